"""specan import aiperf-records / trtllm-responses (docs/importers.md): every number against values by hand.

The inputs are tests/fixtures/aiperf/profile_export.jsonl and
tests/fixtures/trtllm/responses.jsonl (sources in each folder's SOURCES.md).
The importers are called through their library functions; the written traces
are then loaded with `specan validate` and `specan report`.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from analyzer.ingest.importers.aiperf import import_aiperf_records
from analyzer.ingest.importers.common import ImportInputError, MalformedInput, Overrides
from analyzer.ingest.importers.trtllm_responses import import_trtllm_responses
from imported import rows, run, t

FIXTURES = Path(__file__).parent / "fixtures"
AIPERF = FIXTURES / "aiperf" / "profile_export.jsonl"
TRTLLM = FIXTURES / "trtllm" / "responses.jsonl"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
UTC = dt.timezone.utc

# AIPerf record ids (x_request_id), in fixture order
R1 = "7609a2e7-aa53-4ab1-98f4-f35ecafefd25"      # documented metadata; TRT-LLM acceptance, k = 3, exact
R2 = "b7d1c2e4-0f3a-4c55-9e21-6a8f0d4b3c21"      # the documented vLLM example record (inconsistent)
R3 = "c3e9a0f1-5b6d-4e7f-8a9b-0c1d2e3f4a5b"      # num_spec_tokens null (draft_len_schedule)
R4 = "d4f0b1a2-6c7e-4f80-9b1c-2d3e4f5a6b7c"      # drafts per step vary
R5 = "e5a1c2b3-7d8f-4091-8c2d-3e4f5a6b7c8d"      # vLLM detailed per-step arrays, non-streaming
R8 = "0a7c8d9e-1f2a-4b3c-8d4e-5f6a7b8c9d0e"      # no acceptance record, client token counts only

# The documented TRT-LLM histogram [8, 0, 6, 6] with k = 3, rebuilt in ascending accepted count:
# 8 steps accepted 0 (commit 1), 6 accepted 2 (commit 3), 6 accepted 3 (commit 4).
DOC_ROUNDS = [(3, 0, 1)] * 8 + [(3, 2, 3)] * 6 + [(3, 3, 4)] * 6


def rounds_of(root: Path, request_id: str) -> list[tuple]:
    found = sorted((r for r in rows(root, "rounds") if r["request_id"] == request_id), key=lambda r: r["round_idx"])
    assert [r["round_idx"] for r in found] == list(range(len(found)))
    return [(r["num_draft_tokens"], r["num_accepted_tokens"], r["num_committed_tokens"], r["stop_reason"])
            for r in found]


def request(root: Path, request_id: str) -> dict:
    (found,) = [r for r in rows(root, "requests") if r["request_id"] == request_id]
    return found


def notes(root: Path) -> list[str]:
    return [r["note"] for r in rows(root, "import_notes")]


def mean_accept_length(rounds: list[tuple]) -> float:
    """1 + C/R over the speculative rounds (drafted > 0)."""
    spec = [r for r in rounds if r[0] > 0]
    return 1 + sum(r[1] for r in spec) / len(spec)


def with_stop(rounds: list[tuple], stop: str) -> list[tuple]:
    return [(*r, None) for r in rounds[:-1]] + [(*rounds[-1], stop)]


def assert_clean(root: Path) -> None:
    result = run("validate", root, "--strict")
    assert result.exit_code == 0, result.output
    assert "rejected rows: 0" in result.stdout


def report_json(root: Path) -> dict:
    result = run("report", root, "--format", "json")
    assert result.exit_code == 0, result.output
    return {d["deployment_id"]: d for d in json.loads(result.stdout)["deployments"]}


def record(path: Path, line: int) -> dict:
    return json.loads(path.read_text().splitlines()[line - 1])


def write_jsonl(path: Path, objs) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return path


# =========================================================================== aiperf-records


@pytest.fixture
def aiperf(tmp_path):
    out = tmp_path / "traces"
    summary = import_aiperf_records([AIPERF], out, "ai", Overrides(method="eagle3"))
    return out, summary


def test_aiperf_rounds_rebuilt_exactly_from_the_histogram(aiperf):
    out, summary = aiperf
    # {"0": 8, "2": 6, "3": 6}, num_draft_tokens 60 = num_spec_steps 20 × num_spec_tokens 3 → rebuilt;
    # committed 8·1 + 6·3 + 6·4 = 50 = completion_tokens 51 − 1: nothing to reconcile, the last stops (eos)
    assert rounds_of(out, R1) == with_stop(DOC_ROUNDS, "eos")
    # 1 + accepted/steps = 1 + 30/20 = 2.5 = the record's mean_acceptance_length
    assert mean_accept_length(rounds_of(out, R1)) == 2.5 == record(AIPERF, 1)["spec_decode_acceptance"][
        "mean_acceptance_length"]
    assert "rounds of 1 request rebuilt from acceptance_histogram: order is synthetic (ascending accepted count)" \
        in notes(out)


def test_aiperf_per_step_arrays_give_the_rounds_in_order(aiperf):
    out, _ = aiperf
    # per_step_drafted [2,2,2,1], per_step_accepted [2,0,1,1]; committed 3+1+2+2 = 8 = completion_tokens 9 − 1
    assert rounds_of(out, R5) == [(2, 2, 3, None), (2, 0, 1, None), (2, 1, 2, None), (1, 1, 2, "eos")]
    # 1 + 4/4 = 2.0 = mean_acceptance_length of the record
    assert mean_accept_length(rounds_of(out, R5)) == 2.0 == record(AIPERF, 5)["spec_decode_acceptance"][
        "mean_acceptance_length"]


def test_aiperf_request_rows(aiperf):
    out, _ = aiperf
    r = request(out, R1)
    # request_start_ns 1759813207532900363 → 1759813207532900 µs = 2025-10-07T05:00:07.532900Z;
    # first token + time_to_first_token 255.88656799999998 ms = + 255887 µs → .788787;
    # finish + request_latency 297.52522799999997 ms = + 297525 µs → .830425
    assert r["arrival_time"] == t("2025-10-07T05:00:07.532900")
    assert r["first_token_time"] == t("2025-10-07T05:00:07.788787")
    assert r["finish_time"] == t("2025-10-07T05:00:07.830425")
    # usage_prompt_tokens 552 (not the client's input_sequence_length 550); completion_tokens 51 of the
    # acceptance record (not output_sequence_length 50); metadata.source_kind → category
    assert (r["prompt_tokens"], r["output_tokens"], r["finish_reason"], r["category"]) == (552, 51, "stop", "coding")
    r = request(out, R5)
    # non-streaming: no time_to_first_token; finish = 05:00:11 + 180.25 ms
    assert (r["arrival_time"], r["first_token_time"], r["finish_time"]) == (
        t("2025-10-07T05:00:11"), None, t("2025-10-07T05:00:11.180250"))
    assert (r["prompt_tokens"], r["output_tokens"], r["category"]) == (40, 9, None)
    r = request(out, R8)
    # only AIPerf's own token counts: input_sequence_length 200, output_sequence_length 30 (noted)
    assert (r["prompt_tokens"], r["output_tokens"], r["category"]) == (200, 30, "rag")
    assert (r["first_token_time"], r["finish_time"]) == (t("2025-10-07T05:00:12.060"), t("2025-10-07T05:00:12.400"))
    assert "prompt_tokens of 1 request is AIPerf's own token count (input_sequence_length, client tokenizer): " \
           "no usage_prompt_tokens" in notes(out)
    assert "finish_reason is not in AIPerf's records: 6 requests imported as stop (one cut by max_tokens can't be " \
           "told apart)" in notes(out)


def test_aiperf_records_without_rounds_and_skips_are_counted(aiperf):
    out, summary = aiperf
    # 8 lines − the failed record (line 6) − the warmup record (line 7) = 6 requests; rounds 20 + 4
    assert {r["request_id"] for r in rows(out, "requests")} == {R1, R2, R3, R4, R5, R8}
    assert summary.rows["requests"] == 6 and summary.rows["rounds"] == 24
    assert summary.skipped["failed request (error set)"] == 1
    assert summary.skipped["warmup-phase record (AIPerf's own statistics leave it out too)"] == 1
    without = "requests without rounds: "
    # the documented vLLM example: Σ j·n = 22 + 38 + 48 + 60 + 110 = 278 ≠ num_accepted_draft_tokens 281
    assert rounds_of(out, R2) == []
    assert summary.skipped[without + "acceptance_histogram does not add up to the accepted draft tokens"] == 1
    # num_spec_tokens null and no --num-speculative-tokens: k unknown, the multiset can't be rebuilt
    assert rounds_of(out, R3) == []
    assert summary.skipped[without + "no fixed draft length (num_spec_tokens null, as under TensorRT-LLM's "
                                     "draft_len_schedule) and no --num-speculative-tokens"] == 1
    # 45 drafts ≠ 10 steps × 5
    assert rounds_of(out, R4) == []
    assert summary.skipped[without + "drafts per step vary (num_draft_tokens ≠ num_spec_steps × "
                                     "num_spec_tokens)"] == 1
    assert rounds_of(out, R8) == []
    assert summary.skipped[without + "no spec_decode_acceptance in a run where other records have it (no verify "
                                     "steps, n > 1, or a payload AIPerf dropped)"] == 1
    # documented mean 3.18 ≠ 1 + 281/128 = 3.1953125: counted, never copied
    assert "1 record: mean_acceptance_length disagrees with 1 + num_accepted_draft_tokens / num_spec_steps; it " \
           "is never copied, the rounds give 1 + C/R" in notes(out)
    assert "engine per AIPerf: tensorrt_llm: 2, vllm: 3" in notes(out)


def test_aiperf_a_fixed_draft_length_from_the_command_line(tmp_path):
    out = tmp_path / "t"
    summary = import_aiperf_records([AIPERF], out, "ai", Overrides(method="eagle3", num_speculative_tokens=3))
    # R3 (num_spec_tokens null): 60 drafts = 20 steps × 3 → rebuilt exactly as R1
    assert rounds_of(out, R3) == with_stop(DOC_ROUNDS, "eos")
    assert summary.rows["rounds"] == 24 + 20
    # the records' own num_spec_tokens still wins where given: R4 (k = 5) stays without rounds
    assert rounds_of(out, R4) == []
    assert rows(out, "deployments")[0]["num_speculative_tokens"] == 3
    assert "the records give num_spec_tokens up to 5, but --num-speculative-tokens is 3" in notes(out)


def test_aiperf_deployment_row(aiperf, tmp_path):
    out, _ = aiperf
    # the records name no model; the deployment takes the largest num_spec_tokens of the records
    assert rows(out, "deployments") == [{"deployment_id": "ai", "model": "unknown", "method": "eagle3",
                                         "num_speculative_tokens": 5}]
    assert "the records give several num_spec_tokens (2, 3, 5); the deployment takes 5" in notes(out)
    other = tmp_path / "other"
    import_aiperf_records([AIPERF], other, "x", Overrides(model=MODEL))
    assert rows(other, "deployments") == [{"deployment_id": "x", "model": MODEL, "method": "unknown",
                                           "num_speculative_tokens": 5}]


def test_aiperf_rounds_load_cleanly_and_report_the_hand_computed_accept_length(aiperf):
    out, _ = aiperf
    assert_clean(out)
    a = report_json(out)["ai"]
    # R1: R = 20, C = 30;  R5: R = 4, C = 4  →  1 + 34/24
    assert (a["num_spec_rounds"], a["num_accepted_tokens"]) == (24, 34)
    assert a["mean_accept_length"] == pytest.approx(1 + 34 / 24)
    # per request (1 + 30/20 + 1 + 4/4) / 2 = (2.5 + 2.0) / 2: each the record's own mean_acceptance_length
    assert a["mean_accept_length_per_request"] == pytest.approx(2.25)


def test_aiperf_plain_run_makes_a_none_deployment(tmp_path):
    src = write_jsonl(tmp_path / "plain.jsonl", [
        {**record(AIPERF, 1), "spec_decode_acceptance": None},
        {k: v for k, v in record(AIPERF, 5).items() if k != "spec_decode_acceptance"}])
    out = tmp_path / "t"
    import_aiperf_records([src], out, "base")
    assert rows(out, "deployments") == [{"deployment_id": "base", "model": "unknown", "method": "none",
                                         "num_speculative_tokens": 0}]
    # usage_completion_tokens 51 → 50 plain rounds; 9 → 8
    assert rounds_of(out, R1) == [(0, 0, 1, None)] * 49 + [(0, 0, 1, "eos")]
    assert rounds_of(out, R5) == [(0, 0, 1, None)] * 7 + [(0, 0, 1, "eos")]
    assert_clean(out)


def test_aiperf_nothing_imports_is_exit_2_naming_file_and_first_record(tmp_path):
    src = tmp_path / "export.jsonl"
    src.write_text("\n".join(AIPERF.read_text().splitlines()[5:7]) + "\n")   # the failed and the warmup record
    out = tmp_path / "t"
    with pytest.raises(ImportInputError) as err:
        import_aiperf_records([src], out, "x")
    assert err.value.exit_code == 2
    assert f"{src}: nothing to import: the first record that did not import is {src}:1 " \
           "(failed request (error set))" in str(err.value)
    assert not out.exists() or not any(out.rglob("*.parquet"))   # nothing written


def test_aiperf_empty_file_and_wrong_files_are_exit_2(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ImportInputError, match="nothing to import: no records found"):
        import_aiperf_records([empty], tmp_path / "t", "x")
    raw = write_jsonl(tmp_path / "raw.jsonl", [{"metadata": record(AIPERF, 1)["metadata"], "responses": []}])
    with pytest.raises(MalformedInput, match="raw.jsonl:1: an AIPerf raw record"):
        import_aiperf_records([raw], tmp_path / "t", "x")
    # pretty-printed JSON is read (common.json_values); the aggregate summary is not a per-request record
    with pytest.raises(MalformedInput, match=r"profile_export_aiperf.json:1: no metadata object"):
        summary = tmp_path / "profile_export_aiperf.json"
        summary.write_text('{\n  "records": {}\n}\n')
        import_aiperf_records([summary], tmp_path / "t", "x")


def test_aiperf_wrong_type_is_exit_2_naming_file_and_line(tmp_path):
    bad = record(AIPERF, 1)
    bad["spec_decode_acceptance"]["acceptance_histogram"] = {"0": 8, "two": 6}
    src = write_jsonl(tmp_path / "bad.jsonl", [record(AIPERF, 5), bad])
    with pytest.raises(MalformedInput) as err:
        import_aiperf_records([src], tmp_path / "t", "x")
    assert (err.value.line, err.value.exit_code) == (2, 2)
    assert "spec_decode_acceptance.acceptance_histogram: expected {\"j\": steps}" in str(err.value)
    bad = record(AIPERF, 1)
    bad["metrics"]["request_latency"]["unit"] = "fortnights"
    with pytest.raises(MalformedInput, match=r"bad2.jsonl:1: metrics.request_latency.unit: expected a time unit"):
        import_aiperf_records([write_jsonl(tmp_path / "bad2.jsonl", [bad])], tmp_path / "t", "x")


# =========================================================================== trtllm-responses


@pytest.fixture
def trtllm(tmp_path):
    out = tmp_path / "traces"
    summary = import_trtllm_responses([TRTLLM], out, "trt")
    return out, summary


def test_trtllm_documented_choice_rebuilt_exactly(trtllm):
    out, _ = trtllm
    # the documented choice: histogram [8, 0, 6, 6], total_draft_tokens 60 = 20 steps × num_spec_tokens 3;
    # committed 50 = completion_tokens 51 − 1; finish_reason stop → eos
    assert rounds_of(out, "chatcmpl-trt-1") == with_stop(DOC_ROUNDS, "eos")
    # 1 + total_accepted_draft_tokens / num_spec_steps = 1 + 30/20 = 2.5, as AIPerf derives it
    assert mean_accept_length(rounds_of(out, "chatcmpl-trt-1")) == 2.5


def test_trtllm_counts_running_over_truncate_the_last_round(trtllm):
    out, _ = trtllm
    # [0, 0, 0, 5]: five steps accepting all 3 → committed 5 × 4 = 20; completion_tokens 20 − 1 = 19:
    # the last round commits 4 − 1 = 3; finish_reason length → stop_reason length
    assert rounds_of(out, "cmpl-trt-2") == [(3, 3, 4, None)] * 4 + [(3, 3, 3, "length")]
    r = request(out, "cmpl-trt-2")
    # the wrapper's sent_at, category and temperature
    assert (r["arrival_time"], r["category"], r["temperature"], r["finish_reason"]) == (
        t("2025-10-07T05:00:08.250"), "code_edit", 0.0, "length")


def test_trtllm_counts_falling_short_get_plain_rounds_appended(trtllm):
    out, _ = trtllm
    # [10, 0, 0, 0]: ten steps accepting nothing → committed 10; completion_tokens 15 − 1 = 14: 4 plain rounds
    assert rounds_of(out, "chatcmpl-trt-3") == [(3, 0, 1, None)] * 10 + [(0, 0, 1, None)] * 3 + [(0, 0, 1, "eos")]
    assert "1 request: counts fell short of completion_tokens − 1; 4 plain rounds appended after the speculative " \
           "ones, their true position is unknown" in notes(out)


def test_trtllm_never_drafted_is_plain_decoding(trtllm):
    out, _ = trtllm
    # no speculative_decoding beside speculative responses: TensorRT-LLM omits it when nothing was drafted;
    # completion_tokens 3 → 2 plain rounds
    assert rounds_of(out, "chatcmpl-trt-5") == [(0, 0, 1, None), (0, 0, 1, "eos")]
    assert "1 response without speculative_decoding imported as plain decoding beside 5 speculative ones " \
           "(TensorRT-LLM omits it when a request never drafted)" in notes(out)


def test_trtllm_requests_without_rounds_and_skips(trtllm):
    out, summary = trtllm
    # 9 lines − n = 2, a streaming chunk, an error object = 6 requests; rounds 20 + 5 + 14 + 2 = 41
    assert {r["request_id"] for r in rows(out, "requests")} == {
        "chatcmpl-trt-1", "cmpl-trt-2", "chatcmpl-trt-3", "chatcmpl-trt-4", "chatcmpl-trt-5", "chatcmpl-trt-9"}
    assert summary.rows["requests"] == 6 and summary.rows["rounds"] == 41
    for reason in ("not exactly one choice (n > 1): per-request counts can't be split",
                   "streaming chunk, not a whole response", "error response"):
        assert summary.skipped[reason] == 1
    # num_spec_tokens null (draft_len_schedule), no --num-speculative-tokens
    assert rounds_of(out, "chatcmpl-trt-4") == []
    assert summary.skipped["requests without rounds: no fixed draft length (num_spec_tokens null, as under "
                           "draft_len_schedule) and no --num-speculative-tokens"] == 1
    # AIPerf's malformed case: Σ j·n = 12 + 18 = 30 ≠ total_accepted_draft_tokens 29
    assert rounds_of(out, "chatcmpl-trt-9") == []
    assert summary.skipped["requests without rounds: acceptance_histogram does not add up to "
                           "total_accepted_draft_tokens"] == 1
    r = request(out, "chatcmpl-trt-1")
    # created 1759813207 = 2025-10-07T05:00:07Z; usage 32 / 51; no timings: the columns are left out
    assert (r["arrival_time"], r["prompt_tokens"], r["output_tokens"], r["finish_reason"]) == (
        t("2025-10-07T05:00:07"), 32, 51, "stop")
    assert "first_token_time" not in r and "finish_time" not in r
    assert "avg_decoded_tokens_per_iter is not copied (it averages over every iteration, drafting or not): " \
           "mean_accept_length is 1 + C/R from the rounds" in notes(out)


def test_trtllm_a_fixed_draft_length_from_the_command_line(tmp_path):
    out = tmp_path / "t"
    import_trtllm_responses([TRTLLM], out, "trt", Overrides(num_speculative_tokens=3))
    # [8, 0, 6, 6] over 20 steps, 60 drafts = 20 × 3 → the same multiset as the documented choice
    assert rounds_of(out, "chatcmpl-trt-4") == with_stop(DOC_ROUNDS, "eos")


def test_trtllm_deployment_and_report(trtllm):
    out, _ = trtllm
    assert rows(out, "deployments") == [{"deployment_id": "trt", "model": MODEL, "method": "unknown",
                                         "num_speculative_tokens": 3}]
    assert_clean(out)
    d = report_json(out)["trt"]
    # speculative rounds: trt-1 R = 20, C = 30; trt-2 R = 5, C = 15; trt-3 R = 10, C = 0 → 1 + 45/35
    assert (d["num_spec_rounds"], d["num_accepted_tokens"]) == (35, 45)
    assert d["mean_accept_length"] == pytest.approx(1 + 45 / 35)
    # drafted 60 + 15 + 30 = 105 → 45/105
    assert d["acceptance_rate"] == pytest.approx(45 / 105)


def test_trtllm_no_payload_anywhere(tmp_path):
    lines = TRTLLM.read_text().splitlines()
    src = tmp_path / "plain.jsonl"
    src.write_text(lines[4] + "\n")       # chatcmpl-trt-5, without speculative_decoding
    out = tmp_path / "t"
    import_trtllm_responses([src], out, "base")
    assert rows(out, "deployments")[0]["method"] == "none"
    assert rounds_of(out, "chatcmpl-trt-5") == [(0, 0, 1, None), (0, 0, 1, "eos")]
    # --method says it speculated, but nothing says how: requests only
    summary = import_trtllm_responses([src], tmp_path / "u", "spec", Overrides(method="eagle3"))
    assert summary.rows["rounds"] == 0 and summary.rows["requests"] == 1
    assert summary.skipped["requests without rounds: no speculative_decoding in any response, but --method "
                           "is eagle3"] == 1


def test_trtllm_nothing_imports_is_exit_2_naming_file_and_first_record(tmp_path):
    lines = TRTLLM.read_text().splitlines()
    src = tmp_path / "r.jsonl"
    src.write_text("\n" + "\n".join(lines[5:8]) + "\n")   # blank line, n = 2, a chunk, an error
    out = tmp_path / "t"
    with pytest.raises(ImportInputError) as err:
        import_trtllm_responses([src], out, "x")
    assert err.value.exit_code == 2
    assert f"the first record that did not import is {src}:2 (not exactly one choice (n > 1): per-request " \
           "counts can't be split)" in str(err.value)
    assert not out.exists() or not any(out.rglob("*.parquet"))


def test_trtllm_wrong_type_is_exit_2_naming_file_and_line(tmp_path):
    lines = TRTLLM.read_text().splitlines()
    bad = json.loads(lines[0])
    bad["choices"][0]["speculative_decoding"]["acceptance_histogram"] = [8, 0, "6", 6]
    src = tmp_path / "bad.jsonl"
    src.write_text(lines[4] + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(MalformedInput) as err:
        import_trtllm_responses([src], tmp_path / "t", "x")
    assert err.value.line == 2
    assert "choices[0].speculative_decoding.acceptance_histogram: expected an integer list" in str(err.value)
