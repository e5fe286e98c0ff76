"""Which speculation length each batch range gets: configs only where the evidence is.

The tuning search (``analysis.tuning.recommend``) predicts, per batch bucket, the speedup
of every speculation length γ from the round-cost model and the acceptance, and measures
the speedup of the length that ran there, with its interval (the bucket's share of the
matched comparison, ``analysis.uncertainty``). This module turns that into vLLM's
``num_speculative_tokens_per_batch_size`` ranges by one rule (docs/commands.md, "The
ranges"):

- **pays**: the bucket's measured speedup lies above 1 by its 95 % interval, on at least
  ``[evidence] min_bucket_share`` of the deployment's committed tokens: k > 0, the
  predicted best length (or the length that ran, where no length is predicted to beat it);
- **loses**: its interval lies below 1: k = 0;
- **no_baseline**: the baseline never ran at the loads (and contexts) the deployment ran
  at there (less than half of the bucket's tokens matched): k = 0, speculation off until
  it is measured, and the verdict says so;
- **undecided**: the interval includes 1, or the bucket holds too few tokens to decide on
  its own: k = 0 at the edges; between two buckets that pay it takes the lower one's k,
  since a k = 0 range between two k > 0 ranges needs evidence of its own (an upper bound
  below 1), not noise;
- a bucket the deployment never ran at: below a bucket that pays, the nearest lower
  bucket's k (below the lowest, the lowest's), since a speedup falls as the batch grows;
  above every bucket that pays, k = 0 (unmeasured), and so are the batch sizes beyond the
  last bucket with decode-only steps that only other steps (prefills) reached, with a note.

A deployment none of whose buckets is decided either way, whose speedup over all of its
tokens passes, gets no ranges: it ships as configured.
"""

from __future__ import annotations

from typing import Any

from ..analysis import buckets as bucket_seed
from ..analysis.config import Config

BUCKETS = bucket_seed.labels("batch")
BOUNDS = bucket_seed.bounds("batch")
# At least this share of a bucket's tokens matched with the baseline, or it has no baseline there.
MIN_MATCHED_SHARE = 0.5

PAYS, LOSES, NO_BASELINE, UNDECIDED = "pays", "loses", "no_baseline", "undecided"


def classify(bucket: dict[str, Any], config: Config) -> tuple[str, str]:
    """One bucket's evidence (module docstring), and why in words."""
    interval = bucket.get("measured_speedup_interval")
    share = bucket.get("token_share") or 0.0
    floor = config.evidence.min_bucket_share
    matched = bucket.get("matched_share")
    if bucket.get("baseline_ms_per_token") is None or matched is None or matched < MIN_MATCHED_SHARE:
        return NO_BASELINE, "no baseline at these loads: speculation off here until measured"
    if interval is None:
        return UNDECIDED, "its speedup has no interval here (too few blocks of time)"
    shown = f"{bucket['measured_speedup']:.3g}× [{interval[0]:.3g}, {interval[1]:.3g}]"
    if interval[1] < 1:
        return LOSES, f"measured {shown}: below 1 by its interval"
    if share < floor:
        return UNDECIDED, (f"{share:.1%} of its tokens ran here, fewer than min_bucket_share = {floor:.0%}: "
                           "too few to decide on their own")
    if interval[0] > 1:
        return PAYS, f"measured {shown}: above 1 by its interval"
    return UNDECIDED, f"measured {shown}: the interval includes 1"


def evidence_ranges(rec: dict[str, Any], config: Config) -> list[list[int]]:
    """Set each bucket's ``evidence``, ``recommended`` k and ``why`` in ``rec`` (the tuning
    search's document) by the rule of the module docstring, and return the ranges."""
    max_gamma = int(rec.get("num_speculative_tokens") or 0)
    observed = [b for b in rec.get("buckets") or [] if b["batch_bucket"] in BUCKETS]
    if not observed or rec.get("baseline_id") is None:
        return []
    decided: dict[int, tuple[str, int]] = {}
    for b in observed:
        kind, why = classify(b, config)
        k = 0
        if kind == PAYS:
            best = b.get("predicted_best")
            ran = max(b.get("observed_gamma") or [max_gamma])
            k = best if best else min(ran, max_gamma)
        b["evidence"], b["why_k"] = kind, why
        decided[BUCKETS.index(b["batch_bucket"])] = (kind, k)
    kinds = {kind for kind, _ in decided.values()}
    if PAYS not in kinds and LOSES not in kinds and NO_BASELINE not in kinds:
        for b in observed:
            b["recommended"] = None
        return []
    positions = sorted(decided)
    paying = [i for i in positions if decided[i][0] == PAYS]
    ks: dict[int, int] = {}
    for i in positions:
        kind, k = decided[i]
        if kind == UNDECIDED:
            lower = [j for j in paying if j < i]
            upper = [j for j in paying if j > i]
            k = decided[max(lower)][1] if lower and upper else 0
        ks[i] = k
    for b in observed:
        i = BUCKETS.index(b["batch_bucket"])
        b["recommended"] = ks[i]
        _speedup_at(b, ks[i])
        if b["evidence"] == UNDECIDED and ks[i]:
            b["why_k"] += "; between two buckets that pay, so it keeps the lower one's k"
    ranges: list[list[int]] = []
    last = max(positions)
    largest = rec.get("largest_batch_size")
    for i in range(last + 1):
        if i in ks:
            k = ks[i]
        else:
            k = _unseen(i, positions, ks, paying)
        start, end = BOUNDS[BUCKETS[i]]
        if end is None:
            end = max(int(largest or start), int(start))
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = int(end)
        else:
            ranges.append([int(start), int(end), k])
    if largest is not None and largest > ranges[-1][1]:
        # batch sizes beyond the last bucket with decode-only steps (prefill steps ran there):
        # never measured, above every bucket that pays, so off until measured (as ``_unseen``)
        start, end = ranges[-1][1] + 1, int(largest)
        rec.setdefault("notes", []).append(
            f"The deployment ran at batch sizes up to {end}, beyond its last bucket with decode-only steps "
            f"({BUCKETS[last]}, to {ranges[-1][1]}): no decode step measured speculation there, so it is off "
            f"from {start} to {end} until one does.")
        if ranges[-1][2] == 0:
            ranges[-1][1] = end
        else:
            ranges.append([start, end, 0])
    return ranges


def _speedup_at(bucket: dict[str, Any], k: int) -> None:
    """The bucket's speedup at its decided k: 1 for plain decoding, else what the search
    predicted or measured for that length."""
    if k == 0:
        bucket["speedup_at_k"], bucket["speedup_at_k_source"] = 1.0, "plain decoding"
        return
    value = (bucket.get("predicted_speedup") or {}).get(str(k))
    bucket["speedup_at_k"] = value
    bucket["speedup_at_k_source"] = (bucket.get("speedup_source") or {}).get(str(k)) if value is not None else None


def _unseen(i: int, positions: list[int], ks: dict[int, int], paying: list[int]) -> int:
    """The k of a bucket the deployment never ran at: a speedup falls as the batch grows, so
    a bucket below one that pays would pay too, and it takes the k of the nearest bucket
    below it (of the one above, below the lowest), when that one pays; a bucket above every
    bucket that pays is unmeasured, and speculation is off there."""
    if not any(j > i for j in paying):
        return 0
    lower = [j for j in positions if j < i]
    if not lower:
        return ks[min(j for j in paying if j > i)]
    return ks[max(lower)]


def off_ranges(ranges: list[list[int]]) -> list[tuple[int, int]]:
    """The batch ranges a config turns speculation off in (k = 0)."""
    return [(start, end) for start, end, k in ranges if k == 0]


def no_baseline_buckets(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The buckets the config turns off for want of a baseline there."""
    return [b for b in rec.get("buckets") or [] if b.get("evidence") == NO_BASELINE]
