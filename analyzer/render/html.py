"""Render the report document as one self-contained HTML page.

Charts are drawn by matplotlib and inlined as SVG; the stylesheet is inline
too. Nothing is fetched from the network, so the page works offline and can be
mailed or archived as one file.
"""

from __future__ import annotations

import functools
import html
import io
import json
from collections import defaultdict
from typing import Any

import matplotlib
from matplotlib.figure import Figure

from ..analysis import buckets
from .markdown import (ANOMALIES_SHOWN, ANOMALY_MEANINGS, DASH, NULL_SLICE, SLICE_HEADERS, anomaly_rule,
                       anomaly_value, is_missing, num, pct, shown_ratio, slice_tables, times)

# The charts' style, applied around each chart only (matplotlib.rc_context): importing
# or using this module changes neither matplotlib's global settings nor its backend.
# Figures are matplotlib.figure.Figure objects, not pyplot's: no backend, no display,
# and nothing kept in pyplot's figure registry.
CHART_RC = {
    "svg.fonttype": "none",      # keep text as text: smaller, selectable
    "svg.hashsalt": "specan",    # stable element ids, so the same data gives the same page
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}

STYLE = """
body { font-family: system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 0 auto; max-width: 1200px;
       padding: 0 24px 48px; color: #1d2330; }
h1 { margin-top: 24px; } h2 { border-bottom: 1px solid #d9dde5; padding-bottom: 4px; margin-top: 36px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0 16px; }
th, td { padding: 4px 10px; border-bottom: 1px solid #eceff4; text-align: right; white-space: nowrap; }
th { background: #f5f7fa; position: sticky; top: 0; }
td:first-child, th:first-child, td.text { text-align: left; }
.scroll { overflow-x: auto; }
.pass { color: #1a7f37; font-weight: 600; } .fail { color: #cf222e; font-weight: 600; }
.unknown { color: #9a6700; font-weight: 600; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; } .chart svg { max-width: 100%; height: auto; }
.finding { margin: 4px 0; } .note { color: #57606a; font-size: 13px; }
.regression { background: #fff1f0; border-left: 4px solid #cf222e; padding: 8px 12px; }
"""


def _styled(draw):
    """Run a chart function under CHART_RC: the style is read when the figure and its
    axes are made and again when the SVG is written, so both happen inside."""
    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        with matplotlib.rc_context(CHART_RC):
            return draw(*args, **kwargs)
    return wrapper


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _chart(fig, title: str) -> str:
    return f'<figure class="chart" aria-label="{html.escape(title)}">{_svg(fig)}</figure>'


def _table(headers: list[str], rows: list[list[Any]], classes: list[str] | None = None) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for value in row:
            text = html.escape(str(value))
            css = {"PASS": "pass", "FAIL": "fail", "UNKNOWN": "unknown"}.get(str(value))
            cells.append(f'<td class="{css}">{text}</td>' if css else f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


@_styled
def _survival_chart(doc: dict) -> str:
    fig = Figure(figsize=(5.2, 3.4))
    ax = fig.subplots()
    drawn = False
    for d in doc["deployments"]:
        positions = [p for p in d["positions"] if p["survival"] is not None]
        if positions:
            ax.plot([p["position"] for p in positions], [p["survival"] for p in positions], marker="o",
                    label=d["deployment_id"])
            drawn = True
    ax.set_xlabel("draft position i")
    ax.set_ylabel("survival Pr(K ≥ i)")
    ax.set_ylim(0, 1)
    ax.set_title("Acceptance survival by position")
    if drawn:
        ax.legend(fontsize=7)
    return _chart(fig, "acceptance survival curve")


@_styled
def _load_chart(doc: dict) -> str:
    curves: dict[str, list[dict]] = defaultdict(list)
    for row in doc["load_curve"]:
        curves[row["deployment_id"]].append(row)
    all_buckets = buckets.labels("batch")
    present = {row["batch_bucket"] for row in doc["load_curve"]}
    order = [b for b in all_buckets if b in present]
    fig = Figure(figsize=(10, 3.4))
    left, right = fig.subplots(1, 2)
    for dep, rows in curves.items():
        rows = sorted(rows, key=lambda r: order.index(r["batch_bucket"]))
        xs = [order.index(r["batch_bucket"]) for r in rows]
        speed = [(x, r["speedup"]) for x, r in zip(xs, rows) if r["speedup"] is not None]
        if speed:
            left.plot(*zip(*speed), marker="o", label=dep)
        length = [(x, r["mean_accept_length"]) for x, r in zip(xs, rows) if r["mean_accept_length"] is not None]
        if length:
            right.plot(*zip(*length), marker="o", label=dep)
    for ax in (left, right):
        ax.set_xticks(range(len(order)), order, rotation=45)
        ax.set_xlabel("batch bucket")
    left.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    left.set_ylabel("speedup vs baseline")
    left.set_title("Speedup by batch size")
    right.set_ylabel("mean accept length")
    right.set_title("Accept length by batch size")
    if left.lines[1:]:
        left.legend(fontsize=7)
    return _chart(fig, "speedup and accept length by batch bucket")


@_styled
def _latency_chart(doc: dict) -> str:
    deployments = [d for d in doc["deployments"] if d["latency_ms"].get("tpot", {}).get("p50") is not None]
    fig = Figure(figsize=(12, 3.4))
    axes = fig.subplots(1, 3)
    for ax, metric in zip(axes, ("tpot", "itl", "max_stall")):
        names = [d["deployment_id"] for d in deployments]
        for offset, stat in zip((-0.25, 0, 0.25), ("p50", "p95", "p99")):
            values = [d["latency_ms"][metric][stat] or 0 for d in deployments]
            ax.bar([i + offset for i in range(len(names))], values, width=0.25, label=stat)
        ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
        ax.set_title(f"{metric} (ms)")
    axes[0].legend(fontsize=7)
    return _chart(fig, "latency percentiles")


@_styled
def _trend_chart(history) -> str:
    fig = Figure(figsize=(12, 3.2))
    axes = fig.subplots(1, 3)
    for ax, metric in zip(axes, ("mean_accept_length", "speedup", "tpot_p99")):
        for dep in sorted(set(history.get_column("deployment_id").to_list())):
            rows = history.filter(history["deployment_id"] == dep).sort("date")
            points = [(d, v) for d, v in zip(rows["date"].to_list(), rows[metric].to_list()) if v is not None]
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=dep)
        ax.set_title(metric)
        ax.tick_params(axis="x", rotation=45)
    if axes[0].lines:
        axes[0].legend(fontsize=7)
    return _chart(fig, "history trend")


def _speculation_length(doc: dict) -> list[str]:
    """The recommended vLLM line per deployment, overall and within each context bucket."""
    recommendations = (doc.get("tuning") or {}).get("recommendations") or []
    rows = []
    for rec in recommendations:
        overall = rec["num_speculative_tokens_per_batch_size"]
        rows.append([rec["deployment_id"], "all", DASH, json.dumps(overall) if overall else DASH, DASH])
        for e in rec.get("by_context") or []:
            rows.append([rec["deployment_id"], e["context_bucket"],
                         pct(e["share_of_rounds"]), json.dumps(e["ranges"]) if e["ranges"] else DASH,
                         "; ".join(f"batch {d['batch_bucket']}: k = {d['k']} (overall {d['overall_k']}; {d['num_rounds']:,} rounds)"
                                   for d in e["differs_from_overall"]) or "no"])
    if not rows:
        return []
    return ["<h2>Speculation length</h2>",
            '<p class="note">vLLM\'s num_speculative_tokens_per_batch_size, overall and within each context '
            "bucket (vLLM takes batch-size ranges only: use the dominant context's line, or the overall one). "
            "`specan recommend --by-context` shows every input.</p>",
            _table(["deployment", "context", "decode rounds", "num_speculative_tokens_per_batch_size",
                    "differs from overall"], rows)]


def _anomalies(doc: dict) -> str:
    """The flagged requests, the top ANOMALIES_SHOWN of each kind, with each rule and what it usually means."""
    rules = "".join(f"<li><strong>{kind}</strong>: {html.escape(anomaly_rule(kind, doc['anomaly_thresholds']))}. "
                    f"Usually {html.escape(meaning)}.</li>" for kind, meaning in ANOMALY_MEANINGS.items())
    shown: dict[str, int] = defaultdict(int)
    rows = []
    for a in doc["anomalies"]:
        shown[a["kind"]] += 1
        if shown[a["kind"]] <= ANOMALIES_SHOWN:
            rows.append([a["kind"], a["deployment_id"], a["request_id"], anomaly_value(a["kind"], a["value"]),
                         anomaly_value(a["kind"], a["threshold"]), a["detail"]])
    if not rows:
        return f'<ul class="note">{rules}</ul><p class="note">No request is flagged.</p>'
    return (f'<ul class="note">{rules}</ul>'
            + _table(["kind", "deployment", "request", "value", "threshold", "detail"], rows))


def render(doc: dict[str, Any], history=None, title: str = "specan report") -> str:
    """The whole page. ``history`` (a polars frame from analyzer.history) adds the trend chart."""
    inp = doc["input"]
    parts = [f"<h1>{html.escape(title)}</h1>",
             f'<p class="note">Input: {inp["deployments"]:,} deployments, {inp["requests"]:,} requests, '
             f'{inp["steps"]:,} steps, {inp["rounds"]:,} rounds; {inp["rejected_rows"]:,} rows rejected.</p>']
    if doc.get("regressions"):
        items = "".join(f"<li>{html.escape(r['deployment_id'])}: {html.escape(r['metric'])} "
                        f"{num(r['value'])} vs median {num(r['baseline'])} ({r['change']:+.1%})</li>"
                        for r in doc["regressions"])
        parts.append(f'<div class="regression"><strong>Regressions</strong><ul>{items}</ul></div>')
    if "regression_check" in doc:
        # The same sentences as stdout and report.md, so "not checked" is never read as "none".
        from .regressions import status_lines

        parts += [f'<p class="note">{html.escape(line)}.</p>'
                  for line in status_lines(doc["regression_check"], doc.get("regressions") or [])]
    findings = []
    for d in doc["deployments"]:
        if d["method"] != "none" and not is_missing(d["speedup"]):
            shown, _ = shown_ratio(d["speedup"])
            findings.append(f'<p class="finding"><strong>{html.escape(d["deployment_id"])}</strong> '
                            f'({html.escape(d["method"])}): {shown}× the throughput of '
                            f'{html.escape(d["baseline_id"])} over {pct(d["speedup_coverage"])} of its tokens; '
                            f'mean accept length {num(d["mean_accept_length"], 2)}.</p>')
    parts += ["<h2>Findings</h2>", *findings]
    parts += ["<h2>Summary</h2>", _table(
        ["deployment", "method", "γ", "baseline", "accept length", "per request", "acceptance", "tokens/round",
         "speedup", "coverage"],
        [[d["deployment_id"], d["method"], d["num_speculative_tokens"], d["baseline_id"] or DASH,
          num(d["mean_accept_length"]), num(d["mean_accept_length_per_request"]), pct(d["acceptance_rate"]),
          num(d["tokens_per_round"]), times(d["speedup"]), pct(d["speedup_coverage"])] for d in doc["deployments"]])]
    parts += ['<h2>Charts</h2><div class="charts">', _survival_chart(doc), _load_chart(doc), _latency_chart(doc)]
    if history is not None and not history.is_empty():
        parts.append(_trend_chart(history))
    parts.append("</div>")
    parts += ["<h2>Round ledger against the baseline</h2>",
              '<p class="note">Decode-only rounds per batch bucket. The speedup condition holds when a round '
              "takes less than t0 · tokens/round, the time plain decoding needs for the same tokens.</p>",
              _table(["deployment", "batch", "rounds", "draft ms", "verify ms", "other ms", "round ms",
                      "tokens/round", "t0 ms", "break-even ms", "condition holds"],
                     [[r["deployment_id"], r["batch_bucket"], num(r["num_rounds"]), num(r["draft_ms"]),
                       num(r["verify_ms"]), num(r["other_ms"]), num(r["round_ms"]), num(r["tokens_per_round"]),
                       num(r["t0_ms"]), num(r["break_even_ms"]), num(r["condition_holds"])]
                      for r in doc["round_ledger"] if r["t0_ms"] is not None])]
    parts += _speculation_length(doc)
    parts += ["<h2>Categories</h2>", _table(
        ["deployment", "category", "requests", "accept length", "acceptance", "tokens/round", "speedup",
         "repeat ratio"],
        [[r["deployment_id"], r["category"], num(r["num_requests"]), num(r["mean_accept_length"]),
          pct(r["acceptance_rate"]), num(r["tokens_per_round"]), times(r["speedup"]), num(r.get("repeat_ratio"))]
         for r in doc["categories"]])]
    tables = slice_tables(doc)
    if tables:
        parts += ["<h2>Slices</h2>",
                  f'<p class="note">By requests column (--by); a null value, or no requests row, is the slice '
                  f"{NULL_SLICE}.</p>"]
        for column, body in tables:
            parts += [f"<h3>By {html.escape(column)}</h3>",
                      _table(list(SLICE_HEADERS), [list(row) for row in body]) if body else
                      '<p class="note">No request with a clean round.</p>']
    if "anomalies" in doc:
        parts += ["<h2>Requests to look at</h2>", _anomalies(doc)]
    gates = doc.get("gates") or []
    if gates:
        by_dep: dict[str, dict[str, str]] = defaultdict(dict)
        for g in gates:
            by_dep[g["deployment_id"]][g["gate"]] = g["status"].upper()
        names = ("correctness", "quality", "latency", "capacity")
        parts += ["<h2>Deployment gates</h2>",
                  _table(["deployment", *names], [[dep, *(row.get(n, DASH) for n in names)]
                                                  for dep, row in by_dep.items()])]
    if doc.get("notes"):
        parts.append("<h2>Notes</h2><ul>" + "".join(f'<li class="note">{html.escape(n)}</li>'
                                                   for n in doc["notes"]) + "</ul>")
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n")
