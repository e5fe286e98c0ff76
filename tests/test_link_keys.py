"""Link keys written at the source (docs/trace-format.md, "Link keys written at the source"):
request_uid and step_uid stored by the writer are used instead of hashing the string keys
when every file of both tables carries them and they link what the string keys link;
otherwise the string keys are hashed, with a note, and every number is the one the string
keys give.

Reports are compared whole and exactly: the means over requests add their terms in the
order of their values, so no key order reaches a number."""

import json
import shutil
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from analyzer import api
from analyzer.cli import main
from analyzer.ingest.uids import link_uid
from tracebuilder import deployment, request, round_row, step, write_table, write_traces

FIXTURES = Path(__file__).parent / "fixtures"
BOTH = frozenset({"request_uid", "step_uid"})
UNKNOWN_R3 = ("rounds", "deployment_id=a, request_id=r3, round_idx=0", "unknown_request")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def rid(dep: str, request_id: str) -> int:
    return link_uid(dep, request_id)


def sid(dep: str, step_id: int) -> int:
    return link_uid(dep, step_id)


def with_uids(rows: list[dict]) -> list[dict]:
    """The rows with the uids of their ids, by the documented recipe."""
    out = []
    for row in rows:
        row = dict(row)
        if "request_id" in row:
            row["request_uid"] = rid(row["deployment_id"], row["request_id"])
        if row.get("step_id") is not None:
            row["step_uid"] = sid(row["deployment_id"], row["step_id"])
        out.append(row)
    return out


def tables(dirty: bool) -> dict:
    """Two requests of deployment a, three steps; with ``dirty``, a round of a request that
    has no requests row (unknown_request: the rounds take the exact path)."""
    rounds = [round_row("a", "r1", 0, 4, 2, step_id=1), round_row("a", "r1", 1, 4, 0, step_id=2),
              round_row("a", "r2", 0, 4, 3, step_id=3)]
    if dirty:
        rounds.append(round_row("a", "r3", 0, 4, 1, step_id=3))
    return {"deployments": [deployment("a")],
            "requests": [request("a", "r1", output_tokens=5), request("a", "r2", output_tokens=5)],
            "steps": [step("a", 1), step("a", 2), step("a", 3)],
            "rounds": rounds}


def with_uid_tables(tabs: dict) -> dict:
    """Every table but deployments with the uids of its ids."""
    return {t: with_uids(rows) if t != "deployments" else rows for t, rows in tabs.items()}


def write(root: Path, tabs: dict, uids: bool = True) -> Path:
    return write_traces(root, **(with_uid_tables(tabs) if uids else tabs))


def r2_named_by_r1s_uid(dirty: bool) -> dict:
    """The tables with uids, r2's round carrying r1's request_uid: by its key it is r2's."""
    bad = with_uid_tables(tables(dirty))
    bad["rounds"][2]["request_uid"] = rid("a", "r1")
    return bad


def opened(traces: Path, **options) -> tuple[dict, list[tuple], api.LoadSummary]:
    ws = api.open_traces(traces, **options)
    try:
        rejected = ws.con.execute("select table_name, row_key, reason from rejected_rows order by all").fetchall()
        doc = json.loads(api.to_json(api.report_document(ws)))
        return doc, rejected, ws.summary
    finally:
        ws.close()


def uid_notes(doc: dict) -> list[str]:
    return [n for n in doc["notes"] if "_uid" in str(n)]


def without_uid_notes(doc: dict) -> dict:
    return {**doc, "notes": [n for n in doc["notes"] if "_uid" not in str(n)]}


@pytest.mark.parametrize("dirty", [False, True], ids=["in place", "exact path"])
def test_valid_uids_are_the_link_keys_and_change_nothing(tmp_path, dirty):
    traces = write(tmp_path / "uids", tables(dirty))
    plain = write(tmp_path / "plain", tables(dirty), uids=False)
    doc, rejected, summary = opened(traces)
    plain_doc, plain_rejected, plain_summary = opened(plain)
    assert summary.written_links == BOTH and plain_summary.written_links == frozenset()
    assert rejected == plain_rejected == ([UNKNOWN_R3] if dirty else [])
    assert uid_notes(doc) == []
    assert doc == plain_doc
    (a,) = [d for d in doc["deployments"] if d["deployment_id"] == "a"]
    # clean rounds: accepted 2, 0, 3 of three speculative rounds: 1 + 5/3
    assert a["num_rounds"] == 3 and a["mean_accept_length"] == pytest.approx(1 + 5 / 3)


def test_the_link_keys_are_the_written_uids(tmp_path):
    traces = write(tmp_path / "uids", tables(False))
    ws = api.open_traces(traces)
    try:
        assert sorted(ws.con.execute("select request_id, request_uid from requests").fetchall()) == [
            ("r1", rid("a", "r1")), ("r2", rid("a", "r2"))]
        assert sorted(ws.con.execute("select step_id, step_uid from rounds").fetchall()) == [
            (1, sid("a", 1)), (2, sid("a", 2)), (3, sid("a", 3))]
    finally:
        ws.close()


def test_the_recipe_in_duckdb_sql_gives_the_same_uids():
    # docs/trace-format.md's SQL for DuckDB, against the Python recipe; md5("a\x1fr1") begins
    # 1fb900399c1d48d2 (a positive BIGINT), md5("a\x1fr2") 92fd874ba59076df (negative: 0x92fd... − 2^64)
    sql = ("select cast(h - case when h >= 9223372036854775808 then 18446744073709551616 else 0 end as bigint) "
           "from (select cast(cast('0x' || substr(md5(? || chr(31) || ?), 1, 16) as ubigint) as hugeint) as h)")
    con = duckdb.connect()
    for dep, key in [("a", "r1"), ("a", "r2"), ("fast-eagle", "fast-eagle-00000001"), ("dép", "ü"), ("a", "17")]:
        assert con.execute(sql, [dep, key]).fetchone()[0] == link_uid(dep, key)
    assert link_uid("a", 17) == link_uid("a", "17")
    assert link_uid("a", "r1") == 0x1fb900399c1d48d2 == 2285858533299538130
    assert link_uid("a", "r2") == 0x92fd874ba59076df - 2**64 == -7854973416094271777


def fallback(tmp_path, tabs_with_uids: dict, tabs_plain: dict, uid: str, problem: str, **options):
    """The written uids are refused: the note says why, and everything else is the plain run's."""
    traces = write_traces(tmp_path / "bad", **tabs_with_uids)
    plain = write_traces(tmp_path / "plain", **tabs_plain)
    doc, rejected, summary = opened(traces, **options)
    plain_doc, plain_rejected, _ = opened(plain, **options)
    assert uid not in summary.written_links
    (note,) = uid_notes(doc)
    assert problem in note and "specan hashed deployment_id" in note
    assert rejected == plain_rejected
    assert without_uid_notes(doc) == plain_doc
    return traces, note


@pytest.mark.parametrize("dirty", [False, True], ids=["in place", "exact path"])
def test_a_wrong_uid_in_rounds_falls_back_to_the_string_keys(tmp_path, dirty):
    _, note = fallback(tmp_path, r2_named_by_r1s_uid(dirty), tables(dirty), "request_uid", "request_uid written in requests and rounds")
    # named by the ids in the files, not by the uid as specan reads it
    assert "(rounds of request_id r1 (deployment_id a) share their request_uid with rounds of another request_id)" in note


def test_a_uid_of_no_request_falls_back(tmp_path):
    tabs = tables(False)
    bad = with_uid_tables(tabs)
    bad["rounds"][2]["request_uid"] = 12345          # r2's round, a uid no request has
    _, note = fallback(tmp_path, bad, tabs, "request_uid", "rounds of request_id r2 (deployment_id a) carry a "
                       "request_uid that requests gives another request_id or none")
    assert "12345" not in note


def test_a_uid_shared_by_two_requests_falls_back(tmp_path):
    tabs = tables(True)
    bad = with_uid_tables(tabs)
    for row in bad["requests"] + bad["rounds"]:
        if row["request_id"] == "r2":
            row["request_uid"] = rid("a", "r1")
    _, note = fallback(tmp_path, bad, tabs, "request_uid", "(deployment_id a, request_id r1 and deployment_id a, "
                       "request_id r2 have one request_uid in requests)")
    assert str(rid("a", "r1")) not in note


def test_a_step_id_without_its_step_uid_falls_back(tmp_path):
    tabs = tables(False)
    bad = with_uid_tables(tabs)
    bad["rounds"][1]["step_uid"] = None
    _, note = fallback(tmp_path, bad, tabs, "step_uid", "1 row has a step_id but no step_uid")


def test_a_step_with_two_uids_falls_back(tmp_path):
    tabs = tables(False)
    tabs["steps"].append(step("a", 3, duration_ms=12.0))    # step 3 twice: duplicate_key, both rejected
    bad = with_uid_tables(tabs)
    bad["steps"][3]["step_uid"] = 99
    _, note = fallback(tmp_path, bad, tabs, "step_uid", "(deployment_id a, step_id 3 has two step_uids in steps, "
                       "or rows without one)")


def test_uids_in_some_files_only_are_not_used(tmp_path):
    tabs = tables(True)
    root = tmp_path / "mixed"
    write_traces(root, deployments=tabs["deployments"], requests=with_uids(tabs["requests"]),
                 steps=with_uids(tabs["steps"]))
    rounds = with_uids(tabs["rounds"])
    write_table(root, "rounds", {"shard=0": rounds[:2]})
    write_table(root, "rounds", {"shard=1": tabs["rounds"][2:]})     # without uids
    plain = tmp_path / "plain"
    write_traces(plain, **{t: rows for t, rows in tabs.items() if t != "rounds"})
    write_table(plain, "rounds", {"shard=0": tabs["rounds"][:2]})
    write_table(plain, "rounds", {"shard=1": tabs["rounds"][2:]})
    doc, rejected, summary = opened(root)
    plain_doc, plain_rejected, _ = opened(plain)
    assert summary.written_links == frozenset()
    assert [n.split(" (not in")[0] for n in uid_notes(doc)] == [
        "request_uid is in 2 of the 3 files of requests and rounds",
        "step_uid is in 2 of the 3 files of steps and rounds"]
    assert rejected == plain_rejected == [("rounds", "deployment_id=a, request_id=r3, round_idx=0, shard=1",
                                           "unknown_request")]
    assert without_uid_notes(doc) == plain_doc


def ids_restarting_every_day(root: Path, uids: bool) -> Path:
    """Two dates whose r1 and step 1 are different requests and steps: the recipe's uid is
    the same on both dates, and the loader mixes in the date the link spans."""
    day = {"deployments": [deployment("a")],
           "requests": [request("a", "r1", output_tokens=4)],
           "steps": [step("a", 1), step("a", 2)],
           "rounds": [round_row("a", "r1", 0, 4, 1, step_id=1), round_row("a", "r1", 1, 4, 2, step_id=2)]}
    other = {**day, "rounds": [round_row("a", "r1", 0, 4, 4, step_id=1)]}
    for table in day:
        parts = {f"date=2026-11-2{i}": (with_uids(d[table]) if uids and table != "deployments" else d[table])
                 for i, d in ((7, day), (8, other))}
        write_table(root, table, parts)
    return root


def test_partitioned_ids_that_restart_every_day_need_no_partition_in_the_uid(tmp_path):
    doc, rejected, summary = opened(ids_restarting_every_day(tmp_path / "uids", True))
    plain_doc, plain_rejected, _ = opened(ids_restarting_every_day(tmp_path / "plain", False))
    assert summary.written_links == BOTH
    assert rejected == plain_rejected == []
    assert doc == plain_doc
    (a,) = doc["deployments"]
    # two requests (r1 of each date), accepted 1 + 2 + 4 over three speculative rounds
    assert a["num_requests"] == 2 and a["mean_accept_length"] == pytest.approx(1 + 7 / 3)


def test_validate_and_load_fall_back_with_the_note(tmp_path):
    traces = write_traces(tmp_path / "bad", **r2_named_by_r1s_uid(True))
    result = run("validate", traces)
    assert result.exit_code == 0, result.output
    assert "note: the request_uid written in requests and rounds is not a valid link key" in result.output
    assert "rejected rows: 1" in result.output
    db = tmp_path / "bad.duckdb"
    result = run("load", traces, "--db", db)
    assert result.exit_code == 0, result.output
    assert "not a valid link key" in result.output
    con = duckdb.connect(str(db), read_only=True)
    try:
        # hashed: r2's rounds join r2
        assert con.execute("select r.request_id, q.request_id from rounds r join requests q using (request_uid) "
                           "order by all").fetchall() == [("r1", "r1"), ("r1", "r1"), ("r2", "r2")]
    finally:
        con.close()


def test_the_report_notes_the_fallback(tmp_path):
    traces = write_traces(tmp_path / "bad", **r2_named_by_r1s_uid(False))
    result = run("report", traces)
    assert result.exit_code == 0, result.output
    assert "the request_uid written in requests and rounds is not a valid link key" in result.output


# ----------------------------------------------------------------------------- writers


def strip_uids(src: Path, dst: Path) -> Path:
    """A copy of the trace directory without the uid columns."""
    for path in src.rglob("*.parquet"):
        out = dst / path.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        table = pq.read_table(path, partitioning=None)
        pq.write_table(table.drop([c for c in ("request_uid", "step_uid") if c in table.column_names]), out)
    for path in src.rglob("*"):
        if path.is_file() and path.suffix != ".parquet":
            (dst / path.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, dst / path.relative_to(src))
    return dst


def uids_of(root: Path, table: str, uid: str, key: str) -> list[tuple]:
    rows = []
    for path in sorted((root / table).rglob("*.parquet")) if (root / table).is_dir() else [root / f"{table}.parquet"]:
        data = pq.read_table(path, columns=["deployment_id", key, uid], partitioning=None).to_pylist()
        rows += [(r["deployment_id"], r[key], r[uid]) for r in data]
    return rows


@pytest.mark.parametrize("args", [["--requests", "6", "--days", "2"], ["--rounds", "2000", "--no-tokens"]],
                         ids=["simulate", "simulate --no-tokens"])
def test_simulate_writes_uids_the_loader_uses(tmp_path, args):
    out = tmp_path / "sim"
    assert run("simulate", out, *args).exit_code == 0
    for table, uid, key in (("requests", "request_uid", "request_id"), ("rounds", "request_uid", "request_id"),
                            ("steps", "step_uid", "step_id"), ("rounds", "step_uid", "step_id")):
        found = uids_of(out, table, uid, key)
        assert found and all(u == link_uid(d, k) for d, k, u in found)
    doc, rejected, summary = opened(out)
    plain_doc, plain_rejected, _ = opened(strip_uids(out, tmp_path / "plain"))
    assert summary.written_links == BOTH and uid_notes(doc) == []
    assert rejected == plain_rejected
    assert doc == plain_doc


def test_an_import_writes_uids_the_loader_uses(tmp_path):
    out = tmp_path / "traces"
    result = run("import", "vllm-responses", FIXTURES / "vllm_responses.jsonl", "--deployment", "eagle-a",
                 "--method", "eagle3", "--out", out)
    assert result.exit_code == 0, result.output
    for table in ("requests", "rounds"):
        found = uids_of(out, table, "request_uid", "request_id")
        assert found and all(u == link_uid(d, k) for d, k, u in found)
    doc, rejected, summary = opened(out)
    plain_doc, plain_rejected, _ = opened(strip_uids(out, tmp_path / "plain"))
    # the import writes no steps: only the request link is written
    assert summary.written_links == {"request_uid"} and uid_notes(doc) == []
    assert rejected == plain_rejected
    assert doc == plain_doc
