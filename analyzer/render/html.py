"""Render the report document as one self-contained HTML page.

The page shows what the Markdown report shows: its sections are the Markdown
renderer's output read back as blocks (md_blocks), so every sentence and table
has one source. The page adds a first box, "What to do" (the verdict lines and
any regression), and charts in the sections they illustrate.

Charts are drawn by matplotlib and inlined as SVG; the stylesheet is inline
too. Nothing is fetched from the network, so the page works offline and can be
mailed or archived as one file.
"""

from __future__ import annotations

import functools
import html
import io
import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import matplotlib
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from ..analysis import buckets
from . import markdown, md_blocks
from .cells import DASH
from .regressions import flag_line, status_lines

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

# Charts are drawn this wide and scaled to the page's width by the stylesheet, so the
# text keeps about the page's size (9 pt at 11 in shown ~1150 px wide ≈ 13 px).
CHART_WIDTH = 11.0

STYLE = """
body { font-family: system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 0 auto; max-width: 1200px;
       padding: 0 24px 48px; color: #1d2330; }
h1 { margin-top: 24px; } h2 { border-bottom: 1px solid #d9dde5; padding-bottom: 4px; margin-top: 36px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0 16px; }
th, td { padding: 4px 10px; border-bottom: 1px solid #eceff4; text-align: right; white-space: nowrap; }
th { background: #f5f7fa; position: sticky; top: 0; }
td:first-child, th:first-child, td.text { text-align: left; }
td.text { white-space: normal; min-width: 24em; }
.scroll { overflow-x: auto; } .scroll.long { max-height: 460px; overflow-y: auto; }
.pass { color: #1a7f37; font-weight: 600; } .fail { color: #cf222e; font-weight: 600; }
.unknown { color: #9a6700; font-weight: 600; }
figure.chart { margin: 12px 0 20px; } .chart svg { display: block; width: 100%; height: auto; }
.note { color: #57606a; font-size: 13px; }
pre { background: #f5f7fa; padding: 8px 12px; overflow-x: auto; }
code { font-size: 12px; }
.todo { background: #f3f8ff; border-left: 4px solid #0969da; padding: 4px 16px 8px; margin: 16px 0; }
.todo h2 { border: none; margin-top: 8px; }
.todo .ship { color: #1a7f37; } .todo .cap { color: #9a6700; } .todo .dont_ship { color: #cf222e; }
.todo .inconclusive, .todo .unknown { color: #57606a; } .shared { color: #9a6700; font-weight: 600; }
.regression { background: #fff1f0; border-left: 4px solid #cf222e; padding: 8px 12px; }
"""

# A table cell longer than this wraps instead of widening the table (details, reasons).
WRAP_AT = 48
# A table with more rows scrolls in a box of its own (its header stays in view), so the
# long per-bucket tables do not push the charts and sections after them pages down.
LONG_TABLE = 16

NO_DATA = "Left out for want of data (their tables have no rows): {sections}."


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


def _figure(height: float) -> Figure:
    # constrained layout makes room for the legends placed outside the axes ("outside ..."),
    # so no legend sits on the data.
    return Figure(figsize=(CHART_WIDTH, height), layout="constrained")


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for value in row:
            text = html.escape(str(value))
            css = {"PASS": "pass", "FAIL": "fail", "SHARED": "shared", "UNKNOWN": "unknown"}.get(str(value))
            if css is None and len(str(value)) > WRAP_AT:
                css = "text"
            cells.append(f'<td class="{css}">{text}</td>' if css else f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    css = "scroll long" if len(rows) > LONG_TABLE else "scroll"
    return f'<div class="{css}"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


# ----------------------------------------------------------------------------------- charts


@_styled
def _survival_chart(doc: dict) -> str:
    """Pr(K ≥ i) by draft position, one line per speculative deployment; "" without positions."""
    series = [(d["deployment_id"], [p for p in d["positions"] if p["survival"] is not None])
              for d in doc["deployments"]]
    series = [(dep, points) for dep, points in series if points]
    if not series:
        return ""
    fig = _figure(3.6)
    ax = fig.subplots()
    for dep, points in series:
        ax.plot([p["position"] for p in points], [p["survival"] for p in points], marker="o", label=dep)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))    # positions are whole numbers
    ax.set_xlabel("draft position i")
    ax.set_ylabel("survival Pr(K ≥ i)")
    ax.set_ylim(0, 1)
    ax.set_title("Acceptance survival by position")
    fig.legend(loc="outside right upper", fontsize=8, frameon=False)
    return _chart(fig, "acceptance survival curve")


@_styled
def _load_chart(doc: dict) -> str:
    """Speedup and accept length by batch bucket; "" when no bucket has either."""
    rows = [r for r in doc["load_curve"] if r["speedup"] is not None or r["mean_accept_length"] is not None]
    if not rows:
        return ""
    present = {r["batch_bucket"] for r in rows}
    order = [b for b in buckets.labels("batch") if b in present]
    curves: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        curves[row["deployment_id"]].append(row)
    fig = _figure(3.6)
    left, right = fig.subplots(1, 2)
    for i, (dep, points) in enumerate(curves.items()):
        points = sorted(points, key=lambda r: order.index(r["batch_bucket"]))
        style = {"color": f"C{i % 10}", "marker": "o", "label": dep}   # one colour per deployment in both panels
        for ax, key in ((left, "speedup"), (right, "mean_accept_length")):
            xy = [(order.index(r["batch_bucket"]), r[key]) for r in points if r[key] is not None]
            if xy:
                ax.plot(*zip(*xy), **style)
    for ax in (left, right):
        ax.set_xticks(range(len(order)), order, rotation=45)
        ax.set_xlabel("batch size bucket")
    left.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="1.0× (break-even)")
    left.set_ylabel("speedup vs baseline (×)")
    left.set_title("Speedup by batch size")
    right.set_ylabel("mean accept length (tokens)")
    right.set_title("Accept length by batch size")
    handles, labels = _unique_handles(left, right)
    fig.legend(handles, labels, loc="outside upper center", ncol=min(len(labels), 6), fontsize=8, frameon=False)
    return _chart(fig, "speedup and accept length by batch bucket")


def _unique_handles(*axes) -> tuple[list, list[str]]:
    seen: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    return list(seen.values()), list(seen)


LATENCY_METRICS = ("ttft", "tpot", "itl", "max_stall")
LATENCY_STATS = ("p50", "p95", "p99")
_GATE_CHECK = re.compile(r"(?P<metric>\w+?)_(?P<stat>p\d+)_ms")


def latency_thresholds(gates: list[dict]) -> dict[tuple[str, str], list[float]]:
    """The latency gates' thresholds as {(metric, stat): [threshold, ...]}, from the
    checks named <metric>_<stat>_ms (ttft_p99_ms → ("ttft", "p99"))."""
    found: dict[tuple[str, str], set[float]] = defaultdict(set)
    for g in gates:
        for c in g["checks"]:
            m = _GATE_CHECK.fullmatch(c["name"])
            if m and c["threshold"] is not None:
                found[(m["metric"], m["stat"])].add(float(c["threshold"]))
    return {key: sorted(values) for key, values in found.items()}


@_styled
def _latency_chart(doc: dict) -> str:
    """p50/p95/p99 per deployment for each latency metric that has values, with the
    latency gates' thresholds as horizontal lines; "" when no metric has a value."""
    thresholds = latency_thresholds(doc.get("gates") or [])
    panels = []
    for metric in LATENCY_METRICS:
        deps = [d for d in doc["deployments"]
                if any(d["latency_ms"].get(metric, {}).get(s) is not None for s in LATENCY_STATS)]
        if deps:
            panels.append((metric, deps))
    if not panels:
        return ""
    fig = _figure(3.8)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    colors = {stat: f"C{i}" for i, stat in enumerate(LATENCY_STATS)}
    offsets = dict(zip(LATENCY_STATS, (-0.27, 0, 0.27)))
    gate_drawn = False
    for ax, (metric, deps) in zip(axes, panels):
        names = [d["deployment_id"] for d in deps]
        top = 0.0
        for stat in LATENCY_STATS:
            values = [d["latency_ms"][metric].get(stat) for d in deps]
            xs = [i + offsets[stat] for i, v in enumerate(values) if v is not None]
            ys = [v for v in values if v is not None]
            ax.bar(xs, ys, width=0.27, color=colors[stat])
            top = max([top, *ys])
        gates = []
        for stat in LATENCY_STATS:
            for limit in thresholds.get((metric, stat), []):
                # A limit far above every bar would squash them to nothing: it is named, not drawn.
                if limit <= 2 * top:
                    ax.axhline(limit, color=colors[stat], linestyle="--", linewidth=1.2)
                    gates.append(f"gate {stat} ≤ {limit:,.0f}")
                    gate_drawn = True
                else:
                    gates.append(f"gate {stat} ≤ {limit:,.0f}, off scale")
        ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
        ax.set_ylabel(f"{metric} (ms)")
        # the threshold in the title, not on the plot, where it would cover bars
        ax.set_title(metric + (f"\n{'; '.join(gates)}" if gates else ""))
    handles = [Patch(color=colors[s], label=s) for s in LATENCY_STATS]
    if gate_drawn:
        handles.append(Line2D([], [], color="grey", linestyle="--", label="gate threshold (its percentile's colour)"))
    fig.legend(handles=handles, loc="outside upper center", ncol=len(handles), fontsize=8, frameon=False)
    return _chart(fig, "latency percentiles")


@_styled
def _trend_chart(history) -> str:
    labels = {"mean_accept_length": "mean accept length (tokens)", "speedup": "speedup (×)",
              "tpot_p99": "TPOT p99 (ms)"}
    fig = _figure(3.4)
    axes = fig.subplots(1, 3)
    deployments = sorted(set(history.get_column("deployment_id").to_list()))
    for ax, (metric, label) in zip(axes, labels.items()):
        for i, dep in enumerate(deployments):
            rows = history.filter(history["deployment_id"] == dep).sort("date")
            points = [(d, v) for d, v in zip(rows["date"].to_list(), rows[metric].to_list()) if v is not None]
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=dep, color=f"C{i % 10}")
        ax.set_title(metric)
        ax.set_ylabel(label)
        ax.tick_params(axis="x", rotation=45)
    handles, names = _unique_handles(*axes)
    if handles:
        fig.legend(handles, names, loc="outside upper center", ncol=min(len(names), 6), fontsize=8, frameon=False)
    return _chart(fig, "history trend")


# Charts shown in the section they illustrate, found by the Markdown section's title
# without its number ("6. Load curve by batch bucket" → "Load curve by batch bucket").
SECTION_CHARTS: dict[str, Callable[[dict], str]] = {
    "Acceptance by draft position": _survival_chart,
    "Load curve by batch bucket": _load_chart,
    "Latency (ms)": _latency_chart,
}


# ------------------------------------------------------------------------------ the page


def _what_to_do(doc: dict) -> str:
    """The first box: the verdict lines (doc["verdict"]), then any regression; "" when
    the document has neither."""
    # the lines the Markdown's "What to do" shows
    verdict = markdown.what_to_do_lines(doc)
    # the text is the Markdown line: its `config` span becomes code
    lines = [f'<li class="{html.escape(v["action"])}">{md_blocks.inline(v["text"])}</li>' for v in verdict]
    box = []
    if doc.get("regressions"):
        items = "".join(f"<li>{html.escape(flag_line(r, doc['date']))}</li>" for r in doc["regressions"])
        box.append(f'<div class="regression"><strong>Regressions</strong><ul>{items}</ul></div>')
    if "regression_check" in doc:
        # the same sentences as stdout and report.md, so "not checked" is never read as "none"
        box += [f'<p class="note">{html.escape(line)}.</p>'
                for line in status_lines(doc["regression_check"], doc.get("regressions") or [])]
    if not lines and not box:
        return ""
    return ('<div class="todo"><h2>What to do</h2>' + (f"<ul>{''.join(lines)}</ul>" if lines else "")
            + "".join(box) + "</div>")


def _has_data(block: md_blocks.Block) -> bool:
    """A table has data when some row has a value beyond its first (key) column."""
    return any(cell not in (DASH, "") for row in block.rows for cell in row[1:])


def _prune(blocks: list[md_blocks.Block]) -> tuple[list[md_blocks.Block], bool]:
    """The blocks without tables that have no data, and without sub-headings left with
    nothing under them; and whether the section still shows anything the data gave
    (a table, list or code) when it had a table to begin with."""
    kept = [b for b in blocks if b.kind != "table" or _has_data(b)]
    out: list[md_blocks.Block] = []
    # backwards, so a heading sees what is left under it after the headings below it went
    for block in reversed(kept):
        if block.kind == "heading" and (not out or (out[0].kind == "heading" and out[0].level <= block.level)):
            continue
        out.insert(0, block)
    had_tables = any(b.kind == "table" for b in blocks)
    shows = any(b.kind in ("table", "list", "code") for b in out)
    return out, shows or not had_tables


def _block_html(block: md_blocks.Block) -> str:
    if block.kind == "heading":
        level = min(block.level, 6)
        return f"<h{level}>{md_blocks.inline(block.text)}</h{level}>"
    if block.kind == "para":
        return f"<p>{md_blocks.inline(block.text)}</p>"
    if block.kind == "list":
        return "<ul>" + "".join(f"<li>{md_blocks.inline(item)}</li>" for item in block.items) + "</ul>"
    if block.kind == "code":
        return f"<pre><code>{html.escape(block.text)}</code></pre>"
    return _table(block.headers, block.rows)


def _without_verdict(blocks: list[md_blocks.Block], verdict: set[str]) -> list[md_blocks.Block]:
    """The blocks without the verdict lines, which the first box already shows, wherever
    the Markdown writes them (a paragraph or list items)."""
    out = []
    for block in blocks:
        if block.kind == "para" and md_blocks.plain(block.text) in verdict:
            continue
        if block.kind == "list":
            items = [i for i in block.items if md_blocks.plain(i) not in verdict]
            if not items:
                continue
            block = md_blocks.Block("list", items=items)
        out.append(block)
    return out


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"


def render(doc: dict[str, Any], history=None, title: str = "specan report") -> str:
    """The whole page. ``history`` (a polars frame from analyzer.history) adds the trend chart."""
    verdict = {v["text"] for v in doc.get("verdict") or []}
    preamble, body, left_out = [], [], []
    for section in md_blocks.sections(md_blocks.parse(markdown.render(doc))):
        blocks = _without_verdict(section.blocks, verdict)
        if not section.title:
            # The Markdown's title line gives way to the page's own (nightly names its date).
            preamble += [_block_html(b) for b in blocks if not (b.kind == "heading" and b.level == 1)]
            continue
        if section.title == "Regressions" and doc.get("regressions"):
            continue                                       # the first box lists them
        if section.title == "What to do" and doc.get("verdict"):
            continue                                       # the first box is this section
        blocks, shows = _prune(blocks)
        if not shows:
            left_out.append(section.title)
            continue
        if not blocks:
            continue                                       # a heading whose lines the first box shows
        html_blocks = [_block_html(b) for b in blocks]
        chart = SECTION_CHARTS.get(section.title.split(". ", 1)[-1], lambda _: "")(doc)
        if chart:
            # after the section's opening paragraph, before its tables
            html_blocks.insert(1 if blocks[0].kind == "para" else 0, chart)
        body.append(f'<section id="{_slug(section.title)}"><h2>{md_blocks.inline(section.title)}</h2>\n'
                    + "\n".join(html_blocks) + "</section>")
    parts = [f"<h1>{html.escape(title)}</h1>", _what_to_do(doc), *preamble]
    if left_out:
        # said once, at the top, instead of a blank chart or an empty table per section
        parts.append(f'<p class="note">{html.escape(NO_DATA.format(sections=", ".join(left_out)))}</p>')
    if history is not None and not history.is_empty():
        parts.append('<section id="trend"><h2>Trend</h2>' + _trend_chart(history) + "</section>")
    parts += body
    page = "\n".join(p for p in parts if p)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n<body>\n{page}\n</body></html>\n")
