"""specan import (docs/importers.md): every number out of an import against values computed by hand.

The inputs are the small hand-built files of tests/fixtures/. Each expected value
carries its arithmetic in a comment. Rounds-based imports (vllm-responses,
sglang-responses) are also loaded with `specan validate` and `specan report`;
intervals can't be loaded yet, so their Parquet files are read with pyarrow.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from analyzer.cli import main
from analyzer.ingest.importers import ImportConflict, MalformedInput, run_import
from analyzer.ingest.importers.common import _link_new, reconcile
from analyzer.ingest.schema import ARROW
from analyzer.ingest.importers.vllm_log import num_drafts_from, parse_metrics
from analyzer.ingest.importers.vllm_responses import check_histogram
from tracebuilder import at, deployment, round_row, write_traces

FIXTURES = Path(__file__).parent / "fixtures"
SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
UTC = dt.timezone.utc


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def t(text: str) -> dt.datetime:
    """An ISO instant as the aware datetime pyarrow returns."""
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


def files(root: Path, table: str) -> list[Path]:
    return sorted((root / table).rglob("*.parquet")) if (root / table).is_dir() else []


def rows(root: Path, table: str) -> list[dict]:
    out = []
    for path in files(root, table):
        out += pq.read_table(path, partitioning=None).to_pylist()
    return out


def rounds_of(root: Path, request_id: str) -> list[tuple]:
    """(drafted, accepted, committed, stop_reason) in round_idx order."""
    found = sorted((r for r in rows(root, "rounds") if r["request_id"] == request_id), key=lambda r: r["round_idx"])
    assert [r["round_idx"] for r in found] == list(range(len(found)))
    return [(r["num_draft_tokens"], r["num_accepted_tokens"], r["num_committed_tokens"], r["stop_reason"])
            for r in found]


def request(root: Path, request_id: str) -> dict:
    (found,) = [r for r in rows(root, "requests") if r["request_id"] == request_id]
    return found


def notes(root: Path) -> list[str]:
    return [r["note"] for r in rows(root, "import_notes")]


def report_json(root: Path) -> dict:
    result = run("report", root, "--format", "json")
    assert result.exit_code == 0, result.output
    return {d["deployment_id"]: d for d in json.loads(result.stdout)["deployments"]}


def assert_clean(root: Path) -> None:
    result = run("validate", root, "--strict")
    assert result.exit_code == 0, result.output
    assert "rejected rows: 0" in result.stdout


def assert_one_line_exit_2(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


# =========================================================================== vllm-responses


@pytest.fixture
def vllm(tmp_path):
    out = tmp_path / "traces"
    result = run("import", "vllm-responses", FIXTURES / "vllm_responses.jsonl", "--deployment", "eagle-a",
                 "--method", "eagle3", "--out", out)
    assert result.exit_code == 0, result.output
    return out, result.stdout


def test_vllm_detailed_arrays_one_round_per_step(vllm):
    out, _ = vllm
    # per_step_drafted [3,3,3,3], per_step_accepted [2,0,3,1]; committed = accepted + 1:
    # 3 + 1 + 4 + 2 = 10 = completion_tokens 11 − 1, so nothing to reconcile; finish stop → eos
    assert rounds_of(out, "chatcmpl-detailed") == [(3, 2, 3, None), (3, 0, 1, None), (3, 3, 4, None),
                                                   (3, 1, 2, "eos")]


def test_vllm_counts_running_over_truncate_the_last_round(vllm):
    out, _ = vllm
    # accepted [3,3,3] → committed 4+4+4 = 12; completion_tokens 10 − 1 = 9: 3 too many,
    # so the last round commits 4 − 3 = 1; finish_reason length → stop_reason length
    assert rounds_of(out, "cmpl-length") == [(3, 3, 4, None), (3, 3, 4, None), (3, 3, 1, "length")]
    assert request(out, "cmpl-length")["finish_reason"] == "length"


def test_vllm_counts_falling_short_get_plain_rounds_appended(vllm):
    out, stdout = vllm
    # accepted [1,2] → committed 2 + 3 = 5; completion_tokens 9 − 1 = 8: 3 short,
    # so three plain rounds (0 drafts, 1 token) follow; the last one stops (eos)
    assert rounds_of(out, "chatcmpl-short") == [(3, 1, 2, None), (3, 2, 3, None), (0, 0, 1, None),
                                                (0, 0, 1, None), (0, 0, 1, "eos")]
    expected = ("1 request: counts fell short of completion_tokens − 1; 3 plain rounds appended after the "
                "speculative ones, their true position is unknown")
    assert expected in stdout
    assert expected in notes(out)


def test_vllm_summary_rebuilt_from_histogram_when_exact(vllm):
    out, stdout = vllm
    # num_draft_tokens 15 = num_spec_steps 5 × num_spec_tokens 3 → rebuild.
    # acceptance_histogram [1,2,1,1]: accepted 0 once, 1 twice, 2 once, 3 once, in that order;
    # committed 1+2+2+3+4 = 12 = completion_tokens 13 − 1
    assert rounds_of(out, "chatcmpl-summary") == [(3, 0, 1, None), (3, 1, 2, None), (3, 1, 2, None),
                                                  (3, 2, 3, None), (3, 3, 4, "eos")]
    assert "rounds of 1 request rebuilt from acceptance_histogram: order is synthetic" in stdout


def test_vllm_summary_not_rebuilt_when_drafts_per_step_vary(vllm):
    out, stdout = vllm
    # num_draft_tokens 10 ≠ 4 steps × 3: the multiset is not known, so no rounds; the request stays
    assert rounds_of(out, "chatcmpl-varying") == []
    assert request(out, "chatcmpl-varying")["output_tokens"] == 7
    assert ("1  requests without rounds: drafts per step vary (num_draft_tokens ≠ num_spec_steps × "
            "num_spec_tokens)") in stdout


def test_vllm_request_times(vllm):
    out, _ = vllm
    r = request(out, "chatcmpl-detailed")
    # arrival = created 1795867200 = 2026-11-28T12:00:00Z (no sent_at)
    # first_token = arrival + queue 5 ms + ttft 120 ms = 12:00:00.125
    # finish = first_token + generation 300 ms = 12:00:00.425
    assert r["arrival_time"] == t("2026-11-28T12:00:00")
    assert r["first_token_time"] == t("2026-11-28T12:00:00.125")
    assert r["finish_time"] == t("2026-11-28T12:00:00.425")
    assert (r["prompt_tokens"], r["output_tokens"], r["finish_reason"]) == (25, 11, "stop")
    # no timing fields in metrics → both unknown, never invented
    r = request(out, "chatcmpl-summary")
    assert (r["first_token_time"], r["finish_time"]) == (None, None)


def test_vllm_wrapper_keys_fill_their_columns(vllm):
    out, _ = vllm
    r = request(out, "chatcmpl-wrapped")
    # arrival = sent_at 12:00:01.250 (not created 12:00:01);
    # first_token = + queue 2.5 + ttft 40 = 12:00:01.2925; finish = + 60 ms = 12:00:01.3525
    assert r["arrival_time"] == t("2026-11-28T12:00:01.250")
    assert r["first_token_time"] == t("2026-11-28T12:00:01.292500")
    assert r["finish_time"] == t("2026-11-28T12:00:01.352500")
    assert (r["category"], r["structured_output"], r["temperature"]) == ("extraction", True, 0.0)
    assert r["prompt_token_ids"] == [101, 2054, 2003, 102]
    assert r["output_token_ids"] == [123, 1998, 1024, 4202, 125, 2]
    # detailed [2,3] / [2,1]: committed 3 + 2 = 5 = 6 − 1
    assert rounds_of(out, "chatcmpl-wrapped") == [(2, 2, 3, None), (3, 1, 2, "eos")]


def test_vllm_unusable_records_are_counted_and_rows_per_table(vllm):
    out, stdout = vllm
    assert "        1  error response" in stdout
    # 7 lines − 1 error object = 6 requests; rounds 4 + 5 + 3 + 5 + 2 + 0 = 19
    assert len(rows(out, "requests")) == 6
    assert len(rows(out, "rounds")) == 19
    assert "requests             6 rows" in stdout and "rounds              19 rows" in stdout


def test_vllm_deployment_row(vllm, tmp_path):
    out, _ = vllm
    assert rows(out, "deployments") == [{"deployment_id": "eagle-a", "model": MODEL, "method": "eagle3",
                                         "num_speculative_tokens": 3}]   # num_spec_tokens of the responses
    other = tmp_path / "other"
    assert run("import", "vllm-responses", FIXTURES / "vllm_responses.jsonl", "--deployment", "x",
               "--out", other).exit_code == 0
    # something speculated but no --method: unknown, never guessed
    assert rows(other, "deployments")[0]["method"] == "unknown"


def test_vllm_plain_responses_make_a_none_deployment(tmp_path):
    out = tmp_path / "traces"
    result = run("import", "vllm-responses", FIXTURES / "vllm_responses_plain.jsonl", "--deployment", "base",
                 "--out", out)
    assert result.exit_code == 0, result.output
    assert rows(out, "deployments") == [{"deployment_id": "base", "model": MODEL, "method": "none",
                                         "num_speculative_tokens": 0}]
    # completion_tokens 5 → 5 − 1 = 4 plain rounds; 3 → 2, cut by length
    assert rounds_of(out, "chatcmpl-plain-1") == [(0, 0, 1, None)] * 3 + [(0, 0, 1, "eos")]
    assert rounds_of(out, "chatcmpl-plain-2") == [(0, 0, 1, None), (0, 0, 1, "length")]


def test_vllm_rounds_load_cleanly_and_report_the_hand_computed_accept_length(vllm):
    out, _ = vllm
    assert run("import", "vllm-responses", FIXTURES / "vllm_responses_plain.jsonl", "--deployment", "base",
               "--out", out).exit_code == 0
    assert_clean(out)
    deps = report_json(out)
    a = deps["eagle-a"]
    # speculative rounds R and accepted drafts C per request:
    #   detailed 4 rounds, C = 2+0+3+1 = 6;  summary 5, C = 0+1+1+2+3 = 7;  length 3, C = 9
    #   short 2, C = 3 (its 3 plain rounds are not speculative);  wrapped 2, C = 3;  varying none
    # R = 16, C = 28 → mean_accept_length = 1 + 28/16 = 2.75
    assert a["num_spec_rounds"] == 16 and a["num_accepted_tokens"] == 28
    assert a["mean_accept_length"] == pytest.approx(2.75)
    # Σ drafted = 12 + 15 + 9 + 6 + 5 = 47 → acceptance 28/47
    assert a["acceptance_rate"] == pytest.approx(28 / 47)
    # rounds 16 + 3 plain = 19; committed 10 + 12 + 9 + 8 + 5 = 44; one round truncated by 3
    assert (a["num_rounds"], a["num_committed_tokens"]) == (19, 44)
    assert (a["truncated_rounds"], a["truncated_tokens"]) == (1, 3)
    # per request: (1+6/4 + 1+7/5 + 1+9/3 + 1+3/2 + 1+3/2) / 5 = (2.5+2.4+4+2.5+2.5)/5 = 2.78
    assert a["mean_accept_length_per_request"] == pytest.approx(2.78)
    assert deps["base"]["mean_accept_length"] is None and deps["base"]["num_rounds"] == 4 + 2


def test_vllm_truncated_json_line_is_exit_2_naming_file_and_line(tmp_path):
    out = tmp_path / "traces"
    result = run("import", "vllm-responses", FIXTURES / "vllm_responses_truncated.jsonl", "--deployment", "x",
                 "--out", out)
    assert_one_line_exit_2(result, "vllm_responses_truncated.jsonl:2:", "not valid JSON")
    assert not out.exists() or not any(out.rglob("*.parquet"))   # nothing half-written


def test_vllm_wrong_type_is_exit_2_naming_file_and_line(tmp_path):
    src = tmp_path / "bad.jsonl"
    good = (FIXTURES / "vllm_responses_plain.jsonl").read_text().splitlines()[0]
    bad = json.loads(good)
    bad["usage"]["completion_tokens"] = "five"
    src.write_text(good + "\n\n" + json.dumps(bad) + "\n")
    result = run("import", "vllm-responses", src, "--deployment", "x", "--out", tmp_path / "t")
    # line 2 is blank, the bad record is line 3
    assert_one_line_exit_2(result, "bad.jsonl:3:", "usage.completion_tokens: expected an integer")


def test_importing_the_same_input_twice_replaces_it(vllm):
    out, first = vllm
    before = sorted(p.relative_to(out) for p in out.rglob("*.parquet"))
    rows_before = {t: rows(out, t) for t in ("deployments", "requests", "rounds")}
    result = run("import", "vllm-responses", FIXTURES / "vllm_responses.jsonl", "--deployment", "eagle-a",
                 "--method", "eagle3", "--out", out)
    assert result.exit_code == 0, result.output
    # named by its content: the same files, holding the same rows, and no duplicate_key later
    assert sorted(p.relative_to(out) for p in out.rglob("*.parquet")) == before
    assert {t: rows(out, t) for t in ("deployments", "requests", "rounds")} == rows_before
    assert "the same input was imported before (import " in result.stdout
    assert "already in TRACES/requests" not in result.stdout
    validate = run("validate", out)
    assert "rejected rows: 0" in validate.stdout


def test_another_input_adds_to_the_trace(vllm, tmp_path):
    out, _ = vllm
    before = {p: p.read_bytes() for p in out.rglob("*.parquet")}
    other = tmp_path / "other.jsonl"
    other.write_text((FIXTURES / "vllm_responses.jsonl").read_text().replace('"chatcmpl-', '"chatcmpl-b-'))
    result = run("import", "vllm-responses", other, "--deployment", "eagle-a", "--method", "eagle3", "--out", out)
    assert result.exit_code == 0, result.output
    assert {p: p.read_bytes() for p in before} == before          # another import's files are never rewritten
    assert len(files(out, "requests")) == 2 and len(files(out, "rounds")) == 2
    assert "deployment eagle-a: already present, identical" in result.stdout


def test_an_unknown_value_is_filled_in_by_a_later_import(tmp_path):
    out = tmp_path / "traces"
    # the log knows neither model nor method: unknown, unknown
    assert run("import", "vllm-log", FIXTURES / "vllm.log", "--deployment", "eagle-a", "--year", "2026",
               "--out", out).exit_code == 0
    assert rows(out, "deployments") == [{"deployment_id": "eagle-a", "model": "unknown", "method": "unknown",
                                         "num_speculative_tokens": 3}]
    # the responses know the model (response.model), and --method is given: no conflict, both filled in
    result = run("import", "vllm-responses", FIXTURES / "vllm_responses.jsonl", "--deployment", "eagle-a",
                 "--method", "eagle3", "--num-speculative-tokens", "3", "--out", out)
    assert result.exit_code == 0, result.output
    assert "filled in model = 'meta-llama/Llama-3.1-8B-Instruct' (it was unknown)" in result.stdout
    assert "filled in method = 'eagle3' (it was unknown)" in result.stdout
    assert {tuple(sorted(r.items())) for r in rows(out, "deployments")} == {tuple(sorted({
        "deployment_id": "eagle-a", "model": "meta-llama/Llama-3.1-8B-Instruct", "method": "eagle3",
        "num_speculative_tokens": 3}.items()))}
    assert "rejected rows: 0" in run("validate", out).stdout


def test_list_and_remove_imports(vllm):
    out, _ = vllm
    assert run("import", "vllm-log", FIXTURES / "vllm.log", "--deployment", "eagle-a", "--year", "2026",
               "--method", "eagle3", "--out", out).exit_code == 0
    listed = run("import", "--list", out)
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["id", "source", "imported", "at", "rows", "inputs"]
    assert set(lines[1]) <= {"-", " "}
    assert [line.split()[1] for line in lines[2:]] == ["vllm-responses", "vllm-log"]   # oldest first
    log_id = lines[3].split()[0]
    assert str(FIXTURES / "vllm.log") in lines[3] and "intervals=4" in lines[3]
    removed = run("import", "--remove", log_id[:6], "--out", out)
    assert removed.exit_code == 0, removed.output
    assert removed.stdout.startswith(f"removed import {log_id} (vllm-log): ")
    assert files(out, "intervals") == []
    assert [line.split()[1] for line in run("import", "--list", out).stdout.splitlines()[2:]] == ["vllm-responses"]
    missing = run("import", "--remove", "ffffff", "--out", out)
    assert missing.exit_code == 2 and "no import matches 'ffffff'" in missing.stderr


def test_link_never_replaces_an_existing_file(tmp_path):
    final, tmp = tmp_path / "a.parquet", tmp_path / ".a.tmp"
    final.write_bytes(b"old")
    tmp.write_bytes(b"new")
    with pytest.raises(ImportConflict, match="already exists"):
        _link_new(tmp, final)
    assert final.read_bytes() == b"old"


def test_conflicting_deployment_is_exit_2(vllm):
    out, _ = vllm
    result = run("import", "vllm-responses", FIXTURES / "vllm_responses.jsonl", "--deployment", "eagle-a",
                 "--method", "eagle", "--out", out)
    assert_one_line_exit_2(result, "deployment 'eagle-a' already exists with method = 'eagle3'",
                           "this import gives 'eagle'")


def test_a_fallback_value_yields_to_the_existing_row(vllm):
    out, _ = vllm
    # no --method: 'unknown' is a fallback, so the existing eagle3 row holds and nothing conflicts
    result = run("import", "vllm-log", FIXTURES / "vllm.log", "--deployment", "eagle-a", "--year", "2026",
                 "--out", out)
    assert result.exit_code == 0, result.output
    assert len(files(out, "deployments")) == 1


def test_single_file_table_is_exit_2(tmp_path):
    out = write_traces(tmp_path / "t", deployments=[deployment("a")], rounds=[round_row("a", "r", 0, 3, 1)])
    result = run("import", "vllm-responses", FIXTURES / "vllm_responses.jsonl", "--deployment", "a",
                 "--out", out)
    assert_one_line_exit_2(result, "rounds.parquet: table rounds is a single file")


def test_date_partitioned_directory_gets_date_partitions(tmp_path):
    day = "date=2026-11-27"
    out = write_traces(tmp_path / "t", deployments={day: [deployment("a")]},
                       requests={day: [{"deployment_id": "a", "request_id": "r", "arrival_time": at(0),
                                        "prompt_tokens": 3, "output_tokens": 3, "finish_reason": "stop"}]},
                       rounds={day: [round_row("a", "r", 0, 3, 1)]})
    result = run("import", "vllm-responses", FIXTURES / "vllm_responses.jsonl", "--deployment", "eagle-a",
                 "--method", "eagle3", "--out", out)
    assert result.exit_code == 0, result.output
    # every response arrived on 2026-11-28 (UTC): requests, rounds, and a deployments copy go there
    for table in ("deployments", "requests", "rounds", "import_notes"):
        assert [p.parent.name for p in files(out, table) if p.name.startswith("import-")] == ["date=2026-11-28"]
    assert_clean(out)


def test_reconcile_rules():
    # exact: (1+1) + (2+1) = 5 = 6 − 1
    assert reconcile([(3, 1), (3, 2)], 6).rounds == [(3, 1, 2), (3, 2, 3)]
    # over by 2: last round 3 → 1
    fixed = reconcile([(3, 1), (3, 2)], 4)
    assert (fixed.rounds, fixed.truncated_by) == ([(3, 1, 2), (3, 2, 1)], 2)
    # over by 3: the last round (3 tokens) can't lose 3 and still commit one → no rounds
    assert reconcile([(3, 1), (3, 2)], 3).error
    # short by 2
    fixed = reconcile([(3, 1)], 5)
    assert (fixed.rounds, fixed.plain_appended) == ([(3, 1, 2), (0, 0, 1), (0, 0, 1)], 2)
    # plain decoding: completion_tokens − 1 rounds; a single (prefill) token has no decode round
    assert reconcile([], 4).rounds == [(0, 0, 1)] * 3
    assert reconcile([], 1).rounds == []


def test_histogram_rebuild_is_exact_or_refused():
    assert check_histogram([1, 2, 1, 1], steps=5, draft_tokens=15, accepted_tokens=7, gamma=3) is None
    assert "vary" in check_histogram([1, 2, 1, 1], steps=5, draft_tokens=14, accepted_tokens=7, gamma=3)
    assert "num_spec_steps" in check_histogram([1, 2, 1], steps=5, draft_tokens=15, accepted_tokens=7, gamma=3)
    # 0·1 + 1·2 + 2·1 + 3·1 = 7, not 8
    assert "accepted" in check_histogram([1, 2, 1, 1], steps=5, draft_tokens=15, accepted_tokens=8, gamma=3)
    assert "more than" in check_histogram([1, 0, 0, 0, 1], steps=2, draft_tokens=6, accepted_tokens=4, gamma=3)


# =========================================================================== sglang-responses


@pytest.fixture
def sglang(tmp_path):
    out = tmp_path / "traces"
    result = run("import", "sglang-responses", FIXTURES / "sglang_responses.jsonl", "--deployment", "sg",
                 "--out", out)
    assert result.exit_code == 0, result.output
    return out, result.stdout


def test_sglang_new_names_rebuilt_from_histogram(sglang):
    out, _ = sglang
    # spec_num_proposed_drafts 12 / spec_verify_ct 4 = 3 drafts per step;
    # spec_correct_drafts_histogram [1,0,2,1] → accepted 0, 2, 2, 3 (0 + 4 + 3 = 7 correct drafts);
    # committed 1 + 3 + 3 + 4 = 11 = completion_tokens 12 − 1; finish {"type": "stop"} → eos
    assert rounds_of(out, "sg-new-1") == [(3, 0, 1, None), (3, 2, 3, None), (3, 2, 3, None), (3, 3, 4, "eos")]


def test_sglang_old_names_and_length_truncation(sglang):
    out, _ = sglang
    # spec_proposed_drafts 15 / 5 = 3; spec_accept_histogram [1,1,1,2] → 0, 1, 2, 3, 3 (9 accepted);
    # committed 1+2+3+4+4 = 14 > 13 − 1 = 12 → last round 4 − 2 = 2, stop_reason length
    assert rounds_of(out, "sg-old-2") == [(3, 0, 1, None), (3, 1, 2, None), (3, 2, 3, None), (3, 3, 4, None),
                                          (3, 3, 2, "length")]


def test_sglang_openai_compatible_short_counts(sglang):
    out, _ = sglang
    # 9 / 3 = 3 drafts per step; histogram [0,2,1,0] → 1, 1, 2; committed 2+2+3 = 7 < 10 − 1 = 9:
    # two plain rounds appended, the last one stops
    assert rounds_of(out, "chatcmpl-sg3") == [(3, 1, 2, None), (3, 1, 2, None), (3, 2, 3, None),
                                              (0, 0, 1, None), (0, 0, 1, "eos")]


def test_sglang_requests_times_and_skips(sglang):
    out, stdout = sglang
    r = request(out, "sg-new-1")
    # sent_at 1795867200.5 = 12:00:00.5; finish = + e2e_latency 0.85 s = 12:00:01.35
    assert (r["arrival_time"], r["finish_time"]) == (t("2026-11-28T12:00:00.500"), t("2026-11-28T12:00:01.350"))
    # first_token_time is unknown for every SGLang response: the column is left out, not written as nulls
    assert "first_token_time" not in r
    assert (r["prompt_tokens"], r["output_tokens"], r["finish_reason"], r["category"]) == (50, 12, "stop", "chat")
    r = request(out, "sg-old-2")
    # sent_at 12:00:02 + 1.2 s
    assert (r["arrival_time"], r["finish_time"], r["temperature"]) == (
        t("2026-11-28T12:00:02"), t("2026-11-28T12:00:03.200"), 0.7)
    r = request(out, "chatcmpl-sg3")
    # created 1795867203 = 12:00:03, + 0.5 s
    assert (r["arrival_time"], r["finish_time"]) == (t("2026-11-28T12:00:03"), t("2026-11-28T12:00:03.500"))
    # sg-notime-4 has neither sent_at nor created: skipped and counted, never given a time
    assert {r["request_id"] for r in rows(out, "requests")} == {"sg-new-1", "sg-old-2", "chatcmpl-sg3", "sg-vary-5"}
    assert "        1  no time: neither sent_at nor created" in stdout
    # sg-vary-5: 10 proposed over 4 steps does not divide: kept, without rounds
    assert rounds_of(out, "sg-vary-5") == []
    assert "1  requests without rounds: drafts per step vary" in stdout
    assert "both old (spec_accepted_drafts, …) and new (spec_num_correct_drafts, …) meta_info names were read" \
        in notes(out)


def test_sglang_deployment_and_report_recompute_accept_length(sglang):
    out, _ = sglang
    assert rows(out, "deployments") == [{"deployment_id": "sg", "model": "Qwen/Qwen3-8B", "method": "unknown",
                                         "num_speculative_tokens": 3}]   # most drafts per verify step
    assert_clean(out)
    sg = report_json(out)["sg"]
    # R = 4 + 5 + 3 = 12 verify steps, C = 7 + 9 + 4 = 20 → 1 + 20/12 = 2.6667, recomputed: not SGLang's
    # spec_accept_length (completion_tokens / spec_verify_ct: 12/4 = 3.0, 13/5 = 2.6, 10/3 = 3.33)
    assert sg["mean_accept_length"] == pytest.approx(1 + 20 / 12)
    # per request: (1 + 7/4 + 1 + 9/5 + 1 + 4/3) / 3 = (2.75 + 2.8 + 2.3333) / 3
    assert sg["mean_accept_length_per_request"] == pytest.approx((2.75 + 2.8 + 7 / 3) / 3)


# =========================================================================== vllm-log


@pytest.fixture
def vlog(tmp_path):
    out = tmp_path / "traces"
    result = run("import", "vllm-log", FIXTURES / "vllm.log", "--deployment", "eagle-a", "--year", "2026",
                 "--out", out)
    assert result.exit_code == 0, result.output
    return out, result.stdout


def test_vllm_log_intervals(vlog):
    out, _ = vlog
    got = rows(out, "intervals")
    series = "(APIServer pid=1) Engine 000"
    mean = "1 + accepted / drafts, as vLLM prints it (2 decimals)"
    none = {"running_requests": None, "waiting_requests": None, "generation_tokens_per_s": None,
            "kv_cache_usage": None}
    assert got == [
        # 07:49:11, the file's first line: no start. Drafted 240 over k = 3 positions: 80 steps,
        # and 1 + 124 / 80 = 2.55 is the printed mean; per position round(0.8·80, 0.5·80, 0.25·80) = 64, 40, 20.
        # The Engine 000 line just before it: Running 4, Waiting 0, 88.1 tokens/s, KV 3.1 %
        {"deployment_id": "eagle-a", "series": series, "start_time": None, "end_time": t("2026-05-30T07:49:11"),
         "num_drafts": 80, "num_draft_tokens": 240, "num_accepted_tokens": 124,
         "accepted_per_position": [64, 40, 20], "source": "vllm_log",
         "running_requests": 4, "waiting_requests": 0, "generation_tokens_per_s": 88.1,
         "kv_cache_usage": pytest.approx(0.031), "reported_accept_length": 2.55,
         "reported_accept_length_definition": mean},
        # 210 / 3 = 70, and 1 + 97 / 70 = 2.386 prints 2.39; 0.714·70 = 49.98 → 50, 0.443·70 = 31.01 → 31,
        # 0.229·70 = 16.03 → 16
        {"deployment_id": "eagle-a", "series": series, "start_time": t("2026-05-30T07:49:11"),
         "end_time": t("2026-05-30T07:49:21"),
         "num_drafts": 70, "num_draft_tokens": 210, "num_accepted_tokens": 97,
         "accepted_per_position": [50, 31, 16], "source": "vllm_log",
         "running_requests": 3, "waiting_requests": 0, "generation_tokens_per_s": 71.5,
         "kv_cache_usage": pytest.approx(0.027), "reported_accept_length": 2.39,
         "reported_accept_length_definition": mean},
        # 609 / 3 = 203, and 1 + 101 / 203 = 1.4975 prints 1.50 (round(101 / 0.50) would say 202);
        # 0.345·203 = 70.04 → 70, 0.123·203 = 24.97 → 25, 0.030·203 = 6.09 → 6. No load line before it.
        {"deployment_id": "eagle-a", "series": series, "start_time": t("2026-05-30T07:49:21"),
         "end_time": t("2026-05-30T07:49:31"),
         "num_drafts": 203, "num_draft_tokens": 609, "num_accepted_tokens": 101,
         "accepted_per_position": [70, 25, 6], "source": "vllm_log", **none,
         "reported_accept_length": 1.50, "reported_accept_length_definition": mean},
        # mean 1.00, nothing accepted: 30 / 3 = 10 steps (1 + 0 / 10 = 1.00), every position 0. It starts
        # at 07:49:36, the metrics line that did not parse (vLLM reset its counters when it printed that line)
        {"deployment_id": "eagle-a", "series": series, "start_time": t("2026-05-30T07:49:36"),
         "end_time": t("2026-05-30T07:49:41"),
         "num_drafts": 10, "num_draft_tokens": 30, "num_accepted_tokens": 0,
         "accepted_per_position": [0, 0, 0], "source": "vllm_log", **none,
         "reported_accept_length": 1.00, "reported_accept_length_definition": mean},
    ]


def test_vllm_log_skipped_lines_and_notes(vlog):
    out, stdout = vlog
    # 14 lines: 4 intervals, 1 metrics line cut short, 1 metrics line without a prefix,
    # 3 load lines (kept with the next interval), 5 other lines
    assert "        5  not a speculative-decoding metrics line" in stdout
    assert "        1  metrics line that does not parse" in stdout
    assert "        1  metrics line without a date and time" in stdout
    kept = notes(out)
    assert any(n.startswith("num_drafts = Drafted / k on 4 intervals") for n in kept)
    assert not any(n.startswith("num_drafts is approximate") for n in kept)
    assert not any(n.startswith("num_drafts unknown") for n in kept)
    fixture = FIXTURES / "vllm.log"
    assert f"1 line skipped (metrics line that does not parse), first at {fixture}:11" in kept
    assert f"1 line skipped (metrics line without a date and time), first at {fixture}:12" in kept
    assert "layouts read: newest (4)" in kept
    # other engine lines are expected: counted and printed, not persisted as a note
    assert not any("not a speculative-decoding metrics line" in n for n in kept)
    assert rows(out, "deployments") == [{"deployment_id": "eagle-a", "model": "unknown", "method": "unknown",
                                         "num_speculative_tokens": 3}]   # three per-position rates


def test_vllm_log_default_year_and_rollover(tmp_path):
    line = ("\x1b[1;36m(APIServer pid=1)\x1b[0;0m INFO {md} {hms} [metrics.py:101] SpecDecoding metrics: "
            "Mean acceptance length: 2.00, Accepted throughput: 1.00 tokens/s, Drafted throughput: 2.00 tokens/s, "
            "Accepted: 10 tokens, Drafted: 20 tokens, Per-position acceptance rate: 0.600, 0.400, "
            "Avg Draft acceptance rate: 50.0%\n")
    log = tmp_path / "x.log"
    log.write_text(line.format(md="12-31", hms="23:59:55") + line.format(md="01-01", hms="00:00:05"))
    assert run("import", "vllm-log", log, "--deployment", "a", "--year", "2025", "--out", tmp_path / "a").exit_code == 0
    got = rows(tmp_path / "a", "intervals")
    # December → January: the year moves on; 10 / (2.00 − 1) = 10 drafts; 0.6·10, 0.4·10
    assert [r["end_time"] for r in got] == [t("2025-12-31T23:59:55"), t("2026-01-01T00:00:05")]
    assert got[1]["start_time"] == t("2025-12-31T23:59:55")
    assert got[0]["num_drafts"] == 10 and got[0]["accepted_per_position"] == [6, 4]
    assert run("import", "vllm-log", log, "--deployment", "a", "--out", tmp_path / "b").exit_code == 0
    # without --year: the current year, unless 12-31 of it would lie more than a day after the import
    # (then the previous year: a log is not from the future)
    now = dt.datetime.now(UTC)
    ahead = dt.datetime(now.year, 12, 31, 23, 59, 55, tzinfo=UTC) > now + dt.timedelta(days=1)
    assert rows(tmp_path / "b", "intervals")[0]["end_time"].year == now.year - ahead


def test_vllm_log_parser_anchors_on_avg_draft_acceptance_rate():
    text = ("SpecDecoding metrics: Mean acceptance length: 3.10, Accepted throughput: 21.00 tokens/s, "
            "Drafted throughput: 40.00 tokens/s, Accepted: 210 tokens, Drafted: 400 tokens, "
            "Per-position acceptance rate: 0.900, 0.700, 0.500, Avg Draft acceptance rate: 52.5%")
    assert parse_metrics(text) == {"layout": "newest", "cumulative": False, "accepted": 210, "drafted": 400,
                                   "emitted": None, "k": None, "mean": 3.10, "rates": [0.9, 0.7, 0.5],
                                   "printed": {"avg_rate": (52.5, 1), "accepted_per_s": (21.0, 2),
                                               "drafted_per_s": (40.0, 2), "rates": (2.1, 3)}}
    assert num_drafts_from(210, 3.10) == (100, "approximate")          # 210 / 2.10
    # 100 steps of at most 3 drafts can't have drafted 400 tokens: at least ceil(400 / 3) = 134
    assert num_drafts_from(210, 3.10, 400, 3) == (134, "approximate")
    assert num_drafts_from(210, 3.10, 80, 3) == (80, "approximate")    # nor more steps than drafted tokens
    assert num_drafts_from(210, 3.10, 300, 3) == (100, "fixed_k")      # 300 / 3, and 1 + 210 / 100 = 3.10
    assert num_drafts_from(0, 1.00) == (None, None)
    assert num_drafts_from(0, 1.00, 30, 3) == (10, "fixed_k")         # nothing accepted: 30 / 3 steps
    assert num_drafts_from(0, 1.00, 31, 3) == (None, None)            # … unless 3 does not divide Drafted


# =========================================================================== prometheus


T0, T1, T2 = (t("2026-11-28T12:00:30.781"), t("2026-11-28T12:01:30.781"), t("2026-11-28T12:02:30.781"))


# Each label group is one series of the intervals table, named by its labels.
E0, E1 = (f"engine={e},instance=vllm-0:8000,job=vllm,model_name={MODEL}" for e in "01")


def interval(dep, start, end, drafts, draft_tokens, accepted, per_pos, series):
    return {"deployment_id": dep, "series": series, "start_time": start, "end_time": end, "num_drafts": drafts,
            "num_draft_tokens": draft_tokens, "num_accepted_tokens": accepted, "accepted_per_position": per_pos,
            "source": "prometheus"}


def test_prometheus_label_groups_to_deployments_by_pairs(tmp_path):
    out = tmp_path / "t"
    result = run("import", "prometheus", FIXTURES / "prometheus_range.json", "--deployment", "engine=0:e0",
                 "--deployment", "engine=1:e1", "--out", out)
    assert result.exit_code == 0, result.output
    got = sorted(rows(out, "intervals"), key=lambda r: (r["deployment_id"], r["end_time"]))
    assert got == [
        # engine 0: drafts 100 → 160 → 250, draft tokens 200 → 320 → 500, accepted 150 → 240 → 370,
        # position 0: 90 → 144 → 224, position 1: 60 → 96 → 146; each row holds the deltas
        interval("e0", T0, T1, 160 - 100, 320 - 200, 240 - 150, [144 - 90, 96 - 60], E0),
        interval("e0", T1, T2, 250 - 160, 500 - 320, 370 - 240, [224 - 144, 146 - 96], E0),
        # engine 1: 500 → 550 → 40 and so on: a restart between T1 and T2, so the new values are the deltas
        interval("e1", T0, T1, 550 - 500, 1100 - 1000, 770 - 700, [462 - 420, 308 - 280], E1),
        interval("e1", T1, T2, 40, 80, 50, [30, 20], E1),
    ]
    assert "e1: 1 counter reset (a counter decreased: a restart); the new values were taken as the deltas" \
        in result.stdout
    assert "        1  series of another metric" in result.stdout
    deps = sorted(rows(out, "deployments"), key=lambda r: r["deployment_id"])
    # model from model_name, num_speculative_tokens = 2 position series
    assert deps == [{"deployment_id": d, "model": MODEL, "method": "unknown", "num_speculative_tokens": 2}
                    for d in ("e0", "e1")]


def test_prometheus_one_id_keeps_each_group_a_series(tmp_path):
    # both engines go to one deployment, but each stays its own series (no longer summed into one row):
    # the intervals table is keyed by (deployment_id, series, end_time)
    out = tmp_path / "t"
    result = run("import", "prometheus", FIXTURES / "prometheus_range.json", "--deployment", "p", "--out", out)
    assert result.exit_code == 0, result.output
    assert sorted(rows(out, "intervals"), key=lambda r: (r["series"], r["end_time"])) == [
        interval("p", T0, T1, 60, 120, 90, [54, 36], E0),
        interval("p", T1, T2, 90, 180, 130, [80, 50], E0),
        interval("p", T0, T1, 50, 100, 70, [42, 28], E1),
        interval("p", T1, T2, 40, 80, 50, [30, 20], E1),       # the reset
    ]
    assert f"p: 2 series (label groups), each with its own intervals: {E0}; {E1}" in result.stdout


def test_prometheus_comma_separated_pairs_and_unmapped_group(tmp_path):
    out = tmp_path / "t"
    result = run("import", "prometheus", FIXTURES / "prometheus_range.json", "--deployment",
                 f"engine=0:e0,model_name={MODEL}:e0", "--out", out)
    assert result.exit_code == 0, result.output
    # engine 1 also carries that model_name, so it maps to e0 as well: both groups, one series each
    assert {(r["deployment_id"], r["series"]) for r in rows(out, "intervals")} == {("e0", E0), ("e0", E1)}
    out2 = tmp_path / "t2"
    result = run("import", "prometheus", FIXTURES / "prometheus_range.json", "--deployment", "engine=0:e0",
                 "--out", out2)
    assert result.exit_code == 0, result.output
    assert "        1  label group not mapped by --deployment" in result.stdout
    assert len(rows(out2, "intervals")) == 2


def test_prometheus_reset_applies_to_the_whole_group(tmp_path):
    # position 1 climbed back above its old value by the next sample (10 → 12), but num_drafts fell
    # (100 → 15): the process restarted, so every counter's new value is its delta, 12 not 2
    def s(name, values, **labels):
        return {"metric": {"__name__": name, "engine": "0", **labels},
                "values": [[1795867200 + 60 * i, str(v)] for i, v in enumerate(values)]}
    body = {"status": "success", "data": {"resultType": "matrix", "result": [
        s("vllm:spec_decode_num_drafts_total", [100, 15]),
        s("vllm:spec_decode_num_draft_tokens_total", [200, 30]),
        s("vllm:spec_decode_num_accepted_tokens_total", [110, 20]),
        s("vllm:spec_decode_num_accepted_tokens_per_pos_total", [100, 8], position="0"),
        s("vllm:spec_decode_num_accepted_tokens_per_pos_total", [10, 12], position="1"),
    ]}}
    src = tmp_path / "r.json"
    src.write_text(json.dumps(body))
    out = tmp_path / "t"
    assert run("import", "prometheus", src, "--deployment", "p", "--out", out).exit_code == 0
    (row,) = rows(out, "intervals")
    assert (row["num_drafts"], row["num_draft_tokens"], row["num_accepted_tokens"], row["accepted_per_position"]) \
        == (15, 30, 20, [8, 12])


def test_prometheus_not_a_matrix_is_exit_2_naming_file_and_line(tmp_path):
    result = run("import", "prometheus", FIXTURES / "prometheus_vector.json", "--deployment", "p",
                 "--out", tmp_path / "t")
    # "resultType": "vector" is on line 4 of the file
    assert_one_line_exit_2(result, "prometheus_vector.json:4:", 'expected resultType "matrix"')
    bad = tmp_path / "cut.json"
    bad.write_text((FIXTURES / "prometheus_range.json").read_text()[:200])
    result = run("import", "prometheus", bad, "--deployment", "p", "--out", tmp_path / "t")
    assert_one_line_exit_2(result, "cut.json:1:", "not valid JSON", "cut off")
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").rglob("*.parquet"))


def test_prometheus_deployment_option_errors(tmp_path):
    result = run("import", "prometheus", FIXTURES / "prometheus_range.json", "--deployment", "a",
                 "--deployment", "engine=0:b", "--out", tmp_path / "t")
    assert_one_line_exit_2(result, "give one id, or only label=value:ID pairs")
    result = run("import", "vllm-log", FIXTURES / "vllm.log", "--deployment", "a", "--deployment", "b",
                 "--out", tmp_path / "t")
    assert_one_line_exit_2(result, "vllm-log takes exactly one deployment id")
    result = run("import", "vllm-responses", FIXTURES / "vllm_responses.jsonl", "--deployment", "a",
                 "--year", "2026", "--out", tmp_path / "t")
    assert_one_line_exit_2(result, "--year applies to vllm-log only")


# =========================================================================== written files


def declared(table: str) -> dict[str, pa.DataType]:
    doc = json.loads((SCHEMAS / f"{table}.json").read_text())
    return {c["name"]: ARROW[c["type"]] for c in doc["columns"]}


def test_written_files_carry_the_exact_arrow_types(vllm, vlog):
    for out in (vllm[0], vlog[0]):
        for table in ("deployments", "requests", "rounds", "intervals"):
            types = declared(table)
            for path in files(out, table):
                schema = pq.read_schema(path)
                for f in schema:
                    assert f.type == types[f.name], (path, f)
                assert set(c for c in types if c in schema.names) >= set(
                    c["name"] for c in json.loads((SCHEMAS / f"{table}.json").read_text())["columns"]
                    if c["required"])
        for path in files(out, "import_notes"):
            assert pq.read_schema(path).names == ["source", "deployment_id", "note", "imported_at"]
            assert pq.read_schema(path).field("imported_at").type == pa.timestamp("us", tz="UTC")


def test_file_names_and_no_leftovers(vllm):
    out, _ = vllm
    names = [p.name for p in out.rglob("*.parquet") if p.is_file()]
    assert all(n.startswith("import-vllm-responses-") for n in names)
    assert len({n for n in names}) == 1   # one stem per import, one file per table
    (manifest,) = (out / "_imports").iterdir()   # what it read and wrote, for `specan import --list`
    assert manifest.name == names[0].replace(".parquet", ".json")
    assert [p for p in out.rglob("*") if p.is_file() and p.suffix not in (".parquet", ".json")] == []


def test_intervals_schema_declaration():
    doc = json.loads((SCHEMAS / "intervals.json").read_text())
    assert doc["key"] == ["deployment_id", "series", "end_time"]
    assert doc["required"] is False
    types = {c["name"]: (c["type"], c["required"]) for c in doc["columns"]}
    assert types == {"deployment_id": ("VARCHAR", True), "series": ("VARCHAR", False),
                     "start_time": ("TIMESTAMP", False),
                     "end_time": ("TIMESTAMP", True), "num_drafts": ("BIGINT", False),
                     "num_draft_tokens": ("BIGINT", False), "num_accepted_tokens": ("BIGINT", False),
                     "accepted_per_position": ("BIGINT[]", False), "source": ("VARCHAR", True),
                     "running_requests": ("BIGINT", False), "waiting_requests": ("BIGINT", False),
                     "generation_tokens_per_s": ("DOUBLE", False), "kv_cache_usage": ("DOUBLE", False),
                     "reported_accept_length": ("DOUBLE", False),
                     "reported_accept_length_definition": ("VARCHAR", False),
                     "reported_accept_rate": ("DOUBLE", False), "reported_accept_rate_definition": ("VARCHAR", False)}
    assert [r["reason"] for r in doc["rules"]] == ["implausible_time", "implausible_throughput", "time_order"]


def test_library_api_matches_the_cli(tmp_path):
    summary = run_import("sglang-responses", [FIXTURES / "sglang_responses.jsonl"], tmp_path / "t", "sg")
    assert summary.rows == {"deployments": 1, "requests": 4, "rounds": 14, "import_notes": len(notes(tmp_path / "t"))}
    # 4 + 5 + 5 rounds (sg-new-1, sg-old-2, chatcmpl-sg3 with its 2 plain rounds)
    assert summary.skipped["no time: neither sent_at nor created"] == 1
    with pytest.raises(MalformedInput) as err:
        run_import("vllm-responses", [FIXTURES / "vllm_responses_truncated.jsonl"], tmp_path / "u", "x")
    assert err.value.line == 2
