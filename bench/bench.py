"""specan benchmarks. Run from the checkout with the package installed:

    python bench/bench.py repetition            # tokens/s of repeat_ratio and of the n-gram replay

Results are printed and written as JSON under bench/results/. Performance is
measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from analyzer import api
from analyzer.analysis.replay import replay_ngram
from analyzer.simulate.traces import simulate
from analyzer.analysis.views import create_macros, discover_views

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
RESULTS = HERE / "results"


def _traces(name: str, **options) -> Path:
    """Synthetic traces, generated once and cached under bench/data/."""
    path = DATA / name
    if not (path / "rounds").exists():
        print(f"generating {path} {options}")
        simulate(path, **options)
    return path


def _machine() -> dict:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def bench_repetition(requests: int, days: int) -> dict:
    traces = _traces(f"tokens-r{requests}-d{days}", seed=0, requests=requests, days=days)
    ws = api.open_traces(traces)
    con = ws.con
    tokens = con.execute("select sum(len(prompt_token_ids) + len(output_token_ids)) from requests "
                         "where prompt_token_ids is not null and output_token_ids is not null").fetchone()[0]
    create_macros(con, 3)
    sql = discover_views()["request_repetition"].sql
    timings = []
    for _ in range(3):
        start = time.perf_counter()
        con.execute(f"create or replace temp table bench_repetition as {sql}")
        timings.append(time.perf_counter() - start)
    best = min(timings)
    result = {"tokens": tokens, "repeat_ratio_seconds": best, "repeat_ratio_tokens_per_s": tokens / best,
              "repeat_ratio_target_tokens_per_s": 2_000_000}
    for variant in ("prompt_lookup", "suffix"):
        start = time.perf_counter()
        replay_ngram(con, min_n=2, max_n=5, k=4, variant=variant)
        elapsed = time.perf_counter() - start
        result.update({f"replay_{variant}_seconds": elapsed, f"replay_{variant}_tokens_per_s": tokens / elapsed})
    ws.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    rep = sub.add_parser("repetition", help="tokens/s of repeat_ratio and of the n-gram replay")
    rep.add_argument("--requests", type=int, default=400, help="requests per deployment per day")
    rep.add_argument("--days", type=int, default=2)
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    if args.what == "repetition":
        result = {"machine": _machine(), **bench_repetition(args.requests, args.days)}
        out = RESULTS / "repetition.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
