"""How the rendered reports write one value, and a table of them: numbers rounded for
display (the JSON keeps full precision), the dash for a missing value, Markdown cells
escaped. Every renderer of ``analyzer.render`` shares these, so none imports another
renderer for them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

DASH = "–"


def is_missing(value: Any) -> bool:
    """None, NaN or ±inf: a value the JSON writes as null, shown as the dash."""
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def num(value: Any, digits: int = 3) -> str:
    if is_missing(value):
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def pct(value: Any, digits: int = 1) -> str:
    return DASH if is_missing(value) else f"{value:.{digits}%}"


def times(value: Any) -> str:
    return DASH if is_missing(value) else f"{value:.3f}×"


def gamma_text(d: dict) -> str:
    """γ as a table shows it: the configured maximum, or the dash for a speculative deployment whose
    row gives 0: a speculative method with a maximum of 0 drafts nothing, so 0 there means the
    length was not given (an import whose source does not print it)."""
    if d["method"] != "none" and d["num_speculative_tokens"] == 0:
        return DASH
    return num(d["num_speculative_tokens"])


def shown_ratio(value: float) -> tuple[str, str]:
    """A throughput ratio as shown, and the word that fits what is shown: ``faster``,
    ``slower`` or ``no faster``. Two decimals, or three when two would show 1.00, so
    0.9962 is "0.996" (slower), not "1.00" (slower); a ratio that shows 1.000 is
    "no faster"."""
    shown = f"{value:.2f}"
    if float(shown) == 1:
        shown = f"{value:.3f}"
    shown_value = float(shown)
    word = "faster" if shown_value > 1 else "slower" if shown_value < 1 else "no faster"
    return shown, word


def cell(value: Any) -> str:
    """A Markdown table cell: ``|`` escaped, line breaks as spaces, and ``&`` and ``<`` as
    entities, so a value can neither end its cell nor its row, nor open an HTML tag
    (``>`` alone cannot, and stays readable: the temperature bucket ">1")."""
    text = str(value).replace("&", "&amp;").replace("<", "&lt;")
    return " ".join(text.replace("|", "\\|").splitlines())


def table(headers: Sequence[str], body: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in body]
    return "\n".join(lines) + "\n"
