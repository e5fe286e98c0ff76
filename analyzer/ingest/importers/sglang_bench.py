"""`specan import sglang-bench`: what SGLang's `bench_serving` prints and appends, one interval per run.

Its summary prints one speculative number, ``Accept length:`` (2 decimals), which it
reads from the server's ``/server_info`` (``avg_spec_accept_length``: tokens committed
per verify step, the bonus token included); ``--output-file`` appends one JSON line per
run with the key ``accept_length``. There are no counts: the interval carries the
accept length as printed and its definition, nothing else of acceptance.
"""

from __future__ import annotations

from pathlib import Path

from .bench import BenchFormat, BenchRun, import_bench
from .common import ImportSummary, MalformedInput, Overrides, is_number, open_input
from .vllm_bench import FIELD, HEADER, json_documents

SOURCE = "sglang-bench"
LABELS = {"Benchmark duration (s)": "duration_s", "Output token throughput (tok/s)": "output_tokens_per_s",
          "Accept length": "accept_length"}
NOTE = ("the accept length is the server's running average (avg_spec_accept_length), which may include "
        "traffic before the run")


def _text_runs(path: Path, lines: list[str]) -> list[BenchRun]:
    runs: list[BenchRun] = []
    for lineno, line in enumerate(lines, 1):
        if HEADER.search(line):
            runs.append(BenchRun(where=f"{path.name}:{lineno}"))
            continue
        m = FIELD.match(line) if runs else None
        if not m or m["label"].strip() not in LABELS:
            continue
        try:
            setattr(runs[-1], LABELS[m["label"].strip()], float(m["value"]))
        except ValueError:
            raise MalformedInput(path, lineno, f"{m['label']}: {m['value']!r} is not a number") from None
    return runs


def _json_run(path: Path, lineno: int, doc: dict) -> BenchRun:
    number = lambda key: doc.get(key) if is_number(doc.get(key)) else None  # noqa: E731
    return BenchRun(where=f"{path.name}:{lineno}", duration_s=number("duration"),
                    accept_length=number("accept_length"), output_tokens_per_s=number("output_throughput"),
                    model=doc.get("model_id") if isinstance(doc.get("model_id"), str) else None)


def read_runs(path: Path) -> list[BenchRun]:
    with open_input(path) as fh:
        text = fh.read()
    if text.lstrip().startswith(("{", "[")):
        runs = [_json_run(path, lineno, doc) for lineno, doc in json_documents(path, text)]
    else:
        runs = _text_runs(path, text.splitlines())
    for run in runs:
        if run.accept_length is not None:
            run.notes.append(NOTE)
    return runs


FORMAT = BenchFormat(
    source=SOURCE, interval_source="sglang_bench", client="sglang bench_serving",
    accept_length_definition=("tokens committed per verify step (accepted drafts and the bonus token), the "
                              "server's avg_spec_accept_length (sglang bench_serving, 2 decimals in text)"),
    accept_rate_definition=None, read=read_runs)


def import_sglang_bench(files, out, deployment_id: str, overrides: Overrides | None = None,
                        time: str | None = None) -> ImportSummary:
    """Import SGLang bench_serving summaries (text or --output-file JSONL) as one interval per run."""
    return import_bench(FORMAT, files, out, deployment_id, overrides or Overrides(), time=time)
