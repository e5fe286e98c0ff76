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

from collections.abc import Callable, Sequence
from pathlib import Path

from .aiperf import import_aiperf_records
from .common import RUN, ImportConflict, ImportInputError, ImportRun, ImportSummary, MalformedInput, Overrides, commit_all
from .llamacpp_log import LAYOUTS as LLAMACPP_LAYOUTS, import_llamacpp_log
from .prometheus import DeploymentMap, import_prometheus
from .sglang_bench import import_sglang_bench
from .sglang_log import LAYOUTS as SGLANG_LAYOUTS, import_sglang_log
from .sglang_responses import import_sglang_responses
from .sniff import pick, refusal, resemblance
from .trtllm_iter import import_trtllm_iter
from .trtllm_responses import import_trtllm_responses
from .vllm_bench import import_vllm_bench
from .vllm_iterations import LAYOUTS as VLLM_ITERATION_LAYOUTS
from .vllm_log import LAYOUTS as VLLM_LAYOUTS, import_vllm_log
from .vllm_responses import import_vllm_responses

SOURCES = ("vllm-responses", "vllm-log", "prometheus", "sglang-responses", "sglang-log", "aiperf-records",
           "trtllm-responses", "trtllm-iter", "llamacpp-log", "vllm-bench", "sglang-bench")
TIME_SOURCES = ("prometheus", "vllm-bench", "sglang-bench")
# The options only some sources take: option → (its flag, the sources it applies to).
SOURCE_OPTIONS = {"year": ("--year", ("vllm-log",)), "start": ("--start", ("llamacpp-log", "vllm-log")),
                  "time": ("--time", TIME_SOURCES), "sglang_version": ("--sglang-version", ("sglang-log",))}

# What each source reads, one layout a line (`specan import SOURCE --list-layouts`).
LAYOUTS: dict[str, tuple[str, ...]] = {
    "vllm-responses": ("vLLM OpenAI-compatible responses (whole, streamed SSE, or wrapped with sent_at) with "
                       "`metrics.speculative_decoding`",),
    "vllm-log": VLLM_LAYOUTS + ("load line `Avg prompt throughput …, Avg generation throughput …, Running: N reqs` "
                                "(V0 `Pending:`, V1 `Engine 00N:`, `N Engines Aggregated:`): a baseline",
                                *(f"iteration line {layout} → steps" for layout in VLLM_ITERATION_LAYOUTS)),
    "prometheus": ("/metrics text scrape with `vllm:spec_decode_*`, `sglang:*`, `llamacpp:*` or `trtllm_*` counters",
                   "Prometheus `query_range` / `query` JSON (`resultType`)"),
    "sglang-responses": ("SGLang responses with spec `meta_info` (old or new field names)",
                         "OpenAI-compatible responses with `sglext.spec_tokens_details`"),
    "sglang-log": SGLANG_LAYOUTS + ("`Decode batch` lines without `accept len`: a baseline",),
    "aiperf-records": ("AIPerf `profile_export.jsonl` records with per-request `spec_decode_acceptance`",),
    "trtllm-responses": ("TensorRT-LLM responses with per-choice `speculative_decoding` (as AIPerf documents it)",),
    "trtllm-iter": ("`print_iter_log` lines `iter = N, … elapsed_time = Xs, timestamp = …, num_scheduled_requests: "
                    "N, states = {…}` → steps",
                    "iteration statistics JSON (`enable_iter_perf_stats`, `get_stats()`, trtllm-serve `/metrics`): "
                    "one object per iteration, arrays or JSONL, with `specDecodingStats` → steps with drafted and "
                    "accepted counts"),
    "llamacpp-log": LLAMACPP_LAYOUTS + ("`statistics <drafter>: #calls(b,g,a) = B G A, …` after a request's block "
                                        "(differenced per request; a block with only these lines too)",
                                        "per-round debug lines `slot update_slots: id S | task T | accepted A/D "
                                        "draft tokens, new n_tokens = N` (and `operator()`, build 11434 on)"),
    "vllm-bench": ("`vllm bench serve` summary with its `Speculative Decoding` block (text)",
                   "`vllm bench serve --save-result` JSON"),
    "sglang-bench": ("SGLang `bench_serving` summary with `Accept length` (text)", "`--output-file` JSONL"),
}

__all__ = ["SOURCES", "DeploymentMap", "ImportConflict", "ImportInputError", "ImportSummary", "MalformedInput",
           "Overrides", "import_aiperf_records", "import_llamacpp_log", "import_prometheus", "import_sglang_log",
           "import_sglang_bench", "import_sglang_responses", "import_trtllm_iter", "import_trtllm_responses",
           "import_vllm_bench", "import_vllm_log", "import_vllm_responses", "import_all", "list_layouts",
           "pick_sources", "run_import"]


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


def list_layouts(source: str) -> list[str]:
    """``specan import SOURCE --list-layouts``: the layouts a source reads, one a line (every source's for
    ``auto``)."""
    sources = SOURCES if source == "auto" else (source,)
    return [f"{name}: {layout}" for name in sources for layout in LAYOUTS[name]]


def option_notes(groups: dict[str, list[Path]], options: dict) -> list[str]:
    """``import auto``: which of the source options given applied to which file, and which were not used."""
    notes = []
    for name, value in options.items():
        if value is None or name not in SOURCE_OPTIONS:
            continue
        flag, takes = SOURCE_OPTIONS[name]
        used = [f"{p} ({source})" for source, paths in groups.items() if source in takes for p in paths]
        unused = [f"{p} ({source})" for source, paths in groups.items() if source not in takes for p in paths]
        if used:
            notes.append(f"{flag} {value} applied to {', '.join(used)}")
        if unused:
            notes.append(f"{flag} not used for {', '.join(unused)} (it applies to {', '.join(takes)} only)")
    return notes


def import_all(groups: dict[str, list[Path]], out: str | Path, deployment: str | Sequence[str], *,
               auto: bool = False, partition: str | None = None, read_bytes: Callable[[int], None] | None = None,
               **options) -> list[ImportSummary]:
    """Import every group (source → files) into ``out``, all or nothing: every file of every group is
    read and checked first, then all are written (and a failed write rolls back what was written).
    With ``auto``, each source option is passed only to the sources that take it (``option_notes``)."""
    if partition not in (None, "date", "none"):
        raise ImportInputError(f"--partition: {partition!r} is not one of date, none")
    deferred: list = []
    token = RUN.set(ImportRun(partition=partition, deferred=deferred, read_bytes=read_bytes))
    try:
        summaries = []
        for source, files in groups.items():
            given = {name: value for name, value in options.items()
                     if not (auto and name in SOURCE_OPTIONS and source not in SOURCE_OPTIONS[name][1])}
            summaries.append(run_import(source, files, out, deployment, **given))
    finally:
        RUN.reset(token)
    commit_all(deferred)
    return summaries


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
