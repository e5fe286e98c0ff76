"""How sure a latency percentile is, and the baseline's at the same load.

The latency gate decides with percentiles (TTFT p99, TPOT p95, max stall p99). A p99 of
591 requests rests on about six of them, so it moves from day to day; and a deployment
that ran at a higher load than its baseline is slower per token for that reason alone.
This module gives each percentile a 95 % interval and the matched baseline's percentile
at the deployment's own load mix (docs/metrics.md, "Latency against its target"):

- **Counts.** The view ``latency_cells`` counts each deployment's requests per block of
  time (by arrival), load cell (its mean concurrency from request timings) and value bin
  (1 % wide on a log scale). Nothing per request leaves the SQL.
- **Bootstrap.** Each replicate weighs every coarse block of time (``BLOCKS`` of them,
  contiguous in arrival order) by a Poisson(1) draw, the deployment's and the baseline's
  independently, from a numpy Generator seeded by ``[intervals] seed`` and the
  deployment, so a run gives the same intervals every time. A percentile of a replicate
  is read off its weighted bins; the interval is the 2.5 % and 97.5 % quantiles of the
  replicates' percentiles, widened by half a bin on either side (``HALF_BIN``: the bins'
  quantisation never narrows an interval).
- **The baseline at the same load.** The cells both sides ran in (the baseline with at
  least ``MIN_CELL_REQUESTS`` requests there) are the matched cells; the baseline's
  histogram is reweighted cell by cell to the deployment's requests there, and the
  deployment's is restricted to them: ``baseline_matched`` and ``ratio`` (the
  deployment's percentile over its matched requests ÷ the baseline's at the same load
  mix) follow, each with its interval. ``matched_share`` is the share of the deployment's
  requests (with a load) in matched cells; below ``[gates.capacity] min_speedup_coverage``
  the two ran at different loads and no comparison is made.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .uncertainty import chunk, scalar_exp

CHECKS = {"ttft_p99_ms": ("ttft", 0.99), "tpot_p95_ms": ("tpot", 0.95), "max_stall_p99_ms": ("max_stall", 0.99)}
BLOCKS = 32                 # coarse blocks of time per deployment that a replicate weighs
MIN_CELL_REQUESTS = 5       # a baseline's load cell stands for the deployment's requests there from this many
ZERO_BIN = -100000


@dataclass
class Histogram:
    """One deployment's counts of one metric: [blocks, cells, bins], with the cell and bin labels."""

    counts: np.ndarray
    cells: list            # cell labels; None: requests without a load
    bins: np.ndarray       # value bins (floor(100 · ln ms))

    def values(self) -> np.ndarray:
        return np.where(self.bins == ZERO_BIN, 0.0, scalar_exp((self.bins + 0.5) / 100))


def _quantile(hist: np.ndarray, values: np.ndarray, p: float) -> np.ndarray:
    """The p quantile of each row of weighted counts ``hist`` [R, bins] (bins ascending):
    the value of the first bin whose cumulative weight reaches p of the total; nan for an
    empty row."""
    cum = np.cumsum(hist, axis=1)
    total = cum[:, -1]
    index = (cum < (p * total)[:, None]).sum(axis=1)
    out = values[np.minimum(index, len(values) - 1)]
    return np.where(total > 0, out, np.nan)


def _coarse(counts: np.ndarray) -> np.ndarray:
    """The blocks of ``counts`` [fine blocks, ...] summed into at most BLOCKS contiguous ones."""
    ids = chunk(counts.shape[0], max(1, -(-counts.shape[0] // BLOCKS)))
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    return np.add.reduceat(counts, starts, axis=0)


def _weights(seed: int, deployment: str, metric: str, replicates: int, blocks: int) -> np.ndarray:
    key = hashlib.sha256(f"{deployment}/{metric}".encode()).digest()
    rng = np.random.default_rng([seed, int.from_bytes(key[:8], "little")])
    return rng.poisson(1.0, size=(replicates, blocks)).astype(float)


# Each replicate reads a percentile as its bin's middle, within half a bin (0.5 %) of any value
# in the bin: an interval is widened by that on either side, and a ratio of two such by a bin,
# so quantisation never narrows it (every request at 58.0 ms is no proof of 58.2 ms).
HALF_BIN = math.exp(0.005)


def _interval(samples: np.ndarray, widen: float = HALF_BIN) -> list[float] | None:
    kept = samples[np.isfinite(samples)]
    if len(kept) < 0.9 * len(samples) or not len(kept):
        return None
    return [float(np.quantile(kept, 0.025)) / widen, float(np.quantile(kept, 0.975)) * widen]


def percentile_intervals(histograms: dict[str, dict[str, Histogram]], pairs: dict[str, str | None], *,
                         seed: int = 0, replicates: int = 2000) -> dict[str, dict[str, dict[str, Any]]]:
    """Per deployment and latency check (``CHECKS``): its percentile's interval and, for a
    deployment with a baseline in ``pairs``, the baseline's percentile at its load mix and
    their ratio, each with an interval (module docstring)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for dep, by_metric in histograms.items():
        out[dep] = {}
        for check, (metric, p) in CHECKS.items():
            hist = by_metric.get(metric)
            if hist is None:
                continue
            counts = _coarse(hist.counts)
            w = _weights(seed, dep, metric, replicates, counts.shape[0])
            values = hist.values()
            own = w @ counts.sum(axis=1)
            entry: dict[str, Any] = {"p": p, "n": int(hist.counts.sum()),
                                     "interval": _interval(_quantile(own, values, p)),
                                     "baseline_matched": None, "baseline_matched_interval": None,
                                     "ratio": None, "ratio_interval": None, "matched_share": None}
            base = pairs.get(dep)
            base_hist = histograms.get(base, {}).get(metric) if base else None
            if base_hist is not None:
                entry.update(_matched(hist, base_hist, counts, w, p, seed, base, metric, replicates))
            out[dep][check] = entry
    return out


def _matched(hist: Histogram, base: Histogram, counts: np.ndarray, w: np.ndarray, p: float, seed: int,
             base_id: str, metric: str, replicates: int) -> dict[str, Any]:
    """The baseline's percentile reweighted to the deployment's load mix, and the ratio.

    Per replicate, each matched cell of the baseline is scaled to the deployment's weighted
    requests there; the percentile of each side is then read off the bins above ``TAIL``
    below it in the full sample (a replicate's p-quantile never falls that far), so the
    replicates' histograms need only those bins."""
    bins = np.union1d(hist.bins, base.bins)
    values = np.where(bins == ZERO_BIN, 0.0, scalar_exp((bins + 0.5) / 100))
    d = _on_bins(counts, hist.bins, bins)
    b = _on_bins(_coarse(base.counts), base.bins, bins)
    d_cells = {c: i for i, c in enumerate(hist.cells) if c is not None}
    b_cells = {c: i for i, c in enumerate(base.cells) if c is not None}
    b_totals = b.sum(axis=(0, 2))
    common = [c for c in d_cells if c in b_cells and b_totals[b_cells[c]] >= MIN_CELL_REQUESTS]
    loaded = sum(d[:, i].sum() for i in d_cells.values())
    matched = sum(d[:, d_cells[c]].sum() for c in common)
    share = float(matched / loaded) if loaded else None
    result: dict[str, Any] = {"matched_share": share}
    if not common:
        return result
    d_common = d[:, [d_cells[c] for c in common]]          # [blocks, cells, bins]
    b_common = b[:, [b_cells[c] for c in common]]
    w_base = _weights(seed, base_id, metric + "/baseline", replicates, b_common.shape[0])
    # the full sample's matched histograms, and the bins their tails start at
    d_mass_full, b_mass_full = d_common.sum(axis=(0, 2)), b_common.sum(axis=(0, 2))
    full_d = d_common.sum(axis=0).sum(axis=0)
    full_b = (b_common.sum(axis=0) * (d_mass_full / b_mass_full)[:, None]).sum(axis=0)
    start = min(_index(full_d, max(p - TAIL, 0.0)), _index(full_b, max(p - TAIL, 0.0)))
    tail = slice(start, len(bins))
    # per replicate: each side's weighted requests per cell, and the tail bins
    d_mass = w @ d_common.sum(axis=2)                       # [R, cells]
    b_mass = w_base @ b_common.sum(axis=2)
    ok = (d_mass > 0) & (b_mass > 0)
    scale = np.where(ok, d_mass / np.where(b_mass > 0, b_mass, 1), 0.0)
    cells, width = len(common), len(bins) - start
    d_tail = (w @ d_common[:, :, tail].reshape(d_common.shape[0], cells * width)).reshape(-1, cells, width)
    b_tail = (w_base @ b_common[:, :, tail].reshape(b_common.shape[0], cells * width)).reshape(-1, cells, width)
    total = (d_mass * ok).sum(axis=1)                       # both sides' matched mass, by construction
    d_q = _tail_quantile(np.einsum("rcw,rc->rw", d_tail, ok.astype(float)), total, values[tail], p)
    b_q = _tail_quantile(np.einsum("rcw,rc->rw", b_tail, scale), total, values[tail], p)
    base_full = float(_quantile(full_b[None], values, p)[0])
    d_full = float(_quantile(full_d[None], values, p)[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = d_q / b_q
    result.update({
        "baseline_matched": base_full, "baseline_matched_interval": _interval(b_q),
        "ratio": d_full / base_full if base_full > 0 else None, "ratio_interval": _interval(ratio, HALF_BIN ** 2),
    })
    return result


# A replicate's p-quantile is read off the bins above the full sample's (p − TAIL)-quantile.
TAIL = 0.15


def _index(hist: np.ndarray, q: float) -> int:
    """The bin of the q-quantile of one histogram."""
    cum = np.cumsum(hist)
    return int(min((cum < q * cum[-1]).sum(), len(hist) - 1)) if cum[-1] > 0 else 0


def _tail_quantile(tail: np.ndarray, total: np.ndarray, values: np.ndarray, p: float) -> np.ndarray:
    """The p quantile of each replicate from its tail bins [R, tail] and its whole mass [R]:
    the weight below the tail counts as reached before its first bin (so a quantile that
    would fall below the tail reads as its first bin)."""
    below = total - tail.sum(axis=1)
    cum = below[:, None] + np.cumsum(tail, axis=1)
    index = (cum < (p * total)[:, None]).sum(axis=1)
    out = values[np.minimum(index, len(values) - 1)]
    return np.where(total > 0, out, np.nan)


def _on_bins(counts: np.ndarray, own: np.ndarray, bins: np.ndarray) -> np.ndarray:
    out = np.zeros((*counts.shape[:-1], len(bins)))
    out[..., np.searchsorted(bins, own)] = counts
    return out


def histograms(con) -> dict[str, dict[str, Histogram]]:
    """Every deployment's Histogram per metric, from the view latency_cells."""
    rows = con.execute("select deployment_id, metric, time_block, cell, value_bin, requests from latency_cells "
                       "order by deployment_id, metric").fetchall()
    blocks = dict(con.execute("select deployment_id, max(time_block) from latency_cells group by deployment_id"
                              ).fetchall())
    grouped: dict[tuple[str, str], list] = {}
    for dep, metric, block, cell, value_bin, n in rows:
        grouped.setdefault((dep, metric), []).append((block, cell, value_bin, n))
    out: dict[str, dict[str, Histogram]] = {}
    for (dep, metric), found in grouped.items():
        cells = sorted({c for _, c, _, _ in found}, key=lambda c: (c is None, c if c is not None else 0))
        bins = np.array(sorted({b for _, _, b, _ in found}))
        counts = np.zeros((int(blocks[dep]), len(cells), len(bins)))
        cell_index = {c: i for i, c in enumerate(cells)}
        bin_index = {b: i for i, b in enumerate(bins)}
        for block, cell, value_bin, n in found:
            counts[block - 1, cell_index[cell], bin_index[value_bin]] += n
        out.setdefault(dep, {})[metric] = Histogram(counts, cells, bins)
    return out
