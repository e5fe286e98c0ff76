"""The report's Markdown read back as blocks, so the HTML page shows what it says.

The Markdown renderer (markdown.py and the section modules it calls) is the one
source of every sentence and table of the report; the HTML page converts its
output instead of writing each sentence a second time, so the two cannot drift.
Only the subset those modules write is read: ``#`` to ``####`` headings,
paragraphs, ``- `` lists, pipe tables, fenced code, and inline ``**bold**`` and
```code```. Anything else is kept as paragraph text, so nothing is ever lost.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

_CODE_SPAN = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


@dataclass
class Block:
    """One block of the Markdown: ``kind`` is heading, para, list, table or code.

    heading: ``level`` and ``text``; para and code: ``text``; list: ``items``;
    table: ``headers`` and ``rows`` as plain text (the cell escapes undone)."""
    kind: str
    text: str = ""
    level: int = 0
    items: list[str] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)


def unescape_cell(text: str) -> str:
    """Undo cells.cell: ``\\|`` and the entities it writes for ``<`` and ``&``."""
    return text.replace("\\|", "|").replace("&lt;", "<").replace("&amp;", "&")


def _cells(line: str) -> list[str]:
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [unescape_cell(c.strip()) for c in _CELL_SPLIT.split(inner)]


def parse(markdown: str) -> list[Block]:
    """The blocks of ``markdown``, in order."""
    blocks: list[Block] = []
    current: Block | None = None
    lines = markdown.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip():
            current = None
            continue
        if line.startswith("```"):
            body = []
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            i += 1                                   # the closing fence
            blocks.append(Block("code", text="\n".join(body)))
            current = None
            continue
        heading = re.match(r"(#{1,4}) (.*)", line)
        if heading:
            blocks.append(Block("heading", level=len(heading.group(1)), text=unescape_cell(heading.group(2))))
            current = None
        elif line.startswith("|"):
            if current is None or current.kind != "table":
                current = Block("table", headers=_cells(line))
                blocks.append(current)
            elif not re.fullmatch(r"\|(?:-+\|)+", line.strip()):   # not the |---| separator
                current.rows.append(_cells(line))
        elif line.startswith("- "):
            if current is None or current.kind != "list":
                current = Block("list")
                blocks.append(current)
            current.items.append(line[2:])
        elif current is not None and current.kind == "para":
            current.text += "\n" + line
        else:
            current = Block("para", text=line)
            blocks.append(current)
    return blocks


def inline(text: str) -> str:
    """Markdown inline text as HTML: escaped, with ``code`` spans and **bold**."""
    out = []
    last = 0
    for m in _CODE_SPAN.finditer(text):
        out.append(_bold(html.escape(text[last:m.start()])))
        out.append(f"<code>{html.escape(m.group(1))}</code>")
        last = m.end()
    out.append(_bold(html.escape(text[last:])))
    return "".join(out)


def _bold(escaped: str) -> str:
    return _BOLD.sub(r"<strong>\1</strong>", escaped)


def plain(text: str) -> str:
    """Inline text without its markup: what a reader sees."""
    return _BOLD.sub(r"\1", _CODE_SPAN.sub(r"\1", text))


@dataclass
class Section:
    """A ``##`` section: its title (empty for what comes before the first one) and blocks."""
    title: str
    blocks: list[Block]


def sections(blocks: list[Block]) -> list[Section]:
    """The blocks grouped by level-2 heading; the heading itself is the section's title."""
    out = [Section("", [])]
    for block in blocks:
        if block.kind == "heading" and block.level == 2:
            out.append(Section(block.text, []))
        else:
            out[-1].blocks.append(block)
    return out
