"""`specan import vllm-bench`: what `vllm bench serve` prints and saves, one interval per run.

The printed summary (since vLLM PR #31739, 2026-01) ends with a block

    ---------------Speculative Decoding---------------
    Acceptance rate (%):                     83.39
    Acceptance length:                       1.83
    Drafts:                                  26407
    Draft tokens:                            26407
    Accepted tokens:                         22021
    Per-position acceptance (%):
      Position 0:                            83.39

and ``--save-result`` writes the same numbers as ``spec_decode_*`` keys, the
per-position rates as fractions of the drafts. A position's accepted count is its
rate × drafts: exact from the JSON's full-precision rates, and from the printed
percentages (2 decimals) only to ± drafts / 20,000, which a note says. The client
differences the server's Prometheus counters around the run, so the counts cover
the run's requests alone.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

from .bench import BenchFormat, BenchRun, import_bench
from .common import ImportSummary, MalformedInput, Overrides, datetime_us, is_int, is_number, open_input

SOURCE = "vllm-bench"
HEADER = re.compile(r"=+ Serving Benchmark Result =+")
SPEC_HEADER = re.compile(r"^-+Speculative Decoding-+\s*$")
FIELD = re.compile(r"^\s*(?P<label>[A-Za-z][^:]*?):\s+(?P<value>[-+0-9.eE]+|inf)\s*$")
POSITION = re.compile(r"^Position (\d+)$")
LABELS = {"Benchmark duration (s)": "duration_s", "Output token throughput (tok/s)": "output_tokens_per_s",
          "Acceptance rate (%)": "rate_pct", "Acceptance length": "accept_length", "Drafts": "num_drafts",
          "Draft tokens": "num_draft_tokens", "Accepted tokens": "num_accepted_tokens"}


def _text_runs(path: Path, lines: list[str]) -> list[BenchRun]:
    runs: list[tuple[int, dict]] = []
    for lineno, line in enumerate(lines, 1):
        # a paste often keeps the speculative block alone: it opens a run too, unless it is
        # the block of the run whose header came before
        if HEADER.search(line) or (SPEC_HEADER.match(line) and (not runs or "rate_pct" in runs[-1][1])):
            runs.append((lineno, {"positions": {}}))
            continue
        if not runs:
            continue
        m = FIELD.match(line)
        if not m:
            continue
        label, value = m["label"].strip(), m["value"]
        fields = runs[-1][1]
        pos = POSITION.match(label)
        try:
            number = float(value)
        except ValueError:
            raise MalformedInput(path, lineno, f"{label}: {value!r} is not a number") from None
        if pos:
            fields["positions"][int(pos[1])] = number
        elif label in LABELS:
            fields[LABELS[label]] = number
    return [_text_run(path, lineno, fields) for lineno, fields in runs]


def _text_run(path: Path, lineno: int, f: dict) -> BenchRun:
    count = lambda key: int(f[key]) if key in f else None  # noqa: E731
    run = BenchRun(where=f"{path.name}:{lineno}", duration_s=f.get("duration_s"),
                   num_drafts=count("num_drafts"), num_draft_tokens=count("num_draft_tokens"),
                   num_accepted_tokens=count("num_accepted_tokens"), accept_length=f.get("accept_length"),
                   accept_rate=f["rate_pct"] / 100 if "rate_pct" in f else None,
                   output_tokens_per_s=f.get("output_tokens_per_s"))
    pct = [f["positions"][i] for i in sorted(f["positions"])]
    if pct and run.num_drafts:
        run.accepted_per_position = [round(p / 100 * run.num_drafts) for p in pct]
        run.notes.append(f"per-position counts are the printed percentages × {run.num_drafts} drafts, exact to "
                         f"± {run.num_drafts / 20000:.1f} tokens per position (2 decimals)")
    return run


def _json_run(path: Path, lineno: int, doc: dict) -> BenchRun:
    def count(key):
        value = doc.get(key)
        if value is not None and not is_int(value):
            raise MalformedInput(path, lineno, f"{key} must be an integer, found {value!r}")
        return value

    rate = doc.get("spec_decode_acceptance_rate")
    run = BenchRun(where=f"{path.name}:{lineno}", duration_s=doc.get("duration") if is_number(doc.get("duration"))
                   else None, num_drafts=count("spec_decode_num_drafts"),
                   num_draft_tokens=count("spec_decode_draft_tokens"),
                   num_accepted_tokens=count("spec_decode_accepted_tokens"),
                   accept_length=doc.get("spec_decode_acceptance_length"),
                   accept_rate=rate / 100 if is_number(rate) else None,
                   output_tokens_per_s=doc.get("output_throughput") if is_number(doc.get("output_throughput"))
                   else None, model=doc.get("model_id") if isinstance(doc.get("model_id"), str) else None)
    rates = doc.get("spec_decode_per_position_acceptance_rates")
    if isinstance(rates, list) and rates and run.num_drafts:
        if not all(is_number(r) for r in rates):
            raise MalformedInput(path, lineno, "spec_decode_per_position_acceptance_rates must be numbers")
        run.accepted_per_position = [round(r * run.num_drafts) for r in rates]
    date = doc.get("date")
    if isinstance(date, str):
        try:
            # vllm bench serve writes the client's local time as %Y%m%d-%H%M%S, without a zone
            run.end_us = datetime_us(dt.datetime.strptime(date, "%Y%m%d-%H%M%S"))
            run.notes.append(f"date {date} has no time zone: read as UTC")
        except ValueError:
            pass
    return run


def read_runs(path: Path) -> list[BenchRun]:
    with open_input(path) as fh:
        text = fh.read()
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        return [_json_run(path, lineno, doc) for lineno, doc in json_documents(path, text)]
    return _text_runs(path, text.splitlines())


def json_documents(path: Path, text: str) -> list[tuple[int, dict]]:
    """One object, an array of objects, or one object per line (pretty-printed or not)."""
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        docs = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                docs.append((lineno, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise MalformedInput(path, lineno, f"not JSON ({exc.msg})") from None
    else:
        docs = [(1, d) for d in (whole if isinstance(whole, list) else [whole])]
    for lineno, doc in docs:
        if not isinstance(doc, dict):
            raise MalformedInput(path, lineno, "expected a JSON object (a benchmark result)")
    return docs


FORMAT = BenchFormat(
    source=SOURCE, interval_source="vllm_bench", client="vllm bench serve",
    accept_length_definition="1 + accepted / drafts over the run (vllm bench serve, 2 decimals in text)",
    accept_rate_definition="accepted / draft tokens over the run (vllm bench serve, percent with 2 decimals in text)",
    read=read_runs)


def import_vllm_bench(files, out, deployment_id: str, overrides: Overrides | None = None,
                      time: str | None = None) -> ImportSummary:
    """Import `vllm bench serve` summaries (text or --save-result JSON) as one interval per run."""
    return import_bench(FORMAT, files, out, deployment_id, overrides or Overrides(), time=time)
