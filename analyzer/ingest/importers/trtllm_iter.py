"""`specan import trtllm-iter`: TensorRT-LLM's per-iteration output → steps (docs/importers.md).

Two inputs, told apart per file by content:

* **print_iter_log lines** (``print_iter_log: true``, PyTorch backend), printed by
  ``PyExecutor._profiler`` in ``tensorrt_llm/_torch/pyexecutor/py_executor.py`` after
  each iteration. Layouts read, every field by its label::

      iter = N, global_rank = G, rank = R, currank_total_requests = a/b, elapsed_time = Xs,
          timestamp = YYYY-MM-DD HH:MM:SS, [num_scheduled_requests: N,] states = {...}
      iter = N, ..., host_step_time = Xms, prev_device_step_time = Yms|N/A, timestamp = ...,
          num_scheduled_requests: N, states = {...}
      iter = N, ..., num_scheduled_requests = N, kv_cache_util = U, currank_total_requests = a/b,
          host_step_time = Xms, prev_device_step_time = ..., timestamp = ..., states = {...}

  ``states`` is a Python dict: ``num_ctx_requests``, ``num_ctx_tokens``,
  ``num_generation_tokens`` (which counts CUDA-graph padding, PR #3914), and later keys
  that are not read.

* **Iteration statistics JSON** (``enable_iter_perf_stats``; ``llm.get_stats()``,
  ``trtllm-serve``'s ``/metrics``): the C++ ``IterationStats`` serialised by
  ``cpp/tensorrt_llm/executor/jsonSerialization.cpp`` (camelCase keys), one object per
  iteration, in arrays, JSONL or pretty-printed, or JSON strings holding such objects.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .common import (ImportInputError, ImportSummary, MalformedInput, Overrides, TraceWriter, datetime_us,
                     deployment_row, finish, is_int, is_number, json_values, open_input)

SOURCE = "trtllm-iter"

STEP_COLUMNS = ("deployment_id", "step_id", "start_time", "duration_ms", "batch_size", "num_prefill_tokens",
                "kv_usage", "num_draft_tokens", "num_accepted_tokens", "num_committed_tokens", "counts_from")
OPTIONAL = ("kv_usage", "num_draft_tokens", "num_accepted_tokens", "num_committed_tokens", "counts_from")

# skip reasons
OTHER_LINE = "line that is not an iteration line"
NO_SCHEDULED = ("iteration line without num_scheduled_requests (layout before 2025-04): the batch size can't be "
                "told (num_generation_tokens counts CUDA-graph padding)")
NO_DURATION = "iteration line without elapsed_time or host_step_time"
NO_TIME = "iteration line without a readable timestamp"
BAD_LINE = "iteration line whose fields don't parse"
OTHER_RANK = ("iteration of another rank (one iteration of the ranks is one step: the lowest rank's line or "
              "stats object is kept)")
REPEATED = "iteration repeated (an iter already imported for this deployment)"
IDLE = "iteration with neither generation nor context requests"
NO_IFB = "stats object without inflightBatchingStats (static batching, or not an IterationStats object)"
NOT_STATS = "JSON value that is not an iteration stats object"
BAD_RECORD = "stats object with a field of the wrong type"
NO_STAMP = "stats object without a readable timestamp"

ITER_LINE = re.compile(r"\biter = (\d+), global_rank = ")
FIELD = re.compile(r"(\w+)(?: = |: )([^,]*)")
LOG_TIME = "%Y-%m-%d %H:%M:%S"
STATS_TIME = "%m-%d-%Y %H:%M:%S.%f"


@dataclass
class _Step:
    iter: int
    rank: int
    start_us: int
    duration_ms: float
    batch_size: int
    prefill: int
    kv_usage: float | None = None
    drafted: int | None = None
    accepted: int | None = None
    committed: int | None = None
    place: str = ""
    ctx_requests: int = 0


@dataclass
class _Tally:
    layouts: Counter = field(default_factory=Counter)
    stamp_start: int = 0        # stats: timestamp taken as the iteration's start (PyTorch backend)
    stamp_end: int = 0          # stats: timestamp taken as its end (C++ backend)
    spec: int = 0               # stats objects with specDecodingStats
    no_spec: int = 0            # stats objects without, in a capture where others have it
    length_off: list[str] = field(default_factory=list)
    per_request: Counter = field(default_factory=Counter)   # drafts per request → iterations
    uneven: int = 0             # iterations whose drafts don't divide evenly among their requests
    ranks: set = field(default_factory=set)
    log_lines: int = 0
    stats_objects: int = 0


JSON_START = re.compile(r'\A[\ufeff\s]*(\{|\[\s*(\{|"|\]|\Z))')


def _is_json(path: Path) -> bool:
    """JSON (an object, or an array of objects or JSON strings), not a log whose lines start with
    ``[MM/DD/YYYY-…]``."""
    with open_input(path) as fh:
        head = fh.read(4096)
    return JSON_START.match(head) is not None


# --------------------------------------------------------------------------- print_iter_log


def _parse_line(line: str) -> dict | None:
    """The fields of an iteration line (strings), with ``states`` as a dict; None when it doesn't parse."""
    m = ITER_LINE.search(line)
    if m is None:
        return None
    tail = line[m.start():].rstrip()
    states: dict = {}
    marker = tail.find("states = ")
    if marker >= 0:
        try:
            states = ast.literal_eval(tail[marker + len("states = "):].strip())
        except (ValueError, SyntaxError):
            return None
        if not isinstance(states, dict):
            return None
        tail = tail[:marker]
    fields = {k: v.strip() for k, v in FIELD.findall(tail)}
    fields["states"] = states
    return fields


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _seconds(text: str | None, unit: str) -> float | None:
    """``0.0987s`` (unit s) or ``12.5ms`` (unit ms) → milliseconds."""
    if text is None or not text.endswith(unit):
        return None
    try:
        value = float(text[: -len(unit)])
    except ValueError:
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value * 1000 if unit == "s" else value


def _log_steps(path: Path, summary: ImportSummary, tally: _Tally) -> list[_Step]:
    steps = []
    with open_input(path) as fh:
        for number, line in enumerate(fh, 1):
            place = f"{path}:{number}"
            if ITER_LINE.search(line) is None:
                summary.skip(OTHER_LINE)
                continue
            tally.log_lines += 1
            f = _parse_line(line)
            if f is None:
                summary.skip(BAD_LINE, place=place)
                continue
            it, rank = _int(f.get("iter")), _int(f.get("rank"))
            states = f["states"]
            ctx_req, ctx_tok = states.get("num_ctx_requests"), states.get("num_ctx_tokens")
            if it is None or rank is None or not is_int(ctx_req) or not is_int(ctx_tok):
                summary.skip(BAD_LINE, place=place)
                continue
            if "elapsed_time" in f:
                duration, layout = _seconds(f["elapsed_time"], "s"), "elapsed_time"
            elif "host_step_time" in f:
                duration, layout = _seconds(f["host_step_time"], "ms"), "host_step_time"
            else:
                summary.skip(NO_DURATION, place=place)
                continue
            if duration is None:
                summary.skip(BAD_LINE, place=place)
                continue
            scheduled = _int(f.get("num_scheduled_requests"))
            if scheduled is None:
                summary.skip(NO_SCHEDULED, place=place)
                continue
            try:
                end = dt.datetime.strptime(f.get("timestamp", ""), LOG_TIME)
            except ValueError:
                summary.skip(NO_TIME, place=place)
                continue
            batch = scheduled - ctx_req
            if batch < 0:
                summary.skip(BAD_LINE, place=place)
                continue
            layout += (", num_scheduled_requests = N, kv_cache_util" if "kv_cache_util" in f
                       else ", num_scheduled_requests: N")
            tally.layouts[layout] += 1
            tally.ranks.add(rank)
            end_us = datetime_us(end)
            step = _Step(it, rank, end_us - int(round(duration * 1000)), duration, batch, ctx_tok,
                         place=place, ctx_requests=ctx_req)
            # newest layout: kv_cache_util = 1 − free blocks / max blocks, 3 decimals, or N/A
            try:
                util = float(f["kv_cache_util"]) if "kv_cache_util" in f else None
            except ValueError:
                util = None
            step.kv_usage = util if util is not None and 0 <= util <= 1 else None
            steps.append(step)
    return steps


# --------------------------------------------------------------------------- stats JSON


def _count(obj: dict, key: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if not is_int(value) or value < 0:
        raise TypeError(key)
    return value


def _stats_steps(path: Path, summary: ImportSummary, tally: _Tally) -> list[_Step]:
    with open_input(path, binary=True) as fh:
        raw = fh.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedInput(path, raw.count(b"\n", 0, exc.start) + 1, "not valid JSON (not UTF-8 text)") from None
    steps = []
    for number, value in json_values(text, path):
        place = f"{path}:{number}"
        summary.at = place
        if isinstance(value, str):          # llm.get_stats() of some releases: JSON text per iteration
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                summary.skip(NOT_STATS)
                continue
        if not isinstance(value, dict) or "iter" not in value:
            summary.skip(NOT_STATS)
            continue
        tally.stats_objects += 1
        ifb = value.get("inflightBatchingStats")
        if not isinstance(ifb, dict):
            summary.skip(NO_IFB)
            continue
        try:
            step = _stats_step(value, ifb, tally)
        except TypeError:
            summary.skip(BAD_RECORD)
            continue
        if step is None:
            summary.skip(NO_STAMP)
            continue
        step.place = place
        steps.append(step)
    summary.at = None
    return steps


def _stats_step(obj: dict, ifb: dict, tally: _Tally) -> _Step | None:
    it = _count(obj, "iter")
    latency = obj.get("iterLatencyMS")
    gen, ctx_tok = _count(ifb, "numGenRequests"), _count(ifb, "numCtxTokens")
    ctx_req = _count(ifb, "numContextRequests")
    if it is None or gen is None or ctx_tok is None or not is_number(latency) or latency < 0 \
            or not math.isfinite(latency):
        raise TypeError("iter")
    stamp = obj.get("timestamp")
    try:
        moment = dt.datetime.strptime(stamp, STATS_TIME) if isinstance(stamp, str) else None
    except ValueError:
        moment = None
    if moment is None:
        return None
    stamp_us = datetime_us(moment)
    # PyTorch backend: staticBatchingStats is an (empty) object and the timestamp is taken when the
    # iteration's stats object is made, before scheduling; C++ backend: staticBatchingStats is null for
    # inflight batching and the timestamp is the iteration's end (executorImpl.cpp getCurrentIterationStats,
    # called after the iteration; types.h: "Ending time of this iteration")
    if isinstance(obj.get("staticBatchingStats"), dict):
        tally.stamp_start += 1
        start_us = stamp_us
    else:
        tally.stamp_end += 1
        start_us = stamp_us - int(round(latency * 1000))
    step = _Step(it, _count(obj, "attentionDpRank") or 0, start_us, float(latency), gen, ctx_tok,
                 ctx_requests=ctx_req or 0)
    tally.ranks.add(step.rank)
    kv = obj.get("kvCacheStats")
    if isinstance(kv, dict):
        used, most = _count(kv, "usedNumBlocks"), _count(kv, "maxNumBlocks")
        if used is not None and most:
            step.kv_usage = used / most
    spec = obj.get("specDecodingStats")
    if isinstance(spec, dict):
        drafted, accepted = _count(spec, "numDraftTokens"), _count(spec, "numAcceptedTokens")
        with_drafts = _count(spec, "numRequestsWithDraftTokens")
        if drafted is None or accepted is None:
            raise TypeError("specDecodingStats")
        tally.spec += 1
        step.drafted, step.accepted, step.committed = drafted, accepted, gen + accepted
        length = spec.get("acceptanceLength")
        if with_drafts is not None and is_number(length):
            # py_executor.py _update_iter_stats: (accepted + requests with drafts) / requests with drafts, 0.0
            # when no request drafted
            expected = (accepted + with_drafts) / with_drafts if with_drafts else 0.0
            if not math.isclose(length, expected, rel_tol=1e-6, abs_tol=1e-9):
                tally.length_off.append(str(it))
        if with_drafts:
            if drafted % with_drafts == 0:
                tally.per_request[drafted // with_drafts] += 1
            else:
                tally.uneven += 1
    return step


# --------------------------------------------------------------------------- import


def import_trtllm_iter(files: Sequence[str | Path], out: str | Path, deployment_id: str,
                       overrides: Overrides | None = None) -> ImportSummary:
    """Import TensorRT-LLM iteration lines or iteration statistics into TRACES ``out`` as steps."""
    overrides = overrides or Overrides()
    writer = TraceWriter(Path(out), SOURCE, files, options=f"deployment={deployment_id} {overrides}")
    writer.check_layout(("steps", "import_notes"))
    summary = ImportSummary(SOURCE, Path(out), quiet_reasons=frozenset({OTHER_LINE}))
    tally = _Tally()
    log_steps: list[_Step] = []
    stats_steps: list[_Step] = []
    for path in files:
        path = Path(path)
        if _is_json(path):
            stats_steps += _stats_steps(path, summary, tally)
        else:
            log_steps += _log_steps(path, summary, tally)
    if log_steps and stats_steps:
        raise ImportInputError("iteration log lines and iteration statistics JSON in one import: they describe "
                               "the same iterations twice; import them under two deployments")
    from_log = bool(log_steps)
    steps = log_steps or stats_steps
    if not steps:
        names = ", ".join(str(p) for p in files)
        first = next(((reason, places[0]) for reason, places in summary.places.items() if places), None)
        raise ImportInputError(
            f"{names}: nothing to import: " + (f"the first record that did not import is {first[1]} ({first[0]})"
                                               if first else "no TensorRT-LLM iteration line "
                                               "(`iter = N, global_rank = G, ...`) or iteration statistics "
                                               "object (`iter`, `iterLatencyMS`, `inflightBatchingStats`)")
            + "; expected print_iter_log lines or enable_iter_perf_stats JSON")

    # one series: the lowest rank's (a tensor-parallel group's ranks print the same iteration)
    keep = min(s.rank for s in steps)
    kept: list[_Step] = []
    seen: set[int] = set()
    for s in steps:
        if s.rank != keep:
            summary.skip(OTHER_RANK, place=s.place)
        elif s.iter in seen:
            summary.skip(REPEATED, place=s.place)
        elif s.batch_size == 0 and s.prefill == 0 and not s.ctx_requests:
            seen.add(s.iter)
            summary.skip(IDLE, place=s.place)
        else:
            seen.add(s.iter)
            kept.append(s)
    if not kept:
        raise ImportInputError(f"{', '.join(str(p) for p in files)}: nothing to import: every iteration was "
                               "left out (" + ", ".join(sorted(summary.skipped)) + ")")
    kept.sort(key=lambda s: s.iter)

    # the PyTorch backend writes specDecodingStats whenever a speculative config is set, drafting or not
    spec_seen = tally.spec > 0
    gamma = max(tally.per_request) if tally.per_request else None
    if from_log:
        plain = overrides.method == "none"
        method_known = overrides.method is not None
        row = deployment_row(deployment_id, overrides, model=None, speculated=not plain, num_spec_tokens=None)
    else:
        # no specDecodingStats anywhere is plain decoding, unless --method names a speculative method
        plain = not spec_seen and overrides.method in (None, "none")
        method_known = True
        row = deployment_row(deployment_id, overrides, model=None, speculated=spec_seen, num_spec_tokens=gamma)
    writer.merge_deployment(row, summary)

    cols: dict[str, list] = {c: [] for c in STEP_COLUMNS}
    missing_spec = 0
    for s in kept:
        if from_log:
            drafted, accepted, committed = (0, 0, s.batch_size) if plain else (None, None, None)
        elif s.drafted is not None:
            drafted, accepted, committed = s.drafted, s.accepted, s.committed
        elif plain:
            drafted, accepted, committed = 0, 0, s.batch_size
        else:
            missing_spec += 1
            drafted = accepted = committed = None
        cols["deployment_id"].append(deployment_id)
        cols["step_id"].append(s.iter)
        cols["start_time"].append(s.start_us)
        cols["duration_ms"].append(s.duration_ms)
        cols["batch_size"].append(s.batch_size)
        cols["num_prefill_tokens"].append(s.prefill)
        cols["kv_usage"].append(s.kv_usage)
        cols["num_draft_tokens"].append(drafted)
        cols["num_accepted_tokens"].append(accepted)
        cols["num_committed_tokens"].append(committed)
        cols["counts_from"].append("iteration" if committed is not None else None)
    writer.add("steps", cols, times=cols["start_time"], drop_empty_optional=OPTIONAL)
    _notes(summary, tally, deployment_id, from_log, plain, method_known, keep, missing_spec, gamma, overrides)
    return finish(writer, summary, deployment_id)


def _notes(summary: ImportSummary, tally: _Tally, deployment_id: str, from_log: bool, plain: bool,
           method_known: bool, keep: int, missing_spec: int, gamma: int | None, overrides: Overrides) -> None:
    note = lambda text: summary.note(text, deployment_id)  # noqa: E731
    if from_log:
        note("print_iter_log layouts read: " + ", ".join(f"{n} × {k}" for k, n in sorted(tally.layouts.items())))
        note("step times come from the line's `timestamp` (the server's local clock, read as UTC, whole "
             "seconds) minus its elapsed_time or host_step_time: the line is printed after the iteration, so "
             "start times are exact to about 1 s and durations are as printed")
        note("batch_size is num_scheduled_requests − num_ctx_requests (the generation requests); "
             "num_generation_tokens is not used: it counts CUDA-graph padding, and with speculation drafts")
        if plain:
            note("--method none: each generation request commits one token per iteration "
                 "(num_committed_tokens = batch_size, no drafts, counts_from = iteration)")
        elif method_known:
            note(f"--method {overrides.method}: the iteration lines carry no draft or acceptance counts, so the "
                 "steps' token counts are null")
        else:
            note("the iteration lines can't tell plain decoding from speculative decoding: the steps' token "
                 "counts are null and the method is unknown (pass --method none for a plain deployment)")
    else:
        if tally.stamp_start:
            note(f"{tally.stamp_start} stats objects from the PyTorch backend (staticBatchingStats is an object): "
                 "their timestamp is taken when the iteration begins (py_executor.py _get_init_iter_stats), so it "
                 "is the step's start; iterLatencyMS under the overlap scheduler spans about two loops")
        if tally.stamp_end:
            note(f"{tally.stamp_end} stats objects from the C++ backend (staticBatchingStats null): their "
                 "timestamp is taken after the iteration (executorImpl.cpp getCurrentIterationStats), so the start is "
                 "timestamp − iterLatencyMS")
        note("timestamps are the server's local clock without a zone, read as UTC")
        if plain:
            note("no stats object carries specDecodingStats: plain decoding, one committed token per "
                 "generation request (num_committed_tokens = numGenRequests)")
        elif not tally.spec:
            note(f"no stats object carries specDecodingStats, but --method is {overrides.method}: the steps' "
                 "token counts are null")
        else:
            note("num_committed_tokens = numGenRequests + numAcceptedTokens (each generation request commits "
                 "its accepted drafts and one token of its own)")
        if missing_spec and tally.spec:
            note(f"{missing_spec} steps without specDecodingStats beside steps with it: their token counts "
                 "are null")
        if tally.length_off:
            note(f"{len(tally.length_off)} stats objects whose acceptanceLength disagrees with (numAcceptedTokens "
                 "+ numRequestsWithDraftTokens) / numRequestsWithDraftTokens, first at iter "
                 + ", ".join(tally.length_off[:3]) + "; the counts are imported as given")
        if gamma is not None and overrides.num_speculative_tokens is None:
            note(f"num_speculative_tokens {gamma}: the most drafts per drafting request in any iteration "
                 "(numDraftTokens / numRequestsWithDraftTokens where it divides evenly), a lower bound of "
                 "the configured maximum")
        if tally.uneven:
            note(f"{tally.uneven} iterations whose drafts don't divide evenly among their drafting requests "
                 "(a dynamic draft length)")
    if len(tally.ranks) > 1 or keep:
        note(f"ranks {', '.join(str(r) for r in sorted(tally.ranks))} logged; rank {keep}'s lines are the steps "
             "(the ranks of a tensor-parallel group run the same iteration)")
