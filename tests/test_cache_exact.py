"""The cache of the passes is exact or absent (issue 37): what its key sees, damaged
entries, parents in partitions without rounds, percent-encoded partition values, and
a property test: after any mix of edits between two runs, the cached document is the
``--no-cache`` document byte for byte."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer import api
from analyzer.analysis import cache_store
from analyzer.cli import main
from analyzer.ingest.load import partition_values
from test_link_keys import tables as link_tables, uid_notes, with_uid_tables
from tracebuilder import write_table

DATES = ("2026-11-27", "2026-11-28")


@pytest.fixture(scope="module")
def two_days(tmp_path_factory) -> Path:
    """`specan simulate --seed 1 --days 2 --requests 40`: 55,244 rounds over two date partitions."""
    out = tmp_path_factory.mktemp("sim") / "traces"
    api.simulate(out, requests=40, days=2, seed=1)
    return out


def fresh(two_days: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(two_days, tmp_path / "traces"))


def report(traces: Path, cache: Path | None) -> str:
    """``specan report TRACES --format json`` as written to ``-o``, with the cache in ``cache``
    or none; a run that fails gives its exit status and message instead."""
    out = traces.parent / "report.json"
    out.unlink(missing_ok=True)
    args = ["report", str(traces), "--format", "json", "-o", str(out)]
    args += ["--cache-dir", str(cache)] if cache is not None else ["--no-cache"]
    result = CliRunner().invoke(main, args)
    if result.exit_code != 0:
        return f"exit {result.exit_code}: {result.output}"
    return out.read_text(encoding="utf-8")


def cache_stats(traces: Path, cache: Path):
    with api.open_traces(traces, cache=api.Cache(cache)) as ws:
        return ws.cache


def rounds_file(traces: Path, date: str) -> Path:
    return traces / "rounds" / f"date={date}" / "part-0.parquet"


def write_fixed_width(table: pa.Table, path: Path) -> None:
    """Parquet whose size depends on the row count only: no compression, no dictionary, no statistics."""
    pq.write_table(table, path, compression="NONE", use_dictionary=False, write_statistics=False)


def zero_every_other_acceptance(table: pa.Table) -> pa.Table:
    """Every other round accepts nothing (and commits the bonus token only): valid rows, other numbers."""
    every_other = pa.array(np.arange(table.num_rows) % 2 == 0)
    for column, value in (("num_accepted_tokens", 0), ("num_committed_tokens", 1)):
        changed = pc.if_else(every_other, value, table[column]).cast(table.schema.field(column).type)
        table = table.set_column(table.schema.get_field_index(column), column, changed)
    return table


def same_size_rewrite(path: Path) -> None:
    """Rewrite ``path`` with other values, the same size, and its modification time set back."""
    table = pq.read_table(path, partitioning=None)
    write_fixed_width(table, path)
    size, info = path.stat().st_size, path.stat()
    write_fixed_width(zero_every_other_acceptance(table), path)
    assert path.stat().st_size == size            # the edit the old key could not see
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


# ---------------------------------------------------------------------------- 1. the key


def test_a_same_size_rewrite_with_its_mtime_set_back_is_read_again(two_days, tmp_path):
    traces, cache = fresh(two_days, tmp_path), tmp_path / "cache"
    path = rounds_file(traces, DATES[1])
    write_fixed_width(pq.read_table(path, partitioning=None), path)
    before = report(traces, cache)
    same_size_rewrite(path)
    after = report(traces, cache)
    assert after == report(traces, None) != before
    stats = cache_stats(traces, cache)
    assert (stats.read, stats.computed) == (2, 0)     # the rewritten unit was kept by the run before


def test_the_key_holds_inode_status_change_time_and_footer(two_days, tmp_path):
    from analyzer.analysis.pass_cache import _fingerprint

    traces = fresh(two_days, tmp_path)
    path = rounds_file(traces, DATES[0])
    first = _fingerprint(path)
    info = path.stat()
    assert first[:5] == [str(path.resolve()), info.st_size, info.st_mtime_ns, info.st_ino, info.st_ctime_ns]
    data = path.read_bytes()
    footer_length = int.from_bytes(data[-8:-4], "little")
    assert data[-4:] == b"PAR1" and first[5] == hashlib.sha256(data[-8 - footer_length:]).hexdigest()
    # a copy with the same bytes and times (cp -p) is another inode: another key
    copy = tmp_path / "copy.parquet"
    shutil.copy2(path, copy)
    os.replace(copy, path)
    assert _fingerprint(path)[3] != first[3] and _fingerprint(path)[5] == first[5]


# ---------------------------------------------------------------------------- 2. damaged entries


def entry_databases(cache: Path) -> list[Path]:
    return sorted((cache / cache_store.LAYOUT).glob("*.duckdb"))


def flip_bytes(path: Path, start: int) -> None:
    """Damage a file in place, its size unchanged: every 512th byte from ``start`` inverted."""
    data = bytearray(path.read_bytes())
    for i in range(start, len(data), 512):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_damaged_entry_is_deleted_and_its_unit_read_from_the_files(two_days, tmp_path):
    traces, cache = fresh(two_days, tmp_path), tmp_path / "cache"
    exact = report(traces, None)
    assert report(traces, cache) == exact
    victim = entry_databases(cache)[0]
    size = victim.stat().st_size
    flip_bytes(victim, 12_288)                       # past DuckDB's headers: its data blocks
    assert victim.stat().st_size == size
    assert report(traces, cache) == exact            # before: exit 3, "Corrupt database file" on every run
    # the entry was replaced by an intact one: the next run reads both units
    manifest = json.loads(victim.with_suffix(".json").read_text())
    assert cache_store.file_digest(victim) == manifest["database_sha256"]
    stats = cache_stats(traces, cache)
    assert (stats.read, stats.computed) == (2, 0)


def test_damage_found_while_merging_falls_back_and_deletes_the_entry(two_days, tmp_path, monkeypatch):
    # an entry damaged after its digest was checked (here: the check is made to pass): the
    # merge's read fails, the run reads every file, and the entry is deleted
    traces, cache = fresh(two_days, tmp_path), tmp_path / "cache"
    exact = report(traces, None)
    report(traces, cache)
    victim = entry_databases(cache)[0]
    digest = cache_store.file_digest(victim)
    flip_bytes(victim, 12_288)
    monkeypatch.setattr(cache_store, "file_digest", lambda path: digest if path == victim else "other")
    assert report(traces, cache) == exact
    # only the fallback deletes an entry that passed the check: the run read every file
    assert not victim.exists() and not victim.with_suffix(".json").exists()
    monkeypatch.undo()
    assert report(traces, cache) == exact


def test_entries_are_flushed_before_they_count(two_days, tmp_path, monkeypatch):
    flushed = []
    real_fsync = os.fsync
    monkeypatch.setattr(cache_store.os, "fsync", lambda fd: (flushed.append(os.readlink(f"/proc/self/fd/{fd}")),
                                                             real_fsync(fd)))
    traces, cache = fresh(two_days, tmp_path), tmp_path / "cache"
    report(traces, cache)
    folder = str((cache / cache_store.LAYOUT).resolve())
    inside = [p for p in flushed if p.startswith(folder)]
    databases = [p for p in inside if p.endswith(".duckdb")]
    manifests = [p for p in inside if p.endswith(".json")]
    # each of the two entries: its database and its manifest before their renames, the folder after
    assert len(databases) == 2 and len(manifests) == 2 and inside.count(folder) == 2


# ---------------------------------------------------------------------------- 3. parents without rounds


def add_parents_sharing_one_uid(traces: Path, date: str = "2026-11-26") -> None:
    """requests/date=DATE/ (a date without rounds: requests may land before their rounds)
    with two rows that share one written request_uid."""
    source = pq.read_table(traces / "requests" / f"date={DATES[0]}" / "part-0.parquet", partitioning=None)
    rows = source.slice(0, 2).to_pylist()
    rows[1]["request_uid"] = rows[0]["request_uid"]
    folder = traces / "requests" / f"date={date}"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=source.schema), folder / "part-0.parquet")


def test_parents_in_a_partition_without_rounds_are_checked_on_a_warm_run(two_days, tmp_path):
    traces, cache = fresh(two_days, tmp_path), tmp_path / "cache"
    report(traces, cache)
    add_parents_sharing_one_uid(traces)
    warm = report(traces, cache)
    assert warm == report(traces, None)
    (note,) = [n for n in json.loads(warm)["notes"] if "request_uid written" in n]
    first = pq.read_table(traces / "requests" / "date=2026-11-26", partitioning=None)["request_id"][0].as_py()
    second = pq.read_table(traces / "requests" / "date=2026-11-26", partitioning=None)["request_id"][1].as_py()
    assert (f"request_id {first}, date=2026-11-26 and deployment_id" in note
            and f"request_id {second}, date=2026-11-26 have one request_uid in requests" in note)


# ---------------------------------------------------------------------------- 4. partition values


def test_partition_values_are_decoded_as_duckdb_decodes_them(tmp_path):
    written = ["00%3A00", "a%25b", "%C3%A9", "x+y", "%zz", "2026-11-28"]
    for value in written:
        folder = tmp_path / "t" / f"hour={value}"
        folder.mkdir(parents=True)
        duckdb.sql(f"copy (select 1 as x) to '{folder / 'f.parquet'}'")
    read = dict(duckdb.sql(f"select filename, hour from read_parquet('{tmp_path}/t/*/f.parquet', "
                           "hive_partitioning = true, filename = true)").fetchall())
    for value in written:
        path = str(tmp_path / "t" / f"hour={value}" / "f.parquet")
        assert partition_values([f"hour={value}"]) == {"hour": read[path]}
    assert partition_values(["hour=00%3A00", "x"]) == {"hour": "00:00"}


def test_percent_encoded_partitions_use_the_cache(tmp_path):
    # Spark writes hour=00:00 as hour=00%3A00: every table partitioned so, two units
    tabs = with_uid_tables(link_tables(False))
    root = tmp_path / "traces"
    write_table(root, "deployments", tabs["deployments"])
    for table in ("requests", "steps", "rounds"):
        write_table(root, table, {"hour=00%3A00": tabs[table]})
        write_table(root, table, {"hour=01%3A00": tabs[table]})
    cache = tmp_path / "cache"
    exact = report(root, None)
    said: list[str] = []
    with api.open_traces(root, cache=api.Cache(cache), progress=said.append) as ws:
        cold = api.to_json(api.report_document(ws))
        assert ws.cache.unused_because is None
    # a first run: one pass over both hours, split into the two units by their decoded values
    assert (ws.cache.units, ws.cache.computed, ws.cache.written, ws.cache.split) == (2, 2, 2, True)
    with api.open_traces(root, cache=api.Cache(cache)) as ws:
        assert api.to_json(api.report_document(ws)) == cold
        assert ws.cache.unused_because is None and (ws.cache.units, ws.cache.read) == (2, 2)
    assert report(root, cache) == exact


# ---------------------------------------------------------------------------- 5. the property


EDITS = ("rewrite", "same_size", "delete", "add_date", "add_parents", "damage")


def apply_edit(edit: str, traces: Path, cache: Path, index: int) -> None:
    date = DATES[index % 2]
    if edit == "rewrite":                      # new values, a new file
        path = rounds_file(traces, date)
        if path.exists():
            write_fixed_width(zero_every_other_acceptance(pq.read_table(path, partitioning=None)), path)
    elif edit == "same_size":
        path = rounds_file(traces, date)
        if path.exists():
            same_size_rewrite(path)
    elif edit == "delete":                     # a date's rounds gone (its parents stay)
        shutil.rmtree(traces / "rounds" / f"date={date}", ignore_errors=True)
    elif edit == "add_date":                   # a new date: a copy of one day under another date
        new = f"2026-11-{29 + index}"
        for table in ("deployments", "requests", "steps", "rounds"):
            source = traces / table / f"date={date}"
            if source.exists() and not (traces / table / f"date={new}").exists():
                shutil.copytree(source, traces / table / f"date={new}")
    elif edit == "add_parents":
        if not (traces / "requests" / f"date=2026-11-{20 + index}").exists():
            add_parents_sharing_one_uid(traces, f"2026-11-{20 + index}")
    elif edit == "damage":
        entries = entry_databases(cache)
        if entries:
            flip_bytes(entries[index % len(entries)], 12_288 + 7 * index)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.sampled_from(EDITS), min_size=1, max_size=3))
def test_the_cached_document_is_the_uncached_one_after_any_edits(two_days, tmp_path_factory, edits):
    work = tmp_path_factory.mktemp("edits")
    traces, cache = Path(shutil.copytree(two_days, work / "traces")), work / "cache"
    report(traces, cache)
    for index, edit in enumerate(edits):
        apply_edit(edit, traces, cache, index)
    assert report(traces, cache) == report(traces, None), edits
