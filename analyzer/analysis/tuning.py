"""Which speculation length pays, per batch size? A round-cost model and a recommendation.

``recommend(con, deployment_id)`` answers ``specan recommend`` (docs/commands.md): for
each batch bucket b it predicts the speedup of every speculation length γ from
0 to the deployment's num_speculative_tokens, picks the best, and writes the
choice as vLLM's ``num_speculative_tokens_per_batch_size`` ranges.

The three ingredients (docs/commands.md)
-----------------------------------
1. E[L](γ) = 1 + Σ_{i ≤ γ} Π_{j ≤ i} a_j, from the conditional acceptance a_j of
   ``position_acceptance``, pooled over all of the deployment's rounds
   (``expected_length``). Unknown past the deepest position any round drafted.
2. T_round(γ, b), the round time at γ in bucket b. Where steps whose requests
   all proposed γ drafts ran in b (view ``gamma_costs``), their measured mean
   round time (each step weighted by its rounds, as docs/metrics.md counts round
   time). Elsewhere the bucket's fitted round-cost model (below), evaluated at
   the batch size a round of b sees on average, B̄ = Σ rounds·B / Σ rounds,
   and X = B̄ · (1 + γ · r) tokens verified, where r is the bucket's verified
   nodes per draft (1 for chain methods; for tree methods the observed ratio,
   so a tree keeps its width as γ changes).
3. t0(b), the matched baseline's time per token in b (``baseline_t0``, read
   through ``speedup_by_batch``, which also gives the measured speedup(b)).

predicted_speedup(γ, b) = t0(b) · E[L](γ) / T_round(γ, b); γ = 0 is plain decoding,
1.0 by definition. The recommended k maximises it (the smaller γ on a tie), and 0
wins unless some γ > 0 beats 1.0.

The round-cost model
--------------------
Per deployment and batch bucket, over its decode-only steps (view ``cost_steps``),
ordinary least squares of the step's duration T on X = tokens verified,
Σ (coalesce(num_verified_nodes, num_draft_tokens) + 1), and B = batch size:

    T = α + β_tokens · X + β_batch · B  [+ q · X²]

The SQL view ``cost_model`` holds the sums of the normal equations, centred on
the bucket means (Σx², Σxb, Σb², Σx³, Σx⁴, Σx²b, Σy², Σxy, Σby, Σx²y) so they
stay well conditioned; numpy solves the small system.

The slopes are constrained: β_tokens ≥ 0, β_batch ≥ 0 and q ≥ 0, since no GPU
verifies a token, or serves one more request, in negative time (and with q ≥ 0,
β_tokens ≥ 0 makes the cost rise with X everywhere). This is non-negative least
squares, solved exactly from the sums: the constrained optimum is the
unconstrained fit on the slopes it leaves free, the others held at 0, so with at
most three slopes the fit tries every subset and keeps the feasible one with the
lowest SSE (the empty one, α alone, always is). No design matrix is needed, and
no solver beyond numpy. The fit says which slopes a constraint held at 0
(``bound``) and what the unconstrained fit gave them (``unconstrained``). α is
not constrained: it is the time at X = 0 and B = 0, which no step has, and a
bucket's fit is local (at batch 65-128, X ≥ 130), so a negative α is the
extrapolation of a straight line that is positive wherever steps ran. A
predicted round time that is not positive is not used (``_round_time``).

A regressor that never
varies in the bucket is dropped (B in buckets ``1`` and ``2``; its effect is in α).
When X is (almost) proportional to B, which happens when γ never varied, the
system is singular: B is dropped, the fit is marked ``singular`` with the
reason, and it is not used to extrapolate. Nor is a fit whose R² is below
min_fit_r2 (the gates TOML's [evidence]; read from the connection's macro,
``evidence_floors``): it explains too little of the step times to predict a
length that never ran, so its bucket uses measured round times only, and its
``why`` says the R² and the floor (``extrapolates`` in the fit).

Rule for the quadratic term q·X²: it is tried only with at least 4 distinct X
values in the bucket and at least one residual degree of freedom left, and kept
when it lowers the Bayesian information criterion, n · ln(SSE_lin / SSE_quad) >
ln(n), i.e. when it improves the fit by more than one parameter's worth.
A residual sum below 1e-9 of the total sum of squares counts as an exact fit:
an exact linear fit keeps the linear model, and an exact quadratic beats an
inexact linear one.

Reported per fit: the coefficients in the original units (a held one is 0.0), the
held ones (bound) and their unconstrained values, R² = 1 − SSE / SST
(null when every step took the same time), RMSE = √(SSE / n), n_steps, the
observed γ list, whether γ varied, and the mean residual of the steps at each
observed γ (measured minus fitted): a residual far from 0 says the model bends
where the data do not.

γ varied in a bucket when its steps ran at least two lengths (> 0), or when it
has steps whose requests drafted different numbers (mixed steps, plain decode
steps beside drafting ones, or steps in which some requests proposed nothing, as
an n-gram lookup without a match does) and the fit is not singular: X then varies
apart from B, which is what extrapolating in γ needs. Where γ
never varied, cost can't be extrapolated: the bucket keeps its observed γ when
its measured speedup(b) (``speedup_by_batch``) is above 1, and gets 0 otherwise,
with a note. Only the observed γ gets a predicted speedup there.

A step's γ is the number of drafts its requests *proposed*, num_draft_tokens +
num_invalidated_tokens, when every request of the step that proposed any proposed
the same number (``cost_steps.gamma``): that is the length the config sets, and a
step whose grammar cut some drafts still paid for drafting them. A request that
proposed nothing (no n-gram match, or speculation off) decoded plainly: it is no
speculation length, so an ngram step of requests proposing 4 or nothing ran at
γ = 4, and the observed γ of a bucket lists lengths > 0. Such a step verified fewer
tokens than one at γ in which every request drafts, so its time is in the fit
(through X) but is no measured T_round(γ) (``gamma_costs``); a step in which no
request proposed is a plain decode step, γ = 0 in ``gamma_costs``. X, as docs/commands.md says,
counts what was verified; so a step with grammar cuts verifies fewer tokens than
it drafted, which the fit can't see (it bends the fit at small X in bucket 1).

``marginal_returns(con)`` gives, per bucket and per position i, what the i-th
draft adds (ΔE[L]_i = Pr(K ≥ i) = marginal_gain_i) and costs (ΔT_i = T_round(i) −
T_round(i − 1), measured where both lengths were measured, else both from the
fit), and whether it pays: E(i)/T(i) > E(i−1)/T(i−1), equivalently ΔE/E(i−1) >
ΔT/T(i−1). T_round(0) is t0(b), plain decoding, so position 1 pays exactly when
predicted_speedup(1) > 1; without t0 it is the deployment's own round time at 0.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import duckdb
import numpy as np

from ..errors import InputProblem
from . import buckets

BUCKETS = buckets.labels("batch")
BUCKET_BOUNDS = buckets.bounds("batch")
# vLLM 0.32.0 documents Dynamic SD as tested with these methods only.
DYNAMIC_SD_METHODS = ("eagle", "eagle3", "dflash")
# How the report says so of a per-batch config offered to another method ("an option ...").
DYNAMIC_SD_TESTED = "vLLM 0.32.0 documents as tested with EAGLE, EAGLE-3 and DFlash only"


def per_batch_documented(method: str | None) -> bool:
    """Whether vLLM documents num_speculative_tokens_per_batch_size (Dynamic SD) for ``method``:
    for any other, the report offers the single ``num_speculative_tokens`` instead."""
    return method in DYNAMIC_SD_METHODS

EXACT_FIT = 1e-9        # SSE / SST below this is an exact fit
SINGULAR = 1e-9         # smallest eigenvalue of the regressors' correlation matrix
MIN_DISTINCT_FOR_QUADRATIC = 4
NO_DRAFT_NOTE_SHARE = 0.05  # note when more rounds than this proposed no draft at all
# A context bucket's own round-cost fit is used in a batch bucket from this many decode
# steps on; with fewer, the batch bucket's fit over every context stands in.
MIN_CONTEXT_FIT_STEPS = 20


def evidence_floors(con: duckdb.DuckDBPyConnection) -> dict[str, float]:
    """The [evidence] floors the recommendation applies, as the connection's macros hold them
    (the defaults, or ``--config``'s: analyzer/analysis/views.py, set_config_thresholds)."""
    steps, requests, cells, r2 = con.execute("select min_baseline_steps(), min_baseline_requests(), "
                                             "min_context_cell_rounds(), min_fit_r2()").fetchone()
    return {"min_baseline_steps": int(steps), "min_baseline_requests": int(requests),
            "min_context_cell_rounds": int(cells), "min_fit_r2": float(r2)}


class UnknownDeployment(InputProblem):
    """The deployment id is not among the clean deployments."""


# --------------------------------------------------------------------------- E[L]

def expected_length(conditionals: Sequence[float | None], gamma: int) -> float | None:
    """E[L](γ) = 1 + Σ_{i ≤ γ} Π_{j ≤ i} a_j, the seed's expected_length of a_1 … a_γ.

    ``conditionals`` are a_1, a_2, … (position 1 first). Once a product reaches 0
    further positions add nothing, known or not; otherwise an unknown (None or
    missing) a_i makes E[L](γ) unknown for γ ≥ i.
    """
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    total = survival = 1.0
    for i in range(gamma):
        if survival == 0:
            break
        a = conditionals[i] if i < len(conditionals) else None
        if a is None:
            return None
        if not 0 <= a <= 1:
            raise ValueError(f"conditional acceptance must be in [0, 1], got {a} at position {i + 1}")
        survival *= a
        total += survival
    return total


# --------------------------------------------------------------------------- the round-cost fit

def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[dict[str, Any]]:
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def _solve(cov: np.ndarray, rhs: np.ndarray) -> tuple[np.ndarray, float] | None:
    """Slopes of centred least squares, and the smallest eigenvalue of the correlation
    matrix; None when singular."""
    scale = np.sqrt(np.diag(cov))
    if np.any(scale <= 0):
        return None
    corr = cov / np.outer(scale, scale)
    smallest = float(np.linalg.eigvalsh(corr).min())
    if smallest < SINGULAR:
        return None
    z = _gauss(corr.tolist(), (rhs / scale).tolist())
    return np.array(z) / scale, smallest


def _gauss(matrix: list[list[float]], rhs: list[float]) -> list[float]:
    """The solution of ``matrix · z = rhs`` (at most 3 × 3, not singular: checked above) by
    Gaussian elimination with partial pivoting, in plain floats: every CPU gives the same
    bits, where LAPACK's kernels differ between instruction sets in the last ones."""
    n = len(rhs)
    a = [row[:] + [rhs[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(col + 1, n):
            factor = a[r][col] / a[col][col]
            for k in range(col, n + 1):
                a[r][k] -= factor * a[col][k]
    z = [0.0] * n
    for r in range(n - 1, -1, -1):
        z[r] = (a[r][n] - sum(a[r][k] * z[k] for k in range(r + 1, n))) / a[r][r]
    return z


def _fit_bucket(row: dict[str, Any], costs: dict[int, dict[str, Any]], min_r2: float) -> dict[str, Any]:
    """The fit of one (deployment, bucket) from its ``cost_model`` row; it extrapolates to
    lengths that never ran only with an R² of at least ``min_r2`` (``extrapolates``)."""
    n = int(row["n_steps"])
    sxx, sxb, sbb = float(row["sxx"] or 0), float(row["sxb"] or 0), float(row["sbb"] or 0)
    syy = float(row["syy"] or 0)
    m2 = sxx / n
    cov = {("x", "x"): sxx, ("x", "b"): sxb, ("b", "b"): sbb,
           ("x", "q"): float(row["sxxx"] or 0), ("b", "q"): float(row["sxxb"] or 0),
           ("q", "q"): float(row["sxxxx"] or 0) - sxx * m2}
    rhs = {"x": float(row["sxy"] or 0), "b": float(row["sby"] or 0), "q": float(row["sxxy"] or 0)}

    def c(u: str, v: str) -> float:
        return cov.get((u, v), cov.get((v, u)))

    gammas = [int(g) for g in row["gammas"]]
    singular_reason = None
    terms: list[str] = []
    dropped: list[str] = []
    varies_x = row["distinct_tokens"] > 1 and sxx > 0
    varies_b = row["distinct_batch_sizes"] > 1 and sbb > 0
    if varies_x:
        terms.append("x")
    else:
        singular_reason = ("tokens verified never varied in this bucket: the cost per verified token "
                           "can't be estimated")
    if varies_b:
        if varies_x and sxb * sxb >= (1 - SINGULAR) * sxx * sbb:
            dropped.append("batch_size")
            singular_reason = ("tokens verified is proportional to batch size (γ never varied): "
                               "their effects can't be separated; batch_size was dropped")
        else:
            terms.append("b")
    else:
        dropped.append("batch_size")

    mu = float(row["mean_x"])

    def regressor(term: str, use: list[str]) -> dict[str, float]:
        """Term's regressor in the centred coordinates (x, b, q = x² − m2). X² centred on its own
        mean is (x² − m2) + 2μ·x; with x among the regressors the 2μ·x part is x's, which keeps the
        system as well conditioned as the centred sums are, and is undone in ``solve``."""
        if term == "q" and "x" not in use:
            return {"q": 1.0, "x": 2 * mu}
        return {term: 1.0}

    def solve(use: list[str]) -> tuple[dict[str, float], float] | None:
        """Unconstrained least squares on the regressors ``use``: the slopes in the original
        units (β_tokens, β_batch, q) and the residual sum of squares; None when singular."""
        if not use:
            return {}, syy
        vecs = [regressor(t, use) for t in use]
        mat = np.array([[sum(a * w * c(i, j) for i, a in u.items() for j, w in v.items()) for v in vecs]
                        for u in vecs])
        vec = np.array([sum(a * rhs[i] for i, a in u.items()) for u in vecs])
        solved = _solve(mat, vec)
        if solved is None:
            return None
        slopes, _ = solved
        coef = dict(zip(use, (float(v) for v in slopes)))
        if "x" in coef and "q" in coef:   # T = … + s_x·x + q·(x² − m2) = … + (s_x − 2μq)·X + q·X² + const
            coef["x"] -= 2 * mu * coef["q"]
        # a sum in a fixed order, not numpy's dot (its order follows the CPU's vector width)
        return coef, max(syy - sum(float(s) * float(v) for s, v in zip(slopes, vec)), 0.0)

    def solve_nonnegative(use: list[str]) -> tuple[dict[str, float], float, list[str], dict[str, float]] | None:
        """Least squares with every slope ≥ 0, exactly: the constrained optimum is the unconstrained
        fit on the set of slopes it leaves free (the others held at 0), so with at most three slopes
        it is the feasible subset fit with the lowest SSE (the empty one, α alone, always is).
        Returns the slopes (held ones at 0.0), SSE, the held terms and their unconstrained values;
        None when the unconstrained system is singular."""
        full = solve(use)
        if full is None:
            return None
        coef, sse = full
        if all(v >= 0 for v in coef.values()):
            return coef, sse, [], {}
        best: tuple[dict[str, float], float] | None = None
        for size in range(len(use) - 1, -1, -1):
            for subset in itertools.combinations(use, size):
                solved = solve(list(subset))
                if solved is not None and all(v >= 0 for v in solved[0].values()) and (
                        best is None or solved[1] < best[1]):
                    best = solved
        assert best is not None  # the empty subset is feasible
        held = [t for t in use if t not in best[0]]
        return {t: best[0].get(t, 0.0) for t in use}, best[1], held, {t: coef[t] for t in held}

    linear = solve_nonnegative(terms)
    if linear is None:  # numerically singular despite the checks above: keep X alone
        singular_reason = singular_reason or "the normal equations are singular"
        dropped += [name for t, name in (("b", "batch_size"),) if t in terms]
        terms = [t for t in terms if t == "x"]
        linear = solve_nonnegative(terms)
        if linear is None:
            terms, linear = [], ({}, syy, [], {})
    coef, sse, held, unconstrained = linear
    quadratic = False
    tol = EXACT_FIT * syy
    if ("x" in terms and row["distinct_tokens"] >= MIN_DISTINCT_FOR_QUADRATIC
            and n - (len(terms) + 2) >= 1 and syy > 0 and sse > tol):
        quad = solve_nonnegative(terms + ["q"])
        # a q held at 0 is the linear model again
        if quad is not None and quad[0]["q"] > 0:
            q_coef, q_sse, q_held, q_unconstrained = quad
            if q_sse <= tol or n * math.log(sse / q_sse) > math.log(n):
                quadratic, coef, sse, held, unconstrained = True, q_coef, q_sse, q_held, q_unconstrained
                terms = terms + ["q"]
    bx, bb, q = coef.get("x", 0.0), coef.get("b", 0.0), coef.get("q", 0.0)
    mean_x, mean_b, mean_y = mu, float(row["mean_b"]), float(row["mean_y"])
    names = {"x": "beta_tokens", "b": "beta_batch", "q": "q"}
    fit = {
        "deployment_id": row["deployment_id"],
        "batch_bucket": row["batch_bucket"],
        "n_steps": n,
        "num_rounds": int(row["num_rounds"]),
        # T at the means is mean_y, and the mean of X² is m2 + mean_x²
        "alpha": mean_y - bx * mean_x - bb * mean_b - q * (m2 + mean_x * mean_x),
        "beta_tokens": bx if "x" in terms else None,
        "beta_batch": bb if "b" in terms else None,
        "q": q if quadratic else None,
        "quadratic": quadratic,
        "terms": [{"x": "tokens_verified", "b": "batch_size", "q": "tokens_verified^2"}[t] for t in terms],
        "dropped": dropped,
        "bound": [names[t] for t in held],
        "unconstrained": {names[t]: v for t, v in unconstrained.items()},
        "r2": 1 - sse / syy if syy > 0 else None,
        "rmse": math.sqrt(max(sse, 0.0) / n),   # an exact fit's sse can round below 0
        "observed_gamma": gammas,
        "mixed_steps": int(row["mixed_steps"]),
        "plain_steps": int(row["plain_steps"]),
        "partial_steps": int(row["partial_steps"]),
        "gamma_varied": len(gammas) >= 2 or (
            row["mixed_steps"] + row["plain_steps"] + row["partial_steps"] > 0
            and "x" in terms and singular_reason is None),
        "singular": singular_reason is not None,
        "singular_reason": singular_reason,
        "mean_batch_size": float(row["round_mean_batch_size"]),
        "nodes_per_draft": float(row["nodes_per_draft"]) if row["nodes_per_draft"] is not None else None,
        "tokens_range": [int(row["min_tokens"]), int(row["max_tokens"])],
        "batch_size_range": [int(row["min_batch_size"]), int(row["max_batch_size"])],
    }
    # a fit that explains little of the step times predicts an unmeasured γ no better than
    # a guess: it serves only with R² ≥ min_fit_r2 ([evidence]); an unknown R² (every step
    # took the same time) is not enough either
    fit["min_r2"] = min_r2
    fit["extrapolates"] = (fit["gamma_varied"] and not fit["singular"] and fit["beta_tokens"] is not None
                           and fit["r2"] is not None and fit["r2"] >= min_r2)
    fit["residuals"] = {
        str(g): c_row["step_ms"] - predict_round_ms(fit, c_row["mean_tokens_verified"], c_row["mean_batch_size"],
                                                    tokens_sq=c_row["mean_tokens_verified_sq"])
        for g, c_row in sorted(costs.items())
    }
    return fit


def predict_round_ms(fit: dict[str, Any], tokens: float, batch_size: float, *,
                     tokens_sq: float | None = None) -> float:
    """The fitted step time at X = ``tokens``, B = ``batch_size`` (``tokens_sq`` = mean X²
    when predicting a mean over steps)."""
    x2 = tokens * tokens if tokens_sq is None else tokens_sq
    return (fit["alpha"] + (fit["beta_tokens"] or 0.0) * tokens + (fit["beta_batch"] or 0.0) * batch_size
            + (fit["q"] or 0.0) * x2)


def _scope(deployment_id: str | None, context_bucket: str | None) -> tuple[str, list]:
    """The where clause of a (deployment, context bucket) scope; context None is every context."""
    clauses, params = [], []
    if deployment_id:
        clauses.append("deployment_id = ?")
        params.append(deployment_id)
    if context_bucket is None:
        clauses.append("context_bucket is null")
    else:
        clauses.append("context_bucket = ?")
        params.append(context_bucket)
    return "where " + " and ".join(clauses), params


def _gamma_costs(con, deployment_id: str | None,
                 context_bucket: str | None = None) -> dict[tuple[str, str], dict[int, dict[str, Any]]]:
    where, params = _scope(deployment_id, context_bucket)
    out: dict[tuple[str, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    for r in _rows(con, f"select * from gamma_costs {where} order by deployment_id, bucket_min, gamma", params):
        out[(r["deployment_id"], r["batch_bucket"])][int(r["gamma"])] = r
    return out


def round_cost_fits(con: duckdb.DuckDBPyConnection, deployment_id: str | None = None, *,
                    context_bucket: str | None = None, _costs: dict | None = None) -> list[dict[str, Any]]:
    """The round-cost fit per (deployment_id, batch_bucket), in bucket order (see the module doc),
    over every step, or over the steps of one ``context_bucket``.

    Each dict: deployment_id, batch_bucket, n_steps, num_rounds, alpha, beta_tokens,
    beta_batch, q (null unless the quadratic term is kept), quadratic, terms, dropped,
    bound (the slopes the non-negativity constraint held at 0: beta_tokens, beta_batch, q),
    unconstrained {held slope: its value in the unconstrained fit of the same terms},
    r2, rmse, observed_gamma (lengths > 0), mixed_steps, plain_steps (no request proposed),
    partial_steps (some requests proposed nothing), gamma_varied, singular, singular_reason,
    mean_batch_size (round-weighted), nodes_per_draft, tokens_range, batch_size_range,
    residuals {γ: mean measured − fitted step time of the steps at γ}, min_r2 (the floor
    min_fit_r2 applied) and extrapolates (the fit serves for lengths that never ran: γ varied,
    not singular, R² ≥ min_r2).
    """
    where, params = _scope(deployment_id, context_bucket)
    costs = _costs if _costs is not None else _gamma_costs(con, deployment_id, context_bucket)
    rows = _rows(con, f"select * from cost_model {where} order by deployment_id, bucket_min", params)
    min_r2 = evidence_floors(con)["min_fit_r2"]
    return [_fit_bucket(r, costs.get((r["deployment_id"], r["batch_bucket"]), {}), min_r2) for r in rows]


# --------------------------------------------------------------------------- shared inputs

def _inputs(con: duckdb.DuckDBPyConnection, deployment_id: str | None) -> dict[str, Any]:
    where, params = ("where deployment_id = ?", [deployment_id]) if deployment_id else ("", [])
    conditionals: dict[str, list[float | None]] = defaultdict(list)
    for r in _rows(con, f"select deployment_id, position, conditional from position_acceptance {where} "
                        "order by deployment_id, position", params):
        conditionals[r["deployment_id"]].append(r["conditional"])
    # speedup_by_batch carries t0(b) (baseline_t0 with no context bucket) beside the measured
    # speedup, for every bucket where the deployment has decode-only rounds: one scan, not two.
    measured = {(r["deployment_id"], r["batch_bucket"]): r for r in _rows(
        con, f"select deployment_id, batch_bucket, t0_ms, speedup, matched_share from speedup_by_batch {where}",
        params)}
    t0 = {key: r["t0_ms"] for key, r in measured.items() if r["t0_ms"] is not None}
    costs = _gamma_costs(con, deployment_id)
    return {"conditionals": conditionals, "t0": t0, "measured": measured,
            "costs": costs, "fits": round_cost_fits(con, deployment_id, _costs=costs)}


def _fit_usable(fit: dict[str, Any]) -> bool:
    return fit["extrapolates"]


def _round_time(fit: dict[str, Any], costs: dict[int, dict], gamma: int, *,
                measured_only: bool = False, fitted_only: bool = False) -> tuple[float | None, str | None]:
    """T_round(γ) in the fit's bucket: measured where observed, else the fit."""
    if gamma in costs and not fitted_only:
        return float(costs[gamma]["round_ms"]), "measured"
    if measured_only or not _fit_usable(fit):
        return None, None
    batch = fit["mean_batch_size"]
    tokens = batch * (1 + gamma * (fit["nodes_per_draft"] or 1.0))
    value = predict_round_ms(fit, tokens, batch)
    return (value, "fit") if value > 0 else (None, None)


# --------------------------------------------------------------------------- marginal returns

def marginal_returns(con: duckdb.DuckDBPyConnection, deployment_id: str | None = None) -> list[dict[str, Any]]:
    """Per (deployment, bucket) and draft position i = 1 … num_speculative_tokens: does position i pay?

    Each dict: deployment_id, batch_bucket, baseline_ms_per_token (t0, or null),
    positions [{position, marginal_gain (ΔE[L]_i = Pr(K ≥ i)), expected_length (E(i)),
    round_ms (T(i)), prev_round_ms (T(i−1)), delta_round_ms (ΔT_i), source
    ("measured" | "fit" | null), pays (bool | null)}], and largest_paying_gamma: the
    largest γ such that positions 1 … γ all pay (0 when position 1 does not; null
    when position 1 is unknown).
    """
    spec = _spec_deployments(con, deployment_id)
    data = _inputs(con, deployment_id)
    out = []
    for fit in data["fits"]:
        dep, bucket = fit["deployment_id"], fit["batch_bucket"]
        if dep not in spec:
            continue
        conds = data["conditionals"].get(dep, [])
        costs = data["costs"].get((dep, bucket), {})
        t0 = data["t0"].get((dep, bucket))
        positions = []
        for i in range(1, spec[dep]["num_speculative_tokens"] + 1):
            e_now, e_prev = expected_length(conds, i), expected_length(conds, i - 1)
            gain = e_now - e_prev if e_now is not None and e_prev is not None else None
            if i in costs and (i - 1 in costs or (i == 1 and t0 is not None)):
                now, source = _round_time(fit, costs, i, measured_only=True)
            else:
                now, source = _round_time(fit, costs, i, fitted_only=True)
            if i == 1 and t0 is not None:
                prev = t0
            elif source == "measured":
                prev, _ = _round_time(fit, costs, i - 1, measured_only=True)
            else:
                prev, _ = _round_time(fit, costs, i - 1, fitted_only=True)
            known = None not in (now, prev, e_now, e_prev)
            positions.append({
                "position": i,
                "marginal_gain": gain,
                "expected_length": e_now,
                "round_ms": now,
                "prev_round_ms": prev,
                "delta_round_ms": now - prev if now is not None and prev is not None else None,
                "source": source if known else None,
                "pays": (e_now / now > e_prev / prev) if known else None,
            })
        largest: int | None = None
        for p in positions:
            if p["pays"] is None:
                break
            if not p["pays"]:
                largest = p["position"] - 1
                break
            largest = p["position"]
        if largest is None and positions and positions[0]["pays"] is False:
            largest = 0
        out.append({"deployment_id": dep, "batch_bucket": bucket, "baseline_ms_per_token": t0,
                    "positions": positions, "largest_paying_gamma": largest})
    return out


# --------------------------------------------------------------------------- recommend

def _spec_deployments(con, deployment_id: str | None = None) -> dict[str, dict[str, Any]]:
    rows = _rows(con, "select deployment_id, method, num_speculative_tokens from deployments "
                      "where method <> 'none' order by deployment_id")
    return {r["deployment_id"]: r for r in rows if deployment_id in (None, r["deployment_id"])}


def _fmt(value: float) -> str:
    return f"{value:.3f}"


def _counted(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _take_overall_k(bucket: dict[str, Any], k: int | None, min_rounds: int) -> None:
    """A (context, batch) cell too thin to differ takes the overall recommendation's k there."""
    bucket["recommended"] = k
    at_k = bucket["predicted_speedup"].get(str(k)) if k is not None else None
    bucket["speedup_at_k"] = at_k
    bucket["speedup_at_k_source"] = (bucket["speedup_source"].get(str(k)) if at_k is not None else None)
    bucket["why"] = (f"{bucket['num_rounds']:,} decode rounds here, fewer than min_context_cell_rounds = "
                     f"{min_rounds:,}: the overall k" + (f" ({k})" if k is not None else " (none there)"))


def recommend(con: duckdb.DuckDBPyConnection, deployment_id: str, *, by_context: bool = False,
              pair=None) -> dict[str, Any]:
    """The ``specan recommend`` document for one deployment (docs/commands.md).

    Keys: deployment_id, method, num_speculative_tokens, baseline_id,
    num_speculative_tokens_per_batch_size ([[start, end, k], …], empty without any
    prediction; the last range reaches the deployment's largest batch size), buckets
    [{batch_bucket, observed_gamma, predicted_speedup {"0": 1.0, "1": …} (where γ never
    varied, the γ that ran has the measured speedup), speedup_source {γ: "measured" |
    "predicted" | "plain decoding" | null}, recommended, speedup_at_k,
    speedup_at_k_source, baseline_ms_per_token, fit_r2 (null unless the fit serves
    some γ), fit_used, measured_speedup, gamma_varied, round_ms {γ: ms},
    round_ms_source {γ: "measured" | "fit" | null}, why (one line: why this k)}],
    cost_fits (``round_cost_fits`` of the deployment), notes; with ``by_context``,
    by_context (``recommend_by_context``).

    ``pair``: the deployment's matched comparison (``uncertainty.MatchedPair``) when the
    caller has it, else read from the views.

    Raises UnknownDeployment when ``deployment_id`` is not a clean deployment.
    """
    deployments = _rows(con, "select deployment_id, method, num_speculative_tokens from deployments "
                             "order by deployment_id")
    known = {r["deployment_id"]: r for r in deployments}
    if deployment_id not in known:
        listed = ", ".join(known) or "none"
        raise UnknownDeployment(f"unknown deployment {deployment_id!r}; known deployments: {listed}")
    dep = known[deployment_id]
    method, max_gamma = dep["method"], int(dep["num_speculative_tokens"] or 0)
    doc: dict[str, Any] = {"deployment_id": deployment_id, "method": method,
                           "num_speculative_tokens": max_gamma, "baseline_id": None,
                           "num_speculative_tokens_per_batch_size": [], "buckets": [], "cost_fits": [],
                           "notes": []}
    if by_context:
        doc["by_context"] = []
    notes: list[str] = doc["notes"]
    if method == "none":
        notes.append(f"{deployment_id} is plain decoding (method none): there is no speculation length to tune.")
        return doc
    if method not in DYNAMIC_SD_METHODS:
        notes.append(f"vLLM 0.32.0 documents Dynamic SD (num_speculative_tokens_per_batch_size) as tested with "
                     f"EAGLE, EAGLE-3 and DFlash only, and falling back to a fixed length under data "
                     f"parallelism; {deployment_id} uses method {method}.")
    if max_gamma < 1:
        notes.append(f"{deployment_id} has num_speculative_tokens = {max_gamma}: only k = 0 is possible.")

    baseline = con.execute("select baseline_id, baseline_note from matched_baseline where deployment_id = ?",
                           [deployment_id]).fetchone()
    baseline_id, baseline_note = baseline if baseline else (None, None)
    doc["baseline_id"] = baseline_id
    steps_present = con.execute("select present from trace_tables where table_name = 'steps'").fetchone()

    iteration_only = con.execute("select decode_steps from iteration_totals where deployment_id = ?",
                                 [deployment_id]).fetchone()
    if iteration_only:
        # engine iteration lines: steps with token counts, but no rounds, so no acceptance per position
        notes.append(f"{deployment_id} has no rounds: its {iteration_only[0]:,} decode steps come with their own "
                     "token counts (engine iteration lines), which give its speedup at each batch size (the "
                     "report's load curve) but no acceptance per draft position, so no length can be predicted. "
                     "Per-request rounds would (vllm-responses, or a recorder).")
        return doc
    data = _inputs(con, deployment_id)
    conds = data["conditionals"].get(deployment_id, [])
    fits = data["fits"]
    doc["cost_fits"] = fits
    lengths = {g: expected_length(conds, g) for g in range(max_gamma + 1)}
    unknown_lengths = [g for g, e in lengths.items() if e is None]
    if unknown_lengths:
        g = unknown_lengths[0]
        notes.append(f"E[L](γ) is unknown for γ ≥ {g}: the conditional acceptance at position {g} is unknown "
                     f"(no round drafted that position, or none reached it), so those lengths get no prediction.")
    # rounds that drafted nothing and had nothing cut by a grammar: neither speculative nor fully invalidated
    no_draft = con.execute(
        "select coalesce(sum(num_rounds - num_spec_rounds - fully_invalidated_rounds), 0), "
        "coalesce(sum(num_rounds), 0) from acceptance_totals where grouping = 'deployment' and deployment_id = ?",
        [deployment_id]).fetchone()
    if no_draft[1] and no_draft[0] / no_draft[1] > NO_DRAFT_NOTE_SHARE:
        notes.append(f"{no_draft[0] / no_draft[1]:.1%} of {deployment_id}'s rounds proposed no draft (no match, "
                     f"or speculation off). E[L](γ) counts every round as drafting γ, so the predictions "
                     f"overstate what it gains at each γ.")

    if not steps_present or not steps_present[0]:
        notes.append("No steps table: round costs are unknown, so there is no recommendation.")
        return doc
    if not fits:
        notes.append(f"{deployment_id} has no decode-only steps with a clean step: round costs are unknown, "
                     f"so there is no recommendation.")
        return doc
    if baseline_id is None:
        notes.append(f"No matched baseline ({baseline_note or 'none found'}): t0 is unknown, so there is no "
                     f"recommendation.")

    for fit in fits:
        bucket = fit["batch_bucket"]
        doc["buckets"].append(_predict_bucket(fit, data["costs"].get((deployment_id, bucket), {}),
                                              data["t0"].get((deployment_id, bucket)),
                                              data["measured"].get((deployment_id, bucket), {}).get("speedup"),
                                              lengths, max_gamma))
    # the largest batch size any of its steps ran at, prefilling or not: the ranges cover it
    largest = con.execute("select max(max_batch_size) from round_cells where deployment_id = ? and has_step",
                          [deployment_id]).fetchone()[0]
    doc["largest_batch_size"] = largest
    _measured_evidence(con, deployment_id, doc["buckets"], data, pair)
    if by_context:
        doc["by_context"] = recommend_by_context(con, doc, fits, data, largest)
    return doc


def _measured_evidence(con: duckdb.DuckDBPyConnection, deployment_id: str, buckets_: list[dict],
                       data: dict[str, Any], pair=None) -> None:
    """Each bucket's measured speedup with its 95 % interval (the bucket's share of the matched
    comparison, analysis.uncertainty), its share of the deployment's committed tokens and the
    share of those matched with the baseline: what decide/configs.py decides a k from."""
    from . import uncertainty

    if pair is None:
        pair = uncertainty.matched_pairs(con, "steps").get(deployment_id)
    max_blocks = con.execute("select intervals_max_blocks()").fetchone()[0]
    found = uncertainty.matched_interval(pair, max_blocks=max_blocks) if pair is not None else None
    committed = dict(con.execute("select batch_bucket, sum(num_committed_tokens) from decode_totals "
                                 "where grouping = 'batch' and deployment_id = ? group by batch_bucket",
                                 [deployment_id]).fetchall())
    total = con.execute("select sum(num_committed_tokens) from round_cells where deployment_id = ?",
                        [deployment_id]).fetchone()[0]
    for b in buckets_:
        bucket = b["batch_bucket"]
        b["measured_speedup_interval"] = found.interval.get(bucket) if found else None
        b["token_share"] = (float(committed.get(bucket) or 0) / float(total)) if total else None
        b["matched_share"] = data["measured"].get((deployment_id, bucket), {}).get("matched_share")


SLOPE_UNITS = {"beta_tokens": ("β_tokens", "ms/token"), "beta_batch": ("β_batch", "ms/request"),
               "q": ("q", "ms/token²")}


def bound_text(fit: dict[str, Any]) -> str | None:
    """What the non-negativity constraint held in ``fit``, in words; None when nothing."""
    if not fit.get("bound"):
        return None
    return "; ".join(f"{SLOPE_UNITS[b][0]} held at 0 (the unconstrained fit gave "
                     f"{fit['unconstrained'][b]:.3g} {SLOPE_UNITS[b][1]})" for b in fit["bound"])


def _predict_bucket(fit: dict[str, Any], costs: dict[int, dict], t0: float | None, measured: float | None,
                    lengths: dict[int, float | None], max_gamma: int) -> dict[str, Any]:
    """One batch bucket's speedup per γ, its recommended k, and why.

    Where γ never varied, the one γ that ran gets its measured speedup (the bucket's,
    from speedup_by_batch), not t0 · E[L](γ) / T_round(γ): E[L] pooled over every
    bucket is not this bucket's tokens per round, and the two would disagree about
    the γ that was measured. The fit's R² is given only where the fit serves some γ."""
    times: dict[str, float | None] = {}
    sources: dict[str, str | None] = {}
    predicted: dict[str, float | None] = {"0": 1.0}
    speedup_source: dict[str, str | None] = {"0": "plain decoding"}
    observed = fit["observed_gamma"]
    kept = min(observed[0], max_gamma) if not fit["gamma_varied"] and len(observed) == 1 else None
    for g in range(1, max_gamma + 1):
        if fit["gamma_varied"]:
            ms, source = _round_time(fit, costs, g)
        else:
            ms, source = _round_time(fit, costs, g, measured_only=True)
        times[str(g)], sources[str(g)] = ms, source
        e = lengths[g]
        if g == kept and measured is not None:
            predicted[str(g)], speedup_source[str(g)] = measured, "measured"
        else:
            predicted[str(g)] = t0 * e / ms if None not in (t0, e, ms) else None
            speedup_source[str(g)] = "predicted" if predicted[str(g)] is not None else None
    # the lengths whose prediction rests on the fit: only there is its R² worth showing
    fitted = [g for g in range(1, max_gamma + 1) if sources[str(g)] == "fit" and predicted[str(g)] is not None]
    fit_note = None
    if fitted:
        fit_note = f"γ = {', '.join(map(str, fitted))} from the round-cost fit"
        held = bound_text(fit)
        if held:
            fit_note += f"; {held}"
    recommended: int | None = None
    at_k_source: str | None = None
    if t0 is None:
        why = "the baseline has no t0 here: no prediction"
    elif fit["gamma_varied"]:
        best_gamma, best = 0, 1.0
        for g in range(1, max_gamma + 1):
            value = predicted[str(g)]
            if value is not None and value > best:
                best_gamma, best = g, value
        recommended = best_gamma
        why = (f"largest predicted speedup (γ = 0–{max_gamma})" if best_gamma
               else "no γ > 0 is predicted above 1")
        at_k_source = "predicted" if best_gamma else "plain decoding"
    elif not observed:
        recommended, at_k_source = 0, "plain decoding"
        why = "no step drafted here (plain decode steps only): nothing to keep"
    elif kept is not None and measured is not None:
        recommended = kept if measured > 1 else 0
        at_k_source = "measured" if measured > 1 else "plain decoding"
        why = (f"only γ = {observed[0]} ran, so round cost can't be extrapolated: its measured speedup "
               + (f"{_fmt(measured)} > 1 keeps it" if measured > 1 else f"{_fmt(measured)} ≤ 1 turns it off"))
    else:
        why = f"only γ = {observed[0]} ran here and its measured speedup is unknown: no prediction"
    if fit_note:
        why += f"; {fit_note}"
    if fit["gamma_varied"] and not fit["singular"] and fit["beta_tokens"] is not None and not fit["extrapolates"]:
        r2 = "unknown (every step took the same time)" if fit["r2"] is None else _fmt(fit["r2"])
        unmeasured = [str(g) for g in range(1, max_gamma + 1) if sources[str(g)] is None]
        why += (f"; the cost fit's R² {r2} is below min_fit_r2 = {fit['min_r2']:g}, so it predicts no γ that "
                "never ran: measured round times only"
                + (f" (no prediction for γ = {', '.join(unmeasured)})" if unmeasured else ""))
    at_k = predicted.get(str(recommended)) if recommended is not None else None
    return {
        "batch_bucket": fit["batch_bucket"],
        # the search's pick; the recommendation's k is decided from the evidence (decide/configs.py)
        "predicted_best": recommended,
        "observed_gamma": observed,
        "predicted_speedup": predicted,
        "speedup_source": speedup_source,
        "recommended": recommended,
        "speedup_at_k": at_k,
        "speedup_at_k_source": at_k_source if at_k is not None else None,
        "baseline_ms_per_token": t0,
        "fit_r2": fit["r2"] if fitted else None,
        "fit_used": bool(fitted),
        "measured_speedup": measured,
        "gamma_varied": fit["gamma_varied"],
        "round_ms": times,
        "round_ms_source": sources,
        "why": why,
    }


def _ranges(doc: dict[str, Any], fits: list[dict], data: dict, notes: list[str],
            largest: int | None = None) -> list[list[int]]:
    """vLLM's inclusive [start, end, k] ranges from 1 to the largest observed bucket, gaps filled,
    and the last one extended to ``largest``, the deployment's largest batch size, when its steps
    ran beyond (in prefill steps, say, which the fit leaves out), with a note."""
    by_bucket = {b["batch_bucket"]: b for b in doc["buckets"]}
    observed = [f["batch_bucket"] for f in fits]
    last = max(BUCKETS.index(b) for b in observed)
    predicted = [(BUCKETS.index(b), by_bucket[b]["recommended"]) for b in observed
                 if by_bucket[b]["recommended"] is not None]
    if not predicted:
        if doc["baseline_id"] is not None:
            notes.append("No bucket has a prediction (no baseline t0 where the deployment ran, or no usable "
                         "round cost): there is no recommendation.")
        return []
    lowest = min(i for i, _ in predicted)
    ks = dict(predicted)
    filled: list[str] = []
    ranges: list[list[int]] = []
    for i in range(last + 1):
        bucket = BUCKETS[i]
        if i in ks:
            k = ks[i]
        else:
            lower = [j for j in ks if j < i]
            k = ks[max(lower)] if lower else ks[lowest]
            if bucket not in by_bucket:
                reason = "no data"
            elif by_bucket[bucket]["baseline_ms_per_token"] is None:
                reason = "the baseline has no t0 there"
            else:
                reason = "no usable round cost"
            filled.append(f"{bucket} ({reason}; k = {k})")
        start, end = BUCKET_BOUNDS[bucket]
        if end is None:
            end = max(f["batch_size_range"][1] for f in fits if f["batch_bucket"] == bucket)
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = end
        else:
            ranges.append([start, end, k])
    if filled:
        notes.append("Buckets without a prediction take the k of the nearest lower bucket that has one "
                     "(below the lowest predicted bucket, its k), as vLLM treats gaps: " + ", ".join(filled) + ".")
    if largest is not None and largest > ranges[-1][1]:
        notes.append(f"The deployment ran at batch sizes up to {largest}, beyond its last bucket with decode-only "
                     f"steps ({BUCKETS[last]}, to {ranges[-1][1]}): the last range's k = {ranges[-1][2]} is "
                     f"extended to {largest}, without a prediction there.")
        ranges[-1][1] = largest
    return ranges


# --------------------------------------------------------------------------- by context length

def recommend_by_context(con: duckdb.DuckDBPyConnection, doc: dict[str, Any], fits: list[dict[str, Any]],
                         data: dict[str, Any], largest: int | None = None) -> list[dict[str, Any]]:
    """The recommendation repeated within each context bucket of ``doc``'s deployment.

    Per context bucket c (in bucket order), for each batch bucket b where the deployment
    ran decode-only rounds in c: E[L](γ) from c's conditional acceptance
    (``position_acceptance_by_context``); T_round from the fit over c's steps in b
    (``cost_model`` with context_bucket = c) and their measured round times where that
    fit has at least MIN_CONTEXT_FIT_STEPS steps, else from b's fit over every context,
    with a note; t0 matched on (b, c) where the baseline has a usable t0 there (the
    t0 guard), else on b (``speedup_by_batch_context``, as the context curve matches
    it), with a note. Then the same choice of k and the same vLLM ranges as the overall
    recommendation, covering the deployment's batch sizes up to ``largest``: what that
    context would want, not a second config (vLLM takes one per deployment).

    A cell with fewer than min_context_cell_rounds decode rounds ([evidence]) is too
    thin to differ: it takes the overall k (takes_overall_k, and a note names the
    cells), so it is never listed in differs_from_overall.

    Each entry: context_bucket, num_rounds (decode-only rounds in c), share_of_rounds,
    dominant (the bucket with the most of them), ranges ([[start, end, k], …]),
    differs_from_overall [{batch_bucket, k, overall_k, num_rounds}], buckets (the keys
    of ``recommend``'s buckets, plus num_rounds (decode-only rounds in the cell),
    cost_fit "context" | "batch", t0_match "context" | "batch" | null and
    takes_overall_k), notes.
    """
    dep, max_gamma = doc["deployment_id"], doc["num_speculative_tokens"]
    floors = evidence_floors(con)
    cells: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in _rows(con, "select * from speedup_by_batch_context where deployment_id = ? "
                        "order by context_min, bucket_min", [dep]):
        cells[r["context_bucket"]][r["batch_bucket"]] = r
    if not cells:
        return []
    conditionals: dict[str, list[float | None]] = defaultdict(list)
    for r in _rows(con, "select context_bucket, conditional from position_acceptance_by_context "
                        "where deployment_id = ? order by bucket_min, position", [dep]):
        conditionals[r["context_bucket"]].append(r["conditional"])
    context_costs: dict[str, dict[str, dict[int, dict]]] = defaultdict(lambda: defaultdict(dict))
    for r in _rows(con, "select * from gamma_costs where deployment_id = ? and context_bucket is not null",
                   [dep]):
        context_costs[r["context_bucket"]][r["batch_bucket"]][int(r["gamma"])] = r
    context_fits: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in _rows(con, "select * from cost_model where deployment_id = ? and context_bucket is not null "
                        "order by bucket_min", [dep]):
        c, b = r["context_bucket"], r["batch_bucket"]
        context_fits[c][b] = _fit_bucket(r, context_costs[c][b], floors["min_fit_r2"])
    batch_fits = {f["batch_bucket"]: f for f in fits}
    overall_k = {b["batch_bucket"]: b["recommended"] for b in doc["buckets"]}
    total_rounds = sum(int(cell["num_rounds"]) for by_batch in cells.values() for cell in by_batch.values())
    dominant = max(cells, key=lambda c: (sum(int(x["num_rounds"]) for x in cells[c].values()), c))

    out = []
    for context, by_batch in cells.items():
        lengths = {g: expected_length(conditionals.get(context, []), g) for g in range(max_gamma + 1)}
        entry = {"context_bucket": context, "buckets": [], "notes": []}
        notes: list[str] = entry["notes"]
        used_fits, borrowed, batch_t0, guarded_t0, thin = [], [], [], [], []
        for batch_bucket, cell in by_batch.items():
            own = context_fits[context].get(batch_bucket)
            if own is not None and own["n_steps"] >= MIN_CONTEXT_FIT_STEPS:
                fit, costs, source = own, context_costs[context][batch_bucket], "context"
            elif batch_bucket in batch_fits:
                fit = batch_fits[batch_bucket]
                costs, source = data["costs"].get((dep, batch_bucket), {}), "batch"
                borrowed.append(f"{batch_bucket} ({own['n_steps'] if own else 0} steps)")
            else:
                continue
            if cell["t0_match"] == "batch" and cell["context_t0_guard"] is not None:
                guarded_t0.append(f"{batch_bucket} ({_counted(cell['context_baseline_steps'], 'step')}, "
                                  f"{_counted(cell['context_baseline_requests'], 'request')})")
            elif cell["t0_match"] == "batch":
                batch_t0.append(batch_bucket)
            bucket = _predict_bucket(fit, costs, cell["t0_ms"], cell["speedup"], lengths, max_gamma)
            bucket["cost_fit"], bucket["t0_match"] = source, cell["t0_match"]
            bucket["num_rounds"] = int(cell["num_rounds"])
            bucket["takes_overall_k"] = bucket["num_rounds"] < floors["min_context_cell_rounds"]
            if bucket["takes_overall_k"]:
                _take_overall_k(bucket, overall_k.get(batch_bucket), floors["min_context_cell_rounds"])
                thin.append(f"{batch_bucket} ({bucket['num_rounds']:,} rounds)")
            entry["buckets"].append(bucket)
            used_fits.append(fit)
        if borrowed:
            notes.append(f"Fewer than {MIN_CONTEXT_FIT_STEPS} decode steps at context {context} in batch "
                         f"{', '.join(borrowed)}: round cost there comes from the batch bucket's fit over every "
                         "context, which does not see what this context length costs.")
        if batch_t0:
            notes.append(f"The baseline has no rounds at context {context} in batch {', '.join(batch_t0)}: "
                         "t0 there is the batch bucket's over every context.")
        if guarded_t0:
            notes.append(f"The baseline's t0 at context {context} rests on too little in batch {', '.join(guarded_t0)} "
                         f"({_counted(floors['min_baseline_steps'], 'step')} and "
                         f"{_counted(floors['min_baseline_requests'], 'request')} needed): t0 there is the batch "
                         "bucket's over every context.")
        if thin:
            notes.append(f"Fewer than {floors['min_context_cell_rounds']:,} decode rounds (min_context_cell_rounds) at "
                         f"context {context} in batch {', '.join(thin)}: too few to differ from the overall "
                         "recommendation, so these take its k.")
        unknown = [g for g, e in lengths.items() if e is None]
        if unknown:
            notes.append(f"E[L](γ) at context {context} is unknown for γ ≥ {unknown[0]}: no round there "
                         f"reached position {unknown[0]}.")
        ranges = (_ranges({"buckets": entry["buckets"], "baseline_id": doc["baseline_id"]}, used_fits, data, notes,
                          largest) if used_fits else [])
        rounds = sum(int(cell["num_rounds"]) for cell in by_batch.values())
        out.append({"context_bucket": context, "num_rounds": rounds,
                    "share_of_rounds": rounds / total_rounds if total_rounds else None,
                    "dominant": context == dominant, "ranges": ranges,
                    "differs_from_overall": _differences(entry["buckets"], overall_k),
                    "buckets": entry["buckets"], "notes": notes})
    return out


def _differences(buckets_: list[dict[str, Any]], overall_k: dict[str, int | None]) -> list[dict[str, Any]]:
    return [{"batch_bucket": b["batch_bucket"], "k": b["recommended"], "overall_k": overall_k.get(b["batch_bucket"]),
             "num_rounds": b["num_rounds"]}
            for b in buckets_
            if b["recommended"] is not None and overall_k.get(b["batch_bucket"]) is not None
            and b["recommended"] != overall_k[b["batch_bucket"]]]


def compare_contexts(doc: dict[str, Any]) -> None:
    """Each context's differences from the overall recommendation, against its final k (the
    recommendation's k is decided from the evidence after the search: decide/configs.py)."""
    overall_k = {b["batch_bucket"]: b["recommended"] for b in doc["buckets"]}
    for entry in doc.get("by_context") or []:
        entry["differs_from_overall"] = _differences(entry["buckets"], overall_k)
