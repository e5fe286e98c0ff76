"""The nightly regression rule on simulated days: the study in docs/commands.md ("specan nightly").

    python bench/nightly_study.py                      # 21 days, the rule as shipped
    python bench/nightly_study.py --spread-sds 2 3 4   # the same days under other multiples of the MAD

It simulates ``--days`` days (``specan simulate``, ``--seed`` 0, 200 requests a day, cached
under bench/data/), runs ``specan nightly`` for each date in order into a scratch
directory, and then asks ``regression.check_regressions`` about that history:

- unchanged: every date as it is, so every flag is a false alarm (also counted per
  rule: the window's and the reference's);
- one bad day: each date with enough history, each deployment and checked metric
  made 20 % worse on that date alone (accept length and speedup × 0.8, tpot_p99 × 1.2),
  and whether that date is flagged;
- a lasting drop: the same 20 % from a date to the last one, and on how many of those
  days it is flagged; then with ``accept_since`` set to its first day;
- a slow decline (issue 36): each deployment and metric worse by 1, 2 or 3 % a day,
  compound (accept length and speedup × (1 − r)^k, tpot_p99 × (1 + r)^k on the decline's
  k-th day), from the first date after the reference (its first ``window_days`` dates:
  a stable period) or from the first date, and on which day of the decline each rule
  first flags it.

Each of these is counted under the rule as shipped (a date flagged by the window or by
the reference), under the window rule alone (the rule before issue 36) and under the
rule before issue 22: the window's spread (max − min) / median, and flagged dates left
in the window. Results are printed and written to bench/results/nightly_study.json
(``_s1`` for ``--seed 1``, ``_sweep`` for other ``--spread-sds`` than the shipped one).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import tempfile
from collections import Counter
from pathlib import Path

import polars as pl

from analyzer.analysis import history
from analyzer.decide import regression
from analyzer.analysis.config import Nightly, Regression, load_config
from analyzer.nightly import run_nightly
from analyzer.simulate.traces import simulate

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
RESULTS = HERE / "results"
WORSE = {"mean_accept_length": 0.8, "speedup": 0.8, "tpot_p99": 1.2}
RULE = Regression()


def daily_history(days: int, seed: int) -> pl.DataFrame:
    """The history ``specan nightly`` builds over the simulated days, one run per date in order."""
    traces = DATA / f"nightly-s{seed}-d{days}"
    if not (traces / "rounds").exists():
        print(f"generating {traces}")
        simulate(traces, seed=seed, days=days)
    cached = traces / "history.parquet"
    if not cached.exists():
        dates = sorted(p.name.removeprefix("date=") for p in (traces / "rounds").iterdir())
        with tempfile.TemporaryDirectory() as out:
            for date in dates:
                print(f"nightly {date}")
                run_nightly(traces, date, out, config=load_config(None))
            history.read_history(Path(out) / "history.parquet").write_parquet(cached)
    return pl.read_parquet(cached)


def old_rule_flags(data: pl.DataFrame, date: dt.date) -> set[tuple[str, str]]:
    """(deployment, metric) flagged on ``date`` by the rule before issue 22: the latest dates
    before it whatever they were, and spread = (max − min) / median."""
    flags = set()
    earlier = data.filter(pl.col("date") < date)
    for row in data.filter(pl.col("date") == date).iter_rows(named=True):
        own = earlier.filter(pl.col("deployment_id") == row["deployment_id"]).sort("date").tail(RULE.window_days)
        if own.height < RULE.min_history_dates:
            continue
        for metric, (threshold_key, direction) in regression.CHECKED.items():
            window = own.get_column(metric).drop_nulls().to_list()
            value = row[metric]
            if value is None or len(window) < RULE.min_history_dates:
                continue
            baseline = pl.Series(window).median()
            if not baseline:
                continue
            change = (value - baseline) / baseline
            limit = max(getattr(RULE, threshold_key), (max(window) - min(window)) / abs(baseline))
            if (direction == "drop" and change < -limit) or (direction == "rise" and change > limit):
                flags.add((row["deployment_id"], metric))
    return flags


def rule_flags(data: pl.DataFrame, date: dt.date, nightly: Nightly | None = None) -> set[tuple[str, str, str]]:
    """(deployment, metric, rule) of every flag on ``date`` under the shipped rule."""
    return {(r["deployment_id"], r["metric"], r["rule"])
            for r in regression.check_regressions(data, date, RULE, nightly)[1]}


def new_rule_flags(data: pl.DataFrame, date: dt.date, nightly: Nightly | None = None) -> set[tuple[str, str]]:
    """Flagged by either rule: what makes the nightly run exit 1."""
    return {(deployment, metric) for deployment, metric, _ in rule_flags(data, date, nightly)}


def window_rule_flags(data: pl.DataFrame, date: dt.date, nightly: Nightly | None = None) -> set[tuple[str, str]]:
    """Flagged by the window rule alone: the shipped rule before issue 36 (the window rule is unchanged)."""
    return {(deployment, metric) for deployment, metric, rule in rule_flags(data, date, nightly) if rule == "window"}


RULES = {"new": new_rule_flags, "window": window_rule_flags, "old": old_rule_flags}
RATES = (0.01, 0.02, 0.03)


def worsened(data: pl.DataFrame, deployment: str, metric: str, first: dt.date, last: dt.date) -> pl.DataFrame:
    hit = (pl.col("deployment_id") == deployment) & pl.col("date").is_between(first, last)
    return data.with_columns(pl.when(hit).then(pl.col(metric) * WORSE[metric]).otherwise(pl.col(metric)).alias(metric))


def study(data: pl.DataFrame) -> dict:
    dates = data.get_column("date").unique().sort().to_list()
    checked = dates[RULE.min_history_dates:]
    present = {m: sorted(data.filter(pl.col(m).is_not_null()).get_column("deployment_id").unique().to_list())
               for m in regression.CHECKED}
    result: dict = {"dates": len(dates), "checked_dates": len(checked),
                    "deployments": {m: present[m] for m in regression.CHECKED}}
    for name, flags_of in RULES.items():
        unchanged = Counter()
        unchanged_dates: dict[str, list[str]] = {m: [] for m in regression.CHECKED}
        for date in checked:
            for deployment, metric in sorted(flags_of(data, date)):
                unchanged[metric] += 1
                unchanged_dates[metric].append(f"{date} {deployment}")
        one_day = Counter()
        for metric, deployments in present.items():
            for deployment in deployments:
                for date in checked:
                    one_day[metric] += (deployment, metric) in flags_of(
                        worsened(data, deployment, metric, date, date), date)
        result[name] = {
            "unchanged_flags": {m: unchanged[m] for m in regression.CHECKED},
            "unchanged_flagged": unchanged_dates,
            "one_bad_day_caught": {m: one_day[m] for m in regression.CHECKED},
            "one_bad_day_cases": {m: len(present[m]) * len(checked) for m in regression.CHECKED},
            "lasting_drop": lasting(data, checked, present, flags_of),
        }
    result["new"]["lasting_drop_accepted"] = accepted(data, checked, present)
    result["new"]["unchanged_flags_by_rule"] = unchanged_by_rule(data, dates)
    result["declines"] = declines(data, dates, present)
    return result


def unchanged_by_rule(data: pl.DataFrame, dates: list[dt.date]) -> dict:
    """The flags on the unchanged data per rule and metric, with the deployment-days each
    rule judged: the window from the (min_history_dates + 1)-th date of a deployment, the
    reference from the (window_days + 1)-th."""
    flags = {rule: Counter() for rule in ("window", "reference")}
    flagged: dict[str, list[str]] = {m: [] for m in regression.CHECKED}
    judged = {rule: Counter() for rule in ("window", "reference")}
    for date in dates:
        check, found = regression.check_regressions(data, date, RULE)
        for reference in check["references"].values():
            for metric, summary in reference.get("metrics", {}).items():
                judged["reference"][metric] += summary["limit"] is not None
        for r in sorted(found, key=lambda r: (r["rule"], r["metric"], r["deployment_id"])):
            flags[r["rule"]][r["metric"]] += 1
            if r["rule"] == "reference":
                flagged[r["metric"]].append(f"{date} {r['deployment_id']}")
    for date in dates[RULE.min_history_dates:]:
        for metric in regression.CHECKED:
            judged["window"][metric] += data.filter((pl.col("date") == date) & pl.col(metric).is_not_null()).height
    return {rule: {"flags": {m: flags[rule][m] for m in regression.CHECKED},
                   "deployment_days": {m: judged[rule][m] for m in regression.CHECKED}}
            for rule in flags} | {"reference_flagged": flagged}


def declined(data: pl.DataFrame, deployment: str, metric: str, first: dt.date, rate: float) -> pl.DataFrame:
    """``metric`` of ``deployment`` worse by ``rate`` a day, compound, from ``first`` (its day 1) on:
    × (1 − rate)^k for a drop, × (1 + rate)^k for a rise (tpot_p99). The simulated dates are
    consecutive, so the k-th date of the decline is k − 1 calendar days after ``first``."""
    step = 1 - rate if regression.CHECKED[metric][1] == "drop" else 1 + rate
    k = (pl.col("date") - pl.lit(first)).dt.total_days() + 1
    hit = (pl.col("deployment_id") == deployment) & (pl.col("date") >= first)
    return data.with_columns(pl.when(hit).then(pl.col(metric) * pl.lit(step).pow(k)).otherwise(pl.col(metric))
                             .alias(metric))


def declines(data: pl.DataFrame, dates: list[dt.date], present: dict) -> dict:
    """Per start (after the reference, or from the first date), rate and metric: per deployment,
    the decline's first day flagged by either rule, by the window and by the reference (None:
    never over its ``days``), the days of the decline flagged by either rule, and the days of
    the decline on which the unchanged data is flagged too (a noisy day, not the decline: the
    workload days of ``tpot_p99``)."""
    starts = {"after_reference": dates[RULE.window_days], "from_first_day": dates[0]}
    unchanged = {date: new_rule_flags(data, date) for date in dates}
    out: dict = {}
    for start_name, first in starts.items():
        out[start_name] = {"first_date": first.isoformat(), "days": len([d for d in dates if d >= first])}
        for rate in RATES:
            per_metric = {}
            for metric, deployments in present.items():
                per_deployment = {}
                for deployment in deployments:
                    bad = declined(data, deployment, metric, first, rate)
                    first_day = {"either": None, "window": None, "reference": None}
                    flagged_days = 0
                    for day, date in enumerate((d for d in dates if d >= first), start=1):
                        rules = {rule for dep, m, rule in rule_flags(bad, date) if (dep, m) == (deployment, metric)}
                        flagged_days += bool(rules)
                        for rule in rules | ({"either"} if rules else set()):
                            first_day[rule] = first_day[rule] or day
                    noisy = [day for day, date in enumerate((d for d in dates if d >= first), start=1)
                             if (deployment, metric) in unchanged[date]]
                    per_deployment[deployment] = {"first_flagged_day": first_day, "flagged_days": flagged_days,
                                                  "unchanged_flagged_days": noisy}
                per_metric[metric] = per_deployment
            out[start_name][f"{rate:g}"] = per_metric
    return out


def lasting(data, checked, present, flags_of) -> dict:
    """Per metric, over the drops from each checked date (but the last) to the last date: the
    drop's days flagged of all its days, per deployment too; the drops flagged on every day;
    and, of the drops flagged on their first day, their later days flagged."""
    out = {}
    for metric, deployments in present.items():
        counts = Counter()
        per_deployment = {}
        for deployment in deployments:
            own = Counter()
            for start in checked[:-1]:          # at least two days of drop
                bad = worsened(data, deployment, metric, start, checked[-1])
                hits = [(deployment, metric) in flags_of(bad, d) for d in checked if d >= start]
                own.update({"flagged_days": sum(hits), "days": len(hits), "flagged_every_day": all(hits),
                            "drops": 1})
                if hits[0]:
                    own.update({"flagged_first_day": 1, "later_days_flagged": sum(hits[1:]),
                                "later_days": len(hits) - 1})
            per_deployment[deployment] = {"flagged_days": own["flagged_days"], "days": own["days"]}
            counts.update(own)
        keys = ("flagged_days", "days", "flagged_every_day", "drops", "flagged_first_day",
                "later_days_flagged", "later_days")
        out[metric] = {**{k: counts[k] for k in keys}, "by_deployment": per_deployment}
    return out


def accepted(data, checked, present) -> dict:
    """The lasting drops again, with accept_since = their first day for that deployment: the
    days flagged on and after it, and the days flagged when the data is left unchanged but
    re-baselined on the same day. The rule is scale-free (changes, spreads and thresholds
    are fractions of the median), so the two counts are equal when the drop adds no flag."""
    out = {}
    for metric, deployments in present.items():
        flagged_days = unchanged_days = days = 0
        for deployment in deployments:
            for start in checked[:-1]:
                bad = worsened(data, deployment, metric, start, checked[-1])
                nightly = Nightly(accept_since={deployment: start})
                after = [d for d in checked if d >= start]
                flagged_days += sum((deployment, metric) in new_rule_flags(bad, d, nightly) for d in after)
                unchanged_days += sum((deployment, metric) in new_rule_flags(data, d, nightly) for d in after)
                days += len(after)
        out[metric] = {"flagged_days": flagged_days, "unchanged_flagged_days": unchanged_days, "days": days}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=21)
    parser.add_argument("--seed", type=int, default=0, help="the simulation's seed")
    parser.add_argument("--spread-sds", type=float, nargs="*", default=[regression.SPREAD_SDS],
                        help="multiples of 1.4826 · MAD to study (default: the shipped regression.SPREAD_SDS)")
    args = parser.parse_args()
    data = daily_history(args.days, args.seed)
    shipped = regression.SPREAD_SDS
    results = {}
    for k in args.spread_sds:
        regression.SPREAD_SDS = k
        results[f"{k:g}"] = study(data)
    regression.SPREAD_SDS = shipped
    RESULTS.mkdir(exist_ok=True)
    name = "nightly_study" + (f"_s{args.seed}" if args.seed else "") + ("" if args.spread_sds == [shipped] else "_sweep")
    out = RESULTS / f"{name}.json"
    # the multiple is the window's (× 1.4826 · MAD) and the reference's (× 1.4826 · MAD of the
    # day-to-day differences / √2) alike: both read regression.SPREAD_SDS
    text = json.dumps({"days": args.days, "seed": args.seed, "shipped_spread_sds": shipped, "by_spread_sds": results}, indent=2)
    out.write_text(text + "\n")
    print(text)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
