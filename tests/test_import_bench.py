"""vllm-bench, sglang-bench and the content checks (specan import auto), through the CLI.

Every expected number is read off the fixture lines (tests/fixtures/*_bench/SOURCES.md)."""

import json
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from analyzer.cli import main
from analyzer.ingest.importers import SOURCES
from analyzer.ingest.importers.sniff import STRONG, pick, scores

FIXTURES = Path(__file__).parent / "fixtures"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def intervals(out):
    return duckdb.sql(f"select * from read_parquet('{out}/intervals/*.parquet') order by series").fetchall(), \
        duckdb.sql(f"select * from read_parquet('{out}/intervals/*.parquet') order by series").columns


def rows(out):
    data, cols = intervals(out)
    return [dict(zip(cols, r)) for r in data]


def test_vllm_bench_text_block(tmp_path):
    # PR #48892, MTP 1: Drafts 26407, Draft tokens 26407, Accepted 22021, Position 0 83.39 %
    # → 83.39 / 100 × 26407 = 22020.8 → 22021 accepted at position 1
    res = run("import", "vllm-bench", FIXTURES / "vllm_bench/pr48892_mtp1.txt", "--deployment", "mtp1",
              "--time", "2026-08-03T12:00:00", "--out", tmp_path)
    assert res.exit_code == 0, res.output
    [r] = rows(tmp_path)
    assert (r["num_drafts"], r["num_draft_tokens"], r["num_accepted_tokens"]) == (26407, 26407, 22021)
    assert r["accepted_per_position"] == [22021]
    assert r["source"] == "vllm_bench"
    assert r["reported_accept_length"] == 1.83 and r["reported_accept_rate"] == pytest.approx(0.8339)
    assert r.get("start_time") is None      # the pasted block has no Benchmark duration line: column absent
    assert "benchmark traffic, not production" in res.output
    dep = duckdb.sql(f"select num_speculative_tokens, method from read_parquet('{tmp_path}/deployments/*.parquet')")
    assert dep.fetchall() == [(1, "unknown")]   # one per-position rate printed


def test_vllm_bench_json_result(tmp_path):
    # vllm-ascend #9871 (v0.18.0rc2): drafts 23975, draft tokens 71925, accepted 41570; rates × 23975:
    # 0.77343…×23975 = 18543, 0.55920…×23975 = 13407, 0.40125…×23975 = 9620 (sum 41570 = accepted)
    res = run("import", "vllm-bench", FIXTURES / "vllm_bench/ascend9871_v0.18.0rc2.json", "--deployment", "asc",
              "--out", tmp_path)
    assert res.exit_code == 0, res.output
    [r] = rows(tmp_path)
    assert (r["num_drafts"], r["num_draft_tokens"], r["num_accepted_tokens"]) == (23975, 71925, 41570)
    assert r["accepted_per_position"] == [18543, 13407, 9620]
    assert "modification time" in res.output   # no date key in the quoted result: the file's mtime, noted


def test_sglang_bench_two_runs(tmp_path):
    # PR #9588: Accept length 3.46, duration 40.23 s, 1067.83 tok/s; PR #17098: 2.14, 128.43 s, 183.80 tok/s
    res = run("import", "sglang-bench", FIXTURES / "sglang_bench/pr9588_concurrency4.txt",
              FIXTURES / "sglang_bench/pr17098_mindspore_eagle3.txt", "--deployment", "sg",
              "--time", "2025-08-25T10:00:00", "--out", tmp_path)
    assert res.exit_code == 0, res.output
    got = {r["series"]: r for r in rows(tmp_path)}
    a, b = got["pr9588_concurrency4.txt"], got["pr17098_mindspore_eagle3.txt"]
    assert (a["reported_accept_length"], a["generation_tokens_per_s"]) == (3.46, 1067.83)
    assert (b["reported_accept_length"], b["generation_tokens_per_s"]) == (2.14, 183.80)
    assert (a["end_time"] - a["start_time"]).total_seconds() == pytest.approx(40.23)
    assert (b["end_time"] - b["start_time"]).total_seconds() == pytest.approx(128.43)
    assert a.get("num_drafts") is None and a["source"] == "sglang_bench"   # no counts printed


def test_no_summary_is_refused(tmp_path):
    res = run("import", "vllm-bench", FIXTURES / "sglang_logs/eagle3_tp0.log", "--deployment", "x",
              "--out", tmp_path)
    assert res.exit_code == 2
    assert "this is an SGLang log" in res.output and "specan import sglang-log" in res.output


FIXTURE_SOURCE = {"aiperf": "aiperf-records", "llamacpp": "llamacpp-log", "prometheus_text": "prometheus",
                  "sglang_logs": "sglang-log", "streams": "vllm-responses", "trtllm": "trtllm-responses",
                  "vllm_logs": "vllm-log", "vllm_bench": "vllm-bench", "sglang_bench": "sglang-bench"}
TOP = {"vllm.log": "vllm-log", "vllm_responses.jsonl": "vllm-responses",
       "vllm_responses_plain.jsonl": "vllm-responses", "vllm_responses_truncated.jsonl": "vllm-responses",
       "sglang_responses.jsonl": "sglang-responses", "prometheus_range.json": "prometheus",
       "prometheus_vector.json": "prometheus"}
# the kept runs of a real llama-server (e2e/llamacpp/run.sh): its log, responses and stream, its scrapes
E2E_SOURCE = {".log": "llamacpp-log", ".jsonl": "llamacpp-log", ".sse": "llamacpp-log", ".prom": "prometheus"}
CASES = ([(p, TOP[p.name]) for p in sorted(FIXTURES.glob("*")) if p.is_file() and p.suffix != ".md"]
         # trtllm/iter_*: TensorRT-LLM's iteration output, beside its responses
         + [(p, "trtllm-iter" if p.parent.name == "trtllm" and p.name.startswith("iter_")
             else FIXTURE_SOURCE[p.parent.name]) for p in sorted(FIXTURES.glob("*/*"))
            if p.suffix != ".md" and p.parent.name != "llamacpp_e2e"]
         + [(p, E2E_SOURCE[p.suffix]) for p in sorted(FIXTURES.glob("llamacpp_e2e/**/*")) if p.suffix in E2E_SOURCE])


@pytest.mark.parametrize("path,source", CASES, ids=[str(p.relative_to(FIXTURES)) for p, _ in CASES])
def test_every_fixture_is_its_own_source(path, source):
    assert pick(path) == (source, [source]) or scores(path)[source] == STRONG
    assert pick(path)[0] == source


@pytest.mark.parametrize("path,source", CASES[::7], ids=[str(p.relative_to(FIXTURES)) for p, _ in CASES[::7]])
def test_every_other_importer_refuses_a_fixture(tmp_path, path, source):
    for other in SOURCES:
        if other == source:
            continue
        res = run("import", other, path, "--deployment", "x", "--out", tmp_path / other)
        assert res.exit_code == 2, (other, res.output)
        assert f"use `specan import {source}`" in res.output, (other, res.output)


def test_issue_cases_are_refused(tmp_path):
    res = run("import", "trtllm-responses", FIXTURES / "vllm_responses.jsonl", "--deployment", "x", "--out", tmp_path)
    assert res.exit_code == 2 and "this is vLLM per-request output" in res.output
    assert "use `specan import vllm-responses`" in res.output
    res = run("import", "vllm-responses", FIXTURES / "sglang_responses.jsonl", "--deployment", "x", "--out", tmp_path)
    assert res.exit_code == 2 and "use `specan import sglang-responses`" in res.output
    assert not (tmp_path / "requests").exists()


def test_auto_names_the_source_on_stderr(tmp_path):
    res = CliRunner().invoke(main, ["import", "auto", str(FIXTURES / "vllm.log"),
                                                    "--deployment", "x", "--year", "2025", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    lines = res.stderr.strip().splitlines()
    assert lines[0].endswith("vllm.log: vllm-log")
    # auto applies --year where it fits and says so
    assert lines[1] == f"note: --year 2025 applied to {FIXTURES / 'vllm.log'} (vllm-log)"
    assert "specan import vllm-log" in res.stdout


def test_auto_refuses_what_no_source_fits(tmp_path):
    odd = tmp_path / "notes.txt"
    odd.write_text("nothing an engine printed\n")
    res = run("import", "auto", odd, "--deployment", "x", "--out", tmp_path / "t")
    assert res.exit_code == 2 and "no source fits its content" in res.output


def test_bench_then_report_keeps_the_run_apart_from_production(tmp_path):
    # One deployment, one hour (2025-06-06 14:00): the vLLM log v1_0.9.log (production) and a
    # `vllm bench serve` result imported at 14:30. By hand:
    #   log, 2 intervals: drafts 387/3 + 1488/3 = 129 + 496 = 625, draft tokens 387 + 1488 = 1875,
    #     accepted 150 + 725 = 875 → accept length 1 + 875/625 = 2.4; position 1: (70 + 305)/625 = 0.6
    #   bench, 1 run (ascend #9871): drafts 23975, draft tokens 71925, accepted 41570 → 1 + 41570/23975
    # Summed together they would give 24600 drafts; kept apart, the production row stays 625.
    assert run("import", "vllm-log", FIXTURES / "vllm_logs/v1_0.9.log", "--deployment", "mtp", "--year", "2025",
               "--out", tmp_path).exit_code == 0
    res = run("import", "vllm-bench", FIXTURES / "vllm_bench/ascend9871_v0.18.0rc2.json", "--deployment", "mtp",
              "--time", "2025-06-06T14:30:00", "--out", tmp_path)
    assert res.exit_code == 0, res.output
    res = run("report", tmp_path, "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    [dep] = doc["deployments"]
    assert (dep["benchmark"], dep["benchmark_sources"]) == (True, ["vllm_bench"])
    production, bench = doc["intervals"]
    assert (production["hour"], production["benchmark"]) == (bench["hour"], False) == ("2025-06-06T14:00:00", False)
    assert bench["benchmark"] is True
    assert (production["num_intervals"], production["num_drafts"], production["num_draft_tokens"],
            production["num_accepted_tokens"]) == (2, 625, 1875, 875)
    assert production["mean_accept_length"] == pytest.approx(2.4) and production["vllm_rate"][0] == pytest.approx(0.6)
    assert (bench["num_intervals"], bench["num_drafts"], bench["num_draft_tokens"],
            bench["num_accepted_tokens"]) == (1, 23975, 71925, 41570)
    assert bench["mean_accept_length"] == pytest.approx(1 + 41570 / 23975)
    # the load curve and the logs speedup read the log's 2 intervals only: 1 usable, 1 without a start
    # (the log's first line); the run, which has no start either, would have made that 2
    assert sum(r["num_intervals"] for r in doc["interval_load"]) == 2
    evidence = dep["log_speedup_evidence"]
    assert (evidence["usable_intervals"], evidence["left_out"]["without_start"]) == (1, 1)
    assert any(n.startswith("mtp: 1 benchmark run among its intervals (vllm_bench)") for n in doc["notes"])

    res = run("report", tmp_path)
    assert res.exit_code == 0, res.output
    assert "| mtp | 2025-06-06 14:00:00 | 2 | 625 | 1,875 | 875 | 2.400 |" in res.stdout
    assert "| mtp | 2025-06-06 14:00:00 (benchmark) | 1 | 23,975 | 71,925 | 41,570 | 2.734 |" in res.stdout
    assert "Rows marked (benchmark) are benchmark runs" in res.stdout
    html = tmp_path / "report.html"
    assert run("report", tmp_path, "-o", html).exit_code == 0
    assert "2025-06-06 14:00:00 (benchmark)" in html.read_text()


def test_sglang_bench_alone_through_the_report(tmp_path):
    # PR #9588's run: Accept length 3.46 (printed), no counts → the row has the printed length only
    assert run("import", "sglang-bench", FIXTURES / "sglang_bench/pr9588_concurrency4.txt", "--deployment", "sg",
               "--time", "2025-08-25T10:00:00", "--out", tmp_path).exit_code == 0
    res = run("report", tmp_path, "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    [dep] = doc["deployments"]
    assert (dep["benchmark"], dep["benchmark_sources"]) == (True, ["sglang_bench"])
    [row] = doc["intervals"]
    assert (row["hour"], row["benchmark"], row["num_intervals"]) == ("2025-08-25T10:00:00", True, 1)
    assert row["num_drafts"] is None and row["mean_reported_accept_length"] == 3.46
    assert doc["interval_load"] == []
    md = run("report", tmp_path).stdout
    assert "| sg | 2025-08-25 10:00:00 (benchmark) | 1 | – | – | – | – | – | – | – | 3.46 | – |" in md
