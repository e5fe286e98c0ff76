"""What the nightly regression check concluded, in the words the CLI, report.md and report.html share.

One function writes the sentences so that stdout, the Markdown and the HTML page
can never disagree about whether regressions were checked at all.
"""

from __future__ import annotations


def _dates(n: int) -> str:
    return f"{n} earlier date" if n == 1 else f"{n} earlier dates"


def status_lines(check: dict, flagged: list[dict]) -> list[str]:
    """The outcome of ``regression_check`` (analyzer/analysis/history.py) as one line, plus one
    line naming the deployments left unchecked for want of their own history, if any."""
    if check["status"] == "insufficient_history":
        # Saying "nothing moved" here would claim a comparison that never happened.
        return [f"Regressions: not checked — {_dates(check['earlier_dates'])} in the history, "
                f"{check['needed']} needed (min_history_dates)"]
    against = f"the window's {_dates(check['earlier_dates'])}"
    if flagged:
        lines = [f"Regressions: {len(flagged)} flagged against {against}"]
    else:
        lines = [f"Regressions: none — no headline metric moved past both its threshold and the spread of "
                 f"{against}"]
    if check.get("not_checked"):
        names = ", ".join(f"{d['deployment_id']} ({_dates(d['earlier_dates'])})" for d in check["not_checked"])
        lines.append(f"Regressions: not checked for {names}; {check['needed']} needed (min_history_dates)")
    return lines
