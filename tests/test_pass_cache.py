"""The cache of the passes over the rounds (analyzer/analysis/pass_cache.py): per trace
unit (a date partition), reused while the unit's files are unchanged, merged into the
very tables one pass over every file builds. Every test compares with a run without it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq
import duckdb
import pytest
from click.testing import CliRunner

from analyzer import api
from analyzer.analysis import cache_store
from analyzer.analysis.pass_cache import CachedPasses, declared_merges, plan_units, round_passes
from analyzer.analysis.views import dependency_order, discover_views
from analyzer.cli import main
from analyzer.ingest.load import discover, table_plan
from analyzer.ingest.schema import load_schemas
from test_link_keys import (BOTH, ids_restarting_every_day, opened, rid, tables as link_tables, uid_notes,
                            with_uid_tables, without_uid_notes)
from tracebuilder import write_traces

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces"
PASSES = ("request_rounds", "step_rounds", "cost_steps", "round_group_cells", "request_gaps_unpacked",
          "itl_histogram")


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """Three dates of simulated traces (60 requests a day), partitioned like the sample."""
    out = tmp_path_factory.mktemp("sim") / "traces"
    api.simulate(out, requests=60, days=3)
    return out


def copy_of(traces: Path, into: Path) -> Path:
    shutil.copytree(traces, into)
    return into


def document(traces: Path, cache: api.Cache | None) -> tuple[dict, object]:
    with api.open_traces(traces, cache=cache) as ws:
        return json.loads(api.to_json(api.report_document(ws))), ws.cache


def tables(traces: Path, cache: api.Cache | None) -> tuple[dict, object]:
    """Each pass's rows (sorted, as text) and column types, the rejected rows and rows read."""
    with api.open_traces(traces, cache=cache) as ws:
        out = {}
        for name in PASSES:
            types = ws.con.execute(f"describe select * from {name}").fetchall()
            rows = sorted(map(repr, ws.con.execute(f"select * from {name}").fetchall()))
            out[name] = ([(c[0], c[1]) for c in types], rows)
        out["rejected_rows"] = sorted(ws.con.execute("select * from rejected_rows").fetchall())
        out["rows_read"] = ws.summary.rows_read
        return out, ws.cache


def set_first(path: Path, column: str, value) -> None:
    """Rewrite a Parquet file with the first row's ``column`` set to ``value`` (a rule broken)."""
    table = pq.read_table(path)
    values = table.column(column).to_pylist()
    values[0] = value
    index = table.schema.get_field_index(column)
    pq.write_table(table.set_column(index, column, pa.array(values, table.schema.field(column).type)), path)


def touch_later(path: Path) -> None:
    """A new modification time, the content unchanged (a date rewritten by a pipeline)."""
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))


def test_every_pass_over_the_rounds_says_how_its_units_merge():
    views = discover_views()
    merges = declared_merges()
    assert round_passes(views, dependency_order(views)) == [
        "request_rounds", "step_rounds", "round_group_cells", "request_gaps_unpacked"]
    passes = round_passes(views, dependency_order(views), set(merges))
    assert set(passes) == {"request_rounds", "step_rounds", "cost_steps", "round_group_cells",
                           "request_gaps_unpacked", "itl_histogram"}
    order = dependency_order(views)
    assert passes == [n for n in order if n in passes]
    assert set(passes) == set(merges)
    assert merges["round_group_cells"].how == "sum" and merges["request_rounds"].unique


def test_the_sample_report_is_the_same_document_cold_warm_and_without(tmp_path):
    cache = api.Cache(tmp_path / "cache")
    without, none = document(SAMPLE, None)
    cold, first = document(SAMPLE, cache)
    warm, second = document(SAMPLE, cache)
    assert none is None
    assert (first.units, first.read, first.computed, first.written, first.checks) == (3, 0, 3, 3, "merged")
    assert (second.units, second.read, second.computed, second.written, second.checks) == (3, 3, 0, 0, "per unit")
    assert cold == without
    assert warm == without


def test_merged_tables_equal_one_pass_row_for_row_and_type_for_type(small, tmp_path):
    cache = api.Cache(tmp_path / "cache")
    exact, _ = tables(small, None)
    tables(small, cache)
    merged, stats = tables(small, cache)
    assert stats.read == 3
    assert merged == exact
    # the gap counts really were re-summed: one gap length of several dates became one row;
    # round_group_cells keeps each request partition's cells apart (request_partition), so
    # the dates' cells are all its rows
    per_unit = {"itl_histogram": 0, "round_group_cells": 0}
    for entry in (tmp_path / "cache" / "passes-v1").glob("*.duckdb"):
        with duckdb.connect(str(entry), read_only=True) as con:
            for name in per_unit:
                per_unit[name] += con.execute(f"select count(*) from {name}").fetchone()[0]
    assert per_unit["itl_histogram"] > len(merged["itl_histogram"][1]) > 0
    assert per_unit["round_group_cells"] == len(merged["round_group_cells"][1]) > 0


def test_a_date_rewritten_is_read_again_and_the_others_are_not(small, tmp_path):
    traces = copy_of(small, tmp_path / "traces")
    cache = api.Cache(tmp_path / "cache")
    tables(traces, cache)
    touch_later(next((traces / "rounds" / "date=2026-11-27").glob("*.parquet")))
    again, stats = tables(traces, cache)
    assert (stats.read, stats.computed, stats.checks) == (2, 1, "per unit")
    assert again == tables(traces, None)[0]


def test_a_changed_date_gives_the_numbers_of_its_new_files(small, tmp_path):
    traces = copy_of(small, tmp_path / "traces")
    cache = api.Cache(tmp_path / "cache")
    before, _ = document(traces, cache)
    # the newest date loses the rounds of half its requests
    path = next((traces / "rounds" / "date=2026-11-28").glob("*.parquet"))
    table = pq.read_table(path)
    ids = sorted(set(table.column("request_id").to_pylist()))
    kept = table.filter(pa.compute.is_in(table.column("request_id"), pa.array(ids[: len(ids) // 2])))
    pq.write_table(kept, path)
    after, stats = document(traces, cache)
    assert (stats.read, stats.computed) == (2, 1)
    assert after == document(traces, None)[0]
    assert after != before


def cached_before_the_newest_date(traces: Path, tmp_path: Path) -> api.Cache:
    """A cache filled by a run without the newest date (2026-11-28), which then lands."""
    newest = {t: traces / t / "date=2026-11-28" for t in ("deployments", "requests", "steps", "rounds")}
    aside = tmp_path / "aside"
    for table, folder in newest.items():
        shutil.move(folder, aside / table)
    cache = api.Cache(tmp_path / "cache")
    _, first = tables(traces, cache)
    assert (first.units, first.computed) == (2, 2)
    for table, folder in newest.items():
        shutil.move(aside / table, folder)
    return cache


def test_a_new_date_is_the_only_one_read(small, tmp_path):
    traces = copy_of(small, tmp_path / "traces")
    cache = cached_before_the_newest_date(traces, tmp_path)
    landed, stats = document(traces, cache)
    assert (stats.units, stats.read, stats.computed) == (3, 2, 1)
    assert landed == document(traces, None)[0]


def test_traces_without_partitions_are_one_unit(small, tmp_path):
    flat = tmp_path / "flat"
    flat.mkdir()
    for table in ("deployments", "requests", "steps", "rounds"):
        # one date's files (ids restart every day: two dates in one file would be duplicate keys)
        (part,) = (small / table / "date=2026-11-26").glob("*.parquet")
        pq.write_table(pq.read_table(part), flat / f"{table}.parquet")
    cache = api.Cache(tmp_path / "cache")
    exact, _ = tables(flat, None)
    tables(flat, cache)
    again, stats = tables(flat, cache)
    assert (stats.units, stats.read) == (1, 1)
    assert again == exact


def test_a_round_breaking_a_row_rule_reads_the_files_as_without(small, tmp_path):
    traces = copy_of(small, tmp_path / "traces")
    set_first(next((traces / "rounds" / "date=2026-11-27").glob("*.parquet")), "num_draft_tokens", -1)
    cache = api.Cache(tmp_path / "cache")
    with_cache, stats = tables(traces, cache)
    assert "row rule" in stats.unused_because
    assert stats.written == 0
    assert with_cache == tables(traces, None)[0]
    assert ("rounds", ) == tuple({r[0] for r in with_cache["rejected_rows"]})


def test_a_rule_across_units_is_counted_from_the_merged_tables(small, tmp_path):
    """A round of one date naming a request that only another date has: unknown there."""
    traces = copy_of(small, tmp_path / "traces")
    cache = api.Cache(tmp_path / "cache")
    tables(traces, cache)
    path = next((traces / "requests" / "date=2026-11-26").glob("*.parquet"))
    requests = pq.read_table(path)
    pq.write_table(requests.slice(1), path)      # its first request's rounds now have no request
    exact, _ = tables(traces, None)
    cached, stats = tables(traces, cache)
    assert "reads other rows" in stats.unused_because
    assert cached == exact
    assert {r[2] for r in exact["rejected_rows"]} == {"unknown_request"}


def test_a_damaged_entry_is_computed_again(small, tmp_path):
    cache = api.Cache(tmp_path / "cache")
    tables(small, cache)
    folder = tmp_path / "cache" / "passes-v1"
    victim = sorted(folder.glob("*.duckdb"))[0]
    victim.write_bytes(victim.read_bytes()[:100])            # a torn write: the manifest's size disagrees
    leftover = folder / ".tmp-999999999-dead.duckdb"          # a run that died while writing
    leftover.write_bytes(b"half")
    again, stats = tables(small, cache)
    assert (stats.read, stats.computed) == (2, 1)
    assert again == tables(small, None)[0]
    assert not leftover.exists()


def test_the_folder_stays_under_its_bound_least_recently_used_first(small, tmp_path):
    folder = tmp_path / "cache"
    tables(small, api.Cache(folder))
    entries = sorted((folder / "passes-v1").glob("*.duckdb"))
    one = max(p.stat().st_size for p in entries) + 4096
    # room for two entries: the run's least recently used one goes
    bounded, stats = tables(small, api.Cache(folder, max_bytes=2 * one))
    assert stats.evicted == 1
    size = sum(p.stat().st_size for p in (folder / "passes-v1").iterdir() if not p.name.startswith("."))
    assert size <= 2 * one
    again, stats = tables(small, api.Cache(folder, max_bytes=2 * one))
    assert stats.computed == 1 and again == bounded
    # no room at all: nothing is kept, nothing changes
    none_kept, stats = tables(small, api.Cache(folder, max_bytes=0))
    assert none_kept == bounded and not list((folder / "passes-v1").glob("*.duckdb"))


def test_a_folder_others_may_write_is_not_used(small, tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    result, stats = tables(small, api.Cache(folder))
    assert "may be written by other users" in stats.unused_because
    assert result == tables(small, None)[0]
    assert not (folder / "passes-v1").exists()


def test_the_folder_is_created_private(small, tmp_path):
    folder = tmp_path / "new" / "specan"
    tables(small, api.Cache(folder))
    assert (folder.stat().st_mode & 0o777) == 0o700
    assert ((folder / "passes-v1").stat().st_mode & 0o777) == 0o700
    entries = [p for p in (folder / "passes-v1").iterdir() if p.suffix in (".json", ".duckdb")]
    assert len(entries) == 6 and all((p.stat().st_mode & 0o777) == 0o600 for p in entries)


def test_unit_keys_follow_the_files_and_the_shape(small, tmp_path):
    traces = copy_of(small, tmp_path / "traces")

    def keys(repeat_n=3, deployments="d"):
        found = discover(traces)
        plans = {t: table_plan(found[t], load_schemas()[t], found) for t in ("deployments", "requests", "steps",
                                                                              "rounds")}
        return [(u.label, u.key) for u in plan_units(found, plans, repeat_n, deployments)]

    first = keys()
    assert [label for label, _ in first] == ["date=2026-11-26", "date=2026-11-27", "date=2026-11-28"]
    assert keys() == first
    touch_later(next((traces / "steps" / "date=2026-11-26").glob("*.parquet")))
    changed = keys()
    assert changed[0][1] != first[0][1] and changed[1:] == first[1:]
    assert all(a[1] != b[1] for a, b in zip(keys(repeat_n=4), changed))
    # the deployments as loaded (a new date's file may change a deployment every unit reads)
    assert all(a[1] != b[1] for a, b in zip(keys(deployments="other"), changed))


def test_concurrent_runs_share_the_folder(small, tmp_path):
    folder = tmp_path / "cache"
    command = [sys.executable, "-m", "analyzer", "report", str(small), "--format", "json", "--cache-dir", str(folder)]
    runs = [subprocess.Popen(command + ["-o", str(tmp_path / f"r{i}.json")], stderr=subprocess.PIPE, text=True)
            for i in range(3)]
    for run in runs:
        assert run.wait(timeout=300) == 0, run.stderr.read()
    texts = {(tmp_path / f"r{i}.json").read_text() for i in range(3)}
    assert len(texts) == 1
    assert len(list((folder / "passes-v1").glob("*.json"))) == 3
    assert not list((folder / "passes-v1").glob(".tmp-*"))


def test_cli_cache_options(small, tmp_path):
    runner = CliRunner()
    folder = tmp_path / "cache"
    out = tmp_path / "r.json"
    first = runner.invoke(main, ["report", str(small), "--format", "json", "-o", str(out), "--cache-dir", str(folder),
                                 "--progress"])
    assert first.exit_code == 0, first.output
    assert "0 of 3 trace units read, 3 computed, 3 written" in first.stderr
    second = runner.invoke(main, ["report", str(small), "--format", "json", "-o", str(out), "--cache-dir",
                                  str(folder), "--progress"])
    assert "3 of 3 trace units read, 0 computed" in second.stderr
    none = runner.invoke(main, ["report", str(small), "--format", "json", "-o", str(out), "--no-cache",
                                "--cache-dir", str(tmp_path / "unused")])
    assert none.exit_code == 0 and not (tmp_path / "unused").exists()
    bad = runner.invoke(main, ["report", str(small), "--cache-max", "lots"])
    assert bad.exit_code == 2 and "--cache-max" in bad.output and "is not a size" in bad.output


def test_the_default_folder_is_under_xdg_cache_home(small, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    result = CliRunner().invoke(main, ["report", str(small), "--format", "json", "-o", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    assert len(list((tmp_path / "xdg" / "specan" / "passes-v1").glob("*.json"))) == 3


def _uid_cases():
    def wrong_in_rounds():
        bad = with_uid_tables(link_tables(False))
        bad["rounds"][2]["request_uid"] = rid("a", "r1")
        return bad, link_tables(False), "request_uid", "share their request_uid with rounds of another request_id"

    def of_no_request():
        bad = with_uid_tables(link_tables(False))
        bad["rounds"][2]["request_uid"] = 12345
        return bad, link_tables(False), "request_uid", "carry a request_uid that requests gives another request_id or none"

    def shared_by_two():
        tabs = link_tables(True)
        bad = with_uid_tables(tabs)
        for row in bad["requests"] + bad["rounds"]:
            if row["request_id"] == "r2":
                row["request_uid"] = rid("a", "r1")
        return bad, tabs, "request_uid", "have one request_uid in requests"

    def step_without_uid():
        bad = with_uid_tables(link_tables(False))
        bad["rounds"][1]["step_uid"] = None
        return bad, link_tables(False), "step_uid", "1 row has a step_id but no step_uid"

    return {"wrong uid in rounds": wrong_in_rounds, "uid of no request": of_no_request,
            "uid shared by two requests": shared_by_two, "step id without its uid": step_without_uid}


@pytest.mark.parametrize("case", list(_uid_cases()))
def test_written_link_keys_are_refused_alike_from_the_cache(tmp_path, case):
    """The link keys' checks kept per unit refuse what the checks on the files refuse, cold and warm."""
    bad, plain, uid, problem = _uid_cases()[case]()
    traces = write_traces(tmp_path / "bad", **bad)
    plain_doc, plain_rejected, _ = opened(write_traces(tmp_path / "plain", **plain))
    cache = api.Cache(tmp_path / "cache")
    for run in ("cold", "warm"):
        doc, rejected, summary = opened(traces, cache=cache)
        assert uid not in summary.written_links, run
        (note,) = uid_notes(doc)
        assert problem in note, run
        assert rejected == plain_rejected and without_uid_notes(doc) == plain_doc, run


def test_partitioned_written_link_keys_from_the_cache(tmp_path):
    """uids that repeat on every date (the loader mixes the date in) link within their date."""
    root = ids_restarting_every_day(tmp_path / "uids", True)
    exact = opened(root)
    cache = api.Cache(tmp_path / "cache")
    cold, warm = opened(root, cache=cache), opened(root, cache=cache)
    assert cold[2].written_links == warm[2].written_links == BOTH
    assert cold[:2] == warm[:2] == exact[:2]


def test_no_cache_home_means_no_cache(monkeypatch):
    from analyzer.analysis import cache_store

    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(cache_store.Path, "home", staticmethod(no_home))
    assert cache_store.default_cache_dir() is None
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
    assert cache_store.default_cache_dir() == Path("/somewhere/specan")


def test_rounds_partitioned_by_date_and_deployment_are_units_by_date(small, tmp_path):
    # the layout of a fleet: rounds/date=…/dep=…/, the requests and steps by date only. A unit
    # is the partition columns every table shares (the date), so a new date is the only one read
    traces = tmp_path / "traces"
    for table in ("deployments", "requests", "steps"):
        shutil.copytree(small / table, traces / table)
    for folder in sorted((small / "rounds").glob("date=*")):
        (part,) = folder.glob("*.parquet")
        rounds = pq.read_table(part)
        for dep in sorted(set(rounds.column("deployment_id").to_pylist())):
            out = traces / "rounds" / folder.name / f"dep={dep}"
            out.mkdir(parents=True)
            pq.write_table(rounds.filter(pa.compute.equal(rounds.column("deployment_id"), dep)), out / "part-0.parquet")
    assert len(list((traces / "rounds").glob("date=*/dep=*/*.parquet"))) > 3
    found = discover(traces)
    plans = {t: table_plan(found[t], s, found) for t, s in load_schemas().items()}
    assert [u.label for u in plan_units(found, plans, 3)] == [f"date=2026-11-{d}" for d in (26, 27, 28)]

    cache = cached_before_the_newest_date(traces, tmp_path)
    landed, stats = tables(traces, cache)
    assert (stats.units, stats.read, stats.computed, stats.checks) == (3, 2, 1, "per unit")
    assert landed == tables(traces, None)[0]
    assert document(traces, cache)[0] == document(traces, None)[0]


# ---------------------------------------------------------------------------- a first run: one pass, split


def entry_tables(cache: Path) -> dict[str, dict[str, tuple]]:
    """Each kept unit's tables (column types and sorted rows), by unit label."""
    out = {}
    for manifest in (cache / "passes-v1").glob("*.json"):
        meta = json.loads(manifest.read_text())
        with duckdb.connect(str(manifest.with_suffix(".duckdb")), read_only=True) as con:
            out[meta["unit"]] = {name: ([tuple(c[:2]) for c in con.execute(f"describe {name}").fetchall()],
                                        sorted(map(repr, con.execute(f"select * from {name}").fetchall())))
                                 for name in PASSES}
    return out


def test_a_first_run_splits_one_pass_into_the_units_each_would_compute(small, tmp_path, monkeypatch):
    # split: one pass over the three dates, each date's rows written off the report's path
    split = api.Cache(tmp_path / "split")
    cold, stats = document(small, split)
    assert (stats.units, stats.read, stats.computed, stats.written, stats.split) == (3, 0, 3, 3, True)
    assert cold == document(small, None)[0]
    # the same units computed one by one (the path a re-run takes for its new dates)
    monkeypatch.setattr(CachedPasses, "_splits", lambda *args: None)
    _, one_by_one = document(small, api.Cache(tmp_path / "per-unit"))
    assert (one_by_one.computed, one_by_one.written, one_by_one.split) == (3, 3, False)
    kept = entry_tables(tmp_path / "split")
    assert sorted(kept) == [f"date=2026-11-{d}" for d in (26, 27, 28)]
    assert kept == entry_tables(tmp_path / "per-unit")          # row for row, type for type
    monkeypatch.undo()
    # and read back, they are the one pass
    merged, again = tables(small, split)
    assert (again.read, again.computed) == (3, 0)
    assert merged == tables(small, None)[0]


def test_a_row_of_the_one_pass_in_no_unit_keeps_nothing(small, tmp_path, monkeypatch):
    # a request partition the split cannot place (here: taken out of its map): the cells of
    # that date would be missing from its unit, so no unit is kept and the report is unchanged
    original = CachedPasses._write_splits_on

    def losing_a_partition(self, con, *args):
        con.execute("delete from _specan_unit_partitions where partition = 'date=2026-11-27'")
        return original(self, con, *args)

    monkeypatch.setattr(CachedPasses, "_write_splits_on", losing_a_partition)
    cache = api.Cache(tmp_path / "cache")
    doc, stats = document(small, cache)
    assert doc == document(small, None)[0]
    assert stats.written == 0 and not list((tmp_path / "cache" / "passes-v1").glob("*.duckdb"))
    (problem,) = stats.problems
    assert problem.startswith("kept no trace unit: rows of one pass over every file are in no unit or in two: "
                              "round_group_cells (")


def test_a_writer_that_fails_is_said_and_the_report_is_unchanged(small, tmp_path, monkeypatch):
    monkeypatch.setattr(cache_store.Store, "new_database", lambda self: tmp_path / "no such folder" / "x.duckdb")
    result = CliRunner().invoke(main, ["report", str(small), "--format", "json", "--cache-dir",
                                       str(tmp_path / "cache"), "-o", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    assert "specan: cache: could not keep date=2026-11-26 in the cache" in result.output
    assert "Traceback" not in result.output
    assert json.loads((tmp_path / "r.json").read_text()) == document(small, None)[0]
    assert not list((tmp_path / "cache" / "passes-v1").glob("*.duckdb"))


def test_rejected_requests_compute_each_unit_on_its_own(small, tmp_path):
    # a clean round of a rejected request has no request partition: the units are computed
    # one by one, as before the split, and the report is the one without the cache
    traces = copy_of(small, tmp_path / "traces")
    set_first(next((traces / "requests" / "date=2026-11-27").glob("*.parquet")), "prompt_tokens", -5)
    cache = api.Cache(tmp_path / "cache")
    cold, stats = tables(traces, cache)
    assert stats.unused_because is None and (stats.computed, stats.split) == (3, False)
    exact, _ = tables(traces, None)
    assert cold == exact and exact["rejected_rows"]
    assert tables(traces, cache)[0] == exact
