"""How many digits a number's interval supports.

A speedup of 1.1903 whose 95 % interval is 1.16–1.23 is known to about ±0.03: the
second decimal is the last one that means anything, so it is written 1.19. The rule:
one significant digit of the interval's half-width decides the last decimal shown
(at least ``least`` and at most ``most`` decimals).
"""

from __future__ import annotations

import math


def supported_decimals(lo: float | None, hi: float | None, *, least: int = 0, most: int = 3,
                       default: int = 2) -> int:
    """The decimals that the interval [lo, hi] supports (``default`` without one)."""
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return default
    half = (hi - lo) / 2
    if half <= 0:
        return most
    return max(least, min(most, -math.floor(math.log10(half))))


def with_interval(value: float, lo: float | None, hi: float | None, *, suffix: str = "") -> str:
    """ "1.19× [1.16, 1.23]": the value to the decimals its interval supports, and the interval."""
    digits = supported_decimals(lo, hi)
    text = f"{value:.{digits}f}{suffix}"
    if lo is None or hi is None:
        return text
    return f"{text} [{lo:.{digits}f}, {hi:.{digits}f}]"
