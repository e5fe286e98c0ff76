"""How sure a matched speedup is: a block jackknife over both sides' blocks of time.

The matched speedup (sql/marts/matched_speedup.sql) is a smooth function of sums: the
speculative deployment's tokens, times and contexts per matched load, and its
baseline's per load cell. Both sides' sums are kept per block of time
(``time_block``: each deployment's steps, requests or log intervals cut into
``[intervals] blocks`` blocks of equal count, in time order), so the interval can
resample time, not units: steps share requests, and conditions drift in time, so
neither steps nor requests are independent, but stretches of time far enough apart
nearly are (docs/metrics.md, "The interval of the matched speedup").

The interval, per deployment and basis:

1. **Block length, per side.** Deleting one fine block at a time gives the jackknife's
   pseudo-values of log(speedup), a series in time order. Its autocorrelation says how
   long the dependence lasts; the block length is Politis and White's (2004, with the
   correction of Patton, Politis and White 2009) for that series, in fine blocks
   (``block_length``). Independent blocks give 1; a level that drifts over many blocks
   gives longer ones.
2. **Jackknife, per side.** The fine blocks are grouped into coarse blocks of that
   length (contiguous in time), and each coarse block is deleted in turn, the other side
   held whole: V_side = (K − 1)/K · Σ (θ_(j) − θ̄)², θ = log(speedup), K the side's coarse
   blocks. The baseline's cell times, its context slope and the interpolation are
   recomputed in every replicate, so a thin baseline widens the interval. A cell that a
   deletion empties keeps its full-sample value in that replicate (a cell measured in one
   block adds no between-block spread: the [evidence] floors keep such cells rare).
3. **Interval.** V = V_D + V_B, and the interval is exp(θ̂ ± t · √V) with t the 97.5 %
   quantile of Student's t at the Welch–Satterthwaite degrees of freedom
   (V_D + V_B)² / (V_D²/(K_D − 1) + V_B²/(K_B − 1)): few blocks on a side widen it.

The jackknife is deterministic: the same traces give the same interval, whatever the
seed. ``settle`` uses the two variances to say which side is short: a side's variance
falls as 1/n in its data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Z975 = 1.959963984540054
# At most this many coarse blocks per side ([intervals] max_blocks): blocks a tenth of a
# side's trace long, so that a level that drifts over stretches shorter than that still
# falls in whole blocks (bench/coverage_study.py measured the choice)
MAX_BLOCKS = 10


# --------------------------------------------------------------------------- Student's t

def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t with ``df`` degrees of freedom (df may be fractional).

    Exact for df = 1 and 2; otherwise the Cornish–Fisher expansion of Abramowitz and
    Stegun 26.7.5 in the normal quantile, refined by Newton steps on the t distribution's
    CDF (``t_cdf``), so it is exact to about 1e-10 for every df ≥ 1."""
    if df <= 0 or not 0 < p < 1:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if math.isinf(df):
        return normal_quantile(p)
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = normal_quantile(p)
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    g4 = (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160
    t = z + g1 / df + g2 / df ** 2 + g3 / df ** 3 + g4 / df ** 4
    for _ in range(20):
        err = t_cdf(t, df) - p
        density = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi) \
            * (1 + t * t / df) ** (-(df + 1) / 2)
        step = err / density
        t -= step
        if abs(step) < 1e-12 * max(1.0, abs(t)):
            break
    return t


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function, through the regularized incomplete beta function."""
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2, 0.5, x)
    return 1 - tail if t > 0 else tail


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction
    (Numerical Recipes, betacf), with the symmetry that keeps it convergent."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1 - front * _betacf(b, a, 1 - x) / b


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return h


def beta_quantile(q: float, a: float, b: float) -> float:
    """The q quantile of the Beta(a, b) distribution, by bisection on its distribution
    function (``_betainc``) to about 1e-15."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if _betainc(a, b, mid) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def clopper_pearson(x: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The exact (Clopper–Pearson) bounds of the share x / n, each one-sided 1 − alpha: the
    share whose binomial would make x or more (fewer) events as rare as alpha."""
    lo = 0.0 if x == 0 else beta_quantile(alpha, x, n - x + 1)
    hi = 1.0 if x == n else beta_quantile(1 - alpha, x + 1, n - x)
    return lo, hi


def normal_quantile(p: float) -> float:
    """The standard normal p quantile (Acklam's rational approximation, refined by one
    Halley step on math.erfc: exact to about 1e-15)."""
    a = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
         -3.066479806614716e+01, 2.506628277459239e+00)
    b = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
         -1.328068155288572e+01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
         4.374664141464968e+00, 2.938163982698783e+00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00)
    low = 0.02425
    if p < low:
        q = math.sqrt(-2 * math.log(p))
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / \
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
    elif p <= 1 - low:
        q = p - 0.5
        r = q * q
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q / \
            (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
    else:
        q = math.sqrt(-2 * math.log1p(-p))
        x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / \
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
    e = 0.5 * math.erfc(-x / math.sqrt(2)) - p
    u = e * math.sqrt(2 * math.pi) * math.exp(x * x / 2)
    return x - u / (1 + x * u / 2)


# --------------------------------------------------------------------------- block length

def block_length(series: np.ndarray) -> int:
    """Politis and White's (2004) automatic block length for a series in time order, with
    Patton, Politis and White's (2009) correction, for the circular block bootstrap: the
    number of consecutive observations a block should hold so that blocks are nearly
    independent. 1 for a series without autocorrelation."""
    x = np.asarray(series, dtype=float)
    n = len(x)
    if n < 8 or not np.isfinite(x).all():
        return 1
    x = x - x.mean()
    var = float(x @ x) / n
    if var <= 0:
        return 1
    kn = max(5, math.ceil(math.sqrt(math.log10(n))))
    m_max = min(math.ceil(math.sqrt(n)) + kn, n - 1)
    b_max = math.ceil(min(3 * math.sqrt(n), n / 3))
    acov = np.array([float(x[: n - k] @ x[k:]) / n for k in range(m_max + 1)])
    rho = acov / acov[0]
    bound = 2 * math.sqrt(math.log10(n) / n)
    m_hat = None
    for m in range(0, m_max - kn + 1):
        if np.all(np.abs(rho[m + 1: m + kn + 1]) < bound):
            m_hat = m
            break
    if m_hat is None:
        m_hat = m_max - kn
    big_m = min(2 * m_hat, m_max)
    if big_m == 0:
        return 1
    lags = np.arange(-big_m, big_m + 1)
    t = np.abs(lags) / big_m
    lam = np.where(t <= 0.5, 1.0, np.where(t <= 1, 2 * (1 - t), 0.0))
    r = acov[np.abs(lags)]
    g = float((lam * np.abs(lags) * r).sum())
    g0 = float((lam * r).sum())
    if g0 <= 0 or g <= 0:
        return 1
    d_cb = 4 / 3 * g0 * g0
    b = (2 * g * g / d_cb) ** (1 / 3) * n ** (1 / 3)
    return int(max(1, min(round(b), b_max)))


def chunk(num_blocks: int, length: int) -> np.ndarray:
    """Coarse block of each of ``num_blocks`` fine blocks in time order, ``length`` fine
    blocks each (the last holds the rest, merged into the one before when it would be less
    than half a block)."""
    ids = np.arange(num_blocks) // length
    count = int(ids.max()) + 1 if num_blocks else 0
    if count >= 2 and num_blocks - (count - 1) * length < length / 2:
        ids[ids == count - 1] = count - 2
    return ids


# --------------------------------------------------------------------------- the matched speedup

B_SUMS = ("tokens", "time_ms", "tx", "txx", "yx")
D_SUMS = ("tokens", "time_ms", "tx")


@dataclass
class MatchedPair:
    """One speculative deployment's matched groups and its baseline's cells, per fine block.

    d: [K_D, G, 3] sums (tokens, time, tx) of the deployment's matched groups (a group is
    a load and, where known, a context bucket) per fine block, in time order;
    b: [K_B, C, 5] sums (tokens, time, tx, txx, yx) of the baseline's supported cells per
    fine block; lo, hi: each group's cells (indices into C; hi = -1 when one cell stands
    alone) and w_lo, w_hi their weights; with_context: the context term is in.
    subsets: name -> boolean mask over the groups (a batch bucket, say), besides "all"."""

    d: np.ndarray
    b: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    w_lo: np.ndarray
    w_hi: np.ndarray
    with_context: bool
    subsets: dict[str, np.ndarray] = field(default_factory=dict)
    # each group's stratum: its load cell and context bucket. A replicate keeps the strata's
    # shares of the deployment's time (see ``statistics``)
    strata: np.ndarray | None = None
    # each group's load, and the groups a config turns speculation off at (``with_off``)
    loads: np.ndarray | None = None
    off: np.ndarray | None = None
    _strata_cache: tuple[np.ndarray, np.ndarray] | None = field(default=None, init=False, repr=False)

    def with_off(self, ranges: list[tuple[int, int]]) -> "MatchedPair":
        """The same pair with speculation off at the loads in ``ranges`` ((start, end)
        inclusive): those groups run plain decoding, so their time is their counterfactual
        and their speedup 1 — the speedup of a config that caps or gaps speculation,
        computed on the same steps."""
        off = np.zeros(len(self.loads), dtype=bool)
        for start, end in ranges:
            off |= (self.loads >= start - 0.5) & (self.loads < end + 0.5)
        return MatchedPair(self.d, self.b, self.lo, self.hi, self.w_lo, self.w_hi, self.with_context,
                           self.subsets, self.strata, self.loads, off)

    def statistics(self, d: np.ndarray, b: np.ndarray, hold: np.ndarray | None = None) -> np.ndarray:
        """log(speedup) of every subset (columns: "all", then ``subsets`` in order) for
        replicates of the sums: d [R, G, 3], b [R, C, 5]. ``hold``: the full-sample f per
        cell, which a replicate whose cell has no tokens keeps."""
        tokens, time, tx, txx, yx = (b[..., i] for i in range(5))
        with np.errstate(divide="ignore", invalid="ignore"):
            t0 = time / tokens
            xbar = tx / tokens
            if self.with_context:
                sxy = (yx - tx * time / tokens)
                sxx = (txx - tx * tx / tokens)
                ok = tokens > 0
                num = ordered_sum(np.where(ok, sxy, 0), axis=-1)
                den = ordered_sum(np.where(ok, sxx, 0), axis=-1)
                kappa = np.where(den > 0, np.maximum(num / np.where(den > 0, den, 1), 0), 0)
            else:
                kappa = np.zeros(b.shape[0])
            f = t0 - kappa[:, None] * np.nan_to_num(xbar)
        if hold is not None:
            f = np.where(tokens > 0, f, hold[None, :])
        level = self.w_lo[None, :] * f[:, self.lo] + self.w_hi[None, :] * np.where(
            self.hi[None, :] >= 0, f[:, np.maximum(self.hi, 0)], 0)
        cf = d[..., 0] * level + kappa[:, None] * d[..., 2]
        time = d[..., 1] if self.off is None else np.where(self.off[None, :], cf, d[..., 1])
        masks = [np.ones(d.shape[1], dtype=bool), *self.subsets.values()]
        out = np.empty((d.shape[0], len(masks)))
        strata = self.strata if self.strata is not None else np.arange(d.shape[1])
        count = int(strata.max()) + 1 if len(strata) else 0
        # per stratum: the speedup of the replicate, and of the full sample (which a replicate
        # that empties the stratum keeps), and the stratum's share of the full sample's time
        cf_s = np.zeros((d.shape[0], count))
        time_s = np.zeros((d.shape[0], count))
        np.add.at(cf_s.T, strata, cf.T)
        np.add.at(time_s.T, strata, time.T)
        full = self._full_strata(count, strata)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(time_s > 0, cf_s / time_s, full[0][None, :])
        for i, m in enumerate(masks):
            shares = np.zeros(count)
            np.add.at(shares, strata[m], full[1][m])
            total = float(ordered_sum(shares))
            with np.errstate(divide="ignore", invalid="ignore"):
                out[:, i] = scalar_log(ordered_sum(ratio * (shares / total)[None, :], axis=1)) if total > 0 else np.nan
        return out

    def _full_strata(self, count: int, strata: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The full sample's speedup per stratum (its counterfactual over its time) and each
        group's time, computed once: the weights that hold the load mix fixed."""
        if self._strata_cache is not None:
            return self._strata_cache
        d = self.d.sum(axis=0)
        kappa = self._kappa(self.b.sum(axis=0))
        f = self._hold()
        level = self.w_lo * f[self.lo] + self.w_hi * np.where(self.hi >= 0, f[np.maximum(self.hi, 0)], 0)
        cf = d[:, 0] * level + kappa * d[:, 2]
        time = d[:, 1] if self.off is None else np.where(self.off, cf, d[:, 1])
        cf_s, time_s = np.zeros(count), np.zeros(count)
        np.add.at(cf_s, strata, cf)
        np.add.at(time_s, strata, time)
        with np.errstate(divide="ignore", invalid="ignore"):
            self._strata_cache = (cf_s / time_s, time)
        return self._strata_cache

    def full(self) -> np.ndarray:
        return self.statistics(self.d.sum(axis=0)[None], self.b.sum(axis=0)[None])[0]

    def _hold(self) -> np.ndarray:
        """The full sample's f per cell: its time per token less the context term."""
        b = self.b.sum(axis=0)
        tokens, time, tx = b[:, 0], b[:, 1], b[:, 2]
        return time / tokens - self._kappa(b) * tx / tokens

    def _kappa(self, b: np.ndarray) -> float:
        if not self.with_context:
            return 0.0
        tokens, time, tx, txx, yx = (b[:, i] for i in range(5))
        sxy = float(ordered_sum(yx - tx * time / tokens))
        sxx = float(ordered_sum(txx - tx * tx / tokens))
        return max(sxy / sxx, 0.0) if sxx > 0 else 0.0

    def steady_blocks(self, side: str, mask: np.ndarray) -> np.ndarray:
        """The fine blocks of ``side`` that hold data the speedup of the groups in ``mask``
        reads, and whose deletion empties none of it (no baseline cell those groups use, no
        stratum of theirs): the blocks whose deletion could move it."""
        if side == "d":
            strata = (self.strata if self.strata is not None else np.arange(self.d.shape[1]))[mask]
            per = np.zeros((self.d.shape[0], int(strata.max()) + 1 if len(strata) else 0))
            np.add.at(per.T, strata, self.d[:, mask, 1].T)
            holds = self.d[:, mask, 0].sum(axis=1) > 0
            total = per.sum(axis=0)
            keeps = ((total[None, :] - per) > 0) | (total[None, :] <= 0)
        else:
            used = np.unique(np.concatenate([self.lo[mask & (self.w_lo > 0)],
                                             self.hi[mask & (self.hi >= 0) & (self.w_hi > 0)]]))
            tokens = self.b[:, used, 0]
            holds = tokens.sum(axis=1) > 0
            keeps = (tokens.sum(axis=0)[None, :] - tokens) > 0
        return np.flatnonzero(holds & keeps.all(axis=1))

    def delete_each(self, side: str, ids: np.ndarray) -> np.ndarray:
        """Statistics with each block of ``side`` ("d" or "b") deleted in turn; ``ids`` maps
        each fine block of the side to its block. [K, subsets]."""
        d_total, b_total = self.d.sum(axis=0), self.b.sum(axis=0)
        blocks = self.d if side == "d" else self.b
        k = int(ids.max()) + 1
        grouped = np.zeros((k, *blocks.shape[1:]))
        np.add.at(grouped, ids, blocks)
        if side == "d":
            d, b = d_total[None] - grouped, np.broadcast_to(b_total, (k, *b_total.shape))
        else:
            d, b = np.broadcast_to(d_total, (k, *d_total.shape)), b_total[None] - grouped
        return self.statistics(d, b, hold=self._hold())


def ordered_sum(values, axis: int = -1) -> np.ndarray:
    """The sum along ``axis`` added in index order, so the same float on every CPU. numpy's own
    sum adds a contiguous axis pairwise in as many lanes as the CPU's vectors hold (AVX-512
    gave other last bits than AVX2 on the same sample, and the report is compared byte for
    byte); a running total (``add.accumulate``) cannot be reassociated. Outer axes
    (``sum(axis=0)`` of a 2-D array) numpy already adds row after row."""
    values = np.asarray(values, dtype=float)
    if values.shape[axis] == 0:
        return np.sum(values, axis=axis)
    return np.take(np.add.accumulate(values, axis=axis), -1, axis=axis)


def scalar_log(values) -> np.ndarray:
    """ln of each value with the C library's scalar log (0: -inf, below 0 or nan: nan), the same
    on every CPU of a platform: numpy's vectorized log and exp take other code paths with
    AVX-512 and differ there in the last bit."""
    flat = np.asarray(values, dtype=float).ravel()
    out = np.array([math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan) for x in flat.tolist()])
    return out.reshape(np.shape(values))


def scalar_exp(values) -> np.ndarray:
    """e to each value with the C library's scalar exp (see ``scalar_log``)."""
    flat = np.asarray(values, dtype=float).ravel()
    return np.array([math.exp(x) for x in flat.tolist()], dtype=float).reshape(np.shape(values))


def _chunk_relevant(num_blocks: int, relevant: np.ndarray, length: int) -> np.ndarray:
    """Coarse blocks of ``length`` relevant fine blocks each, in time order (``chunk`` over the
    relevant ones); a fine block that moves nothing joins the coarse block of the relevant
    block before it (of the first, before any), where its deletion changes nothing."""
    if not len(relevant):
        return np.zeros(num_blocks, dtype=int)
    ids = np.empty(num_blocks, dtype=int)
    relevant_ids = chunk(len(relevant), length)
    position = np.searchsorted(relevant, np.arange(num_blocks), side="right") - 1
    ids[:] = relevant_ids[np.maximum(position, 0)]
    return ids


def _jackknife_variance(values: np.ndarray) -> np.ndarray:
    k = values.shape[0]
    return (k - 1) / k * ((values - values.mean(axis=0)) ** 2).sum(axis=0)


@dataclass
class Interval:
    """A matched speedup with its 95 % interval, per subset ("all" and the pair's subsets)."""

    speedup: dict[str, float | None]
    interval: dict[str, list[float] | None]
    # per side ("deployment", "baseline"): coarse blocks, fine blocks per coarse block, variance of log(speedup)
    blocks: dict[str, int]
    block_length: dict[str, int]
    variance: dict[str, dict[str, float | None]]
    df: dict[str, float | None]
    # per side and subset: the coarse blocks whose deletion moved it (its jackknife's K)
    moving: dict[str, dict[str, int]] = field(default_factory=dict)

    def variance_of(self, subset: str = "all") -> dict[str, float | None]:
        """Each side's variance of log(speedup) for ``subset``."""
        return {side: v.get(subset) for side, v in self.variance.items()}


def matched_interval(pair: MatchedPair, level: float = 0.95, max_blocks: int | None = MAX_BLOCKS) -> Interval:
    """The block jackknife of the module docstring; ``max_blocks``: at most this many coarse
    blocks per side (longer blocks than the series asks for, never shorter).

    A subset (a batch bucket) counts only the coarse blocks whose deletion moves it: its
    jackknife runs over those, and with fewer than two on a side it has no interval (all
    of its data in one block of time say nothing about how they vary)."""
    names = ["all", *pair.subsets]
    theta = pair.full()
    lengths, coarse, variance, moving = {}, {}, {}, {}
    for side, label in (("d", "deployment"), ("b", "baseline")):
        k_fine = (pair.d if side == "d" else pair.b).shape[0]
        variance[label] = {n: None for n in names}
        moving[label] = {n: 0 for n in names}
        if k_fine < 2:
            lengths[label], coarse[label] = 1, k_fine
            continue
        fine = pair.delete_each(side, np.arange(k_fine))
        # only the blocks whose deletion moves the statistic carry its time structure: a
        # baseline's blocks at loads the deployment never ran at (or a deployment's blocks
        # it could not match) leave it where it is, and a run of them would read as
        # autocorrelation
        relevant = np.flatnonzero(_moves(fine[:, 0], theta[0]))
        if not len(relevant):
            # No deletion moves it. Where two or more blocks hold its data and deleting each
            # empties none of it (units that agree exactly, as identical requests do), the
            # side's jackknife variance is 0, not unknown: more such data would never give
            # another value. Blocks without its data still say nothing.
            lengths[label], coarse[label] = 1, 1
            masks = [np.ones(pair.d.shape[1], dtype=bool), *pair.subsets.values()]
            for i, name in enumerate(names):
                steady = pair.steady_blocks(side, masks[i])
                if (len(steady) >= 2 and np.isfinite(theta[i]) and np.isfinite(fine[steady, i]).all()
                        and not _moves(fine[steady, i], theta[i]).any()):
                    variance[label][name], moving[label][name] = 0.0, len(steady)
                    coarse[label] = max(coarse[label], len(steady)) if i else len(steady)
            continue
        pseudo = k_fine * theta[0] - (k_fine - 1) * fine[relevant, 0]
        length = block_length(pseudo) if len(relevant) else 1
        if max_blocks and len(relevant):
            length = max(length, math.ceil(len(relevant) / max_blocks))
        ids = _chunk_relevant(k_fine, relevant, length)
        lengths[label], coarse[label] = length, int(ids.max()) + 1
        values = pair.delete_each(side, ids)
        for i, name in enumerate(names):
            moved = values[_moves(values[:, i], theta[i]), i]
            moving[label][name] = len(moved)
            if len(moved) >= 2:
                var = _jackknife_variance(moved[:, None])[0]
                variance[label][name] = float(var) if np.isfinite(var) else None
    speedup, interval, dfs = {}, {}, {}
    for i, name in enumerate(names):
        value = math.exp(theta[i]) if np.isfinite(theta[i]) else None
        speedup[name] = value
        vd, vb = variance["deployment"][name], variance["baseline"][name]
        if value is None or vd is None or vb is None:
            interval[name], dfs[name] = None, None
            continue
        v = vd + vb
        denominator = (vd * vd / (moving["deployment"][name] - 1)) + (vb * vb / (moving["baseline"][name] - 1))
        df = v * v / denominator if denominator > 0 else math.inf
        half = t_quantile(0.5 + level / 2, df) * math.sqrt(v) if v > 0 else 0.0
        interval[name] = [math.exp(theta[i] - half), math.exp(theta[i] + half)]
        dfs[name] = df
    return Interval(speedup, interval, coarse, lengths, variance, dfs, moving)


def _moves(values: np.ndarray, full: float) -> np.ndarray:
    """Which replicates moved a statistic off its full-sample value (beyond rounding)."""
    return np.isfinite(values) & (np.abs(values - full) > 1e-12 * max(1.0, abs(full)))


# --------------------------------------------------------------------------- from the views

def _rows(con, sql: str, params: list | None = None) -> list[dict[str, Any]]:
    cur = con.execute(sql, params or [])
    names = [c[0] for c in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def _cell(load: float) -> int:
    """The load cell of a load, as the SQL macro load_cell computes it."""
    b = int(math.floor(load + 0.5)) if load >= 0 else 0
    if b <= 16:
        return max(b, 0)
    # the batch bucket's least size: 17, 33, 65, ..., 513 (the last bucket, 513+, is open)
    low = min(2 ** (b - 1).bit_length() // 2 + 1, 513)
    width = (low - 1) // 8
    return low + width * ((b - low) // width)


def matched_pairs(con, basis: str, subsets: str | None = "batch_bucket") -> dict[str, MatchedPair]:
    """The MatchedPair of every speculative deployment with matched units of ``basis``, from
    the views matched_sums, matched_weights and matched_baseline_blocks. ``subsets``: the
    column of matched_sums whose values are the subsets (batch_bucket, or None)."""
    weights = {(r["deployment_id"], r["load"]): r for r in _rows(
        con, "select * from matched_weights where basis = ? and covered", [basis])}
    groups: dict[str, dict] = {}
    for r in _rows(con, """
            select deployment_id, baseline_id, load, context_bucket, batch_bucket, time_block,
                   cast(tokens as double) as tokens, cast(time_ms as double) as time_ms,
                   coalesce(cast(tx as double), 0) as tx
            from matched_sums where basis = ? and reason is null
            order by deployment_id, load, context_bucket nulls first, time_block""", [basis]):
        groups.setdefault(r["deployment_id"], []).append(r)
    blocks = {r["deployment_id"]: r["blocks"] for r in _rows(
        con, "select deployment_id, max(blocks) as blocks from matched_sums where basis = ? "
             "group by deployment_id", [basis])}
    cells: dict[str, list[dict]] = {}
    for r in _rows(con, """
            select deployment_id, time_block, cell, blocks, cast(tokens as double) as tokens,
                   cast(time_ms as double) as time_ms, coalesce(cast(tx as double), 0) as tx,
                   coalesce(cast(txx as double), 0) as txx, coalesce(cast(yx as double), 0) as yx
            from matched_baseline_blocks where basis = ? order by deployment_id, cell, time_block""", [basis]):
        cells.setdefault(r["deployment_id"], []).append(r)
    out: dict[str, MatchedPair] = {}
    for dep, rows in groups.items():
        baseline = rows[0]["baseline_id"]
        base_rows = cells.get(baseline) or []
        if not base_rows:
            continue
        cell_ids = sorted({r["cell"] for r in base_rows})
        cell_index = {c: i for i, c in enumerate(cell_ids)}
        k_b = int(base_rows[0]["blocks"])
        b = np.zeros((k_b, len(cell_ids), 5))
        for r in base_rows:
            b[r["time_block"] - 1, cell_index[r["cell"]]] = [r[k] for k in B_SUMS]
        keys = sorted({(r["load"], r["context_bucket"] or "") for r in rows})
        stratum_of = {}
        for load, context in keys:
            stratum_of.setdefault((_cell(float(load)), context), len(stratum_of))
        strata = np.array([stratum_of[(_cell(float(load)), context)] for load, context in keys])
        key_index = {k: i for i, k in enumerate(keys)}
        k_d = int(blocks[dep])
        d = np.zeros((k_d, len(keys), 3))
        labels: dict[int, str] = {}
        for r in rows:
            g = key_index[(r["load"], r["context_bucket"] or "")]
            d[r["time_block"] - 1, g] += [r[k] for k in D_SUMS]
            if subsets:
                labels[g] = r[subsets]
        lo = np.zeros(len(keys), dtype=int)
        hi = np.full(len(keys), -1)
        w_lo = np.zeros(len(keys))
        w_hi = np.zeros(len(keys))
        with_context = False
        for (load, _), g in key_index.items():
            w = weights[(dep, load)]
            lo[g] = cell_index[w["cell_lo"]]
            w_lo[g] = w["w_lo"]
            if w["cell_hi"] is not None:
                hi[g] = cell_index[w["cell_hi"]]
                w_hi[g] = w["w_hi"]
            with_context = bool(w["context_known"])
        names = sorted(set(labels.values()), key=lambda v: (len(v), v)) if subsets else []
        masks = {n: np.array([labels.get(g) == n for g in range(len(keys))]) for n in names}
        loads = np.array([float(load) for load, _ in keys])
        out[dep] = MatchedPair(d, b, lo, hi, w_lo, w_hi, with_context, masks, strata, loads)
    return out
