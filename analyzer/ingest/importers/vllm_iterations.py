"""vLLM's per-iteration lines (``--enable-logging-iteration-details``) → the ``steps`` table.

vLLM prints one line per engine iteration when the flag is on. Three layouts are known
(docs/importers.md has the table, tests/fixtures/vllm_logs/SOURCES.md where each comes from):

1. ``Iteration(N): C context requests, T context tokens, G generation requests, W generation
   tokens, iteration elapsed time: X.XX ms``, from the EngineCore process (``core.py``, PR #31193,
   2025-12); later with `` (dummy)`` at the end of a data-parallel dummy iteration.
2. The same with ``, kv cache: P% (U/N blocks, K tokens)`` (PR #34860's branch, 2026-02).
3. Printed by the frontend's stat logger (PR #46647, 2026-06): ``Engine 00N: Iteration(N): …
   iteration elapsed time: X.XX ms, <device> KV cache usage: P%``, optionally followed by
   ``, encoder inputs: N, encoder output embeddings: N`` and `` (dummy)``.

Every field is read by its label, so a layout is the set of fields a line has. The line is
logged when the iteration ends: start = the line's time − the elapsed time. vLLM's log time
has one-second resolution, so steps within one second are ordered by line order (the
``Iteration(N)`` counter), not by their derived start.

Token counts: a plain deployment (no spec-decode line in the log) commits one token per
generation request (``counts_from = 'iteration'``). In a speculative deployment the printed
generation tokens are the *scheduled* ones, 1 + drafts per request: drafts = generation tokens
− generation requests. Accepted drafts come from the spec-decode window that covers the step
(``estimate_window``), ``counts_from = 'window'``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The marker: vLLM's own `Iteration(N): … context requests` (or generation requests).
_MARKER = re.compile(r"\bIteration\(([^)]*)\):\s*(?=.*\b(?:context|generation) requests)")
_INT = {
    "ctx_requests": re.compile(r"(?:^|\s)(\S+) context requests"),
    "ctx_tokens": re.compile(r"(?:^|\s)(\S+) context tokens"),
    "gen_requests": re.compile(r"(?:^|\s)(\S+) generation requests"),
    "gen_tokens": re.compile(r"(?:^|\s)(\S+) generation tokens"),
}
_ELAPSED = re.compile(r"iteration elapsed time: (\S+) ms")
_KV_BLOCKS = re.compile(r"kv cache: (\S+)% \((\d+)/(\d+) blocks, (\d+) tokens\)")
_KV_USAGE = re.compile(r"(?:(\w+) )?KV cache usage: (\S+)%")
_DUMMY = re.compile(r"\(dummy\)\s*$")
_ENGINE_BEFORE = re.compile(r"Engine (\d+):\s*$")
_DP_RANK = re.compile(r"EngineCore_DP(\d+)")

LAYOUTS = ("`Iteration(N): … iteration elapsed time: X ms` (core.py, PR #31193; `(dummy)` later)",
           "… `, kv cache: P% (U/N blocks, K tokens)` (PR #34860 branch)",
           "`Engine 00N: Iteration(N): … ms, <device> KV cache usage: P%` (frontend loggers.py, PR #46647)")


def find_marker(line: str) -> re.Match | None:
    return _MARKER.search(line)


def parse_iteration(text: str) -> dict | None:
    """The fields of one iteration message (the text from its ``Iteration(`` marker on), or None when
    a field the line must have does not parse: counter, the four counts, the elapsed time."""
    marker = _MARKER.match(text) or _MARKER.search(text)
    if marker is None:
        return None
    rest = text[marker.end():]
    try:
        counter = int(marker.group(1))
        found = {}
        for name, pattern in _INT.items():
            m = pattern.search(rest)
            if m is None:
                return None
            found[name] = int(m.group(1))
        elapsed = _ELAPSED.search(rest)
        if elapsed is None:
            return None
        elapsed_ms = float(elapsed.group(1))
    except ValueError:
        return None
    if elapsed_ms != elapsed_ms or elapsed_ms < 0 or elapsed_ms == float("inf") or min(found.values()) < 0:
        return None
    kv, layout, device, blocks_agree = None, "iteration", None, None
    blocks = _KV_BLOCKS.search(rest)
    usage = _KV_USAGE.search(rest)
    try:
        if blocks is not None:
            kv, layout = float(blocks.group(1)) / 100, "iteration + kv cache blocks"
            used, total = int(blocks.group(2)), int(blocks.group(3))
            # the percentage is used / total blocks, printed to one decimal
            blocks_agree = total > 0 and abs(float(blocks.group(1)) - 100 * used / total) <= 0.05 + 1e-9
        elif usage is not None:
            kv, layout, device = float(usage.group(2)) / 100, "iteration + KV cache usage", usage.group(1)
    except ValueError:
        return None
    if kv is not None and not 0 <= kv <= 1:
        return None
    return {"counter": counter, **found, "elapsed_ms": elapsed_ms, "kv_usage": kv, "layout": layout,
            "device": device, "blocks_agree": blocks_agree, "dummy": _DUMMY.search(rest) is not None}


def engine_of(prefix: str) -> tuple[int, str | None]:
    """(the engine index, the ``Engine N`` label if printed) of an iteration line, from the text before
    its marker: ``(EngineCore_DP1 pid=…)`` is DP rank 1; a frontend line names its ``Engine 00N:``; else 0."""
    engine = _ENGINE_BEFORE.search(prefix)
    dp = _DP_RANK.search(prefix)
    index = int(engine.group(1)) if engine else int(dp.group(1)) if dp else 0
    return index, (f"Engine {engine.group(1)}" if engine else None)


@dataclass
class Iteration:
    """One iteration line that becomes a step."""

    series: str
    engine: int
    end_us: int          # the line's time: when the iteration ended
    order: tuple         # (file, line): the order vLLM printed it in
    place: str
    counter: int
    ctx_requests: int
    ctx_tokens: int
    gen_requests: int
    gen_tokens: int
    elapsed_ms: float
    kv_usage: float | None
    drafts: int | None = None
    accepted: int | None = None
    committed: int | None = None
    counts_from: str | None = None


def round_half_up_ratio(num: int, den: int) -> int:
    """round(num / den), halves up, exactly (integers)."""
    return (2 * num + den) // (2 * den)


def spread(target: int, weights: list[int]) -> list[int]:
    """``target`` split over ``weights`` in proportion by the largest-remainder method: each gets
    floor(target · w / Σw), and the units left go to the largest remainders (ties: the earlier one).
    The parts add up to ``target``; a part never exceeds its weight when target ≤ Σw."""
    total = sum(weights)
    if total == 0:
        return [0] * len(weights)
    parts = [target * w // total for w in weights]
    remainders = [target * w % total for w in weights]
    left = target - sum(parts)
    for i in sorted(range(len(weights)), key=lambda i: (-remainders[i], i))[:left]:
        parts[i] += 1
    return parts


def estimate_window(steps: list[Iteration], accepted: int, drafted: int) -> int | None:
    """Fill the accepted and committed tokens of a window's steps from its spec-decode line
    (accepted / drafted): round(Σ drafts × rate) spread over the steps by their drafts. Returns the
    window's Σ drafts − the line's Drafted (None when the rate is unknown: nothing drafted)."""
    total = sum(s.drafts for s in steps)
    if drafted == 0:
        if total:
            return None
        target = 0
    else:
        target = round_half_up_ratio(total * accepted, drafted)
    for step, part in zip(steps, spread(min(target, total), [s.drafts for s in steps])):
        step.accepted = part
        step.committed = step.gen_requests + part
        step.counts_from = "window"
    return total - drafted
