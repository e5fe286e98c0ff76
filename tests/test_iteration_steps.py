"""Steps that carry their own token counts (engine iteration lines, no rounds): the speedup
matched step by step at each batch size, basis ``steps`` (docs/trace-format.md, "Token
counts without rounds"; docs/metrics.md, "Speedup at the load and context each step ran at").

Every expected number is a closed form worked out in the comments, never read back from
the views.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from analyzer.api import open_traces
from analyzer.cli import main
from tracebuilder import deployment, interleave, round_row, step, trend_ms, write_traces

# Step costs (ms): a plain step at batch b takes A + S·b; a speculative one A + S·b·(γ+1) + D·γ,
# and commits L tokens per request. With time = b × duration per step (every request waits for the
# whole step) and tokens = committed:
#   t0(b)           = b·(A + S·b) / b         = A + S·b ms per token
#   speedup(b)      = L·b·t0(b) / (b·(A + S·b·(γ+1) + D·γ)) = L·(A + S·b) / (A + S·b·(γ+1) + D·γ)
A, S, D, GAMMA, L = 8.0, 0.5, 1.0, 3, 3
N = 40   # decode steps per batch size, per side: at or above [evidence] min_baseline_steps (20)


def plain_ms(b: int) -> float:
    return A + S * b


def spec_ms(b: int) -> float:
    return A + S * b * (GAMMA + 1) + D * GAMMA


# b = 1: 3 · 8.5 / 13 = 25.5 / 13;  b = 4: 3 · 10 / 19 = 30 / 19
SPEEDUP = {1: L * plain_ms(1) / spec_ms(1), 4: L * plain_ms(4) / spec_ms(4)}
assert SPEEDUP[1] == pytest.approx(25.5 / 13) and SPEEDUP[4] == pytest.approx(30 / 19)
# all of spec's steps: Σ tokens · t0 / Σ time = N·(3·8.5 + 12·10) / N·(1·13 + 4·19) = 145.5 / 89
OVERALL = (L * 1 * plain_ms(1) + L * 4 * plain_ms(4)) / (1 * spec_ms(1) + 4 * spec_ms(4))
assert OVERALL == pytest.approx(145.5 / 89)


def iteration_steps(dep: str, speculative: bool, counts_from: str, first_id: int = 1) -> list[dict]:
    """N steps at batch 1 and N at batch 4, taking turns in time, their durations rising around the
    closed form (trend_ms: the sums stay exact, so every blocks of time differs and the interval is
    a real one)."""
    cost = spec_ms if speculative else plain_ms
    per_batch = []
    for b in (1, 4):
        committed = L * b if speculative else b
        drafted = GAMMA * b if speculative else 0
        per_batch.append([(b, ms, committed, drafted) for ms in trend_ms(cost(b), N)])
    rows = []
    for i, (b, ms, committed, drafted) in enumerate(interleave(*per_batch)):
        rows.append(step(dep, first_id + i, ms, b, start_ms=100.0 * i, num_draft_tokens=drafted,
                         num_accepted_tokens=committed - b, num_committed_tokens=committed,
                         counts_from=counts_from))
    return rows


def report(traces, *extra) -> dict:
    result = CliRunner().invoke(main, ["report", str(traces), "--format", "json", *map(str, extra)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("iterations")
    write_traces(root, deployments=[deployment("spec", gamma=GAMMA), deployment("base", method="none")],
                 steps=iteration_steps("spec", True, "window") + iteration_steps("base", False, "iteration"))
    return root, report(root)


def test_the_speedup_is_the_closed_form_overall_and_per_batch(pair):
    _, doc = pair
    spec = next(d for d in doc["deployments"] if d["deployment_id"] == "spec")
    assert spec["iteration_steps"] == {"decode_steps": 2 * N, "counts_from": ["window"]}
    matched = spec["matched"]["steps"]
    assert (matched["units"], matched["matched_units"], matched["coverage"]) == (2 * N, 2 * N, 1.0)
    assert matched["speedup"] == pytest.approx(OVERALL, rel=1e-12)
    assert spec["speedup"] == pytest.approx(OVERALL, rel=1e-12)
    by_batch = {r["batch_bucket"]: r for r in matched["by_batch"]}
    assert set(by_batch) == {"1", "3-4"}
    assert by_batch["1"]["speedup"] == pytest.approx(SPEEDUP[1], rel=1e-12)
    assert by_batch["3-4"]["speedup"] == pytest.approx(SPEEDUP[4], rel=1e-12)
    # committed tokens: N steps of 3 at batch 1, N of 12 at batch 4
    assert (by_batch["1"]["tokens"], by_batch["3-4"]["tokens"]) == (3 * N, 12 * N)
    low, high = matched["interval"]
    assert low < OVERALL < high and low > 1.0


def test_the_verdict_rests_on_the_steps_and_states_the_estimate(pair):
    _, doc = pair
    v = next(x for x in doc["verdict"] if x["deployment_id"] == "spec")
    assert (v["action"], v["basis"], v["matched_on"]) == ("ship", "steps", ["load"])
    assert v["speedup"] == pytest.approx(OVERALL, rel=1e-12)
    assert ("the throughput of base at the same batch sizes, step by step from iteration lines, on 100% of its "
            f"committed tokens ({2 * N} decode steps; committed tokens per step estimated from the log's acceptance "
            "windows); no per-batch recommendation (it needs rounds).") in v["text"], v["text"]


def test_the_markdown_shows_the_speedup_per_batch(pair):
    root, _ = pair
    md = CliRunner().invoke(main, ["report", str(root)]).stdout
    assert "From iteration lines" in md
    rows = [line for line in md.splitlines() if line.startswith("| spec | 1 |") or line.startswith("| spec | 3-4 |")]
    assert [r.split(" | ")[2:4] for r in rows] == [[f"{N}", f"{3 * N}"], [f"{N}", f"{12 * N}"]], rows


def test_counted_by_the_engine_the_line_says_no_estimate(tmp_path):
    write_traces(tmp_path, deployments=[deployment("spec", gamma=GAMMA), deployment("base", method="none")],
                 steps=iteration_steps("spec", True, "iteration") + iteration_steps("base", False, "iteration"))
    v = next(x for x in report(tmp_path)["verdict"] if x["deployment_id"] == "spec")
    assert v["basis"] == "steps" and "estimated" not in v["text"], v["text"]


def test_a_baseline_cell_below_the_step_floor_matches_nothing(tmp_path):
    """base ran batch 4 only 19 times (floor 20): its cell is no point of the curve, so spec's steps
    at batch 4 lie above every load base measured (the cell at batch 1 reaches 1 only) and only the
    batch-1 steps are matched: speedup 25.5/13, on 3·N of spec's 15·N committed tokens (20 %)."""
    base = [s for s in iteration_steps("base", False, "iteration") if s["batch_size"] == 1]
    base += [step("base", 1000 + i, plain_ms(4), 4, start_ms=100.0 * i + 50, num_draft_tokens=0,
                  num_accepted_tokens=0, num_committed_tokens=4, counts_from="iteration") for i in range(19)]
    write_traces(tmp_path, deployments=[deployment("spec", gamma=GAMMA), deployment("base", method="none")],
                 steps=iteration_steps("spec", True, "window") + base)
    matched = next(d for d in report(tmp_path)["deployments"] if d["deployment_id"] == "spec")["matched"]["steps"]
    assert matched["speedup"] == pytest.approx(SPEEDUP[1], rel=1e-12)
    assert matched["coverage"] == pytest.approx(3 * N / (15 * N), rel=1e-12)
    assert matched["unmatched"] == {"above_baseline_loads": N}


def test_rounds_take_precedence_over_the_steps_own_counts(tmp_path):
    """A deployment with rounds is matched on them (basis rounds), its steps' counts only checked."""
    steps = [step("spec", 1, 10.0, 1, num_draft_tokens=4, num_accepted_tokens=2, num_committed_tokens=3)]
    write_traces(tmp_path, deployments=[deployment("spec")], steps=steps,
                 rounds=[round_row("spec", "r1", 0, 4, 2, step_id=1, stop_reason="eos")])
    doc = report(tmp_path)
    spec = doc["deployments"][0]
    assert spec["iteration_steps"] is None and "steps" not in spec["matched"]


def test_step_counts_break_their_row_rules(tmp_path):
    """accepted 5 of 4 drafts: accepted_exceeds_drafted; 2 requests accepting 1 commit at most
    1 + 2 = 3 tokens, not 4: committed_exceeds_accepted. Both quarantined, the good step kept."""
    steps = [step("a", 1, 10.0, 2, num_draft_tokens=4, num_accepted_tokens=1, num_committed_tokens=3),
             step("a", 2, 10.0, 1, num_draft_tokens=4, num_accepted_tokens=5, num_committed_tokens=6),
             step("a", 3, 10.0, 2, num_draft_tokens=4, num_accepted_tokens=1, num_committed_tokens=4)]
    write_traces(tmp_path, deployments=[deployment("a")], steps=steps)
    ws = open_traces(tmp_path)
    try:
        assert sorted(ws.con.execute("select row_key, reason from rejected_rows").fetchall()) == [
            ("deployment_id=a, step_id=2", "accepted_exceeds_drafted"),
            ("deployment_id=a, step_id=3", "committed_exceeds_accepted")]
        assert ws.con.execute("select list(step_id) from steps").fetchone()[0] == [1]
    finally:
        ws.close()


def test_recommend_says_why_steps_alone_give_no_length(pair):
    root, _ = pair
    result = CliRunner().invoke(main, ["recommend", str(root), "--deployment", "spec"])
    assert result.exit_code == 0, result.output
    assert (f"spec has no rounds: its {2 * N} decode steps come with their own token counts (engine iteration "
            "lines)") in result.stdout, result.stdout
