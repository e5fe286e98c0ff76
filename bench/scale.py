"""Scale benchmark: specan report against the floor and the notebook peers.

    python bench/scale.py                              # N = 1M, 10M, 50M rounds
    python bench/scale.py --rounds 200000000 --no-peers
    python bench/scale.py --memory-limit 1GB           # the out-of-core run
    python bench/scale.py --rounds 5000000 --spark     # and --engine spark against the PySpark peer

For each N it generates traces with the fast path (`specan simulate --rounds N
--no-tokens`, cached under bench/data/), then runs, each in its own process,
measuring wall time and peak RSS with GNU time:

- report: `specan report TRACES --format json --memory-limit M --profile`; the
  seconds of every phase (the --profile table) are recorded beside the total;
- floor: one bare DuckDB aggregate scan of the rounds (speculative rounds and
  the sums of drafted, accepted and committed per deployment);
- the peers, which compute the report's core answers, checks included (accept
  length, per-position survival, speedup by batch bucket, exact itl p50/p99,
  duplicate round keys, orphan rounds), each as one would write it by hand:
  duckdb (bench/duckdb_peer.py, SQL), polars (bench/polars_peer.py, lazy scans);
  their answers must agree (bench/peer_answers.py), and the run records whether
  they do;
- with --spark, report_spark: the same report with `--engine spark` in Spark's
  local mode on this machine (`--spark-master local[*]`), beside the DuckDB one, and
  the PySpark peer (bench/pyspark_peer.py) on the same master; its phases and the
  bytes it brought back per table (`--profile`) are recorded. With --spark-cluster
  both run on a standalone cluster started here instead (one master and one worker
  on 127.0.0.1, tests/spark_cluster.py, the executor at Spark's default 1 GB heap and
  2 cores): write it to its own --out.

It prints report ÷ floor and report ÷ each peer, and the duckdb, polars and pyspark
versions the runs used (a ratio says against which release), and writes
bench/results/scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import polars

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
RESULTS = HERE / "results"

FLOOR = """
import duckdb, sys
con = duckdb.connect()
con.execute("set memory_limit = '{memory}'")
print(con.execute('''select deployment_id, count(*) filter (where num_draft_tokens > 0),
    sum(num_draft_tokens), sum(num_accepted_tokens), sum(num_committed_tokens)
    from read_parquet('{traces}/rounds/**/*.parquet') group by deployment_id''').fetchall())
"""


def timed(command: list[str], profile: bool = False, env: dict | None = None) -> dict:
    """Wall seconds and peak RSS (MB) of one command, via GNU time; with ``profile``, its phase table."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as out:
        result = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", out.name, *command],
                                capture_output=True, text=True, env=env)
        wall, rss_kb = out.read().split()[-2:]
    row = {"ok": result.returncode == 0, "seconds": float(wall), "peak_rss_mb": int(rss_kb) / 1024}
    if result.returncode != 0:
        row["error"] = (result.stderr.strip().splitlines() or ["?"])[-1]
    if profile and result.returncode == 0:
        row["phases"] = phases_of(result.stderr)
        if fetched_of(result.stderr):
            row["fetched_bytes"] = fetched_of(result.stderr)
    return row


def phases_of(stderr: str) -> list[list]:
    """The --profile table on stderr: [[phase, seconds], ...], up to its total."""
    return _table_after(stderr, "profile: seconds per phase", float)


def fetched_of(stderr: str) -> list[list]:
    """The Spark engine's --profile bytes brought back: [[table, bytes], ...]."""
    return _table_after(stderr, "profile: bytes brought back from Spark, per table", lambda v: int(v.replace(",", "")))


def _table_after(stderr: str, heading: str, value) -> list[list]:
    lines = stderr.splitlines()
    if heading not in lines:
        return []
    rows = []
    for line in lines[lines.index(heading) + 1:]:
        if line.startswith("profile:"):
            break
        number, name = line.split(None, 1)
        rows.append([name, value(number)])
    return rows


def traces_for(rounds: int) -> Path:
    path = DATA / f"fast-{rounds}"
    if not (path / "rounds").exists():
        print(f"generating {rounds:,} rounds in {path}", flush=True)
        subprocess.run([sys.executable, "-m", "analyzer", "simulate", str(path), "--rounds", str(rounds),
                        "--no-tokens"], check=True, capture_output=True)
    return path


PEERS = ("duckdb", "polars")


def peer(name: str, traces: Path, *args: str, env: dict | None = None) -> dict:
    """One notebook peer, timed; its printed answers kept beside the time."""
    with tempfile.NamedTemporaryFile("r", suffix=".json") as answers:
        row = timed(["sh", "-c", 'exec "$0" "$@" > ' + answers.name, sys.executable,
                     str(HERE / f"{name}_peer.py"), str(traces), *args], env=env)
        if row["ok"]:
            row["answers"] = json.loads(answers.read())
    return row


def measure(rounds: int, memory: str, peers: bool, spark: bool = False,
            master: str = "local[*]", env: dict | None = None) -> dict:
    traces = traces_for(rounds)
    row = {"rounds": rounds, "memory_limit": memory}
    with tempfile.TemporaryDirectory() as tmp:
        # --no-cache: every run computes (the cache of the passes is bench/rerun.py's figure)
        row["report"] = timed([sys.executable, "-m", "analyzer", "report", str(traces), "--format", "json",
                               "--no-cache", "--memory-limit", memory, "--profile", "-o", str(Path(tmp) / "report.json")],
                              profile=True)
        if spark:
            row["report_spark"] = timed([sys.executable, "-m", "analyzer", "report", str(traces), "--format", "json",
                                         "--engine", "spark", "--spark-master", master, "--profile",
                                         "-o", str(Path(tmp) / "report-spark.json")], profile=True, env=env)
            row["report_spark"]["master"] = master
            if row["report"]["ok"] and row["report_spark"]["ok"]:
                row["report_spark_over_report"] = row["report_spark"]["seconds"] / row["report"]["seconds"]
                # Spark adds in another order: the same document to 1e-9, as the parity tests compare
                sys.path.insert(0, str(HERE.parent / "tests"))
                from test_spark import differences

                row["same_document"] = not differences(json.loads((Path(tmp) / "report.json").read_text()),
                                                       json.loads((Path(tmp) / "report-spark.json").read_text()))
    row["floor"] = timed([sys.executable, "-c", FLOOR.format(traces=traces, memory=memory)])
    for name in PEERS if peers else ():
        row[name] = peer(name, traces)
    if spark:
        row["pyspark"] = peer("pyspark", traces, "--master", master, env=env)
        if row["report_spark"]["ok"] and row["pyspark"]["ok"]:
            row["report_spark_over_pyspark"] = row["report_spark"]["seconds"] / row["pyspark"]["seconds"]
    answered = [row[n]["answers"] for n in (*PEERS, "pyspark") if n in row and row[n]["ok"]]
    if len(answered) > 1:
        row["peers_agree"] = all(a == answered[0] for a in answered)
    if row["report"]["ok"]:
        for name in ("floor", *PEERS):
            if name in row and row[name]["ok"]:
                row[f"report_over_{name}"] = row["report"]["seconds"] / row[name]["seconds"]
    print(json.dumps({k: v for k, v in row.items() if k not in ("report", "report_spark", *PEERS, "pyspark")} | {
        name: {k: v for k, v in row[name].items() if k not in ("phases", "answers")}
        for name in ("report", "report_spark", *PEERS, "pyspark") if name in row}), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, action="append", help="sizes to run (default 1M, 10M, 50M)")
    parser.add_argument("--memory-limit", default="3GB", help="passed to specan report (its default)")
    parser.add_argument("--no-peers", action="store_true",
                        help="skip the DuckDB and polars peers (the hand-written SQL needs about 8 GB at 50M rounds)")
    parser.add_argument("--spark", action="store_true", help="also time `report --engine spark` (local mode)")
    parser.add_argument("--spark-cluster", action="store_true",
                        help="with --spark: on a standalone master and worker started on 127.0.0.1")
    parser.add_argument("--out", default=str(RESULTS / "scale.json"))
    args = parser.parse_args()
    master, env, cluster = "local[*]", None, None
    if args.spark_cluster:
        sys.path.insert(0, str(HERE.parent / "tests"))
        from spark_cluster import cluster_environment, start_cluster

        cluster = start_cluster(Path(tempfile.mkdtemp(prefix="specan-bench-cluster-")))
        master, env = cluster.master_url, {**cluster_environment(), "PYSPARK_SUBMIT_ARGS":
                                           "--conf spark.cores.max=2 pyspark-shell"}
    sizes = args.rounds or [1_000_000, 10_000_000, 50_000_000]
    # the peers run in processes of this interpreter (sys.executable): these are their versions,
    # kept with each run (the runs of earlier invocations stay in the file with theirs)
    versions = {"duckdb": duckdb.__version__, "polars": polars.__version__}
    if args.spark or args.spark_cluster:
        import pyspark

        versions["pyspark"] = pyspark.__version__
    print(", ".join(f"{k} {v}" for k, v in versions.items()), flush=True)
    try:
        rows = [measure(n, args.memory_limit, not args.no_peers, args.spark or args.spark_cluster,
                        master, env) | {"versions": versions} for n in sizes]
    finally:
        if cluster is not None:
            cluster.stop()
    RESULTS.mkdir(exist_ok=True)
    out = Path(args.out)
    previous = json.loads(out.read_text()) if out.exists() else {}
    runs = [r for r in previous.get("runs", [])
            if (r["rounds"], r["memory_limit"]) not in {(x["rounds"], x["memory_limit"]) for x in rows}]
    document = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                "targets": {"report_over_floor": 20, "peak_rss_mb": 4096, "peak_rss_mb_at_1GB": 1536,
                            "report_200m_over_50m": 4.4, "report_spark_over_pyspark": 1.5},
                "runs": sorted(runs + rows, key=lambda r: (r["memory_limit"], r["rounds"]))}
    out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
