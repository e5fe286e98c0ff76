"""A vLLM iteration-log pair, end to end: `specan import vllm-log` on a speculative server's log
and a plain server's, then `specan report`, whose verdict rests on the steps the iteration lines
give and whose speedup per batch size is the one worked out by hand from the lines.

The lines are built here in the real layouts, with numbers chosen so every step of the
hand computation is exact: the iteration line of vLLM PR #31193 (layout A of
tests/fixtures/vllm_logs/SOURCES.md, its process prefix and `[core.py:349]` as pasted there)
and the spec-decode line of vLLM 0.10.2+ (layout 6, as in tests/fixtures/vllm_logs/v1_newest.log).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.cli import main

ITERATION = ("(EngineCore_DP0 pid=2010410) INFO 12-22 21:44:{s:02d} [core.py:349] Iteration({n}): 0 context requests, "
             "0 context tokens, {b} generation requests, {t} generation tokens, iteration elapsed time: {ms:.2f} ms")
SPEC = ("(APIServer pid=2010391) INFO 12-22 21:44:{s:02d} [metrics.py:101] SpecDecoding metrics: Mean acceptance "
        "length: {mean:.2f}, Accepted throughput: {at:.2f} tokens/s, Drafted throughput: {dt:.2f} tokens/s, "
        "Accepted: {a} tokens, Drafted: {d} tokens, Per-position acceptance rate: {pos}, "
        "Avg Draft acceptance rate: {rate:.1f}%")

# 50 iterations a side, one a second (21:44:01 to 21:44:50), batch 2 and batch 4 in turn: 25 each.
# Plain: batch 2 in 10 ms, batch 4 in 12 ms, one token per request:
#   t0(2) = Σ b·ms / Σ tokens = 2·10 / 2 = 10 ms per token; t0(4) = 4·12 / 4 = 12
# Speculative, 3 drafts a request (γ = 3): batch 2 schedules 2·(1+3) = 8 tokens (6 drafts) in 14 ms,
# batch 4 schedules 16 (12 drafts) in 18 ms. Its window 21:44:00 → 21:44:50 drafted 25·6 + 25·12 = 450
# and accepted 300 (the line's Drafted and Accepted), 2/3 of each step's drafts exactly:
#   batch 2: accepted 4, committed 2 + 4 = 6;  batch 4: accepted 8, committed 4 + 8 = 12
#   speedup(2) = 6 · t0(2) / (2 · 14) = 60 / 28;  speedup(4) = 12 · 12 / (4 · 18) = 144 / 72 = 2
#   all: 25·(60 + 144) / 25·(28 + 72) = 204 / 100 = 2.04
# The line's other numbers agree with those: 150 drafts (one per request per step: 25·2 + 25·4), mean
# acceptance length 1 + 300/150 = 3.00, per position 120, 100, 80 of 150 (0.800, 0.667, 0.533), rate
# 300/450 = 66.7 %, throughputs 300/50 s = 6.00 and 450/50 s = 9.00. The line opening the window (its
# previous one, 21:44:00) counts 3 drafts of 3 tokens each, 6 of 9 accepted, over 10 s.
SPEEDUP = {"2": 60 / 28, "3-4": 2.0}
OVERALL = 2.04


def iterations(speculative: bool) -> list[str]:
    lines = []
    for i in range(50):
        b = 2 if i % 2 == 0 else 4
        tokens, ms = (b * 4, 14.0 if b == 2 else 18.0) if speculative else (b, 10.0 if b == 2 else 12.0)
        lines.append(ITERATION.format(s=i + 1, n=100 + i, b=b, t=tokens, ms=ms))
    return lines


def write_pair(folder):
    spec = [SPEC.format(s=0, mean=3.0, at=0.6, dt=0.9, a=6, d=9, pos="1.000, 0.667, 0.333", rate=66.7),
            *iterations(True),
            SPEC.format(s=50, mean=3.0, at=6.0, dt=9.0, a=300, d=450, pos="0.800, 0.667, 0.533", rate=66.7)]
    (folder / "spec.log").write_text("\n".join(spec) + "\n")
    (folder / "plain.log").write_text("\n".join(iterations(False)) + "\n")


FIXTURES = Path(__file__).parent / "fixtures" / "vllm_logs"


def test_the_fixture_pair_is_these_lines(tmp_path):
    """The README's walkthrough imports tests/fixtures/vllm_logs/pair_iterations_*.log: exactly the lines
    built here, so the hand computation above is theirs."""
    write_pair(tmp_path)
    for side in ("spec", "plain"):
        assert (FIXTURES / f"pair_iterations_{side}.log").read_text() == (tmp_path / f"{side}.log").read_text()


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pair")
    write_pair(folder)
    runner = CliRunner()
    for log, args in (("spec.log", ["--deployment", "spec", "--method", "eagle3", "--num-speculative-tokens", "3"]),
                      ("plain.log", ["--deployment", "plain", "--method", "none"])):
        done = runner.invoke(main, ["import", "vllm-log", str(folder / log), *args, "--model", "m", "--year", "2025",
                                    "--out", str(folder / "traces")])
        assert done.exit_code == 0, done.output
    report = runner.invoke(main, ["report", str(folder / "traces"), "--format", "json"])
    assert report.exit_code == 0, report.output
    return json.loads(report.stdout)


def test_the_iteration_lines_give_the_steps_and_their_tokens(doc):
    assert doc["input"]["rejected_rows"] == 0
    spec = next(d for d in doc["deployments"] if d["deployment_id"] == "spec")
    assert spec["iteration_steps"] == {"decode_steps": 50, "counts_from": ["window"]}
    matched = spec["matched"]["steps"]
    by_batch = {r["batch_bucket"]: (r["units"], r["tokens"]) for r in matched["by_batch"]}
    assert by_batch == {"2": (25, 25 * 6), "3-4": (25, 25 * 12)}


def test_the_speedup_per_batch_size_is_the_hand_computed_one(doc):
    spec = next(d for d in doc["deployments"] if d["deployment_id"] == "spec")
    matched = spec["matched"]["steps"]
    assert {r["batch_bucket"]: r["speedup"] for r in matched["by_batch"]} == {
        k: pytest.approx(v, rel=1e-9) for k, v in SPEEDUP.items()}
    assert matched["speedup"] == pytest.approx(OVERALL, rel=1e-9)
    assert (matched["coverage"], matched["loads"], matched["baseline_loads"]) == (1.0, [2, 4], [2, 4])


def test_the_verdict_rests_on_the_steps(doc):
    v = next(x for x in doc["verdict"] if x["deployment_id"] == "spec")
    assert (v["basis"], v["baseline_id"]) == ("steps", "plain")
    assert v["speedup"] == pytest.approx(OVERALL, rel=1e-9)
    assert "step by step from iteration lines" in v["text"]
    assert "committed tokens per step estimated from the log's acceptance windows" in v["text"]
    # the steps of a batch size all take one time, but the two sizes' shares vary from block to block of
    # time: a narrow interval around 2.04, well above 1, so it ships (as configured: no rounds, no k per batch)
    low, high = v["speedup_interval"]
    assert low <= OVERALL <= high and low > 1.9, v
    assert v["action"] == "ship" and v["text"].startswith("Ship spec as configured (num_speculative_tokens 3): 2.04")
