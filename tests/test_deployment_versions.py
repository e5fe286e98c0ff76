"""A deployment across the dates of its trace (docs/trace-format.md, "Deployments across
partitions"): each date's ``deployments`` row is that date's configuration. A row that
changes between dates (an engine upgrade) is a new version, named in a note and sliced by
``--by``; rows that differ within one date are ``duplicate_key``, and then the deployment
and the rows that need it are named and its verdict is ``unknown``.

Trace of every test here: deployment ``a`` (eagle, γ = 4) and its baseline ``base``.
On 2026-11-27, requests r1 and r2 of ``a`` run two rounds each that accept 2 of 3
drafts (accept length 3); on 2026-11-28, request r1 (the ids restart) runs two rounds
that accept none (accept length 1). Output tokens are 1 + the tokens committed: 7 and 3.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from analyzer import api
from analyzer.cli import main
from tracebuilder import deployment, request, round_row, write_table

DAY1, DAY2 = "date=2026-11-27", "date=2026-11-28"


def rounds_of(request_id: str, accepted: int) -> list[dict]:
    return [round_row("a", request_id, 0, 3, accepted, stop_reason=None),
            round_row("a", request_id, 1, 3, accepted, stop_reason="eos")]


def write_dated(root, day1: list[dict], day2: list[dict]):
    write_table(root, "deployments", {DAY1: day1, DAY2: day2})
    write_table(root, "requests", {
        DAY1: [request("a", "r1", output_tokens=7), request("a", "r2", output_tokens=7),
               request("base", "b1", output_tokens=1)],
        DAY2: [request("a", "r1", output_tokens=3), request("base", "b1", output_tokens=1)]})
    write_table(root, "rounds", {
        DAY1: rounds_of("r1", 2) + rounds_of("r2", 2) + [round_row("base", "b1", 0, 0, 0, stop_reason="eos")],
        DAY2: rounds_of("r1", 0) + [round_row("base", "b1", 0, 0, 0, stop_reason="eos")]})
    return root


def base() -> dict:
    return deployment("base", "none", engine_version="0.32.0")


def spec(**extra) -> dict:
    return deployment("a", baseline_id="base", **{"engine_version": "0.32.0", "gpu": "H100", **extra})


def report(root, *args) -> dict:
    result = CliRunner().invoke(main, ["report", str(root), "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def sql(root, query: str) -> list[tuple]:
    ws = api.open_traces(root)
    try:
        return ws.con.execute(query).fetchall()
    finally:
        ws.close()


# --------------------------------------------------------------------------- a row that changes between dates


@pytest.fixture
def upgraded(tmp_path):
    return write_dated(tmp_path, [spec(), base()], [spec(engine_version="0.99.0"), base()])


def test_an_upgrade_between_dates_is_a_version_not_a_duplicate(upgraded):
    doc = report(upgraded)
    assert doc["input"]["rejected_rows"] == 0
    assert doc["input"]["deployment_changes"] == [
        {"deployment_id": "a", "column": "engine_version", "before": "0.32.0", "after": "0.99.0", "partition": DAY2}]
    assert doc["input"]["deployment_conflicts"] == []
    assert ("a: engine_version 0.32.0 → 0.99.0 on date=2026-11-28; each date's row is that date's configuration, "
            "the deployment is analysed across all of them (--by engine_version slices it)") in doc["notes"]
    # analysed across both dates: 6 rounds committing 3, 3, 3, 3, 1, 1 → mean accept length 14 / 6
    (row,) = [d for d in doc["deployments"] if d["deployment_id"] == "a"]
    assert row["mean_accept_length"] == pytest.approx(14 / 6)
    # judged on its own evidence (a tiny trace: below the floors), not on a configuration conflict
    assert [(v["deployment_id"], "deployments rows differ" in v["text"]) for v in doc["verdict"]] == [
        ("base", False), ("a", False)]


def test_the_clean_deployments_keep_the_latest_version_and_every_version_is_kept(upgraded):
    assert sql(upgraded, "select deployment_id, engine_version from deployments order by all") == [
        ("a", "0.99.0"), ("base", "0.32.0")]
    assert sql(upgraded, "select deployment_id, partition, engine_version from deployment_versions order by all") == [
        ("a", DAY1, "0.32.0"), ("a", DAY2, "0.99.0"), ("base", DAY1, "0.32.0"), ("base", DAY2, "0.32.0")]


def test_by_a_changed_column_splits_the_deployment_at_the_upgrade(upgraded):
    (sliced,) = report(upgraded, "--by", "engine_version")["slices"]
    rows = [(r["deployment_id"], r["value"], r["num_requests"], r["mean_accept_length"]) for r in sliced["rows"]]
    # 0.32.0: r1 and r2 of 2026-11-27, accept length 3; 0.99.0: r1 of 2026-11-28, 1 (base has no drafts)
    assert sliced["column"] == "engine_version"
    assert rows == [("a", "0.32.0", 2, 3.0), ("a", "0.99.0", 1, 1.0), ("base", "0.32.0", 2, None)]


def test_identical_rows_on_every_date_are_one_deployment_and_no_note(tmp_path):
    doc = report(write_dated(tmp_path, [spec(), base()], [spec(), base()]))
    assert doc["input"]["deployment_changes"] == [] and doc["input"]["rejected_rows"] == 0
    assert not [n for n in doc["notes"] if "→" in n]


def test_by_a_deployments_column_when_requests_are_not_partitioned_like_them_exits_2(tmp_path):
    write_table(tmp_path, "deployments", {DAY1: [spec(), base()], DAY2: [spec(engine_version="0.99.0"), base()]})
    write_table(tmp_path, "requests", [request("a", "r1", output_tokens=7)])
    write_table(tmp_path, "rounds", rounds_of("r1", 2))
    result = CliRunner().invoke(main, ["report", str(tmp_path), "--by", "engine_version"])
    assert (result.exit_code, result.output) == (
        2, "Error: --by engine_version: deployments are partitioned by date but requests are not by date, so which "
           "configuration served a request is unknown\n")


def test_by_a_deployments_column_of_unpartitioned_deployments(tmp_path):
    write_table(tmp_path, "deployments", [spec(), base()])
    write_table(tmp_path, "requests", {DAY1: [request("a", "r1", output_tokens=7)],
                                       DAY2: [request("a", "r1", output_tokens=3)]})
    write_table(tmp_path, "rounds", {DAY1: rounds_of("r1", 2), DAY2: rounds_of("r1", 0)})
    (sliced,) = report(tmp_path, "--by", "gpu")["slices"]
    # one configuration: both requests take it, accept length (3 + 3 + 1 + 1) / 4 = 2
    assert [(r["deployment_id"], r["value"], r["num_requests"], r["mean_accept_length"]) for r in sliced["rows"]] == [
        ("a", "H100", 2, 2.0)]


# --------------------------------------------------------------------------- rows that differ within one date


def test_rows_that_differ_within_a_date_are_duplicates_named_with_what_needs_them(tmp_path):
    root = write_dated(tmp_path, [spec(), base()], [spec(), spec(gpu="A100"), base()])
    doc = report(root)
    assert sql(root, "select table_name, row_key, reason from rejected_rows order by all") == [
        ("deployments", f"deployment_id=a, {DAY2}", "duplicate_key"),
        ("deployments", f"deployment_id=a, {DAY2}", "duplicate_key")]
    assert doc["input"]["deployment_conflicts"] == [
        {"deployment_id": "a", "partition": DAY2, "rows": {"requests": 1, "steps": 0, "rounds": 2}, "analysed": True}]
    assert ("a: deployments rows that differ on date=2026-11-28 (duplicate_key), so which configuration its 1 "
            "requests, 0 steps, 2 rounds on date=2026-11-28 ran is unknown; the report keeps its other dates' "
            "configuration, and its verdict is unknown") in doc["notes"]
    (verdict,) = [v for v in doc["verdict"] if v["deployment_id"] == "a"]
    assert (verdict["action"], verdict["basis"], verdict["baseline_id"]) == ("unknown", None, "base")
    assert verdict["text"] == ("No verdict for a: its deployments rows differ on date=2026-11-28 (duplicate_key), "
                               "so which configuration its 2 rounds there ran is unknown; one deployments row per "
                               "deployment_id on date=2026-11-28 would decide it.")


def test_a_deployment_with_only_conflicting_rows_is_never_a_silent_disappearance(tmp_path):
    root = write_dated(tmp_path, [base()], [spec(), spec(gpu="A100"), base()])
    doc = report(root)
    assert [d["deployment_id"] for d in doc["deployments"]] == ["base"]
    assert [(v["deployment_id"], v["action"]) for v in doc["verdict"]] == [("base", "baseline"), ("a", "unknown")]
    (conflict,) = doc["input"]["deployment_conflicts"]
    assert (conflict["rows"], conflict["analysed"]) == ({"requests": 1, "steps": 0, "rounds": 2}, False)
    assert any(n.startswith("a: deployments rows that differ on date=2026-11-28") and
               "it has no other row, so it is left out of the summary, and its verdict is unknown" in n
               for n in doc["notes"])
    markdown = CliRunner().invoke(main, ["report", str(root)])
    assert markdown.exit_code == 0, markdown.output
    assert "No verdict for a: its deployments rows differ on date=2026-11-28" in markdown.output
