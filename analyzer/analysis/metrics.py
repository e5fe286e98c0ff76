"""Collect the metric views into one report document (docs/metrics.md's JSON contract).

The numbers come from the SQL views; this module only reads them, shapes them
into the documented keys, and writes a note for every value that is null.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import duckdb

from ..ingest.load import LoadSummary
from ..ingest.schema import TABLE_ORDER
from . import versions
from .slices import slices_document

SCHEMA_VERSION = 1

ACCEPTANCE_KEYS = (
    "num_rounds", "num_spec_rounds", "num_draft_tokens", "num_accepted_tokens", "num_invalidated_tokens",
    "num_committed_tokens", "mean_accept_length", "mean_accept_length_per_request", "acceptance_rate",
    "tokens_per_round", "truncated_rounds", "truncated_tokens", "invalidation_rate",
)
POSITION_KEYS = ("position", "drafted", "accepted", "survival", "conditional", "vllm_rate", "marginal_gain")
CAPACITY_KEYS = ("completed_requests", "failed_requests", "preemptions_per_request", "kv_usage_mean",
                 "kv_usage_max", "candidate_kv_share", "output_tokens_per_s", "output_tokens_per_busy_s",
                 "peak_hour_output_tokens_per_s", "peak_hour")
CAPACITY_BY_BATCH_KEYS = ("batch_bucket", "num_steps", "busy_s", "num_committed_tokens", "output_tokens_per_busy_s",
                          "num_gpus", "output_tokens_per_gpu_s", "time_share")
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el", "max_stall")
LATENCY_STATS = ("mean", "p50", "p90", "p95", "p99", "max")
ANOMALY_KINDS = ("looping", "no_acceptance", "stall")
# The thresholds request_anomalies reads (macros; analyzer/analysis/views.py, config_macros_sql).
ANOMALY_THRESHOLDS = ("looping_min_output_tokens", "looping_min_self_repeat_ratio", "no_acceptance_min_spec_rounds",
                      "no_acceptance_min_deployment_acceptance", "stall_min_ms", "stall_min_median_multiple")
UNCOVERED_KEYS = ("batch_bucket", "committed_share", "reason", "min_batch_size", "max_batch_size", "min_context",
                  "max_context", "baseline_min_load", "baseline_max_load")
CURVE_KEYS = ("num_rounds", "mean_accept_length", "tokens_per_round", "round_ms", "t0_ms", "speedup",
              "condition_holds")
# the bases of the matched comparison (sql/marts/matched_speedup.sql) as the verdict names them
BASES = {"steps": "rounds", "iterations": "steps", "requests": "tpot", "logs": "logs"}
LOG_CURVE_KEYS = ("deployment_id", "baseline_id", "batch_bucket", "num_intervals", "seconds", "generated_tokens",
                  "generation_tokens_per_s", "baseline_intervals", "baseline_seconds",
                  "baseline_generation_tokens_per_s", "baseline_seconds_for_tokens", "speedup", "counted")
RECONCILIATION_KEYS = ("deployment_id", "channel", "reference_channel", "is_reference", "num_channels",
                       "has_common_span", "span_start", "span_end", "num_rows", "accepted", "drafted", "drafts",
                       "acceptance_rate", "mean_accept_length", "accepted_per_position", "extends_beyond_span",
                       "accepted_difference", "drafted_difference", "accept_length_difference",
                       "position_difference", "disagrees")
LOG_LEFT_OUT = {"intervals_without_start": "without a start", "idle_intervals": "idle (0 running)",
                "intervals_without_throughput": "without a generation throughput",
                "intervals_without_running": "without a running count"}


def rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    result = con.execute(sql)
    names = [d[0] for d in result.description]
    return [dict(zip(names, values)) for values in result.fetchall()]


def _pick(row: dict, keys) -> dict:
    return {k: row.get(k) for k in keys}


def collect(con: duckdb.DuckDBPyConnection, summary: LoadSummary, slices: tuple[str, ...] = ()) -> dict[str, Any]:
    """The full report document, JSON-ready (no NaN: the views return null). ``slices``:
    the requests columns the workspace's slice views are keyed by (``report --by``)."""
    notes: list[str] = []
    deployments = rows(con, """
        select d.deployment_id, d.model, d.method, d.num_speculative_tokens, d.target_quant, d.draft_quant,
               a.* exclude (deployment_id, method, num_speculative_tokens),
               s.* exclude (deployment_id),
               t.tpot_speedup, t.tpot_speedup_coverage, t.num_requests as tpot_speedup_requests,
               q.prompt_tokens_median
        from deployments as d
        join accept_length as a using (deployment_id)
        join speedup as s using (deployment_id)
        left join tpot_speedup as t using (deployment_id)
        left join request_totals as q using (deployment_id)
        order by d.method <> 'none', d.deployment_id""")
    positions = defaultdict(list)
    for row in rows(con, "select * from position_acceptance order by deployment_id, position"):
        positions[row["deployment_id"]].append(_pick(row, POSITION_KEYS))
    capacity = {r["deployment_id"]: r for r in rows(con, "select * from capacity")}
    intervals_95 = {r["deployment_id"]: r for r in rows(con, "select * from headline_intervals")}
    log_speedups = {r["deployment_id"]: r for r in rows(con, "select * from log_speedup")}
    min_log_intervals = con.execute("select min_log_intervals()").fetchone()[0]
    matched, bucket_intervals = matched_comparisons(con)
    # counts_from: "iteration" for steps the engine counted (or that say nothing), "window" for estimates
    iteration_steps = {r["deployment_id"]: {
        "decode_steps": r["decode_steps"],
        "counts_from": [k for k, n in (("iteration", r["decode_steps"] - r["window_steps"]),
                                        ("window", r["window_steps"])) if n]}
        for r in rows(con, "select * from iteration_totals order by deployment_id")}
    benchmarks = {r["deployment_id"]: r for r in rows(con, "select * from benchmark_runs")}
    uncovered = defaultdict(list)
    # a bucket left out for two reasons (two rows): ordered by where each ran, so every run agrees
    for row in rows(con, "select * from speedup_uncovered "
                         "order by deployment_id, bucket_min, min_batch_size, reason, baseline_id"):
        uncovered[row["deployment_id"]].append(_pick(row, UNCOVERED_KEYS))
    capacity_by_batch = defaultdict(list)
    for row in rows(con, "select * from capacity_by_batch order by deployment_id, bucket_min"):
        capacity_by_batch[row["deployment_id"]].append(_pick(row, CAPACITY_BY_BATCH_KEYS))
    latency: dict[str, dict] = defaultdict(dict)
    latency_n: dict[str, dict] = defaultdict(dict)
    for row in rows(con, "select * from latency order by deployment_id, metric_order"):
        latency[row["deployment_id"]][row["metric"]] = _pick(row, LATENCY_STATS)
        latency_n[row["deployment_id"]][row["metric"]] = row["n"]

    requests_present = summary.present.get("requests", False)
    steps_present = summary.present.get("steps", False)
    out_deployments = []
    for d in deployments:
        dep = d["deployment_id"]
        entry = {
            "deployment_id": dep,
            "model": d["model"],
            "method": d["method"],
            "num_speculative_tokens": d["num_speculative_tokens"],
            "target_quant": d["target_quant"],
            "draft_quant": d["draft_quant"],
            # its intervals include benchmark runs (vllm-bench, sglang-bench): not production traffic
            "benchmark": dep in benchmarks,
            "benchmark_sources": benchmarks.get(dep, {}).get("sources", []),
            "baseline_id": d["baseline_id"],
            **_pick(d, ACCEPTANCE_KEYS),
            "positions": positions.get(dep, []),
            "nodes_per_round": d["nodes_per_round"],
            "accepted_per_node": d["accepted_per_node"],
            "num_requests": d["num_requests"],
            # requests that ended in error or abort (the correctness gate compares the share with the baseline's)
            "failed_requests": capacity.get(dep, {}).get("failed_requests"),
            "failed_share": _share(capacity.get(dep, {}).get("failed_requests"),
                                   capacity.get(dep, {}).get("num_requests")),
            "capacity": {**_pick(capacity.get(dep, {}), CAPACITY_KEYS), "by_batch": capacity_by_batch.get(dep, [])},
            "round_ms": {"mean": d["round_ms_mean"], "draft": d["round_ms_draft"],
                         "verify": d["round_ms_verify"], "other": d["round_ms_other"]},
            "speedup": d["speedup"],
            # 95 % intervals: the speedups' a block jackknife over time (analysis/uncertainty.py),
            # the accept length's a bootstrap over requests (view headline_intervals)
            "speedup_interval": (matched.get(dep, {}).get("rounds") or matched.get(dep, {}).get("steps")
                                 or {}).get("interval"),
            # on one request every resample of the accept length is that request: its [x, x]
            # is no interval, so there is none (the report says it rests on 1 request)
            "mean_accept_length_interval": (_interval(intervals_95.get(dep), "mean_accept_length")
                                            if (d["num_requests"] or 0) > 1 else None),
            "speedup_coverage": d["speedup_coverage"],
            "speedup_note": d["speedup_note"],
            # the batch buckets it ran in that the speedup leaves out, and why (view speedup_uncovered)
            "uncovered_buckets": uncovered.get(dep, []),
            "tpot_speedup": d["tpot_speedup"],
            "tpot_speedup_interval": (matched.get(dep, {}).get("tpot") or {}).get("interval"),
            # the share of its output tokens (after the first) in the requests tpot_speedup counts
            "tpot_speedup_coverage": d["tpot_speedup_coverage"],
            "tpot_speedup_requests": d["tpot_speedup_requests"],
            # from engine logs alone (basis: logs; views log_speedup, log_speedup_intervals)
            **_log_speedup(log_speedups.get(dep), (matched.get(dep, {}).get("logs") or {}).get("interval"),
                           min_log_intervals),
            # the matched comparison of each basis: what it is matched on, its sample and
            # each side's share of its uncertainty (the verdict reads these)
            "matched": matched.get(dep, {}),
            # a deployment without rounds whose steps carry their own token counts (engine
            # iteration lines; view iteration_loads): its decode steps and where the counts came from
            "iteration_steps": iteration_steps.get(dep),
            "prompt_tokens_median": d["prompt_tokens_median"],
            "prefill_round_share": d["prefill_round_share"],
            "latency_ms": dict(latency.get(dep, {})),
        }
        out_deployments.append(entry)
        notes += _deployment_notes(d, entry, latency_n.get(dep, {}), requests_present, steps_present)
        notes += _dropped_replicate_notes(dep, entry, intervals_95.get(dep))
        notes += _log_speedup_notes(dep, log_speedups.get(dep))
        notes += _benchmark_notes(dep, benchmarks.get(dep))

    categories = rows(con, """
        select c.deployment_id, c.category, c.num_requests, c.mean_accept_length, c.acceptance_rate,
               c.tokens_per_round, c.speedup, r.repeat_ratio, r.prompt_copy_ratio, r.repeat_accept_correlation,
               r.repeat_ratio_q1, r.repeat_ratio_median, r.repeat_ratio_q3,
               coalesce(r.num_requests, 0) as repetition_requests
        from accept_length_by_category as c
        left join category_repetition as r using (deployment_id, category)
        order by c.deployment_id, c.category""")
    quartiles = rows(con, "select * from repetition_quartiles order by deployment_id, category, quartile")
    repetition = rows(con, "select * from category_repetition order by deployment_id, category")
    structured = rows(con, """
        select deployment_id, structured_output, num_rounds, proposed_tokens, invalidated_tokens,
               invalidation_rate, mean_accept_length, fully_invalidated_rounds
        from structured_invalidation order by deployment_id, structured_output""")
    load_curve = [{"deployment_id": r["deployment_id"], "batch_bucket": r["batch_bucket"], **_pick(r, CURVE_KEYS),
                   "speedup_interval": bucket_intervals.get((r["deployment_id"], r["batch_bucket"])),
                   "matched_share": r["matched_share"]}
                  for r in rows(con, "select * from speedup_by_batch order by deployment_id, bucket_min")]
    context_curve = [{"deployment_id": r["deployment_id"], "context_bucket": r["context_bucket"],
                      **_pick(r, CURVE_KEYS)}
                     for r in rows(con, "select * from speedup_by_context order by deployment_id, bucket_min")]
    ledger = rows(con, """select deployment_id, batch_bucket, num_rounds, draft_ms, verify_ms, other_ms, round_ms,
                                 tokens_per_round, t0_ms, break_even_ms, condition_holds
                          from round_ledger order by deployment_id, bucket_min""")
    temperature = rows(con, """select deployment_id, temperature_bucket, num_requests, num_rounds, mean_accept_length,
                                      acceptance_rate, tokens_per_round
                               from accept_length_by_temperature
                               order by deployment_id, (select position from buckets
                                   where kind = 'temperature' and label = temperature_bucket)""")
    notes += _repetition_notes(repetition)
    intervals = rows(con, "select * from interval_acceptance order by deployment_id, hour, benchmark")
    interval_load = rows(con, """select * exclude (bucket_min) from interval_load
                                 order by deployment_id, bucket_min""")
    log_load_curve = [_pick(r, LOG_CURVE_KEYS)
                      for r in rows(con, "select * from log_speedup_by_batch order by deployment_id, bucket_min")]
    anomalies = rows(con, """select deployment_id, request_id, partition, kind, value, threshold, detail
                             from anomaly_listing
                             order by kind, value desc, request_id, partition, deployment_id""")
    anomaly_checks = rows(con, "select * from anomaly_checks order by deployment_id, kind")
    notes += _anomaly_notes(anomaly_checks)
    notes += [f"import: {n}" for n in _import_notes(con)]
    reconciliation = [_pick(r, RECONCILIATION_KEYS) for r in rows(con, """
        select * from reconciliation order by deployment_id, not is_reference, channel""")]
    notes += reconciliation_notes(reconciliation)
    mismatch = output_tokens_mismatch(con)
    changed, conflicted = versions.changes(con), versions.conflicts(con)
    notes = (_input_notes(summary) + versions.notes(changed, conflicted) + _mismatch_notes(mismatch)
             + _table_notes(con, summary) + notes)
    return {
        "schema_version": SCHEMA_VERSION,
        "input": {**_input(summary), "output_tokens_mismatch": mismatch, "deployment_changes": changed,
                  "deployment_conflicts": conflicted},
        "deployments": out_deployments,
        "categories": categories,
        "repetition": repetition,
        "repetition_quartiles": quartiles,
        "structured_output": structured,
        "load_curve": load_curve,
        "context_curve": context_curve,
        "round_ledger": ledger,
        "temperature": temperature,
        "slices": slices_document(con, slices),
        "intervals": intervals,
        "interval_load": interval_load,
        "log_load_curve": log_load_curve,
        "reconciliation": reconciliation,
        "anomalies": anomalies,
        "anomaly_checks": anomaly_checks,
        # read back from the database: the values the view used, whatever set them
        "anomaly_thresholds": rows(con, "select " + ", ".join(f"{t}() as {t}" for t in ANOMALY_THRESHOLDS)
                                   + ", repeat_n() as repeat_n")[0],
        "notes": notes,
    }


def _share(part: int | None, whole: int | None) -> float | None:
    return part / whole if part is not None and whole else None


def matched_comparisons(con: duckdb.DuckDBPyConnection) -> tuple[dict[str, dict], dict[tuple, list[float]]]:
    """Per speculative deployment and basis (rounds, tpot, logs): the matched speedup with its
    95 % interval and what it rests on (matched_speedup, analysis.uncertainty); and the
    interval of each batch bucket's speedup (basis rounds), keyed (deployment, bucket)."""
    from . import uncertainty

    out: dict[str, dict] = defaultdict(dict)
    buckets: dict[tuple, list[float]] = {}
    for r in rows(con, "select * from matched_speedup order by basis, deployment_id"):
        basis = BASES[r["basis"]]
        out[r["deployment_id"]][basis] = {
            "speedup": r["speedup"], "interval": None, "coverage": r["coverage"],
            "units": r["units"], "matched_units": r["matched_units"],
            "loads": _range(r["min_load"], r["max_load"]),
            "baseline_loads": _range(r["baseline_min_load"], r["baseline_max_load"]),
            "variance": None, "blocks": None, "block_length": None, "df": None, "unmatched": {}}
    # the units left out, per reason (matched_sums): why a speedup rests on fewer units, or on none
    for r in rows(con, "select basis, deployment_id, reason, sum(units) as units from matched_sums "
                       "where reason is not null group by all order by basis, deployment_id, reason"):
        entry = out.get(r["deployment_id"], {}).get(BASES[r["basis"]])
        if entry is not None:
            entry["unmatched"][r["reason"]] = int(r["units"])
    # steps with their own token counts (basis iterations): the speedup per batch bucket, as the
    # rounds' speedup_by_batch gives it for steps with rounds
    for r in rows(con, """
            select s.deployment_id, s.batch_bucket, sum(s.units) as units, cast(sum(s.tokens) as double) as tokens,
                   sum(cast(s.tokens as double) * w.level_ms + w.kappa * coalesce(cast(s.tx as double), 0)
                       order by s.load, s.time_block)
                   / sum(cast(s.time_ms as double)) as speedup
            from matched_sums as s
            join matched_weights as w on w.basis = s.basis and w.deployment_id = s.deployment_id and w.load = s.load
            where s.basis = 'iterations' and s.reason is null
            group by s.deployment_id, s.batch_bucket
            order by s.deployment_id, min(s.load)"""):
        entry = out.get(r["deployment_id"], {}).get("steps")
        if entry is not None:
            entry.setdefault("by_batch", []).append(
                {"batch_bucket": r["batch_bucket"], "speedup": r["speedup"], "interval": None,
                 "units": int(r["units"]), "tokens": int(r["tokens"])})
    max_blocks = con.execute("select intervals_max_blocks()").fetchone()[0]
    for basis, name in BASES.items():
        for dep, pair in uncertainty.matched_pairs(con, basis).items():
            found = uncertainty.matched_interval(pair, max_blocks=max_blocks)
            entry = out[dep][name]
            entry.update({"interval": found.interval["all"], "variance": found.variance_of("all"),
                          "blocks": found.blocks, "block_length": found.block_length, "df": found.df["all"]})
            if basis == "steps":
                for bucket in pair.subsets:
                    buckets[(dep, bucket)] = found.interval.get(bucket)
            if basis == "iterations":
                for row in entry.get("by_batch") or []:
                    row["interval"] = found.interval.get(row["batch_bucket"])
    context = {r["deployment_id"]: r["context_known"] for r in rows(
        con, "select deployment_id, bool_and(context_known) as context_known from matched_weights "
             "where basis = 'steps' group by deployment_id")}
    for dep, known in context.items():
        if "rounds" in out.get(dep, {}):
            out[dep]["rounds"]["context_known"] = known
    return dict(out), buckets


def _interval(row: dict | None, metric: str) -> list[float] | None:
    if row is None or row[f"{metric}_lo"] is None or row[f"{metric}_hi"] is None:
        return None
    return [row[f"{metric}_lo"], row[f"{metric}_hi"]]


def _log_speedup(row: dict | None, interval: list[float] | None, min_intervals: int) -> dict[str, Any]:
    """A deployment's logs speedup keys: null for one without engine-log intervals (or a baseline)."""
    if row is None:
        return {"log_speedup": None, "log_speedup_interval": None, "log_speedup_coverage": None,
                "log_speedup_evidence": None}
    return {
        "log_speedup": row["log_speedup"],
        "log_speedup_interval": interval if row["log_speedup"] is not None else None,
        "log_speedup_coverage": row["log_speedup_coverage"],
        "log_speedup_evidence": {
            "intervals": row["counted_intervals"],
            "baseline_intervals": row["baseline_counted_intervals"], "min_intervals": min_intervals,
            "usable_intervals": row["usable_intervals"], "baseline_usable_intervals": row["baseline_usable_intervals"],
            "left_out": {key.removesuffix("_intervals").removeprefix("intervals_"): row[key] for key in LOG_LEFT_OUT},
            "loads": _range(row["min_load"], row["max_load"]),
            "baseline_loads": _range(row["baseline_min_load"], row["baseline_max_load"]),
            "note": row["log_speedup_note"]},
    }


def _benchmark_notes(dep: str, row: dict | None) -> list[str]:
    if row is None:
        return []
    runs = row["runs"]
    return [f"{dep}: {runs} benchmark run{'s' if runs != 1 else ''} among its intervals "
            f"({', '.join(row['sources'])}): the benchmark's own traffic, not production; shown apart, marked "
            "(benchmark), in the intervals per hour, and left out of the logs speedup and of the acceptance "
            "against load"]


def _log_speedup_notes(dep: str, row: dict | None) -> list[str]:
    """Why a deployment's logs speedup is missing or partial, and the log intervals it left out."""
    if row is None:
        return []
    notes = []
    if row["log_speedup_note"]:
        notes.append(f"{dep}: {row['log_speedup_note']}")
    elif row["log_speedup_coverage"] is not None and row["log_speedup_coverage"] < 1:
        notes.append(f"{dep}: the logs speedup covers {row['log_speedup_coverage']:.1%} of the tokens in its usable "
                     "log intervals; the rest ran at running-request counts its baseline never logged often enough "
                     "([evidence] min_log_intervals) or between counts too far apart ([evidence] max_load_gap)")
    left = [f"{row[key]} {what}" for key, what in LOG_LEFT_OUT.items() if row[key]]
    if left:
        notes.append(f"{dep}: {sum(row[key] for key in LOG_LEFT_OUT)} of {row['log_intervals']} log intervals left "
                     f"out of the logs speedup: {', '.join(left)}")
    return notes


def _dropped_replicate_notes(dep: str, entry: dict, row: dict | None) -> list[str]:
    """A bootstrap replicate whose resample leaves the accept length undefined (its
    speculative rounds weigh nothing) is dropped: say how many."""
    if row is None or entry.get("mean_accept_length") is None:
        return []
    used = row["accept_length_replicates"]
    if used < row["replicates"]:
        return [f"{dep}: the mean accept length interval rests on {used:,} of {row['replicates']:,} bootstrap "
                "replicates; the others resampled its speculative rounds to none and were dropped"]
    return []


def _import_notes(con) -> list[str]:
    """Notes the importers left beside the traces (TRACES/import_notes/), if any."""
    try:
        # distinct: every engine and run of a recorder may leave the same note
        return [n for (n,) in con.execute("select distinct note from import_notes order by all").fetchall()]
    except duckdb.Error:
        return []


def _repetition_notes(repetition: list[dict]) -> list[str]:
    notes = []
    if not repetition:
        return notes
    n = repetition[0]["repeat_n"]
    without = sum(r["requests_without_tokens"] for r in repetition)
    if without:
        notes.append(f"{without} {'request has' if without == 1 else 'requests have'} no prompt_token_ids or "
                     f"output_token_ids: {'it is' if without == 1 else 'they are'} left out of the repetition "
                     "statistics (repeat_ratio)")
    empty = [f"{r['deployment_id']}/{r['category']}" for r in repetition if r["repeat_ratio"] is None]
    if empty and len(empty) < len(repetition):
        notes.append(f"repeat_ratio is null for {', '.join(empty)}: no request there has token ids and an "
                     f"output position with {n} tokens of context")
    elif empty:
        notes.append("repeat_ratio is null everywhere: no request carries prompt_token_ids and output_token_ids")
    return notes


def _anomaly_notes(checks: list[dict]) -> list[str]:
    """One note per rule that could not check every request, counting those requests."""
    missing = {kind: sum(c["not_checked"] for c in checks if c["kind"] == kind) for kind in ANOMALY_KINDS}
    why = {"looping": "have no output_token_ids",
           "no_acceptance": "have no clean rounds",
           "stall": "have no known max_stall (no first_token_time or no round with a clean step)"}
    return [f"{n} requests {why[kind]}: they are not checked for {kind} (requests to look at)"
            for kind, n in missing.items() if n]


def _input(summary: LoadSummary) -> dict[str, Any]:
    by_reason: dict[str, int] = defaultdict(int)
    for table_reasons in summary.rejected.values():
        for reason, n in table_reasons.items():
            by_reason[reason] += n
    return {
        **{t: summary.rows_read.get(t, 0) for t in TABLE_ORDER},
        # rows kept after the row rules and after identical copies (a deployment row per
        # daily partition, say) were merged into one
        "clean_rows": {t: summary.rows_clean.get(t, 0) for t in TABLE_ORDER},
        "rejected_rows": summary.rejected_total,
        "rejected_by_reason": dict(sorted(by_reason.items())),
        "rejected_by_table": {t: dict(sorted(r.items())) for t, r in summary.rejected.items() if r},
    }


def output_tokens_mismatch(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, Any]]:
    """Per deployment with any, the requests whose output_tokens differ from 1 + Σ committed
    of their clean rounds (view output_tokens_mismatch_examples): how many, of how many
    checked, and the first keys in key order."""
    found = con.execute("""
        select deployment_id, any_value(mismatched_requests), any_value(checked_requests),
               list(request_key order by example)
        from output_tokens_mismatch_examples group by deployment_id order by deployment_id""").fetchall()
    return {dep: {"requests": n, "checked_requests": checked, "examples": examples}
            for dep, n, checked, examples in found}


def _signed_share(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:+.1f} %"


def reconciliation_notes(rows_: list[dict[str, Any]]) -> list[str]:
    """One note per channel that disagrees with its deployment's reference channel, and per deployment
    whose channels share no time."""
    notes = []
    for r in rows_:
        dep, channel, reference = r["deployment_id"], r["channel"], r["reference_channel"]
        if not r["has_common_span"]:
            if r["is_reference"]:
                notes.append(f"{dep}: its {r['num_channels']} channels of acceptance counts share no time span, so "
                             "they are not compared (reconciliation); were they imported with the same clock?")
            continue
        if not r["disagrees"]:
            continue
        parts = [f"accepted {r['accepted']:,} ({_signed_share(r['accepted_difference'])})",
                 f"drafted {r['drafted']:,} ({_signed_share(r['drafted_difference'])})"]
        if r["accept_length_difference"] is not None:
            parts.append(f"mean accept length {r['mean_accept_length']:.3f} "
                         f"({_signed_share(r['accept_length_difference'])})")
        if r["position_difference"] is not None:
            parts.append(f"per-position accepted counts up to {r['position_difference'] * 100:.1f} % apart")
        beyond = (" Its rows reach beyond the common span, so it may count traffic the others did not see."
                  if r["extends_beyond_span"] else "")
        notes.append(f"{dep}: the channels disagree: {channel} against {reference} over "
                     f"{r['span_start']} – {r['span_end']}: " + ", ".join(parts)
                     + f" (more than 1 % apart; reconciliation).{beyond}")
    return notes


def _mismatch_notes(mismatch: dict[str, dict[str, Any]]) -> list[str]:
    return [f"{dep}: output_tokens differs from 1 + the tokens its clean rounds commit for {m['requests']:,} of "
            f"{m['checked_requests']:,} requests (output_tokens_mismatch: rounds missing, rejected or miscounted); "
            f"their rounds are still analysed. E.g. {'; '.join(m['examples'])}"
            for dep, m in mismatch.items()]


def _input_notes(summary: LoadSummary) -> list[str]:
    notes = list(summary.notes)
    if summary.rejected_total:
        parts = ", ".join(f"{reason} {n}" for reason, n in _input(summary)["rejected_by_reason"].items())
        notes.append(f"{summary.rejected_total} rows were rejected and left out ({parts}); "
                     "see the rejected_rows table")
    for table in TABLE_ORDER:
        if not summary.present.get(table):
            if table == "intervals":
                continue  # optional aggregate counters: their absence loses nothing
            what = {"requests": "latency, capacity and categories are unavailable",
                    "steps": "round times, speedup and the load curve are unavailable",
                    "rounds": "only the interval views are available (interval_acceptance); per-round acceptance, "
                              "positions, truncation, speedup and the load curve are unavailable"}.get(table, "")
            notes.append(f"the {table} table is absent: {what}".rstrip(": "))
        elif summary.rows_clean.get(table, 0) == 0:
            notes.append(f"the {table} table has no clean rows: the metrics it feeds are null")
    return notes


def _table_notes(con, summary: LoadSummary) -> list[str]:
    notes = []
    overlapping, unknown_parts = con.execute(
        "select coalesce(sum(overlapping_steps), 0), coalesce(sum(steps_without_parts), 0) from step_part_counts"
    ).fetchone()
    if overlapping:
        notes.append(f"{overlapping} steps have draft_ms + verify_ms > duration_ms (drafting overlaps "
                     "verification): their other_ms is unknown")
    if unknown_parts:
        notes.append(f"{unknown_parts} steps lack draft_ms or verify_ms: their other_ms is unknown")
    no_step = con.execute("select coalesce(sum(num_rounds), 0) from round_cells where not has_step"
                          ).fetchone()[0] if summary.present.get("steps") else 0
    if no_step:
        notes.append(f"{no_step} {'round has' if no_step == 1 else 'rounds have'} no clean step: "
                     f"{'it counts' if no_step == 1 else 'they count'} for acceptance only, not for timing")
    no_context = con.execute("select coalesce(sum(num_rounds), 0) from round_cells where context_bucket is null"
                             ).fetchone()[0]
    if no_context and summary.rows_clean.get("rounds"):
        notes.append(f"{no_context:,} round{'s lack' if no_context != 1 else ' lacks'} context_len: "
                     f"{'they are' if no_context != 1 else 'it is'} left out of the context curve")
    return notes


def _counted(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


UNCOVERED_WHY = {
    "no_baseline": "it has no matched baseline",
    "no_baseline_loads": "the baseline measured no load with enough steps and requests ([evidence] floors)",
    "load_gap": "the baseline's nearest measured loads lie too far apart ([evidence] max_load_gap)",
    "below_baseline_loads": "below every load the baseline measured",
    "above_baseline_loads": "above every load the baseline measured",
    "context_out_of_range": "at contexts the baseline's steps never held there ([evidence] context_margin)",
}


def _range(low, high) -> list[float] | None:
    return None if low is None or high is None else [float(low), float(high)]


def batch_range(low, high) -> str:
    """ "batch 70" or "batch 65-128": a range of loads as the report names it."""
    low, high = int(round(float(low))), int(round(float(high)))
    return f"batch {low}" if low == high else f"batch {low}-{high}"


def uncovered_note(dep: str, entry: dict) -> str | None:
    """Where the deployment's steps ran that its speedup leaves out, and why, with the share of
    its committed tokens there (speedup_uncovered)."""
    parts = []
    for u in entry["uncovered_buckets"]:
        if not u["committed_share"]:
            continue
        where = batch_range(u["min_batch_size"], u["max_batch_size"])
        if u["reason"] == "context_out_of_range" and u["min_context"] is not None:
            where += f" at {u['min_context']:,.0f}-{u['max_context']:,.0f} tokens of context per request"
        parts.append(f"{where} ({u['committed_share']:.1%} of its tokens): {UNCOVERED_WHY.get(u['reason'], u['reason'])}")
    if not parts:
        return None
    base = next((u for u in entry["uncovered_buckets"] if u.get("baseline_min_load") is not None), None)
    measured = (f"; {entry['baseline_id']} measured {batch_range(base['baseline_min_load'], base['baseline_max_load'])}"
                if base else "")
    return f"{dep}: left out of the speedup: " + "; ".join(parts) + measured


def _deployment_notes(d: dict, entry: dict, latency_n: dict, requests_present: bool,
                      steps_present: bool) -> list[str]:
    dep = d["deployment_id"]
    notes = []
    left_out = uncovered_note(dep, entry) if d["method"] != "none" else None
    if left_out:
        notes.append(left_out)
    if d["num_rounds"] == 0:
        notes.append(f"{dep}: no clean rounds, so every acceptance metric is null")
    elif d["num_spec_rounds"] == 0:
        if d["method"] == "none":
            notes.append(f"{dep}: plain decoding (a baseline), so mean_accept_length, acceptance_rate and "
                         "speedup are null")
        else:
            notes.append(f"{dep}: no round drafted a token, so mean_accept_length and acceptance_rate are null")
    if d["method"] != "none" and d["speedup"] is None and d["speedup_note"]:
        notes.append(f"{dep}: {d['speedup_note']}")
    elif d["speedup"] is not None and d["speedup_coverage"] is not None and d["speedup_coverage"] < 1:
        notes.append(f"{dep}: speedup covers {d['speedup_coverage']:.1%} of its committed tokens; the rest ran in "
                     "prefill steps, without a step"
                     + (", or at loads and contexts left out (above)" if left_out else ""))
    if requests_present:
        missing = [m for m in LATENCY_METRICS if not latency_n.get(m)]
        if missing:
            notes.append(f"{dep}: latency {', '.join(missing)} is null: no clean request (or, for itl and "
                         "max_stall, no round with a clean step) has the times it needs")
        if entry["capacity"]["preemptions_per_request"] is None and entry["capacity"]["completed_requests"]:
            notes.append(f"{dep}: preemptions_per_request is unknown: no requests file has num_preemptions")
        if steps_present and entry["capacity"]["candidate_kv_share"] is None:
            notes.append(f"{dep}: candidate_kv_share is unknown: kv_capacity_tokens is not set or there are no steps")
    return notes
