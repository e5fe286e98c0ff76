"""The optional intervals table, the interval_acceptance view, and tpot_speedup."""

import json

import pytest

from analyzer.analysis.precision import with_interval
from click.testing import CliRunner

from analyzer import api
from analyzer.cli import main
from tracebuilder import at, deployment, request, write_table, write_traces


def interval(end_ms, drafts, draft_tokens, accepted, per_position=None, start_ms=None, dep="d"):
    return {"deployment_id": dep, "start_time": None if start_ms is None else at(start_ms), "end_time": at(end_ms),
            "num_drafts": drafts, "num_draft_tokens": draft_tokens, "num_accepted_tokens": accepted,
            "accepted_per_position": per_position, "source": "vllm_log"}


def test_interval_acceptance_by_hand_and_rounds_may_be_absent(tmp_path):
    hour = 3_600_000
    write_table(tmp_path, "deployments", [deployment("d")])
    write_table(tmp_path, "intervals", [
        interval(1_000, 10, 30, 15, [8, 5, 2]),
        interval(2_000, 20, 60, 30, [16, 10, 4], start_ms=1_000),
        interval(hour + 1_000, None, 40, 10, [6, 3, 1], start_ms=2_000),   # next hour, no exact drafts
        interval(hour + 2_000, 5, 15, 5, None, start_ms=3_000, dep="d"),
        interval(hour + 3_000, 5, 15, 5, None, start_ms=hour + 9_000),    # ends before it starts
    ])
    result = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert result.exit_code == 0, result.output      # no rounds: valid beside intervals
    ws = api.open_traces(tmp_path)
    assert ws.con.execute("select reason from rejected_rows").fetchall() == [("time_order",)]
    first, second = ws.con.execute("select * from interval_acceptance order by hour").fetchall()
    names = [d[0] for d in ws.con.execute("select * from interval_acceptance").description]
    first, second = dict(zip(names, first)), dict(zip(names, second))
    # hour 1: 1 + (15 + 30) / (10 + 20) = 2.5; 45 / 90 = 0.5; per position (8+16, 5+10, 2+4) / 30
    assert first["mean_accept_length"] == 2.5 and first["acceptance_rate"] == 0.5
    assert first["vllm_rate"] == pytest.approx([24 / 30, 15 / 30, 6 / 30])
    assert first["drafts_share"] == 1.0
    # hour 2: one interval lacks num_drafts; the accept length comes from the one that has it,
    # 1 + 5 / 5 = 2.0, over 15 of the hour's 55 draft tokens. Per position: the interval with
    # positions has no draft count, the one with a count has no positions: unknown.
    assert second["mean_accept_length"] == 2.0 and second["drafts_share"] == pytest.approx(15 / 55)
    assert second["vllm_rate"] is None and second["intervals_without_drafts"] == 1
    assert second["acceptance_rate"] == pytest.approx(15 / 55)
    ws.close()
    report = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert report.exit_code == 0
    assert "These traces hold aggregate counters only" in report.stdout
    assert "## Aggregate counters (intervals)" in report.stdout


def test_tpot_speedup_by_hand(tmp_path):
    """The speedup from request timings, matched at each request's concurrency (docs/metrics.md,
    "Load from request timings" and "tpot_speedup"). Times in ms; each request arrives 10 ms
    before its first token; tokens = output_tokens − 1."""
    def req(dep, rid, start, ms, tokens):
        return request(dep, rid, arrival=start, first=start + 10, finish=start + 10 + ms, output_tokens=tokens + 1)

    requests = []
    # base, 24 requests: three quads (t = 0, 10, 20 s) whose four decode together for 600 ms, 50 + 55 + 65 + 70
    # = 240 tokens a quad, and two sextets (t = 30, 40 s) decoding together for 840 ms, 50 + 55 + 60 + 60 + 65 + 70
    # = 360 tokens each. Concurrency 4 and 6: cells 4 and 6, 12 requests each (the floor: 10), points 4.0 and 6.0;
    # t0(4) = 12 · 600 / (3 · 240) = 10 ms per token, t0(6) = 12 · 840 / (2 · 360) = 14 ms per token.
    for q in range(3):
        requests += [req("base", f"q{q}-{i}", 10_000 * q, 600, n) for i, n in enumerate((50, 55, 65, 70))]
    for x in range(2):
        requests += [req("base", f"x{x}-{i}", 30_000 + 10_000 * x, 840, n)
                     for i, n in enumerate((50, 55, 60, 60, 65, 70))]
    # spec: four long requests (200 tokens in 1,000 ms) and a short one (50 in 500 ms) decode from t = 10 ms; a lone
    # one (30 tokens in 300 ms) at 5 s, and a one-token request (no decode to time) left out of the speedup
    requests += [req("spec", f"long{i}", 0, 1000, 200) for i in range(4)]
    requests += [req("spec", "short", 0, 500, 50), req("spec", "lone", 5000, 300, 30),
                 request("spec", "one", arrival=8000, first=8010, finish=8010, output_tokens=1)]
    write_traces(tmp_path, deployments=[deployment("spec"), deployment("base", "none")], requests=requests,
                 rounds=[])
    with api.open_traces(tmp_path) as ws:
        loads = dict(ws.con.execute("""select r.request_id, l.load from request_loads as l
                                       join requests as r using (deployment_id, request_uid)""").fetchall())
    # a request's load: the mean number of its deployment's requests decoding over its own decode (first token to
    # finish), itself included. long: 5 decode for 500 ms, then 4 for 500 ms: (5 · 500 + 4 · 500) / 1000 = 4.5;
    # short: 5 all along; lone alone: 1; a quad's and a sextet's together: 4 and 6; "one" (no decode) the
    # concurrency at its first token, itself alone: 1
    assert {k: float(loads[k]) for k in ("long0", "short", "lone", "one", "q0-0", "x1-5")} == {
        "long0": 4.5, "short": 5.0, "lone": 1.0, "one": 1.0, "q0-0": 4.0, "x1-5": 6.0}
    doc = json.loads(CliRunner().invoke(main, ["report", str(tmp_path), "--format", "json"]).stdout)
    spec = next(d for d in doc["deployments"] if d["deployment_id"] == "spec")
    # 4.5 and 5.0 lie between B's points 4 and 6 (6 ≤ 4 · 1.25 + 1): t0(4.5) = 0.75 · 10 + 0.25 · 14 = 11 ms,
    # t0(5) = 0.5 · 10 + 0.5 · 14 = 12 ms. Counterfactual 4 · 200 · 11 + 50 · 12 = 9,400 ms against 4 · 1,000 + 500
    # = 4,500 ms. lone ran at 1, below B's least concurrency (4): not matched. (Unmatched, the pooled rates would
    # give (7,200 + 10,080) / 1,440 = 12 ms against 4,800 / 880 = 5.45 ms: 2.2×.)
    assert spec["tpot_speedup"] == pytest.approx(9400 / 4500, rel=1e-12)
    assert spec["tpot_speedup_coverage"] == pytest.approx(850 / 880, rel=1e-12)   # lone's 30 of 880 tokens unmatched
    assert spec["tpot_speedup_requests"] == 6                                       # "one" has no token to time
    assert spec["speedup"] is None   # no steps
    matched = spec["matched"]["tpot"]
    assert (matched["units"], matched["matched_units"], matched["loads"], matched["baseline_loads"]) == (
        6, 5, [1.0, 5.0], [4.0, 6.0])
    # the jackknife's interval is exp(ln 2.089 ± t · √V): it holds the hand value, symmetric on the log scale
    lo, hi = spec["tpot_speedup_interval"]
    assert lo < 9400 / 4500 < hi and (lo * hi) ** 0.5 == pytest.approx(9400 / 4500, rel=1e-12)
    md = CliRunner().invoke(main, ["report", str(tmp_path)]).stdout
    shown = with_interval(spec["tpot_speedup"], lo, hi, suffix="×")
    assert (f"- **spec** (eagle): speedup per round unknown (no steps); by request timings it is {shown} (faster) "
            "per output token than its baseline at the same concurrency (tpot_speedup), over 96.6% of its output "
            "tokens.") in md


def test_acceptance_against_the_load_a_log_gives(tmp_path):
    def loaded(end_ms, drafts, draft_tokens, accepted, running, gen, kv, series="p Engine 000"):
        row = interval(end_ms, drafts, draft_tokens, accepted)
        row.update(series=series, running_requests=running, waiting_requests=0, generation_tokens_per_s=gen,
                   kv_cache_usage=kv)
        return row

    write_table(tmp_path, "deployments", [deployment("d")])
    write_table(tmp_path, "intervals", [
        loaded(1_000, 10, 30, 15, running=2, gen=100.0, kv=0.10),
        loaded(1_000, 20, 60, 20, running=2, gen=50.0, kv=0.20, series="p Engine 001"),   # same second, other engine
        loaded(2_000, None, 40, 10, running=6, gen=80.0, kv=0.30),
        loaded(3_000, 10, 40, 30, running=7, gen=90.0, kv=0.50),
    ])
    ws = api.open_traces(tmp_path)
    assert ws.con.execute("select count(*) from rejected_rows").fetchone()[0] == 0   # series is in the key
    got = ws.con.execute("""select batch_bucket, num_intervals, mean_accept_length, drafts_share, acceptance_rate,
                                   mean_generation_tokens_per_s, mean_kv_cache_usage
                            from interval_load order by bucket_min""").fetchall()
    ws.close()
    # running 2 → bucket "2": 1 + (15 + 20) / (10 + 20); 35 / 90; gen (100 + 50) / 2; kv 0.15
    # running 6 and 7 → "5-8": accept length from the interval with drafts, 1 + 30 / 10, over 40 of 80
    assert got == [("2", 2, pytest.approx(1 + 35 / 30), 1.0, pytest.approx(35 / 90), 75.0, pytest.approx(0.15)),
                   ("5-8", 2, 4.0, 0.5, pytest.approx(40 / 80), 85.0, pytest.approx(0.40))]
    report = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert "Acceptance against load: intervals grouped by the requests running" in report.stdout
    assert "| d | 5-8 | 2 | 80 | 4.000 | 50.0% | 50.0% | – | 85.0 | 40.0% |" in report.stdout


def test_a_log_with_only_the_engines_accept_length(tmp_path):
    """SGLang's log prints its own accept length and no counts: the report shows it as the
    engine printed it, with its definition, and never as 1 + accepted / drafts."""
    from pathlib import Path

    log = Path(__file__).resolve().parent / "fixtures" / "sglang_logs" / "eagle3_tp0.log"
    out = tmp_path / "t"
    assert CliRunner().invoke(main, ["import", "sglang-log", str(log), "--deployment", "sg",
                                     "--out", str(out)]).exit_code == 0
    report = CliRunner().invoke(main, ["report", str(out)]).stdout
    # every decode line is kept (two and three lines share a second: ordered within it): accept
    # len 2.17, 1.95, 1.80, 2.05, 1.80, 1.57 → mean 11.34 / 6 = 1.89
    assert "| sg | 2025-10-22 10:00:00 | 6 | – | – | – | – | – | – | – | 1.89 | 1.0 |" in report
    assert "in its own definition: tokens committed per request per verify step" in report


def test_the_engines_definition_is_stated_once_without_contradicting_itself(tmp_path):
    """vLLM's own definition of its printed accept length is 1 + accepted / drafts: the section
    states it and no longer adds that it "is not recomputed as 1 + accepted / drafts" (issue 37).
    The two columns differ because one is computed from the counts and the other is the mean of
    the printed, rounded values."""
    from pathlib import Path

    log = Path(__file__).resolve().parent / "fixtures" / "vllm.log"
    out = tmp_path / "t"
    assert CliRunner().invoke(main, ["import", "vllm-log", str(log), "--deployment", "v", "--year", "2026",
                                     "--out", str(out)]).exit_code == 0
    report = CliRunner().invoke(main, ["report", str(out)]).stdout
    # 1 + 322 / 363 = 1.887 from the counts; the four printed values average 1.86
    assert "| v | 2026-05-30 07:00:00 | 4 | 363 | 1,089 | 322 | 1.887 | 100.0% | 29.6% |" in report
    assert ("\nThe engine's accept length is the mean of what it printed, rounded as printed, in its own "
            "definition: 1 + accepted / drafts, as vLLM prints it (2 decimals).\n") in report
    assert "recomputed" not in report


def test_the_interval_sums_add_in_index_order_on_every_cpu():
    # numpy's sum adds a contiguous axis pairwise in vector lanes, which differ by CPU; the
    # intervals' sums are running totals: exactly the left-to-right sum, whatever the machine
    import functools
    import operator

    import numpy as np

    from analyzer.analysis.uncertainty import ordered_sum, scalar_exp, scalar_log

    values = np.random.default_rng(7).standard_normal((3, 1000)) * 10.0 ** np.arange(-8, 8, 16 / 1000)
    for row, total in zip(values, ordered_sum(values, axis=1)):
        assert total == functools.reduce(operator.add, row.tolist())
    assert ordered_sum(values[0]) == functools.reduce(operator.add, values[0].tolist())
    assert ordered_sum(np.zeros((2, 0)), axis=1).tolist() == [0.0, 0.0]
    assert scalar_log([1.0, 0.0, -1.0]).tolist()[:2] == [0.0, -np.inf] and np.isnan(scalar_log([-1.0])[0])
    assert scalar_exp(np.array([[0.0, 1.0]])).tolist() == [[1.0, 2.718281828459045]]
