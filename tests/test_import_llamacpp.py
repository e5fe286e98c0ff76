"""specan import llamacpp-log (docs/importers.md): every number against values worked out by hand.

The log fixtures are real llama-server lines (tests/fixtures/llamacpp/SOURCES.md says from
where, and which log shipper's timestamp was put in front of them). Most tests call the
importer directly; the last ones go through `specan import llamacpp-log` and `run_import`.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from analyzer.ingest.uids import link_uid
from analyzer.ingest.importers.common import ImportInputError, MalformedInput, Overrides
from analyzer.ingest.importers.llamacpp_log import (CONTRADICTS, NO_CLOCK, NO_DRAFT_LINE, NOT_PARSED, OTHER_LINE,
                                                    PARTIAL, STATS_UNUSED, drafts_from, import_llamacpp_log, parse_draft)
from imported import rows, run, t

FIXTURES = Path(__file__).parent / "fixtures" / "llamacpp"
UTC = dt.timezone.utc
MEAN = "1 + accepted / verification steps, as llama.cpp prints it (2 decimals)"


def notes(root: Path) -> list[str]:
    return [r["note"] for r in rows(root, "import_notes")]


def imported(tmp_path, *files, deployment="llama", name="traces", start=None, **overrides):
    out = tmp_path / name
    summary = import_llamacpp_log([FIXTURES / f if isinstance(f, str) else f for f in files], out, deployment,
                                  Overrides(**overrides), start=start)
    return out, summary


def assert_clean(root: Path) -> None:
    result = run("validate", root, "--strict")
    assert result.exit_code == 0, result.output
    assert "rejected rows: 0" in result.stdout


# =========================================================================== layout 1: draft acceptance rate


def test_rate_layout_one_interval_per_request(tmp_path):
    out, _ = imported(tmp_path, "rate.log")
    assert rows(out, "intervals") == [
        # lines 3-7 (PR #22673): header `id 0 | task 854`, bare lines; time of the draft line 08:57:42.052753;
        # start = end − total time 35932.18 ms = 08:57:06.120573. 149 / 213 = 0.69953 as printed. No mean: no drafts
        {"deployment_id": "llama", "series": "slot 0 task 854", "start_time": t("2026-05-20T08:57:06.120573"),
         "end_time": t("2026-05-20T08:57:42.052753"), "num_drafts": None, "num_draft_tokens": 213,
         "num_accepted_tokens": 149, "accepted_per_position": None, "source": "llamacpp_log"},
        # lines 10-14 (PR #23269): journald time 12:04:48.313649+0200 = 10:04:48.313649 UTC; the process prefix is
        # the text before llama.cpp's; start = end − 15224.00 ms = 10:04:33.089649
        {"deployment_id": "llama", "series": "gpu1 llama-swap[812]: [53409] slot 0 task 689",
         "start_time": t("2026-05-21T10:04:33.089649"), "end_time": t("2026-05-21T10:04:48.313649"),
         "num_drafts": None, "num_draft_tokens": 144, "num_accepted_tokens": 118, "accepted_per_position": None,
         "source": "llamacpp_log"},
        # lines 27-30 (PR #14132): no header of their own (the one on line 20 served lines 21-24 only), so the
        # series is the draft line's place; nanoseconds cut to µs; start = 09:30:00 − 172091.72 ms = 09:27:07.908280
        {"deployment_id": "llama", "series": "rate.log:30", "start_time": t("2025-06-11T09:27:07.908280"),
         "end_time": t("2025-06-11T09:30:00"), "num_drafts": None, "num_draft_tokens": 2433,
         "num_accepted_tokens": 1376, "accepted_per_position": None, "source": "llamacpp_log"},
    ]
    # speculated, nothing says how: method unknown, no rates per position so num_speculative_tokens 0
    assert rows(out, "deployments") == [{"deployment_id": "llama", "model": "unknown", "method": "unknown",
                                         "num_speculative_tokens": 0}]
    assert not rows(out, "requests") and not rows(out, "rounds")


def test_rate_layout_skips_and_notes(tmp_path):
    out, summary = imported(tmp_path, "rate.log")
    # 31 lines: 3 requests (lines 3-7, 10-14, 27-30) and the block of lines 20-24 without a wall-clock time;
    # line 31 cut; other: n_decoded lines 1, 2, 8, 9, idle 19 = 5 (release 18 and 26 are request lines: the KV
    # length a requests row's prompt_tokens comes from where its rounds are in the log). Statistics 15-17 are the
    # first of their slot and drafters with b = 10 (nothing to difference), 25 follows a block that has no clock
    assert summary.skipped == {OTHER_LINE: 5, STATS_UNUSED: 4, NO_CLOCK: 1, NOT_PARSED: 1}
    kept = notes(out)
    assert f"1 line skipped ({NO_CLOCK}), first at {FIXTURES / 'rate.log'}:24" in kept
    assert f"1 line skipped ({NOT_PARSED}), first at {FIXTURES / 'rate.log'}:31" in kept
    assert "layouts read: rate (3), request line (`new prompt`, `stopped by`, release) (2)" in kept
    assert any(n.startswith("num_drafts unknown on 3 intervals") for n in kept)
    assert any(n.startswith("3 requests that drafted: one intervals row each") for n in kept)
    assert not any(OTHER_LINE in n for n in kept)      # other lines are printed, not kept
    assert_clean(out)


# =========================================================================== layouts 2-4


def test_mean_layouts(tmp_path):
    out, _ = imported(tmp_path, "mean.log")
    got = rows(out, "intervals")
    assert got == [
        # lines 1-5 (PR #23279): `draft acceptance = …` without `rate`, bare, no header; 24673 / 33126 = 0.74482;
        # start = 10:00:00 − 469687.79 ms = 09:52:10.312210
        {"deployment_id": "llama", "series": "mean.log:5", "start_time": t("2026-05-18T09:52:10.312210"),
         "end_time": t("2026-05-18T10:00:00"), "num_drafts": None, "num_draft_tokens": 33126,
         "num_accepted_tokens": 24673, "accepted_per_position": None, "source": "llamacpp_log",
         "reported_accept_length": None, "reported_accept_length_definition": None},
        # lines 6-10 (PR #24536): mean 2.92 allows 167 / n + 1 ∈ [2.915, 2.925] → n ∈ [86.75, 87.21] → 87 only,
        # exact (llama.cpp's own statistics line says #gen drafts = 87). Per position 0.805·87 = 70.04 → 70,
        # 0.632·87 = 54.98 → 55, 0.483·87 = 42.02 → 42 (70 + 55 + 42 = 167). start = 06.896015 − 2596.83 ms
        {"deployment_id": "llama", "series": "slot 1 task 0", "start_time": t("2026-06-15T07:00:04.299185"),
         "end_time": t("2026-06-15T07:00:06.896015"), "num_drafts": 87, "num_draft_tokens": 259,
         "num_accepted_tokens": 167, "accepted_per_position": [70, 55, 42], "source": "llamacpp_log",
         "reported_accept_length": 2.92, "reported_accept_length_definition": MEAN},
        # line 14 (llamacpp-rocm#129): mean len 4.30 allows n ∈ [5995 / 3.305, 5995 / 3.295] = [1813.9, 1819.4]:
        # 1814..1819, no rates to narrow it: approximate, the nearest to 5995 / 3.30 = 1816.67 → 1817.
        # No timing lines before it: no start. The compose prefix `llama-1 |` is the process, without its bar
        {"deployment_id": "llama", "series": "llama-1 slot 0 task 0", "start_time": None,
         "end_time": t("2026-07-01T12:04:01.806856"), "num_drafts": 1817, "num_draft_tokens": 9089,
         "num_accepted_tokens": 5995, "accepted_per_position": None, "source": "llamacpp_log",
         "reported_accept_length": 4.30, "reported_accept_length_definition": MEAN},
    ]
    kept = notes(out)
    assert "layouts read: acceptance (1), mean acceptance length (1), mean len (1), request line (`new prompt`, `stopped by`, release) (2)" in kept
    # the PR #24536 request: its statistics line (b = 1, a = 87) gives the 87 that the mean allows
    assert any(n.startswith("num_drafts from the `statistics` lines on 1 interval") for n in kept)
    assert any(n.startswith("num_drafts is approximate on 1 interval:") for n in kept)
    assert any(n.startswith("num_drafts unknown on 1 interval") for n in kept)
    assert any(n.startswith("1 interval without start_time") for n in kept)
    # three rates per position
    assert rows(out, "deployments")[0]["num_speculative_tokens"] == 3
    assert_clean(out)


def test_interval_views_of_the_mean_log(tmp_path):
    out, _ = imported(tmp_path, "mean.log")
    result = run("sql", out, "select hour, num_drafts, num_draft_tokens, num_accepted_tokens, mean_accept_length, "
                             "drafts_share from interval_acceptance order by hour", "--format", "json")
    assert result.exit_code == 0, result.output
    hours = json.loads(result.stdout)
    # 2026-06-15 07h: 1 + 167 / 87 = 2.9195; 2026-07-01 12h: 1 + 5995 / 1817 = 4.2994; 2026-05-18 10h: no drafts
    assert [(h["num_drafts"], h["num_draft_tokens"], h["num_accepted_tokens"]) for h in hours] == [
        (None, 33126, 24673), (87, 259, 167), (1817, 9089, 5995)]
    assert hours[0]["mean_accept_length"] is None
    assert hours[1]["mean_accept_length"] == pytest.approx(1 + 167 / 87)
    assert hours[2]["mean_accept_length"] == pytest.approx(1 + 5995 / 1817)
    assert [h["drafts_share"] for h in hours] == [None, 1.0, 1.0]


def test_acc_per_pos_line_at_trace_verbosity(tmp_path):
    # the `mean len` layout prints its rates on a trace-level line of their own (`SLT_TRC "     acc per pos =
    # (%s)"`); the counts are PR #24536's request, written in that layout
    log = tmp_path / "trace.log"
    prefix = "2026-08-01T10:00:00.000000Z 1.00.000.000 I slot print_timing: id  1 | task 7 |"
    log.write_text(f"{prefix}       total time =    2596.83 ms /   276 tokens\n"
                   f"{prefix} draft acceptance = 0.64479 (  167 accepted /   259 generated), mean len =  2.92\n"
                   f"{prefix}      acc per pos = (0.805, 0.632, 0.483)\n")
    out, _ = imported(tmp_path, log)
    (row,) = rows(out, "intervals")
    # the mean alone allows 87 only; the rates give 70, 55, 42
    assert (row["num_drafts"], row["accepted_per_position"], row["reported_accept_length"]) == (87, [70, 55, 42], 2.92)
    assert row["start_time"] == t("2026-08-01T09:59:57.403170")     # 10:00:00 − 2596.83 ms


def test_block_without_draft_line_and_contradicting_counts(tmp_path):
    log = tmp_path / "x.log"
    T = "2026-08-01T10:00:0{}Z "
    log.write_text(
        T.format(1) + "slot print_timing: id  0 | task 1 | prompt eval time =      10.00 ms /     5 tokens (x)\n"
        + T.format(1) + "slot print_timing: id  0 | task 1 |        eval time =     100.00 ms /    10 tokens (x)\n"
        # task 1 drafted nothing: no draft line. Task 2 prints 0.90000 but 149 / 213 = 0.69953
        + T.format(2) + "slot print_timing: id  0 | task 2 | draft acceptance = 0.90000 (  149 accepted /   213 "
                        "generated)\n"
        + T.format(3) + "slot print_timing: id  0 | task 3 | draft acceptance = 0.50000 (   10 accepted /    20 "
                        "generated)\n")
    out, summary = imported(tmp_path, log)
    assert summary.skipped == {NO_DRAFT_LINE: 1, CONTRADICTS: 1}
    assert [(r["series"], r["num_draft_tokens"], r["num_accepted_tokens"]) for r in rows(out, "intervals")] == [
        ("slot 0 task 3", 20, 10)]
    kept = notes(out)
    assert f"1 line skipped ({NO_DRAFT_LINE}), first at {log}:1" in kept
    assert f"1 line skipped ({CONTRADICTS}), first at {log}:3" in kept


def test_draft_line_with_a_header_of_its_own(tmp_path):
    # Builds whose draft line was `SLT_INF(slot, "\ndraft acceptance rate = …")` print a second header before it;
    # the block of PR #22673's request, written that way. An impossible date is skipped and counted
    log = tmp_path / "x.log"
    T = "2026-05-20T08:57:42.052753Z "
    log.write_text(T + "slot print_timing: id  0 | task 854 | \n"
                   + T + "prompt eval time =    4063.52 ms /    96 tokens (   42.33 ms per token,    23.62 tokens "
                         "per second)\n"
                   + T + "       eval time =   31868.65 ms /   221 tokens (  144.20 ms per token,     6.93 tokens "
                         "per second)\n"
                   + T + "      total time =   35932.18 ms /   317 tokens\n"
                   + T + "slot print_timing: id  0 | task 854 | \n"
                   + T + "draft acceptance rate = 0.69953 (  149 accepted /   213 generated)\n"
                   + "2026-02-30T10:00:00Z slot print_timing: id  1 | task 9 | draft acceptance = 0.50000 (    1 "
                     "accepted /     2 generated)\n")
    out, summary = imported(tmp_path, log)
    assert [(r["series"], r["start_time"], r["num_draft_tokens"]) for r in rows(out, "intervals")] == [
        ("slot 0 task 854", t("2026-05-20T08:57:06.120573"), 213)]
    assert summary.skipped == {"timing line with an impossible date": 1}


def test_parse_draft_reads_every_layout():
    assert parse_draft("draft acceptance rate = 0.69953 (  149 accepted /   213 generated)") == {
        "rate": 0.69953, "accepted": 149, "drafted": 213, "mean": None, "rates": [], "layout": "rate"}
    assert parse_draft("draft acceptance = 0.74482 (24673 accepted / 33126 generated)")["layout"] == "acceptance"
    line = ("draft acceptance = 0.64479 (  167 accepted /   259 generated), mean acceptance length =  2.92, "
            "acceptance rate per position = (0.805, 0.632, 0.483)")
    assert parse_draft(line) == {"rate": 0.64479, "accepted": 167, "drafted": 259, "mean": 2.92,
                                 "rates": [0.805, 0.632, 0.483], "layout": "mean acceptance length"}
    assert parse_draft("draft acceptance = 0.65959 ( 5995 accepted /  9089 generated), mean len =  4.30") == {
        "rate": 0.65959, "accepted": 5995, "drafted": 9089, "mean": 4.30, "rates": [], "layout": "mean len"}
    assert parse_draft("draft acceptance rate = 0.5") is None


def test_drafts_from():
    # PR #24536: one whole number fits the mean alone (statistics line: #gen drafts = 87)
    assert drafts_from(167, 259, 2.92, [0.805, 0.632, 0.483]) == (87, True)
    # am17an/llama.cpp#6: 36 accepted, mean 3.00 → n ∈ [36 / 2.005, 36 / 1.995] = [17.96, 18.05] → 18 (its
    # statistics line: #gen drafts = 18)
    assert drafts_from(36, 36, 3.00, []) == (18, True)
    # llamacpp-rocm#129: 1814..1819 fit; the nearest to 5995 / 3.30 = 1816.67
    assert drafts_from(5995, 9089, 4.30, []) == (1817, False)
    # nothing accepted, or no mean: the steps are not in the line
    assert drafts_from(0, 21, 1.00, []) == (None, False)
    assert drafts_from(149, 213, None, []) == (None, False)
    # rates narrow the mean's range: 100 accepted, mean 1.50 → n ∈ [100 / 0.505, 100 / 0.495] = 199..202;
    # rate 0.300 needs a count in [0.2995·n, 0.3005·n]: 199 → [59.60, 59.80], none; 200 → 60;
    # 201 → [60.20, 60.40] and 202 → [60.50, 60.70], none. 200: 60 + 40 (0.200·200) = 100 accepted
    assert drafts_from(100, 400, 1.50, [0.300, 0.200]) == (200, True)
    assert drafts_from(100, 400, 1.50, []) == (200, False)     # the mean alone: 199..202, nearest 100 / 0.5


# =========================================================================== JSON responses


def test_responses_requests_and_intervals(tmp_path):
    out, summary = imported(tmp_path, "responses.jsonl", model="qwen-fleet")
    # line 1 (PR #12603's timings): sent_at 18:00:00; first token + 228.522 ms; finish + 11082.606 ms.
    # lines 2-3 (b9251 stream): no sent_at; created 1779349198 = 2026-05-21T07:39:58Z is the finish; first token
    # = finish − 20629.211 ms = 07:39:37.370789; arrival = − 128.301 ms = 07:39:37.242488; finish_reason
    # tool_calls (from the finish chunk, line 2) → stop; prompt 808 = cache_n 804 + prompt_n 4
    assert rows(out, "requests") == [
        {"deployment_id": "llama", "request_id": "chatcmpl-pr12603", "category": "story",
         "arrival_time": t("2025-03-27T18:00:00"), "first_token_time": t("2025-03-27T18:00:00.228522"),
         "finish_time": t("2025-03-27T18:00:11.311128"), "prompt_tokens": 30, "output_tokens": 200,
         "finish_reason": "length", "request_uid": link_uid("llama", "chatcmpl-pr12603")},
        {"deployment_id": "llama", "request_id": "chatcmpl-nFCxRKKHfmmnVXEHbeKtPcEqHXBZvQCr", "category": None,
         "arrival_time": t("2026-05-21T07:39:37.242488"), "first_token_time": t("2026-05-21T07:39:37.370789"),
         "finish_time": t("2026-05-21T07:39:58"), "prompt_tokens": 808, "output_tokens": 665,
         "finish_reason": "stop", "request_uid": link_uid("llama", "chatcmpl-nFCxRKKHfmmnVXEHbeKtPcEqHXBZvQCr")},
    ]
    assert rows(out, "intervals") == [
        {"deployment_id": "llama", "series": "chatcmpl-pr12603", "start_time": t("2025-03-27T18:00:00"),
         "end_time": t("2025-03-27T18:00:11.311128"), "num_drafts": None, "num_draft_tokens": 347,
         "num_accepted_tokens": 65, "accepted_per_position": None, "source": "llamacpp_response"},
        {"deployment_id": "llama", "series": "chatcmpl-nFCxRKKHfmmnVXEHbeKtPcEqHXBZvQCr",
         "start_time": t("2026-05-21T07:39:37.242488"), "end_time": t("2026-05-21T07:39:58"), "num_drafts": None,
         "num_draft_tokens": 604, "num_accepted_tokens": 515, "accepted_per_position": None,
         "source": "llamacpp_response"},
    ]
    assert not rows(out, "rounds")          # they drafted: their rounds can't be rebuilt
    # the finish chunk (line 2) and the error (line 5) have no timings; [DONE] is other
    assert dict(summary.skipped) == {"JSON record without a timings object (a stream chunk, an error)": 2,
                                     OTHER_LINE: 1}
    kept = notes(out)
    assert any(n.startswith("1 request: first_token_time = sent_at + prompt_ms") for n in kept)
    assert any(n.startswith("1 request without sent_at: finish_time = created") for n in kept)
    assert rows(out, "deployments") == [{"deployment_id": "llama", "model": "qwen-fleet", "method": "unknown",
                                         "num_speculative_tokens": 0}]
    assert_clean(out)


def _response(rid, *, prompt_ms, predicted_n, predicted_ms, finish="stop", draft=None, created=None, model="M"):
    timings = {"prompt_n": 10, "prompt_ms": prompt_ms, "predicted_n": predicted_n, "predicted_ms": predicted_ms}
    if draft:
        timings.update(draft_n=draft[0], draft_n_accepted=draft[1])
    resp = {"id": rid, "object": "chat.completion", "model": model, "created": created,
            "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": "x"}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": predicted_n}, "timings": timings}
    return resp


def test_plain_deployment_gets_plain_rounds_and_tpot_speedup(tmp_path):
    """Constructed responses (llama.cpp's shapes, chosen numbers): a speculative deployment and its baseline."""
    spec = tmp_path / "spec.jsonl"
    spec.write_text("\n".join(json.dumps(r) for r in [
        {"sent_at": "2026-01-01T00:00:00Z", "response": _response("s1", prompt_ms=100.0, predicted_n=101,
                                                                  predicted_ms=2000.0, draft=(150, 90))},
        {"sent_at": "2026-01-01T00:01:00Z", "response": _response("s2", prompt_ms=50.0, predicted_n=51,
                                                                  predicted_ms=1500.0, finish="length",
                                                                  draft=(60, 30))},
    ]) + "\n")
    native = {"content": "x", "id_slot": 0, "stop": True, "model": "M", "tokens_predicted": 101,
              "tokens_evaluated": 10, "stop_type": "word", "stopping_word": "\n\n",
              "timings": {"prompt_n": 10, "prompt_ms": 100.0, "predicted_n": 101, "predicted_ms": 4000.0}}
    # the speedup from request timings is matched at concurrency, and a baseline cell needs 10 requests
    # ([evidence] min_baseline_requests): eight more plain responses, one a minute from 00:02, each alone
    # (100 tokens after the first in 4,000 ms), and a pair at 00:30 that decodes together (100 in 10,000 ms each)
    more = [{"sent_at": f"2026-01-01T00:{m:02d}:00Z",
             "response": _response(f"m{m}", prompt_ms=100.0, predicted_n=101, predicted_ms=4000.0)}
            for m in range(2, 10)]
    pair = [{"sent_at": "2026-01-01T00:30:00Z",
             "response": _response(f"p{i}", prompt_ms=100.0, predicted_n=101, predicted_ms=10000.0)} for i in (1, 2)]
    base = tmp_path / "base.jsonl"
    base.write_text(json.dumps({"sent_at": "2026-01-01T00:00:00Z", "response": native}) + "\n"
                    + json.dumps(_response("b2", prompt_ms=40.0, predicted_n=51, predicted_ms=2000.0,
                                           finish="length", created=1767225600)) + "\n"
                    + "".join(json.dumps(r) + "\n" for r in more + pair))
    out = tmp_path / "traces"
    import_llamacpp_log([spec], out, "spec", Overrides(method="draft"))
    import_llamacpp_log([base], out, "base", Overrides())
    deps = {r["deployment_id"]: r for r in rows(out, "deployments")}
    assert deps["base"] == {"deployment_id": "base", "model": "M", "method": "none", "num_speculative_tokens": 0}
    base_rounds = sorted((r for r in rows(out, "rounds") if r["deployment_id"] == "base"),
                         key=lambda r: (r["request_id"], r["round_idx"]))
    # 101 − 1 = 100 one-token rounds, the last stopped by a stop word; the native response has no id; 51 − 1 = 50
    by_request = {rid: [r for r in base_rounds if r["request_id"] == rid] for rid in ("base.jsonl:1", "b2")}
    assert len(by_request["base.jsonl:1"]) == 100 and len(by_request["b2"]) == 50
    assert {(r["num_draft_tokens"], r["num_accepted_tokens"], r["num_committed_tokens"])
            for r in base_rounds} == {(0, 0, 1)}
    assert [r["stop_reason"] for r in by_request["base.jsonl:1"]][-2:] == [None, "stop_string"]
    assert by_request["b2"][-1]["stop_reason"] == "length"
    assert not any(r["deployment_id"] == "spec" for r in rows(out, "rounds"))
    assert_clean(out)
    result = run("report", out, "--format", "json")
    assert result.exit_code == 0, result.output
    got = {d["deployment_id"]: d for d in json.loads(result.stdout)["deployments"]}
    # Decode windows (first token = sent_at + prompt_ms, finish = first + predicted_ms; b2, without sent_at,
    # finishes at its created second, 00:00:00, and started decoding 2,000 ms before): spec s1 [0.1 s, 2.1 s] and
    # s2 [60.05 s, 61.55 s] never overlap: concurrency 1 each. base: b2 [−2.0 s, 0], the native one [0.1 s, 4.1 s]
    # and m2..m9 [60·m + 0.1 s, 60·m + 4.1 s] each alone: concurrency 1, ten requests; p1 and p2 together: 2 (two
    # requests in cell 2, below the floor: no point there). So both spec requests are matched at B's cell 1 (point 1),
    # t0(1) = (4000 + 2000 + 8 · 4000) / (100 + 50 + 8 · 100) = 38,000 / 950 = 40 ms per token; spec takes
    # (2000 + 1500) / (100 + 50) = 23.33 ms: 40 / 23.33. (B's pair, 100 ms per token at concurrency 2, is no
    # comparison for spec's load-1 requests: pooled in, B would take 58,000 / 1,150 = 50.4 ms, 2.16×.)
    assert got["spec"]["tpot_speedup"] == pytest.approx(40 / (3500 / 150), rel=1e-12)
    assert got["spec"]["tpot_speedup_coverage"] == 1.0
    tpot = got["spec"]["matched"]["tpot"]
    # B's loads are those of its supported cells: cell 2 (two requests) is below the floor
    assert (tpot["loads"], tpot["baseline_loads"], tpot["matched_units"]) == ([1.0, 1.0], [1.0, 1.0], 2)


def test_stream_chunks_with_timings_per_token(tmp_path):
    """With timings_per_token every chunk carries the timings so far; only the last one is the request's."""
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1767225600, "model": "M",
             "choices": [{"index": 0, "finish_reason": None, "delta": {"content": "x"}}],
             "timings": {"prompt_n": 5, "prompt_ms": 10.0, "predicted_n": 3, "predicted_ms": 30.0,
                         "draft_n": 4, "draft_n_accepted": 2}}
    last = {**chunk, "choices": [{"index": 0, "finish_reason": "stop", "delta": {}}],
            "timings": {"prompt_n": 5, "prompt_ms": 10.0, "predicted_n": 9, "predicted_ms": 90.0, "cache_n": 0,
                        "draft_n": 12, "draft_n_accepted": 6}}
    src = tmp_path / "stream.txt"
    src.write_text(f"data: {json.dumps(chunk)}\n\ndata: {json.dumps(last)}\n\ndata: [DONE]\n")
    out, summary = imported(tmp_path, src)
    assert summary.skipped[PARTIAL] == 1
    (req,) = rows(out, "requests")
    # no usage: prompt = cache_n 0 + prompt_n 5, output = predicted_n 9
    assert (req["request_id"], req["prompt_tokens"], req["output_tokens"], req["finish_reason"]) == ("c1", 5, 9, "stop")
    assert [(r["num_draft_tokens"], r["num_accepted_tokens"]) for r in rows(out, "intervals")] == [(12, 6)]


def test_wrong_type_in_a_response_is_exit_2_naming_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n" + json.dumps(_response("x", prompt_ms="100", predicted_n=5, predicted_ms=1.0,
                                               created=1767225600)) + "\n")
    with pytest.raises(MalformedInput, match=r"bad\.jsonl:2: timings\.prompt_ms: expected a number"):
        import_llamacpp_log([bad], tmp_path / "t", "x")
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").rglob("*.parquet"))


# =========================================================================== nothing imports


def test_log_without_any_time_imports_nothing(tmp_path):
    with pytest.raises(ImportInputError) as err:
        imported(tmp_path, "noclock.log")
    message = str(err.value)
    # rate.log lines 20-26 (am17an/llama.cpp#6): no shipper time and no llama.cpp time; the draft line is line 5
    assert message.startswith(f"{FIXTURES / 'noclock.log'}: nothing to import: the first line that looks like "
                              f"llama.cpp timing output but did not import is {FIXTURES / 'noclock.log'}:5 "
                              f"({NO_CLOCK})")
    # one short line: the hint, and where the layouts are listed (no longer the list itself)
    assert "pass --start TIME" in message and "docker logs -t" in message and "known layouts" not in message
    assert message.endswith("(layouts: `specan import llamacpp-log --list-layouts`)")
    assert len(message.replace(str(FIXTURES), "")) < 400 and "\n" not in message
    assert not (tmp_path / "traces").exists() or not any((tmp_path / "traces").rglob("*.parquet"))


def test_relative_times_anchored_at_start(tmp_path):
    out, summary = imported(tmp_path, "notime.log", start="2026-06-15T07:00:00")
    # PR #24536's lines as printed: draft line at 0.06.896.015 → 07:00:06.896015; start = that − 2596.83 ms.
    # num_drafts 87 from the statistics line (b = 1: the slot's first request, a = 87), 259 / 167 as the draft line
    assert rows(out, "intervals") == [
        {"deployment_id": "llama", "series": "slot 1 task 0", "start_time": t("2026-06-15T07:00:04.299185"),
         "end_time": t("2026-06-15T07:00:06.896015"), "num_drafts": 87, "num_draft_tokens": 259,
         "num_accepted_tokens": 167, "accepted_per_position": [70, 55, 42], "source": "llamacpp_log",
         "reported_accept_length": 2.92, "reported_accept_length_definition": MEAN}]
    assert f"{FIXTURES / 'notime.log'}: llama.cpp's log times count from --start 2026-06-15T07:00:00+00:00" in (
        notes(out))
    assert_clean(out)


def fixture_modified_at(path, fixture: str, when: dt.datetime):
    """A copy of a fixture whose modification time is ``when`` (what the import estimates from)."""
    import os

    path.write_text((FIXTURES / fixture).read_text())
    os.utime(path, (when.timestamp(), when.timestamp()))
    return path


def test_relative_times_without_start_are_estimated_from_the_modification_time(tmp_path):
    log = fixture_modified_at(tmp_path / "server.log", "notime.log", dt.datetime(2026, 6, 15, 8, 0, 0, tzinfo=UTC))
    out, _ = imported(tmp_path, log)
    # last llama.cpp time in the file: 0.06.896.140 (line 8) → server start = 08:00:00 − 6.896140 s = 07:59:53.103860;
    # the draft line's 6.896015 s later is 07:59:59.999875
    assert [r["end_time"] for r in rows(out, "intervals")] == [t("2026-06-15T07:59:59.999875")]
    assert (f"{log}: absolute times are estimated: the server's start is taken to be the file's modification time "
            "minus its last llama.cpp log time, 2026-06-15T07:59:53.103860+00:00; pass --start TIME to set it"
            in notes(out))


def test_statistics_lines_differenced_per_request(tmp_path):
    out, summary = imported(tmp_path, "stats.log")
    got = [(r["series"], r["num_drafts"], r["num_draft_tokens"], r["num_accepted_tokens"]) for r in
           rows(out, "intervals")]
    assert got == [
        # task 4199: its statistics line (b = 8) is the slot's first in the file: nothing to difference; no mean
        # (the log viewer's `| ` bar after the time is not part of the series)
        ("slot 0 task 4199", None, 1225, 1213),
        # task 5199: a 4097 − 3355 = 742 steps; #gen tokens 7009 − 5665 = 1344 and #acc 6885 − 5564 = 1321, the
        # draft line's 1344 generated / 1321 accepted
        ("slot 0 task 5199", 742, 1344, 1321),
        # task 6173: no draft acceptance line, only statistics: a 4111 − 4097 = 14, gen 7034 − 7009 = 25,
        # acc 6910 − 6885 = 25 (not "drafted nothing")
        ("slot 0 task 6173", 14, 25, 25),
    ]
    # end = the line's time, start = end − total time: 23:40:18.817 − 1304.95 ms = 23:40:17.512050
    assert rows(out, "intervals")[2]["start_time"] == t("2026-05-14T23:40:17.512050")
    assert summary.skipped[STATS_UNUSED] == 1
    kept = notes(out)
    assert "layouts read: rate (2), request line (`new prompt`, `stopped by`, release) (3), statistics only (1)" in kept
    assert any(n.startswith("num_drafts from the `statistics` lines on 2 intervals") for n in kept)
    assert_clean(out)


def test_per_round_debug_lines_become_rounds(tmp_path):
    out, _ = imported(tmp_path, "rounds.log", start="2026-07-01T00:00:00")
    # issue 24's line: 16 of 16 drafts accepted, committed 16 + 1 = 17, KV before the round 681 − 17 = 664
    assert [(r["request_id"], r["round_idx"], r["num_draft_tokens"], r["num_accepted_tokens"],
             r["num_committed_tokens"], r["context_len"]) for r in rows(out, "rounds")] == [
        ("slot 3 task 0", 0, 16, 16, 17, 664)]
    # issue 24's print_timing line: 37 / 37, mean len 4.70 → n ∈ [37 / 3.705, 37 / 3.695] = [9.99, 10.01] → 10;
    # its time 0.01.883.943 after --start
    assert [(r["series"], r["end_time"], r["num_drafts"]) for r in rows(out, "intervals")] == [
        ("slot 3 task 1", t("2026-07-01T00:00:01.883943"), 10)]
    assert any(n.startswith("1 round of 1 request from llama.cpp's per-round lines") for n in notes(out))
    assert_clean(out)


def test_rounds_without_a_requests_row_are_kept_until_a_requests_table_lacks_them(tmp_path):
    # issue 37: the note said the loader rejects such rounds while the report used them. rounds.log has
    # no print_timing block for its one per-round request: no requests row, and no requests table at all
    out, _ = imported(tmp_path, "rounds.log", start="2026-07-01T00:00:00")
    (note,) = [n for n in notes(out) if "per-round lines but no requests row" in n]
    assert note == ("1 request with per-round lines but no requests row (no print_timing block with its times, or "
                    "no prompt length or stop reason in the log, and no matching response in this import): their "
                    "rounds are written. The loader keeps them while the traces have no requests table, and "
                    "rejects them (unknown_request) once a requests table, another import's, lacks their request; "
                    "import the log together with the responses, or a whole debug log, to give them requests rows")
    # as the note says: kept, and counted (16 drafted, 16 accepted: accept length 17)
    result = run("validate", out)
    assert "rejected rows: 0" in result.stdout
    report = run("report", out).stdout
    assert "Input rows: 1 deployments, 0 requests, 0 steps, 1 rounds; 0 rejected." in report
    assert "| 16 | 1 | 1 | 100.0% | 100.0% | 100.0% | 1.000 |" in report      # its 16th draft position
    # another import's requests table without the request: now rejected, unknown_request
    imported(tmp_path, "responses.jsonl", deployment="other")
    result = run("validate", out)
    assert "rejected rows: 1" in result.stdout and "rounds       unknown_request                     1" in result.stdout
    assert "Input rows: 2 deployments, 2 requests, 0 steps, 1 rounds; 1 rejected (unknown_request 1)." in \
        run("report", out).stdout


def test_the_report_on_a_single_request_says_what_it_rests_on(tmp_path):
    """Issue 37: the report on rounds.log's one per-round request showed γ=0 beside accept length
    17.000 [17.000, 17.000], and "0 flagged of 1 requests checked" beside "the requests table is
    absent". One request (16 drafted, 16 accepted: 1 + 16 / 1 = 17) gets no interval and is below
    every floor; γ is unknown, not 0; the count says where its request is known from."""
    out, _ = imported(tmp_path, "rounds.log", start="2026-07-01T00:00:00")
    report = run("report", out).stdout
    assert "| llama | unknown | – | – | 17.000 (1 request) | 17.000 | 100.0% | 17.000 | – | – | – | – |" in report
    assert "[17.000, 17.000]" not in report and "interval rests on" not in report
    (llama,) = json.loads(run("report", out, "--format", "json").stdout)["deployments"]
    assert llama["num_requests"] == 1 and llama["mean_accept_length"] == 17.0
    assert llama["mean_accept_length_interval"] is None        # not [17.0, 17.0]
    assert ("\nγ is – for llama (its rounds drafted up to 16 tokens): its deployments row gives "
            "num_speculative_tokens 0, which a speculative method cannot run with, so the configured length is "
            "unknown (`specan import … --num-speculative-tokens N` sets it).\n") in report
    assert ("\nllama rests on 1 request: not enough data for an interval (every resample of one request is that "
            "request) and below every floor of `[evidence]`, so its accept length has none.\n") in report
    assert ("- No verdict for llama: its speedup is unknown (no baseline: no none deployment with model unknown and "
            "target_quant bf16), and not enough data: 1 request, floor 10 ([evidence] min_requests); at least 10 "
            "of its requests and a plain-decoding deployment (method none) of model unknown with target_quant "
            "bf16, or its baseline_id set, would decide it.\n") in report
    # no TPOT speedup either: the summary no longer says the verdict rests on it
    assert "they need round times. No verdict has a speedup to rest on (What to do says what would decide it).\n" \
        in report
    # the gates' "the requests table is absent" beside the rule that checks rounds alone
    assert "| llama | latency | ttft_p99_ms | – | – | ≤ 2,000.0 | UNKNOWN | the requests table is absent |" in report
    assert ("### no_acceptance: 0 flagged of 1 request checked (known from the rounds alone: no requests rows)\n"
            in report)
    assert "### looping: 0 flagged of 0 requests checked\n" in report
    assert report.count("1 request could not be checked (see the notes).") == 2     # looping and stall


def test_speculative_cli_summaries_one_interval_each(tmp_path):
    out, summary = imported(tmp_path, "speculative.log", start="2026-01-01T00:00:00")
    got = [(r["series"], r["start_time"], r["end_time"], r["num_drafts"], r["num_draft_tokens"],
            r["num_accepted_tokens"], r["source"]) for r in rows(out, "intervals")]
    start = t("2026-01-01T00:00:00")
    assert got == [
        # lines 1-7 (PR #2926): 47 of 132 drafted accepted, 47 / 132 = 35.606 % as printed; `generated 129 tokens
        # in 248.340 seconds` before the counts → end = start + 248.340 s. num_drafts is not printed
        ("speculative.log:3", start, t("2026-01-01T00:04:08.340"), None, 132, 47, "llamacpp_log"),
        # lines 19-26 (PR #10455): 313 / 912 = 34.320 %; encoded 0.514 s + decoded 34.412 s = 34.926 s
        ("speculative.log:22", start, t("2026-01-01T00:00:34.926"), None, 912, 313, "llamacpp_log"),
        # lines 33-40 (issue #5877): 526 / 730 = 72.055 %; 0.054 + 12.132 = 12.186 s
        ("speculative.log:36", start, t("2026-01-01T00:00:12.186"), None, 730, 526, "llamacpp_log"),
    ]
    # 40 lines, 3 × 5 counts read; the other 25: 9 blank, `draft:` ×2, `target:`, 5 llama_print_timings, 3
    # llama_perf, and the 5 encoded/decoded/generated lines (their seconds are read, the lines counted as other)
    assert summary.skipped == {OTHER_LINE: 25}
    kept = notes(out)
    assert "layouts read: llama-speculative summary (3)" in kept
    assert any(n.startswith("llama-speculative / lookup summaries (3): one intervals row each") for n in kept)
    assert not any(n.startswith("log times are the log shipper") for n in kept)
    assert_clean(out)


def test_speculative_cli_seconds_after_the_counts_and_lookup(tmp_path):
    out, _ = imported(tmp_path, "heuristic.log", "lookup.log", start="2026-01-01T00:00:00")
    start = t("2026-01-01T00:00:00")
    assert [(r["series"], r["start_time"], r["end_time"], r["num_draft_tokens"], r["num_accepted_tokens"])
            for r in rows(out, "intervals")] == [
        # PR #3006 (2023-09) prints `decoded` after the counts: 231 / 245 = 94.286 % in 11.990 s,
        # then 223 / 254 = 87.795 % in 13.234 s, each run's own line
        ("heuristic.log:2", start, t("2026-01-01T00:00:11.990"), 245, 231),
        ("heuristic.log:11", start, t("2026-01-01T00:00:13.234"), 254, 223),
        # PR #5450 (lookup, t_draft between n_drafted and n_accept): 410 / 712 = 57.584 %, no seconds printed:
        # no start, end = --start
        ("lookup.log:1", None, start, 712, 410),
    ]
    assert_clean(out)


def test_cli_summary_without_start_ends_at_the_modification_time(tmp_path):
    log = fixture_modified_at(tmp_path / "run.log", "heuristic.log", dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC))
    out, _ = imported(tmp_path, log)
    # both runs end at 12:00:00 and start 11.990 s and 13.234 s before it
    assert [(r["start_time"], r["end_time"]) for r in rows(out, "intervals")] == [
        (t("2026-03-01T11:59:48.010"), t("2026-03-01T12:00:00")),
        (t("2026-03-01T11:59:46.766"), t("2026-03-01T12:00:00"))]
    assert any(n.startswith(f"{log}: 2 intervals without a time of their own") and "estimated" in n
               for n in notes(out))


def test_cli_summary_whose_percentage_contradicts_its_counts_is_skipped(tmp_path):
    log = tmp_path / "bad.log"
    # lookup.log with n_accept changed 410 → 411: 411 / 712 = 57.725 %, not the printed 57.584 %
    log.write_text((FIXTURES / "lookup.log").read_text().replace("= 410", "= 411"))
    with pytest.raises(ImportInputError, match=rf"did not import is {log}:6 \({CONTRADICTS[:20]}"):
        imported(tmp_path, log)


def test_pretty_printed_bare_timings_many_per_file(tmp_path):
    out, summary = imported(tmp_path, "timings.json", start="2026-01-01T00:00:00")
    start = t("2026-01-01T00:00:00")
    assert [(r["series"], r["start_time"], r["end_time"], r["num_drafts"], r["num_draft_tokens"],
             r["num_accepted_tokens"], r["source"]) for r in rows(out, "intervals")] == [
        # PR #12603's `jq .timings`: 347 drafted, 65 accepted; 228.522 + 11082.606 ms = 11.311128 s
        ("timings.json:1", start, t("2026-01-01T00:00:11.311128"), None, 347, 65, "llamacpp_response"),
        # b9251's usage chunk (responses.jsonl line 3) re-indented: 604 / 515; 128.301 + 20629.211 = 20.757512 s
        ("timings.json:13", start, t("2026-01-01T00:00:20.757512"), None, 604, 515, "llamacpp_response"),
    ]
    assert not rows(out, "requests")        # a bare timings object has no id, finish reason or token counts
    assert not summary.skipped
    assert "layouts read: bare timings (2)" in notes(out)
    assert_clean(out)


def test_unfinished_pretty_printed_json_is_named(tmp_path):
    cut = tmp_path / "cut.json"
    # the second object of timings.json (lines 13-26) without its last 4 lines: it never closes
    cut.write_text("\n".join((FIXTURES / "timings.json").read_text().splitlines()[12:22]) + "\n")
    with pytest.raises(ImportInputError, match=rf"did not import is {cut}:1 \(pretty-printed JSON that never"):
        imported(tmp_path, cut)


def test_llama_swap_pid_prefix_as_quoted_is_a_log_line(tmp_path):
    """rate.log lines 10-14 as PR #23269 quotes them (without the journald prefix SOURCES.md says was added):
    a line opening with `[53409]` is log text, not JSON."""
    log = tmp_path / "swap.log"
    log.write_text("".join(line.split("llama-swap[812]: ", 1)[1] + "\n" for line in
                           (FIXTURES / "rate.log").read_text().splitlines()[9:14]))
    out, _ = imported(tmp_path, log, start="2026-05-21T10:00:00")
    # header at 4.48.313.649 (the bare lines have no time of their own) → end 10:04:48.313649; start = end −
    # total time 15224.00 ms = 10:04:33.089649; 118 of 144
    assert [(r["series"], r["start_time"], r["end_time"], r["num_draft_tokens"], r["num_accepted_tokens"])
            for r in rows(out, "intervals")] == [
        ("[53409] slot 0 task 689", t("2026-05-21T10:04:33.089649"), t("2026-05-21T10:04:48.313649"), 144, 118)]


def test_start_is_refused_for_other_sources_and_must_be_a_time(tmp_path):
    result = run("import", "sglang-log", FIXTURES / "rate.log", "--deployment", "x", "--out", tmp_path / "t",
                 "--start", "2026-01-01T00:00:00")
    assert result.exit_code == 2 and "--start applies to llamacpp-log and vllm-log only" in result.stderr
    result = run("import", "llamacpp-log", FIXTURES / "notime.log", "--deployment", "x", "--out", tmp_path / "t",
                 "--start", "yesterday")
    assert result.exit_code == 2 and "--start: expected an ISO-8601 time" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_every_file_must_import_something(tmp_path):
    other = tmp_path / "other.log"
    other.write_text("main: server is listening on http://127.0.0.1:8080\nsrv  update_slots: all slots are idle\n")
    with pytest.raises(ImportInputError, match=rf"^{other}: nothing to import: no line looks like llama\.cpp timing "
                                               r"output .*--list-layouts"):
        imported(tmp_path, "rate.log", other)
    assert not (tmp_path / "traces").exists()      # the good file's rows are not written either


def test_the_first_bad_line_is_named_by_line_number(tmp_path):
    log = tmp_path / "cut.log"
    log.write_text("srv  update_slots: all slots are idle\n"
                   "2026-08-01T10:00:00Z slot print_timing: id  0 | task 1 | prompt eval time = 1"
                   " ms /\n"
                   "2026-08-01T10:00:01Z slot print_timing: id  0 | task 2 | draft acceptance = 0.5\n")
    with pytest.raises(ImportInputError, match=rf"did not import is {log}:2 \({NOT_PARSED}\)"):
        imported(tmp_path, log)


def test_importing_the_same_input_again_replaces_it(tmp_path):
    out, _ = imported(tmp_path, "mean.log")
    before = sorted(p.relative_to(out) for p in out.rglob("*.parquet"))
    _, summary = imported(tmp_path, "mean.log")
    assert sorted(p.relative_to(out) for p in out.rglob("*.parquet")) == before
    assert len(rows(out, "intervals")) == 3
    assert any("imported before" in text for _, text in summary.notes)


# =========================================================================== through the CLI (needs the wiring)


def test_cli_import_prints_the_summary(tmp_path):
    out = tmp_path / "traces"
    result = run("import", "llamacpp-log", FIXTURES / "rate.log", FIXTURES / "mean.log", "--deployment", "llama",
                 "--out", out)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"specan import llamacpp-log → {out}")
    assert "intervals            6 rows" in result.stdout          # 3 + 3
    # other lines: 5 in rate.log; in mean.log the two graphs reused lines and idle (release lines are read)
    assert "        8  not llama.cpp timing output" in result.stdout


def test_cli_nothing_imports_is_one_line_exit_2(tmp_path):
    out = tmp_path / "traces"
    result = run("import", "llamacpp-log", FIXTURES / "noclock.log", "--deployment", "llama", "--out", out)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    assert "noclock.log:5" in result.stderr and "--list-layouts" in result.stderr
    assert "known layouts" not in result.stderr and len(result.stderr.replace(str(FIXTURES), "")) < 400
    assert not out.exists() or not any(out.rglob("*.parquet"))


def test_run_import_dispatches_llamacpp_log(tmp_path):
    from analyzer.ingest.importers import run_import

    summary = run_import("llamacpp-log", [FIXTURES / "responses.jsonl"], tmp_path / "t", "llama", model="m")
    assert summary.rows["requests"] == 2 and summary.rows["intervals"] == 2
    with pytest.raises(ImportInputError, match="--year applies to vllm-log only"):
        run_import("llamacpp-log", [FIXTURES / "rate.log"], tmp_path / "u", "llama", year=2026)


def test_per_round_lines_of_a_current_build_read_operator_as_their_function(tmp_path):
    out, _ = imported(tmp_path, "rounds_b11434.log", start="2026-12-01T00:00:00")
    # build 11434's six lines: task 1 accepts 4/4 at n_tokens 7, 12, 17, 22, task 8 at 22, 27;
    # committed 4 + 1 = 5 each, context before the round n_tokens − 5
    assert [(r["request_id"], r["round_idx"], r["num_draft_tokens"], r["num_accepted_tokens"],
             r["num_committed_tokens"], r["context_len"]) for r in rows(out, "rounds")] == [
        ("slot 0 task 1", 0, 4, 4, 5, 2), ("slot 0 task 1", 1, 4, 4, 5, 7), ("slot 0 task 1", 2, 4, 4, 5, 12),
        ("slot 0 task 1", 3, 4, 4, 5, 17), ("slot 0 task 8", 0, 4, 4, 5, 17), ("slot 0 task 8", 1, 4, 4, 5, 22)]
    assert_clean(out)
