"""The HTML page shows what the Markdown shows (issue 16, section 3).

The page's sections are the Markdown report read back as blocks (md_blocks), so
these tests check the reading, the parity of every table and sentence on the
sample, the first box "What to do", and the sentences the two formats share.
"""

from __future__ import annotations

import copy
import html as htmllib
from html.parser import HTMLParser

from analyzer.render import html, markdown, md_blocks
from analyzer.render.md_blocks import Block


# --------------------------------------------------------------------------- reading the Markdown


def test_parse_reads_every_block_kind():
    text = ("# specan report\n\nInput rows: 2; 0 rejected.\n\n## Findings\n\n- **a** (eagle): 1.19× (faster).\n"
            "- **b** (ngram): slower.\n\n### By a\\|b &amp; &lt;c\n\n| x | y \\| z |\n|---|---|\n| 1 &amp; 2 | &lt;3 |\n"
            "| – |  |\n\nvLLM config:\n\n```\n\"k\": [[1, 4, 3]]\n```\nA line\ncontinued.\n")
    assert md_blocks.parse(text) == [
        Block("heading", level=1, text="specan report"),
        Block("para", text="Input rows: 2; 0 rejected."),
        Block("heading", level=2, text="Findings"),
        Block("list", items=["**a** (eagle): 1.19× (faster).", "**b** (ngram): slower."]),
        Block("heading", level=3, text="By a|b & <c"),
        Block("table", headers=["x", "y | z"], rows=[["1 & 2", "<3"], ["–", ""]]),
        Block("para", text="vLLM config:"),
        Block("code", text='"k": [[1, 4, 3]]'),
        Block("para", text="A line\ncontinued."),
    ]


def test_inline_escapes_then_marks_bold_and_code():
    assert (md_blocks.inline("**a<b>** uses `x < **y**` & E[T] < t0")
            == "<strong>a&lt;b&gt;</strong> uses <code>x &lt; **y**</code> &amp; E[T] &lt; t0")
    assert md_blocks.plain("**a** runs `specan recommend`") == "a runs specan recommend"


def test_sections_group_blocks_by_level_two_heading():
    found = md_blocks.sections(md_blocks.parse("# t\n\nintro\n\n## A\n\n### a1\n\ntext\n\n## B\n"))
    assert [(s.title, [b.kind for b in s.blocks]) for s in found] == [
        ("", ["heading", "para"]), ("A", ["heading", "para"]), ("B", [])]


# --------------------------------------------------------------------------- parity on the sample


class _Page(HTMLParser):
    """The tables (rows of cell texts, the header row first) and the text of a page."""

    def __init__(self):
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.text: list[str] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("svg", "style"):
            self._skip += 1
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("svg", "style"):
            self._skip -= 1
        elif tag in ("td", "th"):
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr":
            self.tables[-1].append(self._row)

    def handle_data(self, data):
        if self._skip:
            return
        if self._cell is not None:
            self._cell.append(data)
        self.text.append(data)


def _page(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    return page


def test_every_markdown_table_is_on_the_page_cell_for_cell(sample_report):
    page = _page(sample_report["html"])
    tables = [[b.headers, *b.rows] for b in md_blocks.parse(sample_report["md"]) if b.kind == "table"]
    assert len(tables) > 30
    assert [t for t in tables if t not in page.tables] == []
    assert len(page.tables) == len(tables)            # and no table the Markdown does not have


def test_every_markdown_sentence_is_on_the_page(sample_report):
    text = " ".join("".join(_page(sample_report["html"]).text).split())
    blocks = md_blocks.parse(sample_report["md"])
    lines = [md_blocks.plain(b.text) for b in blocks if b.kind in ("para", "heading") and b.level != 1]
    lines += [md_blocks.plain(i) for b in blocks if b.kind == "list" for i in b.items]
    lines += [b.text for b in blocks if b.kind == "code"]
    assert [line for line in lines if " ".join(line.split()) not in text] == []
    # the words the issue names: faster/slower, the batch ranges, the streaming remarks,
    # the TPOT speedup, the vLLM line, the quantization matrix, the failed gate checks
    for words in ("(faster)", "(slower)", "pays at batch 1, 2, 3-4, 5-8, 9-16; loses at 33-64, 65-128; can't tell at 17-32.",
                  "Streaming is burstier than the baseline: itl p99 320 ms vs 107 ms", "TPOT speedup",
                  '"num_speculative_tokens_per_batch_size": [[1, 32, 4]', "Quantization matrix",
                  "Checks that fail, are shared with the baseline, or are unknown:"):
        assert words in text, words


def test_gate_checks_keep_value_threshold_and_status(sample_report):
    page = _page(sample_report["html"])
    checks = next(t for t in page.tables if t[0][:3] == ["deployment", "gate", "check"])
    # the cells of the gates JSON: eagle-fp8's speedup 0.785 [0.762, 0.809] fails min_speedup 1
    speedup = {(g["deployment_id"], c["name"]): c for g in sample_report["doc"]["gates"] for c in g["checks"]}[
        ("eagle-fp8", "speedup")]
    assert (f"{speedup['value']:.3f} [{speedup['interval'][0]:.3f}, {speedup['interval'][1]:.3f}]"
            == "0.785 [0.762, 0.809]")
    assert ["eagle-fp8", "capacity", "speedup", "0.785 [0.762, 0.809]", "–", "≥ 1.000 (lower bound), coverage ≥ 50%",
            "FAIL", ""] in checks
    # ngram-bf16's max stall p99, 363.8 ms, and base-bf16's at the same load, 356.0 ms, both miss
    # 250 ms within 25 %: shared, with the gate's reason
    (stall,) = [r for r in checks if r[:3] == ["ngram-bf16", "latency", "max_stall_p99_ms"]]
    assert stall[3:5] == ["363.8", "356.0"] and stall[5].startswith("≤ 250.0") and stall[6] == "SHARED"
    assert stall[7] == ("base-bf16 misses it too at the same load (356 ms, [334, 358] ms), within 25%: the service "
                        "level, not speculation")
    assert '<td class="fail">FAIL</td>' in sample_report["html"]
    assert '<td class="shared">SHARED</td>' in sample_report["html"]


# --------------------------------------------------------------------------- the first box


VERDICT = [{"deployment_id": "eagle-dyn-bf16", "action": "ship", "text": "Ship eagle-dyn-bf16: 1.45× faster.",
            "blocking": [], "shared": []},
           {"deployment_id": "eagle-fp8", "action": "dont_ship", "text": "Don't ship eagle-fp8: 0.79× (slower).",
            "blocking": [{"gate": "capacity", "check": "speedup", "value": 0.79, "threshold": 1.0,
                          "baseline_value": None}], "shared": []}]
REGRESSIONS = [{"deployment_id": "spec", "metric": "speedup", "value": 1.8, "baseline": 2.0, "change": -0.1,
                "spread": 0.0, "limit": 0.05, "excluded_flagged_dates": [], "flagged_since": "2026-11-28",
                "window_dates": ["2026-11-23", "2026-11-24", "2026-11-25", "2026-11-26", "2026-11-27"]}]
CHECKED = {"status": "checked", "earlier_dates": 5, "needed": 3, "window_days": 7, "not_checked": [],
           "accepted_since": {}}


def test_what_to_do_box_has_the_verdict_then_the_regressions():
    assert html._what_to_do({"verdict": VERDICT, "regressions": REGRESSIONS, "date": "2026-11-28"}) == (
        '<div class="todo"><h2>What to do</h2><ul>'
        '<li class="ship">Ship eagle-dyn-bf16: 1.45× faster.</li>'
        '<li class="dont_ship">Don&#x27;t ship eagle-fp8: 0.79× (slower).</li></ul>'
        '<div class="regression"><strong>Regressions</strong><ul>'
        "<li>spec speedup 1.8 vs median 2 (-10.0%)</li></ul></div></div>")
    assert html._what_to_do({"regressions": REGRESSIONS, "date": "2026-11-28"}).startswith('<div class="todo"><h2>What to do</h2><div ')
    assert html._what_to_do({}) == "" and html._what_to_do({"verdict": [], "regressions": []}) == ""


def test_page_opens_with_the_box(sample_report):
    doc = dict(copy.deepcopy(sample_report["doc"]), verdict=VERDICT)
    page = html.render(doc)
    assert page.index("<h1>") < page.index('<div class="todo">') < page.index("Input rows:")
    assert page.count("Ship eagle-dyn-bf16: 1.45× faster.") == 1
    # the sample's own verdict opens its page; a document with neither verdict nor regressions has no box
    assert sample_report["html"].index('<div class="todo">') < sample_report["html"].index("Input rows:")
    bare = {k: v for k, v in copy.deepcopy(sample_report["doc"]).items() if k != "verdict"}
    assert '<div class="todo">' not in html.render(bare)


def test_verdict_lines_the_markdown_writes_are_shown_once(sample_report, monkeypatch):
    """When the Markdown opens with the verdict too, the box is where the page shows it."""
    monkeypatch.setattr(markdown, "_regressions",
                        lambda doc: "## What to do\n\n" + "\n".join(f"- **{v['text']}**" for v in VERDICT) + "\n")
    page = html.render(dict(copy.deepcopy(sample_report["doc"]), verdict=VERDICT))
    assert page.count("<h2>What to do</h2>") == 1
    assert page.count(htmllib.escape(VERDICT[1]["text"])) == 1


def test_regressions_section_gives_way_to_the_box_only_when_there_are_some(sample_report):
    doc = dict(copy.deepcopy(sample_report["doc"]), regressions=REGRESSIONS, regression_check=CHECKED,
               date="2026-11-28")
    page = html.render(doc)
    assert "<h2>Regressions</h2>" not in page and "<li>spec speedup 1.8 vs median 2 (-10.0%)</li>" in page
    quiet = html.render(dict(doc, regressions=[]))
    assert "<h2>Regressions</h2>" in quiet
    assert htmllib.escape("None — no headline metric moved past both its threshold and the spread of the "
                          "window's 5 earlier dates.") in quiet


# --------------------------------------------------------------------------- shared sentences and chart inputs


def _curve(dep: str, *round_ms: float | None) -> list[dict]:
    return [{"deployment_id": dep, "context_bucket": bucket, "round_ms": ms}
            for bucket, ms in zip(("0-1k", "1k-2k", "2k-4k"), round_ms)]


CONFOUND = ("The rows are not at equal load: each context bucket ran at its own mix of batch sizes, so a "
            "difference between rows mixes context length with batch size.")


def test_context_remark_names_where_round_time_falls_with_context():
    assert markdown.context_remark(_curve("a", 9.0, 10.0) + _curve("b", 9.0, None, 8.0)) == (
        CONFOUND + " Round time falls from the shortest to the longest context bucket for b: dearer "
        "attention cannot explain that, smaller batches at the longer contexts can.")
    assert markdown.context_remark(_curve("a", 9.0, 8.5) + _curve("b", 9.0, 8.0)) == (
        CONFOUND + " Round time falls from the shortest to the longest context bucket for every deployment: "
        "dearer attention cannot explain that, smaller batches at the longer contexts can.")
    # one bucket, or rising round time: only the confound
    assert markdown.context_remark(_curve("a", 9.0) + _curve("b", 9.0, 9.5)) == CONFOUND


def test_context_section_says_what_confounds_it(sample_report):
    section = markdown._context(sample_report["doc"])
    assert CONFOUND in section and "for every deployment" in section


def test_latency_thresholds_come_from_the_gate_checks(sample_report):
    assert html.latency_thresholds(sample_report["doc"]["gates"]) == {
        ("ttft", "p99"): [2000.0], ("tpot", "p95"): [60.0], ("max_stall", "p99"): [250.0]}


def test_latency_chart_draws_the_thresholds_and_names_one_off_scale(sample_report):
    svg = html._latency_chart(sample_report["doc"])
    for title in ("gate p99 ≤ 2,000", "gate p95 ≤ 60", "gate p99 ≤ 250", "gate threshold (its percentile"):
        assert title in svg
    doc = copy.deepcopy(sample_report["doc"])
    for g in doc["gates"]:
        for c in g["checks"]:
            if c["name"] == "tpot_p95_ms":
                c["threshold"] = 1e9
    assert "gate p95 ≤ 1,000,000,000, off scale" in html._latency_chart(doc)


def test_charts_without_data_are_not_drawn(sample_report):
    doc = copy.deepcopy(sample_report["doc"])
    for d in doc["deployments"]:
        d["positions"] = []
        d["latency_ms"] = {m: {s: None for s in ("mean", "p50", "p95", "p99", "max")} for m in d["latency_ms"]}
    doc["load_curve"] = []
    assert html._survival_chart(doc) == html._load_chart(doc) == html._latency_chart(doc) == ""
    assert "<svg" not in html.render(doc)


def test_a_table_without_data_and_its_section_are_left_out():
    empty = Block("table", headers=["deployment", "round ms"], rows=[["base", "–"], ["spec", "–"]])
    full = Block("table", headers=["deployment", "round ms"], rows=[["base", "–"], ["spec", "3.0"]])
    intro = Block("para", text="A round costs draft + verify + other.")
    assert html._prune([intro, empty]) == ([intro], False)
    assert html._prune([intro, empty, full]) == ([intro, full], True)
    # prose alone, with no table to begin with, is kept (Requests to look at, with none flagged)
    assert html._prune([intro]) == ([intro], True)
    # a sub-heading left with nothing under it goes too; one with a list under it stays
    sub = Block("heading", level=3, text="spec")
    notes = Block("list", items=["No steps table: round costs are unknown."])
    assert html._prune([intro, sub, empty, Block("heading", level=3, text="other"), notes]) == (
        [intro, Block("heading", level=3, text="other"), notes], True)
    # nor one whose only sub-heading is left with nothing
    assert html._prune([intro, full, sub, Block("heading", level=4, text="by context"), empty]) == (
        [intro, full], True)
