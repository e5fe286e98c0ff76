"""specan import trtllm-iter (docs/importers.md): TensorRT-LLM iteration output → steps.

Inputs are tests/fixtures/trtllm/iter_* (sources in that folder's SOURCES.md): print_iter_log
lines pasted in PR #3914 and PR #6683, the stats object pasted in issue
#6364, and a speculative capture constructed from it by editing numbers. Every import runs
through the CLI (click's CliRunner); every expected number is worked out by hand below.
"""

from __future__ import annotations

import json
from pathlib import Path

from analyzer.ingest.importers.sniff import NO, STRONG, head_of, scores, trtllm_iter
from imported import rows, run, t

FIXTURES = Path(__file__).parent / "fixtures"
TRT = FIXTURES / "trtllm"
LOG_3914 = TRT / "iter_log_pr3914.log"
LOG_6683 = TRT / "iter_log_pr6683.log"
STATS_6364 = TRT / "iter_stats_issue6364.json"
SPEC = TRT / "iter_stats_spec_constructed.jsonl"


def imported(*args):
    result = run("import", "trtllm-iter", *args)
    assert result.exit_code == 0, result.output
    return result


def steps(root: Path, deployment: str) -> list[dict]:
    return sorted((r for r in rows(root, "steps") if r["deployment_id"] == deployment), key=lambda r: r["step_id"])


def deployment(root: Path, deployment_id: str) -> dict:
    (found,) = [r for r in rows(root, "deployments") if r["deployment_id"] == deployment_id]
    return found


def notes(root: Path) -> list[str]:
    return [r["note"] for r in rows(root, "import_notes")]


def assert_one_line_exit_2(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


# =========================================================================== print_iter_log


def test_log_pr3914_plain_with_method_none(tmp_path):
    out = tmp_path / "t"
    result = imported(LOG_3914, "--deployment", "base", "--method", "none", "--out", out)
    # line 1 is the layout before num_scheduled_requests: skipped, counted
    assert "1  iteration line without num_scheduled_requests" in result.stdout
    (step,) = steps(out, "base")
    assert step["step_id"] == 198
    # timestamp 2025-04-28 09:56:44 is printed after the iteration; elapsed_time 0.005060911178588867 s
    # = 5060.911 µs → 5061 µs; start = 09:56:44.000000 − 0.005061 = 09:56:43.994939
    assert step["start_time"] == t("2025-04-28 09:56:43.994939")
    assert step["duration_ms"] == 5.060911178588867          # 0.005060911178588867 s × 1000
    # batch = num_scheduled_requests 10 − num_ctx_requests 0 = 10
    assert step["batch_size"] == 10
    assert step["num_prefill_tokens"] == 0                   # num_ctx_tokens
    # plain decoding: 10 generation requests commit one token each: 10, not num_generation_tokens (16 = 10
    # requests + 6 CUDA-graph padding, as PR #3914 says)
    assert (step["num_draft_tokens"], step["num_accepted_tokens"], step["num_committed_tokens"]) == (0, 0, 10)
    assert step["counts_from"] == "iteration"
    dep = deployment(out, "base")
    assert (dep["model"], dep["method"], dep["num_speculative_tokens"]) == ("unknown", "none", 0)


def test_log_pr6683_without_method_leaves_counts_null(tmp_path):
    out = tmp_path / "t"
    imported(LOG_6683, "--deployment", "d", "--out", out)
    got = steps(out, "d")
    assert [s["step_id"] for s in got] == [5, 6, 7, 8]
    # start = timestamp − elapsed_time, in whole µs:
    #   5: 02:28:51 − 0.0823206901550293 s (82320.69 µs → 82321) = 02:28:50.917679
    #   6: 02:28:52 − 0.09875988960266113 s (98759.89 → 98760)   = 02:28:51.901240
    #   7: 02:28:52 − 0.0669400691986084 s (66940.07 → 66940)    = 02:28:51.933060
    #   8: 02:28:52 − 0.09499597549438477 s (94995.98 → 94996)   = 02:28:51.905004
    # (7 seems to start after 8: the timestamp has whole seconds, as noted)
    assert [s["start_time"] for s in got] == [t("2025-08-07 02:28:50.917679"), t("2025-08-07 02:28:51.901240"),
                                              t("2025-08-07 02:28:51.933060"), t("2025-08-07 02:28:51.905004")]
    assert [s["duration_ms"] for s in got] == [82.3206901550293, 98.75988960266113, 66.9400691986084,
                                               94.99597549438477]
    # batch = num_scheduled_requests − num_ctx_requests: 1−1, 2−1, 3−1, 4−1
    assert [s["batch_size"] for s in got] == [0, 1, 2, 3]
    assert [s["num_prefill_tokens"] for s in got] == [4096] * 4          # num_ctx_tokens
    # no way to tell plain from speculative: the count columns are not written at all
    for step in got:
        for column in ("num_draft_tokens", "num_accepted_tokens", "num_committed_tokens", "counts_from"):
            assert column not in step
    assert deployment(out, "d")["method"] == "unknown"
    assert any("can't tell plain decoding from speculative decoding" in n for n in notes(out))
    assert any("whole seconds" in n for n in notes(out))


def test_log_pr6683_plain_commits_one_token_per_generation_request(tmp_path):
    out = tmp_path / "t"
    imported(LOG_6683, "--deployment", "base", "--method", "none", "--out", out)
    got = steps(out, "base")
    # batch sizes 0, 1, 2, 3 → committed 0, 1, 2, 3 (here equal to num_generation_tokens: no padding)
    assert [s["num_committed_tokens"] for s in got] == [0, 1, 2, 3]
    assert {(s["num_draft_tokens"], s["num_accepted_tokens"], s["counts_from"]) for s in got} == \
        {(0, 0, "iteration")}


def test_log_ranks_of_one_iteration_are_one_step(tmp_path):
    # Edited from PR #6683's lines for iterations 6 and 7: a copy of each as rank 1 (global_rank and rank
    # 1), as TLLM_PROFILE_LOG_RANKS=all prints them. Rank 0's lines are the steps.
    lines = LOG_6683.read_text().splitlines()[1:3]
    log = tmp_path / "two_ranks.log"
    log.write_text("\n".join(x for line in lines
                             for x in (line, line.replace("global_rank = 0, rank = 0", "global_rank = 1, rank = 1")))
                   + "\n")
    out = tmp_path / "t"
    result = imported(log, "--deployment", "tp2", "--method", "none", "--out", out)
    assert "2  iteration of another rank" in result.stdout
    got = steps(out, "tp2")
    assert [s["step_id"] for s in got] == [6, 7]
    # iteration 7 as in the pasted line: 02:28:51.933060, 66.9400691986084 ms, batch 2
    assert (got[1]["start_time"], got[1]["duration_ms"], got[1]["batch_size"]) == \
        (t("2025-08-07 02:28:51.933060"), 66.9400691986084, 2)
    assert any("ranks 0, 1 logged; rank 0's lines are the steps" in n for n in notes(out))


def test_log_repeated_iteration_is_not_a_second_step(tmp_path):
    # PR #6683's four lines twice (a log captured twice): four steps, four skips
    log = tmp_path / "twice.log"
    log.write_text(LOG_6683.read_text() * 2)
    out = tmp_path / "t"
    result = imported(log, "--deployment", "d", "--out", out)
    assert "4  iteration repeated" in result.stdout
    assert [s["step_id"] for s in steps(out, "d")] == [5, 6, 7, 8]


def test_log_with_only_the_old_layout_imports_nothing(tmp_path):
    log = tmp_path / "old.log"
    log.write_text(LOG_3914.read_text().splitlines()[0] + "\n")
    out = tmp_path / "t"
    result = run("import", "trtllm-iter", log, "--deployment", "d", "--out", out)
    assert_one_line_exit_2(result, f"{log}: nothing to import: the first record that did not import is {log}:1 "
                                   "(iteration line without num_scheduled_requests")
    assert not out.exists() or not any(out.rglob("*.parquet"))


# =========================================================================== stats JSON


def test_stats_issue6364_plain(tmp_path):
    out = tmp_path / "t"
    imported(STATS_6364, "--deployment", "trt", "--out", out)
    (step,) = steps(out, "trt")
    assert step["step_id"] == 60
    # C++ backend (staticBatchingStats null): timestamp "07-25-2025 16:54:34.140189" is the end;
    # iterLatencyMS 13.021209 → 13021.209 µs → 13021 µs; start = .140189 − .013021 = 16:54:34.127168
    assert step["start_time"] == t("2025-07-25 16:54:34.127168")
    assert step["duration_ms"] == 13.021209
    assert step["batch_size"] == 1                    # numGenRequests
    assert step["num_prefill_tokens"] == 0            # numCtxTokens
    assert step["kv_usage"] == 3 / 22955              # usedNumBlocks / maxNumBlocks
    # specDecodingStats null in the only object: plain, numGenRequests 1 → 1 committed token
    assert (step["num_draft_tokens"], step["num_accepted_tokens"], step["num_committed_tokens"]) == (0, 0, 1)
    assert step["counts_from"] == "iteration"
    dep = deployment(out, "trt")
    assert (dep["method"], dep["num_speculative_tokens"]) == ("none", 0)


def test_stats_spec_constructed(tmp_path):
    out = tmp_path / "t"
    result = imported(SPEC, "--deployment", "spec", "--out", out)
    # iteration 64: no generation, no context → counted and left out
    assert "1  iteration with neither generation nor context requests" in result.stdout
    got = steps(out, "spec")
    assert [s["step_id"] for s in got] == [61, 62, 63]
    # start = timestamp − iterLatencyMS (C++-backend objects):
    #   61: .155189 − 15 ms = .140189; 62: .175189 − 20 ms = .155189; 63: .185189 − 10 ms = .175189
    assert [s["start_time"] for s in got] == [t("2025-07-25 16:54:34.140189"), t("2025-07-25 16:54:34.155189"),
                                              t("2025-07-25 16:54:34.175189")]
    assert [s["duration_ms"] for s in got] == [15.0, 20.0, 10.0]
    assert [s["batch_size"] for s in got] == [4, 3, 2]             # numGenRequests
    assert [s["num_prefill_tokens"] for s in got] == [0, 512, 0]   # numCtxTokens
    assert [s["kv_usage"] for s in got] == [8 / 22955, 24 / 22955, 24 / 22955]
    assert [s["num_draft_tokens"] for s in got] == [12, 9, 6]
    assert [s["num_accepted_tokens"] for s in got] == [7, 3, 6]
    # committed = numGenRequests + numAcceptedTokens: 4 + 7 = 11, 3 + 3 = 6, 2 + 6 = 8
    assert [s["num_committed_tokens"] for s in got] == [11, 6, 8]
    assert {s["counts_from"] for s in got} == {"iteration"}
    # drafts per drafting request: 12/4 = 3, 9/3 = 3, 6/2 = 3 → 3; drafts appear → method unknown
    dep = deployment(out, "spec")
    assert (dep["method"], dep["num_speculative_tokens"]) == ("unknown", 3)
    # acceptanceLength: 61 (7+4)/4 = 2.75 ✓, 62 (3+3)/3 = 2.0 ✓, 63 printed 3.5 against (6+2)/2 = 4.0 ✗,
    # 64 0.0 with no drafting request ✓ → one disagreement, at iter 63
    assert any(n.startswith("1 stats objects whose acceptanceLength disagrees") and "first at iter 63" in n
               for n in notes(out))


def test_stats_step_sums_equal_the_json_sums(tmp_path):
    # computed independently from the capture with plain json: every object's specDecodingStats
    drafted = accepted = 0
    for line in SPEC.read_text().splitlines():
        spec = json.loads(line)["specDecodingStats"]
        drafted += spec["numDraftTokens"]
        accepted += spec["numAcceptedTokens"]
    out = tmp_path / "t"
    imported(SPEC, "--deployment", "spec", "--out", out)
    got = steps(out, "spec")
    assert sum(s["num_draft_tokens"] for s in got) == drafted
    assert sum(s["num_accepted_tokens"] for s in got) == accepted
    assert (drafted, accepted) == (27, 16)     # 12 + 9 + 6 + 0, 7 + 3 + 6 + 0


def test_stats_as_a_json_array_and_as_json_strings(tmp_path):
    # /metrics returns one JSON array; some get_stats() releases return each iteration as JSON text
    objects = [json.loads(line) for line in SPEC.read_text().splitlines()]
    array = tmp_path / "metrics.json"
    array.write_text(json.dumps(objects, indent=2))
    strings = tmp_path / "get_stats.json"
    strings.write_text(json.dumps([json.dumps(o) for o in objects]))
    for path, dep in ((array, "a"), (strings, "s")):
        out = tmp_path / dep
        imported(path, "--deployment", dep, "--out", out)
        assert [s["num_committed_tokens"] for s in steps(out, dep)] == [11, 6, 8]


def test_stats_bad_record_is_skipped_and_counted(tmp_path):
    lines = SPEC.read_text().splitlines()
    bad = json.loads(lines[1])
    bad["iterLatencyMS"] = "slow"
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([lines[0], json.dumps(bad), lines[2]]) + "\n")
    out = tmp_path / "t"
    result = imported(path, "--deployment", "d", "--out", out)
    assert f"1  stats object with a field of the wrong type (first at {path}:2)" in result.stdout
    assert [s["step_id"] for s in steps(out, "d")] == [61, 63]


def test_stats_cut_off_file_exits_2_naming_the_line(tmp_path):
    path = tmp_path / "cut.json"
    text = SPEC.read_text()
    path.write_text(text[: len(text) - 40])        # the last object loses its end
    result = run("import", "trtllm-iter", path, "--deployment", "d", "--out", tmp_path / "t")
    assert_one_line_exit_2(result, f"{path}:4: not valid JSON")


def test_log_and_stats_in_one_import_are_refused(tmp_path):
    result = run("import", "trtllm-iter", LOG_6683, STATS_6364, "--deployment", "d", "--out", tmp_path / "t")
    assert_one_line_exit_2(result, "iteration log lines and iteration statistics JSON in one import")


# =========================================================================== content checks


def test_auto_picks_trtllm_iter_for_both_layouts(tmp_path):
    for path in (LOG_3914, LOG_6683, STATS_6364, SPEC):
        assert {s for s, v in scores(path).items() if v} == {"trtllm-iter"}, path
        assert scores(path)["trtllm-iter"] == STRONG
    res = run("import", "auto", LOG_6683, STATS_6364, "--deployment", "x", "--out", tmp_path / "t")
    # two files of one source in one import are refused, as above: auto groups them under trtllm-iter
    assert "iteration log lines and iteration statistics JSON" in res.stderr
    res = run("import", "auto", SPEC, "--deployment", "x", "--out", tmp_path / "u")
    assert res.exit_code == 0, res.output
    assert res.stderr.strip().endswith("iter_stats_spec_constructed.jsonl: trtllm-iter")


def test_no_other_fixture_looks_like_trtllm_iter():
    others = [p for p in FIXTURES.rglob("*") if p.is_file() and not p.name.startswith("iter_")
              and p.suffix in (".log", ".json", ".jsonl", ".txt", ".prom")]
    assert others
    for path in others:
        assert trtllm_iter(head_of(path)) == NO, path


def test_another_source_refuses_an_iteration_log(tmp_path):
    result = run("import", "vllm-log", LOG_6683, "--deployment", "d", "--out", tmp_path / "t")
    assert_one_line_exit_2(result, "this is TensorRT-LLM iteration output, not vllm-log input: "
                                   "use `specan import trtllm-iter`")


def test_stats_with_spec_stats_but_no_drafts_is_not_plain(tmp_path):
    # Edited from the constructed capture's iteration 64 (specDecodingStats all 0): numGenRequests 1,
    # numScheduledRequests 1. A speculative config without drafts (the speculation gate off) is not plain
    # decoding: method unknown, γ unknown (0, weak), and the step's counts as given: 0, 0, 1 + 0 = 1.
    obj = json.loads(SPEC.read_text().splitlines()[3])
    obj["inflightBatchingStats"]["numGenRequests"] = obj["inflightBatchingStats"]["numScheduledRequests"] = 1
    path = tmp_path / "gate_off.json"
    path.write_text(json.dumps(obj))
    out = tmp_path / "t"
    imported(path, "--deployment", "g", "--out", out)
    (step,) = steps(out, "g")
    assert (step["num_draft_tokens"], step["num_accepted_tokens"], step["num_committed_tokens"]) == (0, 0, 1)
    dep = deployment(out, "g")
    assert (dep["method"], dep["num_speculative_tokens"]) == ("unknown", 0)


def test_log_host_step_time_layouts(tmp_path):
    # No pasted line of these layouts was found. Constructed from py_executor.py's format strings (see
    # SOURCES.md) with the numbers of the PR #3914 line: host_step_time in ms in place of elapsed_time.
    middle = ("[04/28/2025-09:56:44] [TRT-LLM] [I] iter = 198, global_rank = 0, rank = 0, currank_total_requests = "
              "0/0, host_step_time = 5.060911178588867ms, prev_device_step_time = N/A, timestamp = 2025-04-28 "
              "09:56:44, num_scheduled_requests: 10, states = {'num_ctx_requests': 0, 'num_ctx_tokens': 0, "
              "'num_generation_tokens': 16}")
    newest = ("[04/28/2025-09:56:45] [TRT-LLM] [I] [_torch][RANK 0] iter = 199, global_rank = 0, rank = 0, "
              "num_scheduled_requests = 10, kv_cache_util = 0.125, currank_total_requests = 0/0, host_step_time = "
              "5.060911178588867ms, prev_device_step_time = 4.9ms, timestamp = 2025-04-28 09:56:45, states = "
              "{'num_ctx_requests': 0, 'num_ctx_tokens': 0, 'num_generation_tokens': 16, 'cached_kv_tokens': 63821}")
    log = tmp_path / "host_step.log"
    log.write_text(middle + "\n" + newest + "\n")
    out = tmp_path / "t"
    result = imported(log, "--deployment", "h", "--method", "none", "--out", out)
    got = steps(out, "h")
    assert [s["step_id"] for s in got] == [198, 199]
    # 5.060911178588867 ms → 5061 µs before each timestamp: 09:56:43.994939 and 09:56:44.994939
    assert [s["start_time"] for s in got] == [t("2025-04-28 09:56:43.994939"), t("2025-04-28 09:56:44.994939")]
    assert [s["duration_ms"] for s in got] == [5.060911178588867] * 2
    assert [s["batch_size"] for s in got] == [10, 10]
    assert [s["num_committed_tokens"] for s in got] == [10, 10]
    # kv_cache_util only in the newest layout
    assert [s["kv_usage"] for s in got] == [None, 0.125]
    assert "1 × host_step_time, num_scheduled_requests = N, kv_cache_util" in result.stdout
    assert "1 × host_step_time, num_scheduled_requests: N" in result.stdout


def test_stats_without_spec_stats_but_a_speculative_method_keeps_counts_null(tmp_path):
    # issue #6364's object (specDecodingStats null) imported as --method eagle3: the counts can't be told
    out = tmp_path / "t"
    imported(STATS_6364, "--deployment", "e", "--method", "eagle3", "--out", out)
    (step,) = steps(out, "e")
    assert step["batch_size"] == 1
    for column in ("num_draft_tokens", "num_accepted_tokens", "num_committed_tokens", "counts_from"):
        assert column not in step
    assert deployment(out, "e")["method"] == "eagle3"
    assert any("but --method is eagle3" in n for n in notes(out))


def test_stats_issue3376_context_only_iteration_without_spec_key(tmp_path):
    out = tmp_path / "t"
    imported(TRT / "iter_stats_issue3376.json", "--deployment", "ctx", "--out", out)
    (step,) = steps(out, "ctx")
    assert step["step_id"] == 0
    # iterLatencyMS 0.0: start = the timestamp 20:33:17.747028 itself (C++ backend: staticBatchingStats null)
    assert (step["start_time"], step["duration_ms"]) == (t("2025-04-07 20:33:17.747028"), 0.0)
    # a context-only iteration: no generation request, 16000 context tokens: kept (not idle)
    assert (step["batch_size"], step["num_prefill_tokens"]) == (0, 16000)
    assert step["kv_usage"] == 5495 / 7240
    # no specDecodingStats key in this release: plain, 0 generation requests → 0 committed
    assert (step["num_draft_tokens"], step["num_accepted_tokens"], step["num_committed_tokens"]) == (0, 0, 0)
    assert deployment(out, "ctx")["method"] == "none"


def test_stats_attention_dp_ranks_keep_the_lowest(tmp_path):
    # Edited from the constructed capture's iterations 61 and 62: each also as attentionDpRank 1 (numbers
    # unchanged), as releases with per-rank Attention-DP rows write them (PR #13649); rank 0's are the steps.
    lines = SPEC.read_text().splitlines()[:2]
    records = []
    for line in lines:
        for rank in (0, 1):
            obj = json.loads(line)
            obj["attentionDpRank"] = rank
            records.append(json.dumps(obj))
    path = tmp_path / "adp.jsonl"
    path.write_text("\n".join(records) + "\n")
    out = tmp_path / "t"
    result = imported(path, "--deployment", "adp", "--out", out)
    assert "2  iteration of another rank" in result.stdout
    got = steps(out, "adp")
    assert [(s["step_id"], s["num_draft_tokens"], s["num_accepted_tokens"]) for s in got] == [(61, 12, 7), (62, 9, 3)]
