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
from .sglang_bench import import_sglang_bench
from .sglang_log import import_sglang_log
from .sglang_responses import import_sglang_responses
from .sniff import pick, refusal, resemblance
from .trtllm_iter import import_trtllm_iter
from .trtllm_responses import import_trtllm_responses
from .vllm_bench import import_vllm_bench
from .vllm_log import import_vllm_log
from .vllm_responses import import_vllm_responses

SOURCES = ("vllm-responses", "vllm-log", "prometheus", "sglang-responses", "sglang-log", "aiperf-records",
           "trtllm-responses", "trtllm-iter", "llamacpp-log", "vllm-bench", "sglang-bench")
TIME_SOURCES = ("prometheus", "vllm-bench", "sglang-bench")

__all__ = ["SOURCES", "DeploymentMap", "ImportConflict", "ImportInputError", "ImportSummary", "MalformedInput",
           "Overrides", "import_aiperf_records", "import_llamacpp_log", "import_prometheus", "import_sglang_log",
           "import_sglang_bench", "import_sglang_responses", "import_trtllm_iter", "import_trtllm_responses",
           "import_vllm_bench",
           "import_vllm_log", "import_vllm_responses", "pick_sources", "run_import"]


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
    if time is not None and source not in TIME_SOURCES:
        raise ImportInputError(f"--time applies to {', '.join(TIME_SOURCES)} only")
    if sglang_version is not None and source != "sglang-log":
        raise ImportInputError("--sglang-version applies to sglang-log only")
    if not files:
        raise ImportInputError("no input FILE given")
    for path in files:
        # every importer reads only its own source's content: another source's file is named, not misread
        if (why := refusal(source, path)) is not None:
            raise ImportInputError(why)
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
    if source == "trtllm-iter":
        return import_trtllm_iter(files, out, ids[0], overrides)
    if source == "llamacpp-log":
        return import_llamacpp_log(files, out, ids[0], overrides, start=start)
    if source == "vllm-bench":
        return import_vllm_bench(files, out, ids[0], overrides, time=time)
    if source == "sglang-bench":
        return import_sglang_bench(files, out, ids[0], overrides, time=time)
    return import_sglang_responses(files, out, ids[0], overrides)


def pick_sources(files: Sequence[str | Path]) -> dict[str, list[Path]]:
    """``specan import auto``: each file's source by its content (analyzer/ingest/importers/sniff.py),
    files grouped by source in the order given. A file no source fits, or several fit equally, is refused."""
    groups: dict[str, list[Path]] = {}
    for path in files:
        source, fits = pick(path)
        if source is None:
            raise ImportInputError(f"{path}: no source fits its content; name one: specan import SOURCE "
                                   f"({resemblance(path)}; SOURCE is one of {', '.join(SOURCES)})"
                                   if not fits else
                                   f"{path}: fits {' and '.join(fits)} equally; name one: specan import SOURCE")
        groups.setdefault(source, []).append(Path(path))
    return groups
