"""Scale benchmark: specan report against the floor and a pandas notebook peer.

    python bench/scale.py                      # N = 1M, 10M, 50M rounds
    python bench/scale.py --rounds 1000000     # one size
    python bench/scale.py --memory-limit 1GB   # the out-of-core run

For each N it generates traces with the fast path (`specan simulate --rounds N
--no-tokens`, cached under bench/data/), then runs, each in its own process,
measuring wall time and peak RSS with GNU time:

- report: `specan report TRACES --format json --memory-limit M`;
- floor: one bare DuckDB aggregate scan of the rounds (speculative rounds and
  the sums of drafted, accepted and committed per deployment);
- peer: bench/pandas_peer.py, a straightforward pandas implementation of the
  core metrics (accept length, positions, throughput-weighted speedup by batch
  bucket).

It prints report ÷ floor and peer ÷ report, and writes bench/results/scale.json.
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


def timed(command: list[str]) -> dict:
    """Wall seconds and peak RSS (MB) of one command, via GNU time."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as out:
        result = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", out.name, *command],
                                capture_output=True, text=True)
        wall, rss_kb = out.read().split()[-2:]
    return {"ok": result.returncode == 0, "seconds": float(wall), "peak_rss_mb": int(rss_kb) / 1024,
            **({} if result.returncode == 0 else {"error": (result.stderr.strip().splitlines() or ["?"])[-1]})}


def traces_for(rounds: int) -> Path:
    path = DATA / f"fast-{rounds}"
    if not (path / "rounds").exists():
        print(f"generating {rounds:,} rounds in {path}", flush=True)
        subprocess.run([sys.executable, "-m", "analyzer", "simulate", str(path), "--rounds", str(rounds),
                        "--no-tokens"], check=True, capture_output=True)
    return path


def measure(rounds: int, memory: str, peer: bool) -> dict:
    traces = traces_for(rounds)
    row = {"rounds": rounds, "memory_limit": memory}
    with tempfile.TemporaryDirectory() as tmp:
        row["report"] = timed([sys.executable, "-m", "analyzer", "report", str(traces), "--format", "json",
                               "--memory-limit", memory, "-o", str(Path(tmp) / "report.json")])
    row["floor"] = timed([sys.executable, "-c", FLOOR.format(traces=traces, memory=memory)])
    if peer:
        row["peer"] = timed([sys.executable, str(HERE / "pandas_peer.py"), str(traces)])
    if row["report"]["ok"] and row["floor"]["ok"]:
        row["report_over_floor"] = row["report"]["seconds"] / row["floor"]["seconds"]
    if peer and row["peer"]["ok"] and row["report"]["ok"]:
        row["peer_over_report"] = row["peer"]["seconds"] / row["report"]["seconds"]
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, action="append", help="sizes to run (default 1M, 10M, 50M)")
    parser.add_argument("--memory-limit", default="3GB", help="passed to specan report (its default)")
    parser.add_argument("--no-peer", action="store_true", help="skip the pandas peer")
    parser.add_argument("--out", default=str(RESULTS / "scale.json"))
    args = parser.parse_args()
    sizes = args.rounds or [1_000_000, 10_000_000, 50_000_000]
    rows = [measure(n, args.memory_limit, not args.no_peer) for n in sizes]
    RESULTS.mkdir(exist_ok=True)
    out = Path(args.out)
    previous = json.loads(out.read_text()) if out.exists() else {}
    runs = [r for r in previous.get("runs", [])
            if (r["rounds"], r["memory_limit"]) not in {(x["rounds"], x["memory_limit"]) for x in rows}]
    document = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                "targets": {"report_over_floor": 20, "peak_rss_mb": 4096, "peer_over_report": 5},
                "runs": sorted(runs + rows, key=lambda r: (r["memory_limit"], r["rounds"]))}
    out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
