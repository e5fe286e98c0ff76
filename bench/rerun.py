"""Re-run benchmark: a report over 31 dates run again after one new date lands, against a report
over that date alone (issue 26's third figure).

    python bench/rerun.py                       # 31 dates of about 1.6M rounds each (50M in all)
    python bench/rerun.py --rounds-per-date 200000 --dates 31
    python bench/rerun.py --layout date-dep     # rounds under date=…/dep=…/, requests and steps by date

It writes the dated traces once, under bench/data/dated-N-D/: one day of `specan simulate --rounds N
--no-tokens` (cached as bench/data/fast-N), copied into D `date=` partitions of requests, steps and
rounds, each day's times moved by whole days (the rounds carry no times and are copied as they are;
deployments stay unpartitioned). Then, each in its own process and timed like bench/scale.py:

- all: `specan report` over the D dates, with an empty cache folder (every date computed and kept);
- again: the same after the newest date was replaced (one new date lands: its files rewritten), with
  that cache folder: only the new date is read, the others come from the cache;
- one: `specan report --no-cache` over the newest date alone (a directory linking to its files);
- all_no_cache: `specan report --no-cache` over the D dates (what every run cost before the cache).

It prints again ÷ one, checks that all, again and all_no_cache are the same JSON document, and writes
bench/results/rerun.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import duckdb

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from scale import DATA, RESULTS, timed, traces_for  # noqa: E402

FIRST_DATE = dt.date(2026, 11, 1)
# the columns of each table that hold times, moved by whole days per date
TIME_COLUMNS = {"requests": ("arrival_time", "first_token_time", "finish_time"), "steps": ("start_time",)}


def dated_traces(rounds_per_date: int, dates: int, layout: str = "date") -> Path:
    base = traces_for(rounds_per_date)
    out = DATA / (f"dated-{rounds_per_date}-{dates}" + ("" if layout == "date" else f"-{layout}"))
    if (out / ".complete").exists():
        return out
    print(f"writing {dates} dates of {base.name} into {out}", flush=True)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    shutil.copy(base / "deployments.parquet", out / "deployments.parquet")
    con = duckdb.connect()
    for day in range(dates):
        write_date(con, base, out, FIRST_DATE + dt.timedelta(days=day), day, layout)
    (out / ".complete").touch()
    return out


def write_date(con: duckdb.DuckDBPyConnection, base: Path, out: Path, date: dt.date, shift_days: int,
               layout: str = "date") -> None:
    for table in ("requests", "steps", "rounds"):
        folder = out / table / f"date={date.isoformat()}"
        folder.mkdir(parents=True, exist_ok=True)
        for source in sorted((base / table).glob("*.parquet")):
            target = folder / source.name
            moved = TIME_COLUMNS.get(table, ())
            if table == "rounds" and layout == "date-dep":
                # a fleet's layout: each deployment's rounds in a folder of its own under the date
                deps = [d for (d,) in con.execute(f"select distinct deployment_id from read_parquet('{source}') "
                                                  "order by 1").fetchall()]
                for dep in deps:
                    (folder / f"dep={dep}").mkdir(exist_ok=True)
                    con.execute(f"copy (select * from read_parquet('{source}') where deployment_id = ?) "
                                f"to '{folder / f'dep={dep}' / source.name}' (format parquet)", [dep])
                continue
            if not moved:
                shutil.copy(source, target)
                continue
            replace = ", ".join(f"{c} + interval {shift_days} day as {c}" for c in moved)
            con.execute(f"copy (select * replace ({replace}) from read_parquet('{source}')) "
                        f"to '{target}' (format parquet)")


def one_date_view(traces: Path, date: dt.date, into: Path) -> Path:
    """A trace directory holding only ``date`` (symbolic links to its files) and the deployments."""
    into.mkdir(parents=True)
    (into / "deployments.parquet").symlink_to(traces / "deployments.parquet")
    for table in ("requests", "steps", "rounds"):
        folder = into / table / f"date={date.isoformat()}"
        folder.mkdir(parents=True)
        dated = traces / table / f"date={date.isoformat()}"
        for source in sorted(dated.rglob("*.parquet")):
            link = folder / source.relative_to(dated)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(source)     # file links: a glob does not enter linked folders
    return into


def report(traces: Path, out: Path, extra: list[str]) -> dict:
    return timed([sys.executable, "-m", "analyzer", "report", str(traces), "--format", "json", "--profile",
                  "-o", str(out), *extra], profile=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds-per-date", type=int, default=1_612_903, help="about 50M rounds over 31 dates")
    parser.add_argument("--dates", type=int, default=31)
    parser.add_argument("--layout", choices=("date", "date-dep"), default="date",
                        help="date-dep: rounds under date=…/dep=…/, requests and steps under date=…/")
    parser.add_argument("--out", default=str(RESULTS / "rerun.json"))
    parser.add_argument("report_options", nargs="*", help="more options for specan report (after --)")
    args = parser.parse_args()
    traces = dated_traces(args.rounds_per_date, args.dates, args.layout)
    newest = FIRST_DATE + dt.timedelta(days=args.dates - 1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cache = ["--cache-dir", str(tmp / "cache")]
        row = {"rounds_per_date": args.rounds_per_date, "dates": args.dates, "layout": args.layout,
               "all": report(traces, tmp / "all.json", cache + args.report_options)}
        # one new date lands: the newest date's files are written again (new modification times)
        con = duckdb.connect()
        for table in ("requests", "steps", "rounds"):
            shutil.rmtree(traces / table / f"date={newest.isoformat()}")
        write_date(con, traces_for(args.rounds_per_date), traces, newest, args.dates - 1, args.layout)
        row["again"] = report(traces, tmp / "again.json", cache + args.report_options)
        row["one"] = report(one_date_view(traces, newest, tmp / "one"), tmp / "one.json",
                            ["--no-cache", *args.report_options])
        row["all_no_cache"] = report(traces, tmp / "all_no_cache.json", ["--no-cache", *args.report_options])
        documents = [json.loads((tmp / f"{name}.json").read_text()) if row[name]["ok"] else None
                     for name in ("all", "again", "all_no_cache")]
        same = documents[0] == documents[1] == documents[2] if None not in documents else None
    row["again_same_document"] = same
    if row["again"]["ok"] and row["one"]["ok"]:
        row["again_over_one"] = row["again"]["seconds"] / row["one"]["seconds"]
    print(json.dumps({k: ({kk: vv for kk, vv in v.items() if kk != "phases"} if isinstance(v, dict) else v)
                      for k, v in row.items()}), flush=True)
    RESULTS.mkdir(exist_ok=True)
    document = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                            "duckdb": duckdb.__version__},
                "targets": {"again_over_one": 3, "goal_again_over_one": 1.5}, "run": row}
    Path(args.out).write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
