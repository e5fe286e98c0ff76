"""The optional intervals table, the interval_acceptance view, and tpot_speedup."""

import json

import pytest
from click.testing import CliRunner

from analyzer import api
from analyzer.cli import main
from tracebuilder import at, deployment, write_table


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
    # hour 2: one interval lacks num_drafts, so the mean accept length is unknown
    assert second["mean_accept_length"] is None and second["vllm_rate"] is None
    assert second["acceptance_rate"] == pytest.approx(15 / 55)
    ws.close()
    report = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert report.exit_code == 0
    assert "These traces hold aggregate counters only" in report.stdout
    assert "## Aggregate counters (intervals)" in report.stdout


def test_tpot_speedup_by_hand(tmp_path):
    def req(dep, rid, ms, tokens):
        return {"deployment_id": dep, "request_id": rid, "arrival_time": at(0), "first_token_time": at(10),
                "finish_time": at(10 + ms), "prompt_tokens": 5, "output_tokens": tokens, "finish_reason": "stop"}

    write_table(tmp_path, "deployments", [deployment("spec"), deployment("base", "none")])
    # baseline: (100 + 300) ms over (10 + 20) tokens after the first = 13.33 ms/token
    # spec: (100 + 50) ms over (20 + 10) tokens = 5 ms/token; a 1-token request is left out
    write_table(tmp_path, "requests", [req("base", "a", 100, 11), req("base", "b", 300, 21),
                                       req("spec", "c", 100, 21), req("spec", "d", 50, 11),
                                       req("spec", "e", 999, 1)])
    write_table(tmp_path, "rounds", [])
    doc = json.loads(CliRunner().invoke(main, ["report", str(tmp_path), "--format", "json"]).stdout)
    spec = next(d for d in doc["deployments"] if d["deployment_id"] == "spec")
    assert spec["tpot_speedup"] == pytest.approx((400 / 30) / 5)
    assert spec["speedup"] is None   # no steps
    assert any("not matched on batch size" in n for n in doc["notes"])
