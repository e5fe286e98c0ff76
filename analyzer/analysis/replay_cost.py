"""The round cost behind ``specan replay-ngram``'s predicted speedup, and its interval.

One formula for every row of the replay (a deployment, or one of its categories):

    predicted_speedup = tpr · Σ_b t0(b)·n(b) / Σ_b n(b)·T_round(b)

over the decode-only batch buckets b it covers, where n(b) is the row's decode-only
rounds with a clean step in b (the weights: where its traffic ran), tpr the replay's
tokens per round, pooled over the row's replayed requests, and T_round(b) the round
time assumed in b. Rows differ only in where t0(b) and T_round(b) come from.

- A speculative deployment (``own_round_time``): t0(b) is its matched baseline's
  (``speedup_by_batch``) and T_round(b) its own measured round time, time(b) / n(b):
  the cost it paid, whatever it drafted with.
- A baseline (method ``none``) asks what turning n-gram drafting on would give. t0(b)
  is its own decode time per token (view ``baseline_decode_buckets``) in the buckets
  with at least ``[evidence] min_baseline_steps`` decode steps and
  ``min_baseline_requests`` requests; the others are left out, with the reason. The
  lookup is taken to cost nothing (a CPU search of the request's own tokens); what
  costs is verifying the drafts, d̄ = the replay's drafted tokens per round. T_round(b)
  is, by the first that applies:

  1. ``per_token`` (``--verify-cost-ms-per-token c``): plain(b) + c · B̄(b) · d̄, each
     drafted token of the step's B̄(b) requests adding c ms to the step;
  2. ``cost_fit``: the round-cost fit (``tuning.round_cost_fits``: T = α + β_tokens·X +
     β_batch·B [+ q·X²] per batch bucket) of an ``ngram`` deployment matched to this
     baseline (the one with the most decode steps), at X = B̄(b)·(1 + d̄) tokens
     verified and B = B̄(b). A bucket where that deployment has no usable fit is left
     out: no steps there, a fit that can't price a token (X never varied, or X and B
     move together), or an X outside the fit's measured range with R² below
     ``[evidence] min_fit_r2``, or a fitted time that is not positive;
  3. ``free_verify``: plain(b), as if verification were free (memory-bound decode):
     the speedup is then tpr itself, an upper bound.

  plain(b) is the baseline's decode round time and B̄(b) = Σ rounds·B / Σ rounds its
  round-mean batch size. The free-verify figure is always given beside
  (``predicted_speedup_upper_bound``).

The interval is a Poisson bootstrap over the replayed requests in the 256 groups of
``request_group_cells`` (the ``request_group`` macro): each replicate weights the
groups' replayed rounds, committed and drafted tokens, so tpr and d̄ move; t0(b), n(b)
and the cost model are held fixed. ``[intervals] replicates`` and ``seed`` set it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

from .config import Evidence, Intervals
from .tuning import predict_round_ms, round_cost_fits

# the request groups of the report's bootstrap (the request_group macro, sql/macros.sql)
GROUPS = 256
OWN, COST_FIT, PER_TOKEN, FREE_VERIFY = "own_round_time", "cost_fit", "per_token", "free_verify"

RoundTime = Callable[[np.ndarray], np.ndarray]   # drafted tokens per round -> round time, ms


@dataclass
class Bucket:
    """One batch bucket of a deployment: its t0, and for a baseline what its cost rests on."""

    batch_bucket: str
    t0_ms: float | None
    left_out: str | None = None          # not enough data for a baseline's t0
    plain_ms: float | None = None        # a baseline's decode round time
    mean_batch_size: float | None = None
    decode_steps: int | None = None
    decode_requests: int | None = None
    fit: dict[str, Any] | None = None    # the cost source's fit in this bucket


@dataclass
class DeploymentCost:
    """How a deployment's rounds are priced: the assumption, its source and its buckets."""

    deployment_id: str
    assumption: str
    buckets: dict[str, Bucket] = field(default_factory=dict)
    source: str | None = None            # the ngram deployment whose fit is used
    per_token_ms: float | None = None
    note: str | None = None              # why there is no prediction at all
    source_note: str | None = None       # why no measured cost is used (baselines)

    @property
    def is_baseline(self) -> bool:
        return self.assumption != OWN


def deployment_costs(con: duckdb.DuckDBPyConnection, methods: dict[str, str], speedup_notes: dict[str, str | None],
                     *, evidence: Evidence, per_token_ms: float | None) -> dict[str, DeploymentCost]:
    """The cost of every deployment: its own round time for a speculative one, an assumed
    one for a baseline."""
    costs: dict[str, DeploymentCost] = {}
    for dep, bucket, t0 in con.execute(
            "select deployment_id, batch_bucket, t0_ms from speedup_by_batch where t0_ms is not null "
            "order by deployment_id, bucket_min").fetchall():
        costs.setdefault(dep, DeploymentCost(dep, OWN)).buckets[bucket] = Bucket(bucket, t0)
    for dep, method in methods.items():
        if method != "none":
            cost = costs.setdefault(dep, DeploymentCost(dep, OWN))
            cost.note = speedup_notes.get(dep)
    baselines = sorted(dep for dep, method in methods.items() if method == "none")
    if baselines:
        costs.update(_baseline_costs(con, baselines, evidence, per_token_ms))
    return costs


def _baseline_costs(con, baselines: list[str], evidence: Evidence,
                    per_token_ms: float | None) -> dict[str, DeploymentCost]:
    buckets: dict[str, dict[str, Bucket]] = {dep: {} for dep in baselines}
    for dep, bucket, steps, requests, t0, plain, mean_b in con.execute("""
            select deployment_id, batch_bucket, decode_steps, decode_requests, t0_ms, round_ms,
                   round_mean_batch_size
            from baseline_decode_buckets order by deployment_id, bucket_min""").fetchall():
        short = []
        if steps < evidence.min_baseline_steps:
            short.append(f"{steps:,} decode steps (min_baseline_steps {evidence.min_baseline_steps})")
        if requests < evidence.min_baseline_requests:
            short.append(f"{requests:,} requests (min_baseline_requests {evidence.min_baseline_requests})")
        buckets[dep][bucket] = Bucket(bucket, t0, "not enough data: " + " and ".join(short) if short else None,
                                      plain, float(mean_b), int(steps), int(requests))
    # ngram deployments matched to each baseline, with their decode steps: the cost sources
    siblings: dict[str, list[tuple[int, str]]] = {dep: [] for dep in baselines}
    others: dict[str, list[str]] = {dep: [] for dep in baselines}
    for dep, method, baseline, steps in con.execute("""
            select m.deployment_id, m.method, m.baseline_id, coalesce(sum(c.n_steps), 0)
            from matched_baseline as m
            left join cost_model as c on c.deployment_id = m.deployment_id and c.context_bucket is null
            where m.baseline_id is not null
            group by m.deployment_id, m.method, m.baseline_id
            order by m.deployment_id""").fetchall():
        if baseline in siblings:
            if method == "ngram" and steps:
                siblings[baseline].append((int(steps), dep))
            else:
                others[baseline].append(dep)
    costs = {}
    for dep in baselines:
        cost = DeploymentCost(dep, FREE_VERIFY, buckets[dep])
        if not buckets[dep]:
            cost.note = "this baseline has no decode-only round with a clean step"
        if per_token_ms is not None:
            cost.assumption, cost.per_token_ms = PER_TOKEN, per_token_ms
        elif siblings[dep]:
            _, source = min(siblings[dep], key=lambda s: (-s[0], s[1]))
            cost.assumption, cost.source = COST_FIT, source
            fits = {f["batch_bucket"]: f for f in round_cost_fits(con, source)}
            for bucket in cost.buckets.values():
                bucket.fit = fits.get(bucket.batch_bucket)
        elif not cost.note:
            matched = ", ".join(others[dep])
            cost.source_note = (f"no ngram deployment is matched to {dep}, so verification is priced at 0"
                                + (f" ({matched}: its round cost includes a draft model's passes)" if matched
                                   else ""))
        costs[dep] = cost
    return costs


# --------------------------------------------------------------------------- round times

def round_time(cost: DeploymentCost, bucket: Bucket, assumption: str, dpr: float,
               evidence: Evidence) -> tuple[RoundTime | None, str | None]:
    """The round time of a baseline's bucket under ``assumption`` as a function of the
    drafted tokens per round (vectorised), or None with the reason it can't be priced
    at ``dpr``, the point estimate."""
    plain, mean_b = bucket.plain_ms, bucket.mean_batch_size
    if assumption == FREE_VERIFY:
        return (lambda d: np.full(np.shape(d), plain)), None
    if assumption == PER_TOKEN:
        c = cost.per_token_ms
        return (lambda d: plain + c * mean_b * np.asarray(d, dtype=float)), None
    fit, source = bucket.fit, cost.source
    if fit is None:
        return None, f"{source} has no decode steps in this bucket"
    if fit["singular"] or fit["beta_tokens"] is None:
        return None, (f"{source}'s round-cost fit can't price a verified token here "
                      f"({fit['singular_reason'] or 'the normal equations are singular'})")
    tokens = mean_b * (1 + dpr)
    lo, hi = fit["tokens_range"]
    r2 = fit["r2"]
    if not lo <= tokens <= hi and (r2 is None or r2 < evidence.min_fit_r2):
        shown = "unknown" if r2 is None else f"{r2:.2f}"
        return None, (f"X = {tokens:.1f} tokens per step lies outside {source}'s measured {lo}-{hi} and its fit's "
                      f"R² ({shown}) is below min_fit_r2 ({evidence.min_fit_r2:g})")
    if predict_round_ms(fit, tokens, mean_b) <= 0:
        return None, f"{source}'s fitted round time at X = {tokens:.1f} is not positive"
    return (lambda d: predict_round_ms(fit, mean_b * (1 + np.asarray(d, dtype=float)), mean_b)), None


# --------------------------------------------------------------------------- the prediction of one row

@dataclass
class Replayed:
    """A row's replay: its pooled totals and the same per request group (GROUPS × 3:
    rounds, committed, drafted)."""

    rounds: int
    committed: int
    drafted: int
    groups: np.ndarray

    @property
    def tokens_per_round(self) -> float:
        return self.committed / self.rounds

    @property
    def drafts_per_round(self) -> float:
        return self.drafted / self.rounds


def bootstrap_weights(intervals: Intervals) -> np.ndarray:
    """Poisson(1) weights, replicates × GROUPS, the same in every run for a seed."""
    return np.random.default_rng(intervals.seed).poisson(1.0, size=(intervals.replicates, GROUPS))


def predict(replayed: Replayed, cells: list[tuple[str, int, float]], all_rounds: int, cost: DeploymentCost | None,
            *, mix: Replayed | None = None, evidence: Evidence, weights: np.ndarray,
            min_requests: int | None = None, num_requests: int = 0) -> dict[str, Any]:
    """The predicted speedup of one row from its decode cells (batch_bucket, rounds, time_ms)
    and its deployment's cost: the keys predicted_speedup* and round_cost_*.

    ``mix`` is the replay of every request the row's requests share steps with (its
    deployment, for a category row): a step verifies the drafts of all its requests, so
    a baseline's round time is priced at the mix's drafts per round, not the row's own.
    None for a deployment row (it is its own mix)."""
    deployment_row = mix is None
    mix = mix or replayed
    out: dict[str, Any] = {"predicted_speedup": None, "predicted_speedup_interval": None,
                           "predicted_speedup_coverage": None, "predicted_speedup_note": None,
                           "predicted_speedup_upper_bound": None, "predicted_speedup_upper_bound_interval": None,
                           "round_cost_assumption": cost.assumption if cost else None,
                           "round_cost_source": cost.source if cost else None,
                           "round_cost_statement": None, "predicted_by_batch": None}
    if replayed.rounds == 0:
        out["predicted_speedup_note"] = "no rounds replayed: every output has fewer than 2 tokens"
        return out
    if cost is None or cost.note:
        out["predicted_speedup_note"] = cost.note if cost else "no speedup: no matched baseline"
        return out
    dpr = mix.drafts_per_round
    out["round_cost_statement"] = statement(cost, dpr)
    draws = _draws(replayed, mix, weights)
    point = (replayed.tokens_per_round, dpr)
    if not cost.is_baseline:
        used = [(cost.buckets[b].t0_ms, n, _constant(time_ms / n)) for b, n, time_ms in cells
                if n and b in cost.buckets]
        if not used:
            out["predicted_speedup_note"] = ("no speedup: " + ("this deployment has" if deployment_row else
                                             "this category has") + " no decode-only round in a batch "
                                             "bucket that the baseline covers")
            return out
        out.update(_speedup(point, used, draws, "predicted_speedup"))
        out["predicted_speedup_coverage"] = sum(n for _, n, _ in used) / all_rounds if all_rounds else None
        return out

    # a baseline: the chosen assumption and the free-verify upper bound, bucket by bucket
    if min_requests is not None and num_requests < min_requests:
        out["predicted_speedup_note"] = (f"not enough data: {num_requests:,} "
                                         f"request{'s' if num_requests != 1 else ''} replayed "
                                         f"(min_baseline_requests {min_requests})")
        return out
    rows, main, upper = [], [], []
    for b, n, _ in cells:
        bucket = cost.buckets.get(b)
        if bucket is None or not n:
            continue
        detail: dict[str, Any] = {"batch_bucket": b, "decode_steps": bucket.decode_steps,
                                  "decode_requests": bucket.decode_requests, "num_rounds": n,
                                  "t0_ms": bucket.t0_ms, "mean_batch_size": bucket.mean_batch_size,
                                  "tokens_verified_per_step": bucket.mean_batch_size * (1 + dpr),
                                  "round_ms": None, "speedup": None, "speedup_upper_bound": None,
                                  "fit_r2": bucket.fit["r2"] if bucket.fit else None, "left_out": bucket.left_out}
        rows.append(detail)
        if bucket.left_out:
            continue
        free, _ = round_time(cost, bucket, FREE_VERIFY, dpr, evidence)
        upper.append((bucket.t0_ms, n, free))
        detail["speedup_upper_bound"] = replayed.tokens_per_round * bucket.t0_ms / float(free(np.array(dpr)))
        timed, reason = round_time(cost, bucket, cost.assumption, dpr, evidence)
        if timed is None:
            detail["left_out"] = reason
            continue
        main.append((bucket.t0_ms, n, timed))
        detail["round_ms"] = float(timed(np.array(dpr)))
        detail["speedup"] = replayed.tokens_per_round * bucket.t0_ms / detail["round_ms"]
    if deployment_row:
        out["predicted_by_batch"] = rows
    if upper:
        out.update(_speedup(point, upper, draws, "predicted_speedup_upper_bound"))
    if not main:
        out["predicted_speedup_note"] = ("not enough data: no batch bucket of this baseline clears the "
                                         "[evidence] floors" if not upper else
                                         "no batch bucket can be priced: " + "; ".join(
                                             sorted({r["left_out"] for r in rows if r["left_out"]})))
        return out
    out.update(_speedup(point, main, draws, "predicted_speedup"))
    out["predicted_speedup_coverage"] = sum(n for _, n, _ in main) / all_rounds if all_rounds else None
    return out


def statement(cost: DeploymentCost, dpr: float) -> str:
    """The round-cost assumption in one sentence, to stand beside the number."""
    if cost.assumption == OWN:
        return "keeps this deployment's own measured round time per batch bucket"
    drafts = f"the replay's {dpr:.2f} drafted tokens per request per round"
    if cost.assumption == COST_FIT:
        r2 = [b.fit["r2"] for b in cost.buckets.values() if b.fit and b.fit["r2"] is not None and not b.left_out]
        shown = (f", R² {min(r2):.2f}" + (f"-{max(r2):.2f}" if max(r2) - min(r2) >= 0.005 else "")) if r2 else ""
        return f"if verifying {drafts} costs what it costs {cost.source} (its round-cost fit per batch bucket{shown})"
    if cost.assumption == PER_TOKEN:
        return (f"if verifying {drafts} adds {cost.per_token_ms:g} ms per drafted token of the step "
                f"(--verify-cost-ms-per-token) to {cost.deployment_id}'s own decode step time")
    return "if verification were free (its own plain decode step time as the round time): an upper bound"


def _constant(value: float) -> RoundTime:
    return lambda d: np.full(np.shape(d), value)


def _draws(replayed: Replayed, mix: Replayed, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each replicate's tokens per round (of the row) and drafts per round (of its mix),
    both from the same draw of the request groups; replicates that drew no round of the
    row are dropped."""
    rounds, committed = weights @ replayed.groups[:, 0], weights @ replayed.groups[:, 1]
    mix_rounds, mix_drafted = weights @ mix.groups[:, 0], weights @ mix.groups[:, 2]
    keep = rounds > 0     # then the mix, which holds the row's requests, drew rounds too
    return committed[keep] / rounds[keep], mix_drafted[keep] / mix_rounds[keep]


def _speedup(tpr_dpr: tuple[float, float], used: list[tuple[float, int, RoundTime]], draws, key: str) -> dict[str, Any]:
    """tpr · Σ t0·n / Σ n·T(d̄), at the point estimate (tpr, d̄) and over the bootstrap draws."""
    baseline_ms = sum(t0 * n for t0, n, _ in used)

    def value(tpr: np.ndarray, dpr: np.ndarray) -> np.ndarray:
        return tpr * baseline_ms / sum(n * timed(dpr) for _, n, timed in used)

    point = float(value(np.array(tpr_dpr[0]), np.array(tpr_dpr[1])))
    tpr, dpr = draws
    interval = None
    if len(tpr):
        lo, hi = np.quantile(value(tpr, dpr), [0.025, 0.975])
        interval = [float(lo), float(hi)]
    return {key: point, f"{key}_interval": interval}
