"""Importers: turn what an engine already emits into trace tables (docs/importers.md).

    from analyzer.importers import run_import
    summary = run_import("vllm-responses", ["responses.jsonl"], "traces/", "eagle-a")
    print("\\n".join(summary.lines()))

Each importer appends new Parquet files under ``TRACES/<table>/`` (never
rewriting a file), writes or merges a deployments row, and returns an
``ImportSummary``: rows written per table, records or lines skipped per reason,
and notes. The notes (with the skip counts) are also written to the optional
``import_notes`` table so a report can show them.

Errors: ``MalformedInput`` names the file and line of input that is not what
the source promises; ``ImportConflict`` is a trace directory that can't take
the import. Both are ``ImportInputError``, which the CLI turns into exit 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .aiperf import import_aiperf_records
from .common import ImportConflict, ImportInputError, ImportSummary, MalformedInput, Overrides
from .llamacpp_log import import_llamacpp_log
from .prometheus import DeploymentMap, import_prometheus
from .sglang_log import import_sglang_log
from .sglang_responses import import_sglang_responses
from .trtllm_responses import import_trtllm_responses
from .vllm_log import import_vllm_log
from .vllm_responses import import_vllm_responses

SOURCES = ("vllm-responses", "vllm-log", "prometheus", "sglang-responses", "sglang-log", "aiperf-records",
           "trtllm-responses", "llamacpp-log")

__all__ = ["SOURCES", "DeploymentMap", "ImportConflict", "ImportInputError", "ImportSummary", "MalformedInput",
           "Overrides", "import_aiperf_records", "import_llamacpp_log", "import_prometheus", "import_sglang_log",
           "import_sglang_responses", "import_trtllm_responses", "import_vllm_log", "import_vllm_responses",
           "run_import"]


def run_import(source: str, files: Sequence[str | Path], out: str | Path, deployment: str | Sequence[str], *,
               model: str | None = None, method: str | None = None, num_speculative_tokens: int | None = None,
               year: int | None = None, sglang_version: str | None = None,
               time: str | None = None, start: str | None = None) -> ImportSummary:
    """Run the importer of ``source`` (one of SOURCES). ``deployment`` is one id; for prometheus it may
    also be a list of ``label=value:ID`` pairs."""
    overrides = Overrides(model=model, method=method, num_speculative_tokens=num_speculative_tokens)
    if source not in SOURCES:
        raise ImportInputError(f"unknown source {source!r}: expected one of {', '.join(SOURCES)}")
    if year is not None and source != "vllm-log":
        raise ImportInputError("--year applies to vllm-log only")
    if start is not None and source not in ("llamacpp-log", "vllm-log"):
        raise ImportInputError("--start applies to llamacpp-log and vllm-log only")
    if time is not None and source != "prometheus":
        raise ImportInputError("--time applies to prometheus only")
    if sglang_version is not None and source != "sglang-log":
        raise ImportInputError("--sglang-version applies to sglang-log only")
    if not files:
        raise ImportInputError("no input FILE given")
    if source == "prometheus":
        return import_prometheus(files, out, deployment, overrides, time=time)
    ids = [deployment] if isinstance(deployment, str) else list(deployment)
    if len(ids) != 1 or not ids[0]:
        raise ImportInputError(f"--deployment: {source} takes exactly one deployment id")
    if source == "vllm-log":
        return import_vllm_log(files, out, ids[0], overrides, year=year, start=start)
    if source == "sglang-log":
        return import_sglang_log(files, out, ids[0], overrides, sglang_version=sglang_version)
    if source == "vllm-responses":
        return import_vllm_responses(files, out, ids[0], overrides)
    if source == "aiperf-records":
        return import_aiperf_records(files, out, ids[0], overrides)
    if source == "trtllm-responses":
        return import_trtllm_responses(files, out, ids[0], overrides)
    if source == "llamacpp-log":
        return import_llamacpp_log(files, out, ids[0], overrides, start=start)
    return import_sglang_responses(files, out, ids[0], overrides)
