"""specan report: golden outputs for the sample traces, the JSON contract, and the CLI behaviour."""

import json
import math
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.cli import main
from tracebuilder import at, deployment, round_row, write_traces

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
SAMPLE = ROOT / "sample_traces"
UPDATE = os.environ.get("SPECAN_UPDATE_GOLDEN") == "1"  # refresh: SPECAN_UPDATE_GOLDEN=1 pytest tests/test_report.py


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def sample_json(sample_report):
    return sample_report["json"]


def close(actual, expected, path="$"):
    """Equal, except floats within 1e-9: parallel sums may differ in the last bits."""
    if isinstance(expected, float) and isinstance(actual, (int, float)):
        assert actual == pytest.approx(expected, rel=1e-9, abs=1e-12), path
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and actual.keys() == expected.keys(), path
        for key in expected:
            close(actual[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), path
        for i, (a, e) in enumerate(zip(actual, expected)):
            close(a, e, f"{path}[{i}]")
    else:
        assert actual == expected, path


def test_sample_report_json_matches_golden(sample_json):
    # Byte for byte: sums are exact or in a fixed order, so the same input gives the same bytes.
    golden = GOLDEN / "sample_report.json"
    if UPDATE:
        golden.write_text(sample_json)
    assert sample_json == golden.read_text()
    close(json.loads(sample_json), json.loads(golden.read_text()))


def test_sample_report_markdown_matches_golden(sample_report):
    golden = GOLDEN / "sample_report.md"
    if UPDATE:
        golden.write_text(sample_report["md"])
    assert sample_report["md"] == golden.read_text()


def test_the_command_prints_the_same_report(sample_report):
    """One full `specan report` run on the sample: what the fixture renders is what a user gets."""
    result = run("report", SAMPLE, "--format", "json", "--progress", "--profile", "--check")
    assert result.exit_code == 1      # the sample fails the latency gate, and --check says so
    assert result.stdout == sample_report["json"]
    assert "reading rounds" in result.stderr and "computing metrics" in result.stderr
    profile = result.stderr.splitlines()
    start = profile.index("profile: seconds per phase")
    phases = [line.split(None, 1) for line in profile[start + 1:]]
    names = [name for _, name in phases]
    for phase in ("reading rounds (3 files, in place: counting row-rule breaks)", "computing request_rounds",
                  "computing round_cells",
                  "counting the rounds' rules that read other rows, from the aggregates",
                  "computing metrics", "rendering json"):
        assert phase in names
    assert names[-1] == "total"
    seconds = [float(s) for s, _ in phases]
    assert all(s >= 0 for s in seconds)
    assert seconds[-1] == pytest.approx(sum(seconds[:-1]), abs=0.01 * len(seconds))


CONTRACT = {
    "deployments": ["deployment_id", "method", "num_speculative_tokens", "baseline_id", "num_rounds",
                    "num_spec_rounds", "num_draft_tokens", "num_accepted_tokens", "num_invalidated_tokens",
                    "num_committed_tokens", "mean_accept_length", "mean_accept_length_per_request",
                    "acceptance_rate", "tokens_per_round", "truncated_rounds", "truncated_tokens",
                    "invalidation_rate", "positions", "nodes_per_round", "accepted_per_node", "capacity",
                    "round_ms", "speedup", "speedup_coverage", "latency_ms"],
    "categories": ["deployment_id", "category", "num_requests", "mean_accept_length", "acceptance_rate",
                   "tokens_per_round", "speedup", "repeat_ratio"],
    "structured_output": ["deployment_id", "structured_output", "num_rounds", "proposed_tokens",
                          "invalidated_tokens", "invalidation_rate", "mean_accept_length",
                          "fully_invalidated_rounds"],
    "load_curve": ["deployment_id", "batch_bucket", "num_rounds", "mean_accept_length", "tokens_per_round",
                   "round_ms", "t0_ms", "speedup", "condition_holds"],
    "context_curve": ["deployment_id", "context_bucket", "num_rounds", "mean_accept_length",
                      "tokens_per_round", "round_ms", "t0_ms", "speedup", "condition_holds"],
}


def test_json_follows_the_contract(sample_json):
    assert "NaN" not in sample_json and "Infinity" not in sample_json
    doc = json.loads(sample_json)
    assert doc["schema_version"] == 1
    # the sample's deployments table has one row per deployment and date: 18 rows, 6 deployments
    assert doc["input"] == {"deployments": 18, "requests": 3600, "steps": 69437, "rounds": 470316, "intervals": 0,
                            "clean_rows": {"deployments": 6, "requests": 3600, "steps": 69437, "rounds": 470316,
                                           "intervals": 0},
                            "rejected_rows": 0, "rejected_by_reason": {}, "rejected_by_table": {},
                            "output_tokens_mismatch": {}, "deployment_changes": [], "deployment_conflicts": []}
    for section, keys in CONTRACT.items():
        assert doc[section], section
        for item in doc[section]:
            assert set(keys) <= item.keys(), (section, set(keys) - item.keys())
    for d in doc["deployments"]:
        assert set(d["capacity"]) == {"completed_requests", "failed_requests", "preemptions_per_request",
                                      "kv_usage_mean", "kv_usage_max", "candidate_kv_share",
                                      "output_tokens_per_s", "output_tokens_per_busy_s",
                                      "peak_hour_output_tokens_per_s", "peak_hour", "by_batch"}
        assert set(d["round_ms"]) == {"mean", "draft", "verify", "other"}
        assert set(d["latency_ms"]) == {"ttft", "tpot", "itl", "e2el", "max_stall"}
        for stats in d["latency_ms"].values():
            assert set(stats) == {"mean", "p50", "p90", "p95", "p99", "max"}
        for p in d["positions"]:
            assert set(p) == {"position", "drafted", "accepted", "survival", "conditional", "vllm_rate",
                              "marginal_gain"}
    assert isinstance(doc["notes"], list) and all(isinstance(n, str) for n in doc["notes"])


def test_sample_numbers_hold_together(sample_json):
    """Identities that hold whatever the simulator draws."""
    doc = json.loads(sample_json)
    for d in doc["deployments"]:
        if d["num_spec_rounds"]:
            assert d["mean_accept_length"] == pytest.approx(1 + d["num_accepted_tokens"] / d["num_spec_rounds"])
            assert d["acceptance_rate"] == pytest.approx(d["num_accepted_tokens"] / d["num_draft_tokens"])
        assert d["tokens_per_round"] == pytest.approx(d["num_committed_tokens"] / d["num_rounds"])
        if d["method"] == "none":
            assert d["speedup"] is None and d["baseline_id"] is None
        else:
            # the throughput-weighted speedup lies between its buckets' speedups
            buckets = [b["speedup"] for b in doc["load_curve"]
                       if b["deployment_id"] == d["deployment_id"] and b["speedup"] is not None]
            assert min(buckets) <= d["speedup"] <= max(buckets)
            assert 0 < d["speedup_coverage"] <= 1
    matched = {d["deployment_id"]: d["baseline_id"] for d in doc["deployments"]}
    assert matched["eagle-bf16"] == "base-bf16"   # implicit: same model and target_quant
    assert matched["eagle-fp8"] == "base-fp8"     # explicit baseline_id


def test_output_file(tmp_path):
    traces = write_traces(tmp_path / "t", deployments=[deployment("spec")], rounds=[round_row("spec", "r", 0, 4, 3)])
    out = tmp_path / "report.md"
    result = run("report", traces, "-o", out)
    assert result.exit_code == 0 and result.stdout == ""
    assert out.read_text() == run("report", traces).stdout
    assert out.read_text().startswith("# specan report\n")


def test_the_format_follows_the_output_extension(tmp_path):
    traces = write_traces(tmp_path / "t", deployments=[deployment("spec")], rounds=[round_row("spec", "r", 0, 4, 3)])
    for name, start in (("r.html", "<!DOCTYPE html>"), ("r.HTM", "<!DOCTYPE html>"), ("r.json", "{"),
                        ("r.md", "# specan report"), ("r.txt", "# specan report")):
        result = run("report", traces, "-o", tmp_path / name)
        assert result.exit_code == 0, result.output
        assert (tmp_path / name).read_text().startswith(start), name
    # an explicit --format wins over the extension
    assert run("report", traces, "--format", "json", "-o", tmp_path / "x.html").exit_code == 0
    assert (tmp_path / "x.html").read_text().startswith("{")
    # written aside and renamed: no temporary file is left beside it
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_an_output_that_cannot_be_written_fails_before_the_analysis(tmp_path):
    # the traces do not even exist: had the analysis run first, this would be exit 2 for them
    result = run("report", tmp_path / "no-traces", "-o", tmp_path / "missing" / "report.md")
    assert result.exit_code == 3
    assert result.stderr == f"Error: cannot write {tmp_path / 'missing' / 'report.md'}: the folder " \
                            f"{tmp_path / 'missing'} does not exist\n"
    result = run("report", tmp_path / "no-traces", "-o", tmp_path)
    assert result.exit_code == 2 and result.stderr == f"Error: cannot write {tmp_path}: it is a folder\n"


def test_no_baseline_is_said_plainly_and_never_invented(tmp_path):
    write_traces(
        tmp_path,
        deployments=[deployment("spec", target_quant="fp8"), deployment("base", "none")],  # base is bf16
        steps=[{"deployment_id": d, "step_id": 1, "start_time": at(0), "duration_ms": 10.0, "batch_size": 1}
               for d in ("spec", "base")],
        rounds=[round_row("spec", "r", 0, 4, 2, step_id=1), round_row("base", "q", 0, 0, 0, step_id=1)],
    )
    doc = json.loads(run("report", tmp_path, "--format", "json").stdout)
    spec = next(d for d in doc["deployments"] if d["deployment_id"] == "spec")
    assert spec["baseline_id"] is None and spec["speedup"] is None and spec["speedup_coverage"] is None
    assert "spec: no baseline: no none deployment with model m and target_quant fp8" in doc["notes"]
    md = run("report", tmp_path).stdout
    assert "- **spec** (eagle): speedup unknown, see the notes." in md


def test_report_without_optional_tables(tmp_path):
    write_traces(tmp_path, deployments=[deployment("spec")],
                 rounds=[round_row("spec", "r", 0, 4, 3), round_row("spec", "r", 1, 4, 1, committed=1,
                                                                     stop_reason="eos")])
    result = run("report", tmp_path, "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (spec,) = doc["deployments"]
    assert spec["mean_accept_length"] == 1 + 4 / 2
    assert spec["truncated_rounds"] == 1 and spec["truncated_tokens"] == 1
    assert spec["speedup"] is None
    assert all(math.isfinite(v) for v in (spec["tokens_per_round"],))
    assert "the requests table is absent: latency, capacity and categories are unavailable" in doc["notes"]
    assert "the steps table is absent: round times, speedup and the load curve are unavailable" in doc["notes"]


def test_gates_exit_status_only_under_check(tmp_path, sample_report):
    # On the sample traces, with the default gates, eagle-fp8's speedup lies below 1 by its
    # interval ([0.76, 0.81]): it is not shipped, blocked on its speed alone; every other
    # speculative deployment is ship or cap (test_verdict.py::test_the_sample_shows_the_range_of_decisions).
    verdict = {v["deployment_id"]: v for v in sample_report["doc"]["verdict"]}
    assert [b["check"] for b in verdict["eagle-fp8"]["blocking"]] == ["speedup"]
    assert {d: v["action"] for d, v in verdict.items() if v["action"] not in ("ship", "cap", "baseline")} == {
        "eagle-fp8": "dont_ship"}
    # --check exits 1 on it and names it alone on stderr: "deployment: action: reason", the
    # reason being its verdict after "Don't ship eagle-fp8: "
    result = run("report", SAMPLE, "--check", "--format", "json")
    assert result.exit_code == 1
    reason = verdict["eagle-fp8"]["text"].removeprefix("Don't ship eagle-fp8: ")
    assert result.stderr.splitlines() == [f"eagle-fp8: dont_ship: {reason}"]
    assert json.loads(result.stdout)["verdict"] == json.loads(sample_report["json"])["verdict"]
    assert run("report", SAMPLE, "--format", "json").exit_code == 0      # without --check, never 1
    # With a min_speedup of 0.5, which eagle-fp8's interval clears, it is capped at batch 16
    # (its config turns speculation off above, where it loses): every speculative deployment
    # is ship or cap, so --check exits 0 and says nothing, though base-bf16 misses its latency
    # targets (a baseline's misses block nothing) and checks are left unknown
    lenient = tmp_path / "lenient.toml"
    lenient.write_text("[gates.capacity]\nmin_speedup = 0.5\n")
    result = run("report", SAMPLE, "--check", "--config", lenient, "--format", "json")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    doc = json.loads(result.stdout)
    assert {v["deployment_id"]: v["action"] for v in doc["verdict"]} == {
        "base-bf16": "baseline", "base-fp8": "baseline", "eagle-bf16": "cap", "eagle-dyn-bf16": "ship",
        "eagle-fp8": "cap", "ngram-bf16": "ship"}
    gates = {(g["deployment_id"], g["gate"]): g["status"] for g in doc["gates"]}
    assert gates[("base-bf16", "latency")] == "fail" and gates[("eagle-bf16", "latency")] == "unknown"
    bad = tmp_path / "bad.toml"
    bad.write_text("[gates.latency]\nttft_p99 = 5\n")
    result = run("report", SAMPLE, "--config", bad)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "ttft_p99" in result.stderr and str(bad) in result.stderr
