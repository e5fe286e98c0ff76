"""Row rules (docs/trace-format.md, "Row rules"): one minimal dataset per rule.

Every test builds a tiny trace directory, loads it with ``open_traces`` and
compares the WHOLE ``rejected_rows`` table (table_name, row_key, reason) with a
hand-written list. ``row_key`` is ``'col=value, col=value'`` over the table's
key columns followed by its partition columns (analyzer/ingest/rules.py ``_row_key``).

Rule order per table: null_required, duplicate_key, negative_count,
accepted_exceeds_drafted, committed_exceeds_accepted, truncated_without_stop,
negative_duration, time_order, unknown_deployment, unknown_request,
unknown_step, ambiguous_request, ambiguous_step. A row is rejected once, under
the first rule it breaks.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analyzer.api import open_traces
from tracebuilder import arrow_table, at, deployment, round_row, write_table, write_traces, request, step

# --------------------------------------------------------------------------- builders






def write_file(path: Path, table: str, rows: list[dict]) -> None:
    """One Parquet file of ``table`` at an arbitrary path (e.g. rounds/b.parquet)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(arrow_table(table, rows), path)


@pytest.fixture
def load(tmp_path):
    """load(deployments=[...], rounds=[...], ...) -> Workspace, closed after the test."""
    opened = []

    def _load(**tables):
        tables.setdefault("deployments", [deployment("a")])
        write_traces(tmp_path, **tables)
        ws = open_traces(tmp_path)
        opened.append(ws)
        return ws

    yield _load
    for ws in opened:
        ws.close()


def rejected(ws) -> list[tuple[str, str, str]]:
    """The whole rejected_rows table, sorted (copies of one key stay as copies)."""
    return sorted(ws.con.execute("select table_name, row_key, reason from rejected_rows").fetchall())


def clean_keys(ws, table: str, columns: str) -> list[tuple]:
    return sorted(ws.con.execute(f"select {columns} from {table}").fetchall())


def rk(**key) -> str:
    """row_key text in key-column order, e.g. rk(deployment_id='a', step_id=1)."""
    return ", ".join(f"{k}={v}" for k, v in key.items())


def round_key(request_id: str, round_idx: int, deployment_id: str = "a") -> str:
    return rk(deployment_id=deployment_id, request_id=request_id, round_idx=round_idx)


# --------------------------------------------------------------------------- null_required


def test_null_required_in_every_table(load):
    ws = load(
        # model is required: the second deployment is rejected.
        deployments=[deployment("a"), deployment("b", model=None)],
        # arrival_time is required; first_token_time / finish_time are not.
        requests=[request("a", "r1"), request("a", "r2", arrival_time=None),
                  request("a", "r3", first_token_time=None, finish_time=None)],
        # duration_ms is required; draft_ms is not.
        steps=[step("a", 1), step("a", 2, duration_ms=None), step("a", 3, draft_ms=None)],
        # num_accepted_tokens is required; step_id is not.
        rounds=[round_row("a", "r1", 0, 3, 2, step_id=1),
                round_row("a", "r1", 1, 3, None, committed=1, step_id=1),
                round_row("a", "r3", 0, 3, 2, step_id=None)],
    )
    assert rejected(ws) == [
        ("deployments", "deployment_id=b", "null_required"),
        ("requests", rk(deployment_id="a", request_id="r2"), "null_required"),
        ("rounds", round_key("r1", 1), "null_required"),
        ("steps", rk(deployment_id="a", step_id=2), "null_required"),
    ]
    assert clean_keys(ws, "requests", "request_id") == [("r1",), ("r3",)]
    assert clean_keys(ws, "steps", "step_id") == [(1,), (3,)]
    assert clean_keys(ws, "rounds", "request_id, round_idx") == [("r1", 0), ("r3", 0)]


def test_null_in_a_key_column_is_null_required_and_shown_as_NULL(load):
    ws = load(rounds=[round_row("a", None, 0, 1, 1), round_row("a", "r1", None, 1, 1)])
    assert rejected(ws) == [
        ("rounds", "deployment_id=a, request_id=NULL, round_idx=0", "null_required"),
        ("rounds", "deployment_id=a, request_id=r1, round_idx=NULL", "null_required"),
    ]


# --------------------------------------------------------------------------- duplicate_key


def test_duplicate_key_rejects_every_copy(load):
    ws = load(
        requests=[request("a", "r1"), request("a", "r1", prompt_tokens=99), request("a", "r2")],
        steps=[step("a", 1), step("a", 1), step("a", 1), step("a", 2)],
        # (a, r1, 0) twice, even though the copies are identical: rounds never merge.
        rounds=[round_row("a", "r1", 0, 2, 1), round_row("a", "r1", 0, 2, 1), round_row("a", "r1", 1, 2, 1),
                round_row("a", "r2", 0, 2, 1)],
    )
    assert rejected(ws) == [
        ("requests", rk(deployment_id="a", request_id="r1"), "duplicate_key"),
        ("requests", rk(deployment_id="a", request_id="r1"), "duplicate_key"),
        ("rounds", round_key("r1", 0), "duplicate_key"),
        ("rounds", round_key("r1", 0), "duplicate_key"),
        ("steps", rk(deployment_id="a", step_id=1), "duplicate_key"),
        ("steps", rk(deployment_id="a", step_id=1), "duplicate_key"),
        ("steps", rk(deployment_id="a", step_id=1), "duplicate_key"),
    ]
    # r1 rounds still find their request: unknown_request looks among all rows as read.
    assert clean_keys(ws, "rounds", "request_id, round_idx") == [("r1", 1), ("r2", 0)]
    assert ws.summary.rejected["steps"] == {"duplicate_key": 3}


def test_duplicate_key_across_two_files_of_one_table(tmp_path):
    # rounds/a.parquet and rounds/b.parquet are one table: no partition column
    # tells the copies apart.
    write_traces(tmp_path, deployments=[deployment("a")])
    write_file(tmp_path / "rounds" / "a.parquet", "rounds", [round_row("a", "r1", 0, 2, 1)])
    write_file(tmp_path / "rounds" / "b.parquet", "rounds", [round_row("a", "r1", 0, 2, 2),
                                                             round_row("a", "r1", 1, 2, 1)])
    ws = open_traces(tmp_path)
    try:
        assert rejected(ws) == [("rounds", round_key("r1", 0), "duplicate_key")] * 2
    finally:
        ws.close()


def test_same_request_id_in_two_deployments_is_not_a_duplicate(load):
    ws = load(deployments=[deployment("a"), deployment("b")],
              requests=[request("a", "r1"), request("b", "r1")],
              rounds=[round_row("a", "r1", 0, 2, 1), round_row("b", "r1", 0, 2, 1)])
    assert rejected(ws) == []


def test_identical_deployments_rows_are_merged(load):
    # Same in every listed column, including the nulls of draft_quant and gpu
    # (absent optional values must compare equal, or no copy could ever merge).
    same = deployment("a", draft_quant=None, gpu=None, engine="vllm")
    ws = load(deployments=[same, dict(same), dict(same), deployment("b")],
              rounds=[round_row("a", "r1", 0, 2, 1)])
    assert rejected(ws) == []
    assert clean_keys(ws, "deployments", "deployment_id, engine") == [("a", "vllm"), ("b", None)]
    assert ws.summary.rows_read["deployments"] == 4
    assert ws.summary.rows_clean["deployments"] == 2
    assert ws.summary.rejected["deployments"] == {}


def test_deployments_sharing_a_key_but_differing_are_all_duplicate_key(load):
    # Two identical copies plus one that differs in gpu: the key is ambiguous,
    # so all three copies are rejected (none is merged away first).
    ws = load(deployments=[deployment("a", gpu="H200"), deployment("a", gpu="H200"),
                           deployment("a", gpu="H100"), deployment("b")],
              rounds=[round_row("a", "r1", 0, 2, 1)])
    assert rejected(ws) == [("deployments", "deployment_id=a", "duplicate_key")] * 3
    assert clean_keys(ws, "deployments", "deployment_id") == [("b",)]
    # The round's deployment was read (then rejected): not unknown_deployment.
    assert clean_keys(ws, "rounds", "request_id") == [("r1",)]


def test_identical_deployments_copies_in_date_partitions_are_merged(tmp_path):
    # deployments/date=…/ copy per day: partition columns are ignored for its key.
    write_table(tmp_path, "deployments", {"date=2026-11-27": [deployment("a")],
                                          "date=2026-11-28": [deployment("a")]})
    write_traces(tmp_path, rounds=[round_row("a", "r1", 0, 2, 1)])
    ws = open_traces(tmp_path)
    try:
        assert rejected(ws) == []
        assert ws.con.execute("select deployment_id, model from deployments").fetchall() == [("a", "m")]
        # The partition column is not a column of the clean deployments table.
        columns = [r[0] for r in ws.con.execute("describe deployments").fetchall()]
        assert "date" not in columns
    finally:
        ws.close()


def test_deployments_differing_across_date_partitions_are_versions_not_duplicates(tmp_path):
    # each date's row is that date's configuration (tests/test_deployment_versions.py);
    # the clean deployments keep the latest, γ = 2 of 2026-11-28
    write_table(tmp_path, "deployments", {"date=2026-11-27": [deployment("a", gamma=4)],
                                          "date=2026-11-28": [deployment("a", gamma=2)]})
    write_traces(tmp_path, rounds=[round_row("a", "r1", 0, 2, 1)])
    ws = open_traces(tmp_path)
    try:
        assert rejected(ws) == []
        assert ws.con.execute("select deployment_id, num_speculative_tokens from deployments").fetchall() == [("a", 2)]
    finally:
        ws.close()


def test_deployments_differing_within_a_date_are_duplicate_key_with_the_date_in_the_key(tmp_path):
    write_table(tmp_path, "deployments", {"date=2026-11-27": [deployment("a", gamma=4), deployment("a", gamma=2)]})
    write_traces(tmp_path, rounds=[round_row("a", "r1", 0, 2, 1)])
    ws = open_traces(tmp_path)
    try:
        assert rejected(ws) == [("deployments", "deployment_id=a, date=2026-11-27", "duplicate_key")] * 2
    finally:
        ws.close()


# --------------------------------------------------------------------------- negative_count


def test_negative_count_in_requests_steps_and_rounds(load):
    ws = load(
        requests=[request("a", "r1"),
                  request("a", "r2", prompt_tokens=-1),
                  request("a", "r3", num_preemptions=-1),     # optional INTEGER column
                  request("a", "r4", output_tokens=0)],      # zero is fine
        steps=[step("a", 1),
               step("a", -5),                                # step_id is BIGINT
               step("a", 2, batch_size=-1),
               step("a", 3, num_prefill_tokens=-2),
               step("a", 4, num_preempted=-1)],
        rounds=[round_row("a", "r1", 0, 2, 1),
                round_row("a", "r1", -1, 2, 1),               # round_idx
                round_row("a", "r1", 1, 2, 1, step_id=-1),    # BIGINT, in rounds
                round_row("a", "r1", 2, 2, 1, context_len=-3),
                round_row("a", "r1", 3, 2, 1, num_invalidated_tokens=-1),
                round_row("a", "r1", 4, 2, 1, num_verified_nodes=-1),
                round_row("a", "r1", 5, -1, -1, committed=0)],  # drafted/accepted
    )
    assert rejected(ws) == sorted([
        ("requests", rk(deployment_id="a", request_id="r2"), "negative_count"),
        ("requests", rk(deployment_id="a", request_id="r3"), "negative_count"),
        ("steps", rk(deployment_id="a", step_id=-5), "negative_count"),
        ("steps", rk(deployment_id="a", step_id=2), "negative_count"),
        ("steps", rk(deployment_id="a", step_id=3), "negative_count"),
        ("steps", rk(deployment_id="a", step_id=4), "negative_count"),
        ("rounds", round_key("r1", -1), "negative_count"),
        ("rounds", round_key("r1", 1), "negative_count"),
        ("rounds", round_key("r1", 2), "negative_count"),
        ("rounds", round_key("r1", 3), "negative_count"),
        ("rounds", round_key("r1", 4), "negative_count"),
        ("rounds", round_key("r1", 5), "negative_count"),
    ])


def test_negative_bigint_beyond_integer_range(load):
    # A BIGINT that does not fit 32 bits must still be compared as a count.
    ws = load(steps=[step("a", -(2**40), start_ms=0.0), step("a", 2**40, start_ms=10.0)],
              rounds=[round_row("a", "r1", 0, 2, 1, step_id=2**40)])
    assert rejected(ws) == [("steps", rk(deployment_id="a", step_id=-(2**40)), "negative_count")]


def test_negative_count_does_not_apply_to_deployments(load):
    # The rule lists requests, steps and rounds only.
    ws = load(deployments=[deployment("a", gamma=-1, tensor_parallel_size=-2, kv_capacity_tokens=-3)],
              rounds=[round_row("a", "r1", 0, 2, 1)])
    assert rejected(ws) == []


# --------------------------------------------------------------------------- rounds: token counts


def test_accepted_exceeds_drafted(load):
    ws = load(rounds=[round_row("a", "r1", 0, 2, 3),          # K=3 > 2 drafted
                      round_row("a", "r1", 1, 2, 2),          # K = drafted: fine
                      round_row("a", "r1", 2, 0, 0)])         # plain decode round
    assert rejected(ws) == [("rounds", round_key("r1", 0), "accepted_exceeds_drafted")]


def test_committed_exceeds_accepted(load):
    ws = load(rounds=[round_row("a", "r1", 0, 3, 1, committed=3),   # 3 > 1 + 1
                      round_row("a", "r1", 1, 3, 1, committed=2),   # K + 1: fine
                      round_row("a", "r1", 2, 0, 0, committed=2)])  # 2 > 0 + 1
    assert rejected(ws) == [("rounds", round_key("r1", 0), "committed_exceeds_accepted"),
                            ("rounds", round_key("r1", 2), "committed_exceeds_accepted")]


def test_truncated_without_stop_when_stop_reason_column_exists(load):
    # With a stop_reason column, a truncated round needs a stop_reason, even on
    # the request's last round.
    ws = load(rounds=[round_row("a", "r1", 0, 3, 2, stop_reason=None),
                      round_row("a", "r1", 1, 3, 2, committed=1, stop_reason=None),   # last round, no reason
                      round_row("a", "r2", 0, 3, 2, committed=1, stop_reason="eos"),  # truncated, with reason
                      round_row("a", "r3", 0, 3, 2, committed=0, stop_reason=None),   # mid-request
                      round_row("a", "r3", 1, 3, 2, stop_reason="length")])           # stop, not truncated
    assert rejected(ws) == [("rounds", round_key("r1", 1), "truncated_without_stop"),
                            ("rounds", round_key("r3", 0), "truncated_without_stop")]


def test_truncated_without_stop_when_stop_reason_is_in_only_one_file(tmp_path):
    # stop_reason exists in a.parquet only: the column exists "somewhere", so
    # b.parquet's rows have a null stop_reason and the last-round rule does not apply.
    write_traces(tmp_path, deployments=[deployment("a")])
    write_file(tmp_path / "rounds" / "a.parquet", "rounds",
               [round_row("a", "r1", 0, 3, 2, committed=1, stop_reason="eos")])
    write_file(tmp_path / "rounds" / "b.parquet", "rounds",
               [round_row("a", "r2", 0, 3, 2), round_row("a", "r2", 1, 3, 2, committed=1)])
    ws = open_traces(tmp_path)
    try:
        assert rejected(ws) == [("rounds", round_key("r2", 1), "truncated_without_stop")]
    finally:
        ws.close()


def test_truncated_without_stop_without_any_stop_reason_column(load):
    # No rounds file has stop_reason: a truncation is valid on the request's
    # highest round_idx only. The highest is found per (deployment, request),
    # whatever the row order.
    ws = load(deployments=[deployment("a"), deployment("b")],
              rounds=[round_row("a", "r1", 2, 3, 2, committed=1),   # last of a/r1: valid
                      round_row("a", "r1", 0, 3, 2, committed=0),   # not last: rejected
                      round_row("a", "r1", 1, 3, 2),
                      round_row("a", "r2", 0, 3, 3, committed=2),   # single round: valid
                      # b/r1 shares the request id with a/r1 but has its own rounds.
                      round_row("b", "r1", 2, 3, 2, committed=2),   # a/r1's max is 2, b/r1's is 3
                      round_row("b", "r1", 3, 3, 2)])
    assert rejected(ws) == [("rounds", round_key("r1", 0), "truncated_without_stop"),
                            ("rounds", round_key("r1", 2, "b"), "truncated_without_stop")]


def test_truncated_without_stop_last_round_is_per_date_partition(tmp_path):
    # Without requests and without stop_reason, a request is (deployment_id,
    # request_id, date): r1 on 11-28 is a different request from r1 on 11-27,
    # so its single truncated round is its own last round.
    write_traces(tmp_path, deployments=[deployment("a")])
    write_table(tmp_path, "rounds", {
        "date=2026-11-27": [round_row("a", "r1", 0, 3, 2, committed=1), round_row("a", "r1", 1, 3, 2)],
        "date=2026-11-28": [round_row("a", "r1", 0, 3, 2, committed=1)],
    })
    ws = open_traces(tmp_path)
    try:
        assert rejected(ws) == [
            ("rounds", "deployment_id=a, request_id=r1, round_idx=0, date=2026-11-27", "truncated_without_stop")]
    finally:
        ws.close()


# --------------------------------------------------------------------------- steps, requests


def test_negative_duration(load):
    ws = load(steps=[step("a", 1, duration_ms=-1.0),
                     step("a", 2, draft_ms=-0.5),
                     step("a", 3, verify_ms=-2.0),
                     step("a", 4, duration_ms=0.0, draft_ms=0.0, verify_ms=0.0),   # zero is fine
                     # Overlapping draft and verify (sum > duration) is valid.
                     step("a", 5, duration_ms=10.0, draft_ms=6.0, verify_ms=8.0)],
              rounds=[round_row("a", "r1", 0, 2, 1, step_id=4)])
    assert rejected(ws) == [("steps", rk(deployment_id="a", step_id=1), "negative_duration"),
                            ("steps", rk(deployment_id="a", step_id=2), "negative_duration"),
                            ("steps", rk(deployment_id="a", step_id=3), "negative_duration")]


def test_time_order_each_comparison(load):
    ws = load(requests=[
        # 1. first_token_time < arrival_time (finish is after both)
        request("a", "r1", arrival_time=at(0), first_token_time=at(-5), finish_time=at(100)),
        # 2. finish_time < first_token_time (finish is still after arrival)
        request("a", "r2", arrival_time=at(0), first_token_time=at(50), finish_time=at(40)),
        # 3. finish_time < arrival_time (no first token to compare with)
        request("a", "r3", arrival_time=at(0), first_token_time=None, finish_time=at(-10)),
        # Equal times are in order; missing times compare with nothing.
        request("a", "r4", arrival_time=at(0), first_token_time=at(0), finish_time=at(0)),
        request("a", "r5", arrival_time=at(0), first_token_time=None, finish_time=None),
        request("a", "r6", arrival_time=at(0), first_token_time=at(5), finish_time=None),
    ], rounds=[round_row("a", "r4", 0, 2, 1)])
    assert rejected(ws) == [("requests", rk(deployment_id="a", request_id="r1"), "time_order"),
                            ("requests", rk(deployment_id="a", request_id="r2"), "time_order"),
                            ("requests", rk(deployment_id="a", request_id="r3"), "time_order")]


def test_time_order_compares_instants_not_millisecond_rounding(load):
    # first token 1 µs before arrival is out of order.
    ws = load(requests=[request("a", "r1", arrival_time=at(1), first_token_time=at(0.999))],
              rounds=[round_row("a", "r1", 0, 2, 1)])
    assert rejected(ws) == [("requests", rk(deployment_id="a", request_id="r1"), "time_order")]


# --------------------------------------------------------------------------- references


def test_unknown_deployment(load):
    ws = load(deployments=[deployment("a")],
              requests=[request("a", "r1"), request("zz", "r1")],
              steps=[step("a", 1), step("zz", 1)],
              rounds=[round_row("a", "r1", 0, 2, 1), round_row("zz", "r1", 0, 2, 1)])
    assert rejected(ws) == [
        ("requests", rk(deployment_id="zz", request_id="r1"), "unknown_deployment"),
        ("rounds", round_key("r1", 0, "zz"), "unknown_deployment"),
        ("steps", rk(deployment_id="zz", step_id=1), "unknown_deployment"),
    ]


def test_unknown_request(load):
    ws = load(deployments=[deployment("a"), deployment("b")],
              requests=[request("a", "r1")],
              rounds=[round_row("a", "r1", 0, 2, 1),
                      round_row("a", "r9", 0, 2, 1),      # no such request
                      round_row("b", "r1", 0, 2, 1)])     # r1 exists, but under a
    assert rejected(ws) == [("rounds", round_key("r9", 0), "unknown_request"),
                            ("rounds", round_key("r1", 0, "b"), "unknown_request")]


def test_unknown_request_not_checked_without_requests_table(load):
    ws = load(rounds=[round_row("a", "r1", 0, 2, 1), round_row("a", "r9", 0, 2, 1)])
    assert rejected(ws) == []
    assert ws.summary.present["requests"] is False


def test_unknown_step(load):
    ws = load(deployments=[deployment("a"), deployment("b")],
              steps=[step("a", 1), step("b", 2)],
              rounds=[round_row("a", "r1", 0, 2, 1, step_id=1),
                      round_row("a", "r1", 1, 2, 1, step_id=7),      # no such step
                      round_row("a", "r1", 2, 2, 1, step_id=2),      # step 2 exists, but under b
                      round_row("a", "r1", 3, 2, 1, step_id=None)])  # null step_id is fine
    assert rejected(ws) == [("rounds", round_key("r1", 1), "unknown_step"),
                            ("rounds", round_key("r1", 2), "unknown_step")]


def test_unknown_step_not_checked_without_steps_table(load):
    ws = load(rounds=[round_row("a", "r1", 0, 2, 1, step_id=7)])
    assert rejected(ws) == []


def test_references_look_among_all_parent_rows_as_read(load):
    ws = load(
        # b is rejected (null model) but was read: its children are not unknown_deployment.
        deployments=[deployment("a"), deployment("b", model=None)],
        # r1 is rejected for time_order, r2 for duplicate_key, r3 is fine.
        requests=[request("a", "r1", first_token_time=at(-1)),
                  request("a", "r2"), request("a", "r2"),
                  request("a", "r3"),
                  request("b", "r4")],
        # step 1 is rejected for negative_duration.
        steps=[step("a", 1, duration_ms=-1.0), step("a", 2)],
        rounds=[round_row("a", "r1", 0, 2, 1, step_id=1),
                round_row("a", "r2", 0, 2, 1, step_id=2),
                round_row("a", "r3", 0, 2, 1, step_id=1),
                round_row("b", "r4", 0, 2, 1)],
    )
    assert rejected(ws) == [
        ("deployments", "deployment_id=b", "null_required"),
        ("requests", rk(deployment_id="a", request_id="r1"), "time_order"),
        ("requests", rk(deployment_id="a", request_id="r2"), "duplicate_key"),
        ("requests", rk(deployment_id="a", request_id="r2"), "duplicate_key"),
        ("steps", rk(deployment_id="a", step_id=1), "negative_duration"),
    ]
    # Every round is kept (for the acceptance metrics), though some parents are not.
    assert clean_keys(ws, "rounds", "deployment_id, request_id") == [
        ("a", "r1"), ("a", "r2"), ("a", "r3"), ("b", "r4")]
    assert clean_keys(ws, "requests", "deployment_id, request_id") == [("a", "r3"), ("b", "r4")]


# --------------------------------------------------------------------------- precedence


def test_duplicate_and_negative_is_counted_once_as_duplicate_key(load):
    ws = load(rounds=[round_row("a", "r1", 0, 2, 1, context_len=-1),
                      round_row("a", "r1", 0, 2, 1, context_len=-1)])
    assert rejected(ws) == [("rounds", round_key("r1", 0), "duplicate_key")] * 2
    assert ws.summary.rejected["rounds"] == {"duplicate_key": 2}


def test_duplicates_are_counted_among_rows_without_nulls(load):
    # The first copy breaks null_required, so the second copy has no duplicate left.
    ws = load(rounds=[round_row("a", "r1", 0, None, 1), round_row("a", "r1", 0, 2, 1)])
    assert rejected(ws) == [("rounds", round_key("r1", 0), "null_required")]
    assert clean_keys(ws, "rounds", "num_draft_tokens") == [(2,)]


def test_null_required_comes_before_negative_count(load):
    ws = load(steps=[step("a", 1, batch_size=-1, duration_ms=None)], rounds=[round_row("a", "r1", 0, 2, 1)])
    assert rejected(ws) == [("steps", rk(deployment_id="a", step_id=1), "null_required")]


def test_first_broken_rule_wins_in_rounds(load):
    ws = load(
        deployments=[deployment("a")],
        requests=[request("a", "r1")],
        steps=[step("a", 1)],
        rounds=[
            # negative_count before accepted_exceeds_drafted
            round_row("a", "r1", 0, 2, 3, context_len=-1),
            # accepted_exceeds_drafted before committed_exceeds_accepted
            round_row("a", "r1", 1, 1, 2, committed=5),
            # committed_exceeds_accepted before unknown_deployment
            round_row("zz", "r1", 2, 3, 1, committed=3),
            # truncated_without_stop before unknown_request (stop_reason column present)
            round_row("a", "r9", 3, 3, 2, committed=1, stop_reason=None),
            # unknown_deployment before unknown_request and unknown_step
            round_row("zz", "r9", 4, 2, 1, step_id=99),
            # unknown_request before unknown_step
            round_row("a", "r9", 5, 2, 1, step_id=99),
        ])
    assert rejected(ws) == sorted([
        ("rounds", round_key("r1", 0), "negative_count"),
        ("rounds", round_key("r1", 1), "accepted_exceeds_drafted"),
        ("rounds", round_key("r1", 2, "zz"), "committed_exceeds_accepted"),
        ("rounds", round_key("r9", 3), "truncated_without_stop"),
        ("rounds", round_key("r9", 4, "zz"), "unknown_deployment"),
        ("rounds", round_key("r9", 5), "unknown_request"),
    ])


def test_first_broken_rule_wins_in_requests_and_steps(load):
    ws = load(
        requests=[request("a", "r1", prompt_tokens=-1, first_token_time=at(-1)),   # negative_count
                  request("zz", "r2", first_token_time=at(-1))],                  # time_order
        steps=[step("a", 1, batch_size=-1, duration_ms=-1.0),                      # negative_count
               step("zz", 2, duration_ms=-1.0)],                                   # negative_duration
        rounds=[round_row("a", "r1", 0, 2, 1)],
    )
    assert rejected(ws) == [
        ("requests", rk(deployment_id="a", request_id="r1"), "negative_count"),
        ("requests", rk(deployment_id="zz", request_id="r2"), "time_order"),
        ("steps", rk(deployment_id="a", step_id=1), "negative_count"),
        ("steps", rk(deployment_id="zz", step_id=2), "negative_duration"),
    ]


# --------------------------------------------------------------------------- summary


def test_rejected_counts_per_reason_in_load_summary(load):
    ws = load(
        deployments=[deployment("a"), deployment("b", model=None)],
        requests=[request("a", "r1"), request("a", "r2", finish_time=at(-1)), request("zz", "r3")],
        steps=[step("a", 1), step("a", 2, duration_ms=-1.0)],
        rounds=[round_row("a", "r1", 0, 2, 1, step_id=1),
                round_row("a", "r1", 1, 2, 3, step_id=1),      # accepted_exceeds_drafted
                round_row("a", "r1", 2, 2, 3, step_id=1),      # accepted_exceeds_drafted
                round_row("a", "r8", 0, 2, 1),                 # unknown_request
                round_row("a", "r1", 3, 2, 1, step_id=9)],     # unknown_step
    )
    assert ws.summary.rejected == {
        "deployments": {"null_required": 1},
        "requests": {"time_order": 1, "unknown_deployment": 1},
        "steps": {"negative_duration": 1},
        "rounds": {"accepted_exceeds_drafted": 2, "unknown_request": 1, "unknown_step": 1},
        "intervals": {},
    }
    assert ws.summary.rejected_total == 8
    assert ws.summary.rows_read == {"deployments": 2, "requests": 3, "steps": 2, "rounds": 5, "intervals": 0}
    assert ws.summary.rows_clean == {"deployments": 1, "requests": 1, "steps": 1, "rounds": 1, "intervals": 0}
    # The same counts are in the database, by table and reason.
    assert ws.con.execute("""select table_name, reason, count(*) from rejected_rows
                             group by all order by all""").fetchall() == [
        ("deployments", "null_required", 1),
        ("requests", "time_order", 1),
        ("requests", "unknown_deployment", 1),
        ("rounds", "accepted_exceeds_drafted", 2),
        ("rounds", "unknown_request", 1),
        ("rounds", "unknown_step", 1),
        ("steps", "negative_duration", 1),
    ]


# --------------------------------------------------------------------------- rules of issue 23


def report_json(path) -> dict:
    import json

    from click.testing import CliRunner

    from analyzer.cli import main

    result = CliRunner().invoke(main, ["report", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_rounds_out_of_order_leave_no_negative_gap_in_itl(tmp_path):
    # First token at 5 ms; steps end at 20 (1), 30 (2), 40 (3) and 35 (4, 25 + 10).
    # Round 2 runs in step 2, which ends before round 1's step 3: out of order. Round 3's
    # step 4 ends after round 2's but before round 1's: out of order too (the latest earlier
    # end, 40, decides; had only the previous round been compared, its gap from round 1
    # would be 35 − 40 = −5 ms). Left: gaps 5 → 20 → 40, 15 and 20 ms.
    write_traces(tmp_path, deployments=[deployment("a")],
                 requests=[request("a", "r1", arrival=0.0, first=5.0, finish=100.0)],
                 steps=[step("a", 1, start_ms=10.0), step("a", 2, start_ms=20.0), step("a", 3, start_ms=30.0),
                        step("a", 4, start_ms=25.0)],
                 rounds=[round_row("a", "r1", 0, 2, 1, step_id=1, stop_reason=None),
                         round_row("a", "r1", 1, 2, 1, step_id=3, stop_reason=None),
                         round_row("a", "r1", 2, 2, 1, step_id=2, stop_reason=None),
                         round_row("a", "r1", 3, 2, 0, step_id=4, stop_reason="eos")])
    doc = report_json(tmp_path)
    itl = doc["deployments"][0]["latency_ms"]["itl"]
    assert (itl["mean"], itl["max"]) == (17.5, 20.0)
    assert doc["deployments"][0]["latency_ms"]["max_stall"]["max"] == 20.0
    assert doc["input"]["rejected_rows"] == 2
    ws = open_traces(tmp_path)
    try:
        assert rejected(ws) == [("rounds", round_key("r1", 2), "round_out_of_order"),
                                ("rounds", round_key("r1", 3), "round_out_of_order")]
    finally:
        ws.close()


def test_a_round_whose_step_is_unknown_or_rejected_is_not_ordered(load):
    # "both steps known": a clean step each. Round 1 has no step, round 2's step was rejected
    # (negative_duration), so neither is compared; round 3 is compared with round 0 (20 ms).
    ws = load(requests=[request("a", "r1")],
              steps=[step("a", 1, start_ms=10.0), step("a", 2, start_ms=0.0, duration_ms=-1.0),
                     step("a", 3, start_ms=12.0)],
              rounds=[round_row("a", "r1", 0, 2, 1, step_id=1), round_row("a", "r1", 1, 2, 1),
                      round_row("a", "r1", 2, 2, 1, step_id=2), round_row("a", "r1", 3, 2, 1, step_id=3)])
    assert rejected(ws) == [("steps", rk(deployment_id="a", step_id=2), "negative_duration")]


def test_steps_longer_than_a_day_are_rejected_not_an_internal_error(tmp_path):
    # the values: verify_ms 1e300 and duration_ms 1e12 made the report exit 3 (no
    # DECIMAL(18, 6) holds them); a day, 86,400,000 ms, is still a step
    write_traces(tmp_path, deployments=[deployment("a")], requests=[request("a", "r1")],
                 steps=[step("a", 1, verify_ms=1e300), step("a", 2, duration_ms=1e12),
                        step("a", 3, duration_ms=86_400_000.0), step("a", 4, draft_ms=-1.0, verify_ms=1e300)],
                 rounds=[round_row("a", "r1", i, 2, 1, step_id=i + 1) for i in range(4)])
    doc = report_json(tmp_path)
    assert doc["input"]["rejected_rows"] == 3
    ws = open_traces(tmp_path)
    try:
        # negative_duration comes first: step 4 breaks both
        assert rejected(ws) == [("steps", rk(deployment_id="a", step_id=1), "implausible_duration"),
                                ("steps", rk(deployment_id="a", step_id=2), "implausible_duration"),
                                ("steps", rk(deployment_id="a", step_id=4), "negative_duration")]
    finally:
        ws.close()


INT_MAX, BIGINT_MAX = 2**31 - 1, 2**63 - 1


@pytest.mark.parametrize("table, column, value, expected", [
    ("rounds", "round_idx", INT_MAX, []),
    ("rounds", "num_invalidated_tokens", INT_MAX, []),
    ("rounds", "num_verified_nodes", INT_MAX, []),
    ("rounds", "context_len", INT_MAX, []),
    ("rounds", "step_id", BIGINT_MAX, [("rounds", round_key("r1", 1), "unknown_step")]),
    ("steps", "batch_size", INT_MAX, []),
    ("steps", "num_prefill_tokens", INT_MAX, []),
    ("steps", "kv_usage", 1e300, []),
    ("steps", "draft_ms", 1e300, [("steps", "deployment_id=a, step_id=2", "implausible_duration")]),
    ("requests", "prompt_tokens", INT_MAX, []),
    ("requests", "output_tokens", INT_MAX, []),
    ("requests", "temperature", 1e300, []),
    ("requests", "quality_score", -1e300, []),
    ("deployments", "num_speculative_tokens", INT_MAX, []),
    ("deployments", "kv_capacity_tokens", BIGINT_MAX, []),
])
def test_values_at_the_ends_of_their_types_never_end_the_report(tmp_path, table, column, value, expected):
    # one value at the edge of its type in an otherwise clean trace: a rejected row or none,
    # never exit 3 (the sums and differences of counts are BIGINT, of times bounded)
    tables = dict(deployments=[deployment("a"), deployment("b", method="none", gamma=0, baseline_id=None)],
                  requests=[request("a", "r1"), request("b", "r1")],
                  steps=[step(d, s, start_ms=10.0 * s) for d in "ab" for s in (1, 2)],
                  rounds=[round_row(d, "r1", i, 0 if d == "b" else 3, 0 if d == "b" else 2, step_id=i + 1,
                                    stop_reason=None if i == 0 else "eos") for d in "ab" for i in (0, 1)])
    tables[table][1][column] = value
    write_traces(tmp_path, **tables)
    report_json(tmp_path)
    ws = open_traces(tmp_path)
    try:
        assert rejected(ws) == expected
    finally:
        ws.close()
