"""What the nightly regression check concluded, in the words the CLI, report.md and report.html share.

One module writes the sentences so that stdout, the Markdown and the HTML page
can never disagree about whether regressions were checked at all, or about
whether a flag is new or continues an earlier one.
"""

from __future__ import annotations


def _dates(n: int) -> str:
    return f"{n} earlier date" if n == 1 else f"{n} earlier dates"


def _since(accepted: dict[str, str]) -> str:
    """" since accept_since D" for the deployments re-baselined on the day, or ""."""
    if not accepted:
        return ""
    if len(set(accepted.values())) == 1:
        return f" since accept_since {next(iter(accepted.values()))}"
    return " since accept_since (" + ", ".join(f"{dep} {date}" for dep, date in sorted(accepted.items())) + ")"


def status_lines(check: dict, flagged: list[dict]) -> list[str]:
    """The outcome of ``regression_check`` (analyzer/decide/regression.py) as one line, plus one
    line naming the deployments left unchecked for want of their own history, if any."""
    accepted = check.get("accepted_since") or {}
    if check["status"] == "insufficient_history":
        # Saying "nothing moved" here would claim a comparison that never happened.
        return [f"Regressions: not checked — {_dates(check['earlier_dates'])} in the history{_since(accepted)}, "
                f"{check['needed']} needed (min_history_dates)"]
    against = f"the window's {_dates(check['earlier_dates'])}"
    # A document written before the reference rule has neither "rule" nor "references".
    by_reference = sum(1 for f in flagged if f.get("rule") == "reference")
    by_window = len(flagged) - by_reference
    if by_window and by_reference:
        lines = [f"Regressions: {by_window} flagged against {against}, {by_reference} against the reference"]
    elif by_reference:
        lines = [f"Regressions: {by_reference} flagged against the reference"]
    elif flagged:
        lines = [f"Regressions: {len(flagged)} flagged against {against}"]
    else:
        # "nor of its reference" only where some deployment was compared with one: before its
        # first full window of dates it has none, and the line must not claim it.
        referenced = any(r.get("status") == "set" for r in (check.get("references") or {}).values())
        lines = [f"Regressions: none — no headline metric moved past both its threshold and the spread of "
                 f"{against}" + (", nor of its reference" if referenced else "")]
    if check.get("not_checked"):
        names = ", ".join(f"{d['deployment_id']} ({_dates(d['earlier_dates'])}"
                          f"{_since({d['deployment_id']: d['accepted_since']} if 'accepted_since' in d else {})})"
                          for d in check["not_checked"])
        lines.append(f"Regressions: not checked for {names}; {check['needed']} needed (min_history_dates)")
    return lines


def flag_line(flag: dict, date: str) -> str:
    """One entry of ``regressions`` of the report for ``date`` as a sentence: the value against
    the window's median, or how far below (above) the reference it is, and, when the flag
    continues one from an earlier date, since when."""
    since = flag.get("flagged_since")
    side = "below" if flag["change"] < 0 else "above"
    if flag.get("rule") == "reference":
        dates = flag["reference_dates"]
        line = (f"{flag['deployment_id']} {flag['metric']} {flag['value']:.4g}: {abs(flag['change']):.1%} {side} "
                f"the reference (median of {dates[0]}..{dates[-1]}: {flag['baseline']:.4g})")
        if since and since != date:
            line += f", flagged since {since}"
        return line
    line = (f"{flag['deployment_id']} {flag['metric']} {flag['value']:.4g} vs median {flag['baseline']:.4g} "
            f"({flag['change']:+.1%})")
    if since and since != date:
        line += f": still {side} the median of the window before {since}, flagged since then"
    return line
