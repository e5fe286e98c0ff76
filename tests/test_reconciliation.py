"""Channels agree (view reconciliation, docs/metrics.md#channels-agree-reconciliation): an engine's own
counts from its log, its responses, Prometheus and the rounds, compared over their common time span.
Every expected number is worked out by hand in the comments."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from analyzer import api
from analyzer.cli import main
from tracebuilder import at, deployment, request, round_row, write_table

S = 1000.0   # ms


def interval(source, start_ms, end_ms, accepted, drafted, drafts=None, positions=None, series=None):
    return {"deployment_id": "d", "series": series or f"{source}-{end_ms}", "start_time": at(start_ms),
            "end_time": at(end_ms), "num_drafts": drafts, "num_draft_tokens": drafted,
            "num_accepted_tokens": accepted, "accepted_per_position": positions, "source": source}


def reconciliation(root) -> dict[str, dict]:
    ws = api.open_traces(root)
    try:
        result = ws.con.execute("select * from reconciliation")
        names = [d[0] for d in result.description]
        return {row[names.index("channel")]: dict(zip(names, row)) for row in result.fetchall()}
    finally:
        ws.close()


def write_four_channels(tmp_path):
    write_table(tmp_path, "deployments", [deployment("d")])
    # two requests: r1 0-100 ms, r2 200-300 ms
    write_table(tmp_path, "requests", [request("d", "r1", arrival=0, first=10, finish=100, output_tokens=10),
                                       request("d", "r2", arrival=200, first=210, finish=300, output_tokens=3)])
    # r1: (4 drafted, 4 accepted), (4, 2); r2: (4, 1) → accepted 7, drafted 12, 3 speculative rounds,
    # accept length 1 + 7/3; per position (rounds with k ≥ i): 3, 2, 1, 1
    write_table(tmp_path, "rounds", [round_row("d", "r1", 0, 4, 4), round_row("d", "r1", 1, 4, 2),
                                     round_row("d", "r2", 0, 4, 1)])
    write_table(tmp_path, "intervals", [
        # the log, per request: 6 / 8 over 2 drafts ([2, 2, 1, 1]) and 1 / 4 over 1 ([1, 0, 0, 0]): as the rounds
        interval("llamacpp_log", 0, 100, 6, 8, 2, [2, 2, 1, 1]),
        interval("llamacpp_log", 200, 300, 1, 4, 1, [1, 0, 0, 0]),
        # the responses: the same two, and one a minute later, outside every other channel's time
        interval("llamacpp_response", 0, 100, 6, 8),
        interval("llamacpp_response", 200, 300, 1, 4),
        interval("llamacpp_response", 60 * S, 61 * S, 5, 5),
        # Prometheus: one difference over -10 s … +10 s that counts one accepted token more
        interval("prometheus", -10 * S, 10 * S, 8, 12, 3, series="prom"),
    ])
    return tmp_path


@pytest.fixture
def four_channels(tmp_path):
    return write_four_channels(tmp_path)


def test_four_channels_by_hand(four_channels):
    got = reconciliation(four_channels)
    assert set(got) == {"rounds", "llamacpp_log", "llamacpp_response", "prometheus"}
    # common span: latest first time max(0, 0, 0, -10 s) = 0, earliest last time min(300 ms, 300 ms, 61 s,
    # 10 s) = 300 ms, widened by 1 s: -1 s … 1.3 s
    for row in got.values():
        assert (row["span_start"], row["span_end"]) == (at(-1 * S).replace(tzinfo=None),
                                                        at(1.3 * S).replace(tzinfo=None))
        assert row["reference_channel"] == "rounds" and row["num_channels"] == 4
    rounds, log, responses, prom = (got[c] for c in ("rounds", "llamacpp_log", "llamacpp_response", "prometheus"))
    assert (rounds["accepted"], rounds["drafted"], rounds["drafts"]) == (7, 12, 3)
    assert rounds["mean_accept_length"] == pytest.approx(1 + 7 / 3)
    assert rounds["acceptance_rate"] == pytest.approx(7 / 12)
    assert rounds["accepted_per_position"] == [3, 2, 1, 1]
    assert rounds["is_reference"] and not rounds["disagrees"]
    # the log agrees on every total and every position
    assert (log["accepted"], log["drafted"], log["drafts"], log["accepted_per_position"]) == (7, 12, 3, [3, 2, 1, 1])
    assert (log["accepted_difference"], log["drafted_difference"], log["accept_length_difference"],
            log["position_difference"]) == (0, 0, 0, 0)
    assert not log["disagrees"]
    # the responses: the row a minute later is outside the span: 2 rows, 7 / 12; no draft counts
    assert (responses["num_rows"], responses["accepted"], responses["drafted"]) == (2, 7, 12)
    assert responses["drafts"] is None and responses["accept_length_difference"] is None
    assert not responses["disagrees"]
    # Prometheus: 8 against 7 accepted is +1/7 = 14.3 %; accept length 1 + 8/3 against 1 + 7/3: +1/10
    assert prom["accepted_difference"] == pytest.approx(1 / 7)
    assert prom["drafted_difference"] == 0
    assert prom["accept_length_difference"] == pytest.approx((8 / 3 - 7 / 3) / (1 + 7 / 3))
    assert prom["extends_beyond_span"] and prom["disagrees"]


def test_report_lists_the_channels_and_names_the_one_that_disagrees(four_channels):
    result = CliRunner().invoke(main, ["report", str(four_channels), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [r["channel"] for r in doc["reconciliation"]] == ["rounds", "llamacpp_log", "llamacpp_response",
                                                             "prometheus"]
    assert [r["disagrees"] for r in doc["reconciliation"]] == [False, False, False, True]
    note = next(n for n in doc["notes"] if "the channels disagree" in n)
    assert note.startswith("d: the channels disagree: prometheus against rounds over 2026-11-28")
    assert "accepted 8 (+14.3 %)" in note and "drafted 12 (+0.0 %)" in note
    assert "may count traffic the others did not see" in note
    md = CliRunner().invoke(main, ["report", str(four_channels)]).stdout
    assert "## Channels agree?" in md
    assert "| d | prometheus | 1 | 8 | 12 | 3 | 66.7% | 3.667 | – | +14.3 % | +0.0 % | disagrees (reaches beyond the span) |" in md
    assert "| d | rounds (reference) | 2 | 7 | 12 | 3 | 58.3% | 3.333 | 3, 2, 1, 1 | – | – | – |" in md
    assert "- **d**: its channels disagree: prometheus against rounds by more than 1 %" in md


@pytest.mark.parametrize("accepted, disagrees", [(1010, False), (1011, True), (990, False), (989, True)])
def test_one_percent_is_the_line(tmp_path, accepted, disagrees):
    # the log's 1,000 accepted is the reference; 1 % of it is 10 tokens
    write_table(tmp_path, "deployments", [deployment("d")])
    write_table(tmp_path, "intervals", [interval("llamacpp_log", 0, 100, 1000, 2000),
                                        interval("prometheus", 0, 100, accepted, 2000)])
    got = reconciliation(tmp_path)
    assert got["prometheus"]["accepted_difference"] == pytest.approx((accepted - 1000) / 1000)
    assert got["prometheus"]["disagrees"] is disagrees


def test_a_reference_of_zero_disagrees_with_anything_else(tmp_path):
    write_table(tmp_path, "deployments", [deployment("d")])
    write_table(tmp_path, "intervals", [interval("llamacpp_log", 0, 100, 0, 50),
                                        interval("llamacpp_response", 0, 100, 1, 50)])
    got = reconciliation(tmp_path)["llamacpp_response"]
    assert got["accepted_difference"] is None and got["disagrees"]


def test_per_position_counts_alone_can_disagree(tmp_path):
    # same totals (5 / 8 over 2 drafts), but position 2 holds 2 accepted against 1: +100 %
    write_table(tmp_path, "deployments", [deployment("d")])
    write_table(tmp_path, "intervals", [interval("llamacpp_log", 0, 100, 5, 8, 2, [2, 1, 1, 1]),
                                        interval("prometheus", 0, 100, 5, 8, 2, [2, 2, 1, 0])])
    got = reconciliation(tmp_path)["prometheus"]
    assert (got["accepted_difference"], got["drafted_difference"], got["accept_length_difference"]) == (0, 0, 0)
    assert got["position_difference"] == pytest.approx(1.0) and got["disagrees"]


def test_channels_without_a_common_span_are_listed_not_compared(tmp_path):
    write_table(tmp_path, "deployments", [deployment("d")])
    write_table(tmp_path, "intervals", [interval("llamacpp_log", 0, 100, 5, 8),
                                        interval("prometheus", 3600 * S, 3610 * S, 50, 80)])
    got = reconciliation(tmp_path)
    assert {c: (r["has_common_span"], r["num_rows"], r["disagrees"]) for c, r in got.items()} == {
        "llamacpp_log": (False, 0, False), "prometheus": (False, 0, False)}
    doc = json.loads(CliRunner().invoke(main, ["report", str(tmp_path), "--format", "json"]).stdout)
    assert any(n.startswith("d: its 2 channels of acceptance counts share no time span") for n in doc["notes"])


def test_one_channel_is_nothing_to_reconcile(tmp_path):
    write_table(tmp_path, "deployments", [deployment("d")])
    write_table(tmp_path, "intervals", [interval("llamacpp_log", 0, 100, 5, 8),
                                        interval("llamacpp_log", 200, 300, 5, 8)])
    assert reconciliation(tmp_path) == {}
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert result.exit_code == 0 and "Channels agree?" not in result.stdout


def test_benchmark_runs_are_not_a_channel(tmp_path):
    write_table(tmp_path, "deployments", [deployment("d")])
    write_table(tmp_path, "intervals", [interval("llamacpp_log", 0, 100, 5, 8),
                                        interval("vllm_bench", 0, 100, 50, 80)])
    assert reconciliation(tmp_path) == {}
