"""`specan import aiperf-records`: AIPerf's per-request records export (JSONL) → requests, rounds.

AIPerf (NVIDIA's benchmark client) writes one line per request to
``profile_export.jsonl`` at ``--export-level records`` (its default):
``{"metadata": {...}, "metrics": {tag: {"value", "unit"}}, "error",
"spec_decode_acceptance": {...}}``. ``spec_decode_acceptance`` is AIPerf's
engine-neutral ``SpecDecodeAcceptanceRecord`` (vLLM, TensorRT-LLM and SGLang
payloads normalised): ``engine``, ``mean_acceptance_length``,
``draft_acceptance_rate``, ``acceptance_histogram`` (a sparse
``{"j": steps}`` map, bonus token excluded), ``num_accepted_draft_tokens``,
``num_draft_tokens``, ``num_spec_steps``, ``num_spec_tokens`` (null without a
fixed per-step bound), ``completion_tokens`` and, from vLLM's ``detailed``
level, ``per_step_accepted`` / ``per_step_drafted``.

Rounds come from the per-step arrays when present, else from the histogram,
rebuilt as a multiset only when num_draft_tokens = num_spec_steps × k for the
fixed bound k (docs/importers.md). AIPerf's own ``mean_acceptance_length`` is
never copied: the rounds give 1 + C/R.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .common import STOP_REASON, ImportInputError, ImportSummary, Overrides, is_int, rebuild_from_histogram
from .responses import NOT_REBUILT, ResponseImport, Tally, Where, add_reconciled_rounds, get
from .vllm_responses import check_histogram

SOURCE = "aiperf-records"


# AIPerf's display units for time metrics → microseconds per unit.
_TIME_UNITS = {"ns": 0.001, "us": 1.0, "µs": 1.0, "ms": 1000.0, "s": 1_000_000.0, "sec": 1_000_000.0}


@dataclass
class FirstSkip:
    """The first record that did not import, for the error when nothing does."""

    where: Where | None = None
    reason: str | None = None

    def skip(self, summary: ImportSummary, reason: str, where: Where) -> None:
        summary.skip(reason)
        if self.where is None:
            self.where, self.reason = where, reason


def nothing_imported(files: Sequence[str | Path], first: FirstSkip, expected: str) -> ImportInputError:
    """Exit 2 when no request imports: name the first record that did not, and what was expected."""
    names = ", ".join(str(p) for p in files)
    if first.where is None:
        return ImportInputError(f"{names}: nothing to import: no records found; expected {expected}")
    return ImportInputError(f"{names}: nothing to import: the first record that did not import is "
                            f"{first.where.path}:{first.where.line} ({first.reason}); expected {expected}")


@dataclass
class _Record:
    where: Where
    request_id: str
    arrival: int
    first_token: int | None
    finish: int | None
    prompt: int
    output: int
    server_output: bool           # output tokens from the server's usage (else AIPerf's tokenizer)
    category: str | None
    spec: dict | None


@dataclass
class _Counts:
    client_prompt: int = 0
    client_output: int = 0
    no_ttft: int = 0
    no_finish: int = 0
    mean_disagrees: int = 0
    engines: Counter = field(default_factory=Counter)
    gammas: Counter = field(default_factory=Counter)


def import_aiperf_records(files: Sequence[str | Path], out: str | Path, deployment_id: str,
                          overrides: Overrides | None = None) -> ImportSummary:
    """Import AIPerf records into TRACES ``out`` under ``deployment_id``; returns what was written."""
    overrides = overrides or Overrides()
    job = ResponseImport(SOURCE, out, deployment_id, files, options=f"deployment={deployment_id} {overrides}")
    first, counts = FirstSkip(), _Counts()
    records: list[_Record] = []
    seen: set[str] = set()
    for where, obj in job.located(job.records(files)):
        record = _parse(obj, where, job.summary, first, counts, seen)
        if record is not None:
            records.append(record)
    if not records:
        raise nothing_imported(files, first, "AIPerf's per-request records (profile_export.jsonl written at "
                                             "--export-level records: metadata, metrics, spec_decode_acceptance)")

    speculated = any(r.spec is not None for r in records)
    for r in records:
        _add(r, deployment_id, speculated, overrides, job, counts)

    _notes(job.summary, job.tally, counts, overrides, deployment_id, len(job.requests))
    gamma = max(counts.gammas) if counts.gammas else None
    return job.write(overrides, gamma)


# --------------------------------------------------------------------------- reading one line


def _parse(obj, where: Where, summary: ImportSummary, first: FirstSkip, counts: _Counts,
           seen: set[str]) -> _Record | None:
    if not isinstance(obj, dict):
        raise where.fail(f"expected a JSON object (an AIPerf record: metadata, metrics, …), "
                         f"found {type(obj).__name__}")
    if "metrics" not in obj and "responses" in obj:
        raise where.fail("an AIPerf raw record (profile_export_raw.jsonl, --export-level raw); specan reads the "
                         "per-request records, profile_export.jsonl")
    meta = get(obj, "metadata", "object", where)
    if meta is None:
        raise where.fail("no metadata object: not a line of AIPerf's per-request records (profile_export.jsonl)")
    metrics = get(obj, "metrics", "object", where) or {}
    skip = lambda reason: first.skip(summary, reason, where)  # noqa: E731
    if obj.get("error") is not None:
        skip("failed request (error set)")
        return None
    phase = get(meta, "benchmark_phase", "string", where, "metadata.benchmark_phase")
    kind = get(meta, "phase_kind", "string", where, "metadata.phase_kind")
    if "warmup" in (phase, kind):
        skip("warmup-phase record (AIPerf's own statistics leave it out too)")
        return None
    if get(meta, "was_cancelled", "boolean", where, "metadata.was_cancelled"):
        skip("cancelled request")
        return None
    request_id = get(meta, "x_request_id", "string", where, "metadata.x_request_id")
    if not request_id:
        skip("no metadata.x_request_id")
        return None
    start_ns = get(meta, "request_start_ns", "integer", where, "metadata.request_start_ns")
    if start_ns is None:
        skip("no metadata.request_start_ns")
        return None
    spec = get(obj, "spec_decode_acceptance", "object", where)
    if spec is not None:
        spec = _acceptance(spec, where)

    prompt = _tokens(metrics, "usage_prompt_tokens", where)
    client_prompt = prompt is None
    if prompt is None:
        prompt = _tokens(metrics, "input_sequence_length", where)
    output = spec["completion_tokens"] if spec is not None else None
    if output is None:
        output = _tokens(metrics, "usage_completion_tokens", where)
    server_output = output is not None
    if output is None:
        output = _tokens(metrics, "output_sequence_length", where)
    if prompt is None or output is None:
        skip("no prompt or output token count (usage_* or *_sequence_length metrics)")
        return None
    if request_id in seen:
        skip("request id repeated in this import")
        return None
    seen.add(request_id)

    arrival = (start_ns + 500) // 1000
    ttft = _duration_us(metrics, "time_to_first_token", where)
    latency = _duration_us(metrics, "request_latency", where)
    end_ns = get(meta, "request_end_ns", "integer", where, "metadata.request_end_ns")
    finish = arrival + latency if latency is not None else (end_ns + 500) // 1000 if end_ns is not None else None
    counts.client_prompt += client_prompt
    counts.client_output += not server_output
    counts.no_ttft += ttft is None
    counts.no_finish += finish is None
    return _Record(where, request_id, arrival, arrival + ttft if ttft is not None else None, finish, prompt, output,
                   server_output, get(meta, "source_kind", "string", where, "metadata.source_kind"), spec)


def _tokens(metrics: dict, tag: str, where: Where) -> int | None:
    value = _metric(metrics, tag, where)
    if value is None:
        return None
    value = value[0]
    if not (is_int(value) or (isinstance(value, float) and value.is_integer())) or value < 0:
        raise where.fail(f"metrics.{tag}.value: expected a token count, found {value!r}")
    return int(value)


def _duration_us(metrics: dict, tag: str, where: Where) -> int | None:
    value = _metric(metrics, tag, where)
    if value is None:
        return None
    number, unit = value
    if unit not in _TIME_UNITS:
        raise where.fail(f"metrics.{tag}.unit: expected a time unit ({', '.join(_TIME_UNITS)}), found {unit!r}")
    if not math.isfinite(number) or number < 0:
        raise where.fail(f"metrics.{tag}.value: expected a non-negative duration, found {number!r}")
    return int(round(number * _TIME_UNITS[unit]))


def _metric(metrics: dict, tag: str, where: Where) -> tuple[float, str | None] | None:
    """(value, unit) of an AIPerf MetricValue; None when the metric is absent or null."""
    entry = get(metrics, tag, "object", where, f"metrics.{tag}")
    if entry is None:
        return None
    value = get(entry, "value", "number", where, f"metrics.{tag}.value")
    if value is None:
        return None
    return value, get(entry, "unit", "string", where, f"metrics.{tag}.unit")


_SPEC_REQUIRED = (("num_spec_steps", "integer"), ("num_draft_tokens", "integer"),
                  ("num_accepted_draft_tokens", "integer"))
_SPEC_OPTIONAL = (("engine", "string"), ("num_spec_tokens", "integer"), ("completion_tokens", "integer"),
                  ("mean_acceptance_length", "number"), ("draft_acceptance_rate", "number"),
                  ("per_step_accepted", "integer list"), ("per_step_drafted", "integer list"))


def _acceptance(spec: dict, where: Where) -> dict:
    """The SpecDecodeAcceptanceRecord, typed, with its histogram as a dense list (index = accepted count)."""
    label = "spec_decode_acceptance."
    found = {}
    for key, kind in _SPEC_REQUIRED:
        found[key] = get(spec, key, kind, where, label + key)
        if found[key] is None:
            raise where.fail(f"{label}{key}: missing; AIPerf's acceptance record always has it")
        if found[key] < 0:
            raise where.fail(f"{label}{key}: expected a count ≥ 0, found {found[key]}")
    for key, kind in _SPEC_OPTIONAL:
        found[key] = get(spec, key, kind, where, label + key)
    sparse = get(spec, "acceptance_histogram", "object", where, label + "acceptance_histogram")
    if sparse is None:
        raise where.fail(f"{label}acceptance_histogram: missing; expected a {{accepted drafts: steps}} map")
    histogram: dict[int, int] = {}
    for key, n in sparse.items():
        if not (isinstance(key, str) and key.isdigit()) or not is_int(n) or n < 0:
            raise where.fail(f"{label}acceptance_histogram: expected {{\"j\": steps}} with j and steps integers "
                             f"≥ 0, found {key!r}: {n!r}")
        histogram[int(key)] = n
    found["histogram"] = [histogram.get(j, 0) for j in range(max(histogram) + 1)] if histogram else []
    return found


# --------------------------------------------------------------------------- one request


def _add(r: _Record, deployment_id: str, speculated: bool, overrides: Overrides, job: ResponseImport,
         counts: _Counts) -> None:
    summary, tally = job.summary, job.tally
    if r.request_id in job.existing:
        tally.already_present += 1
    job.requests.add(deployment_id=deployment_id, request_id=r.request_id, category=r.category,
                     arrival_time=r.arrival, first_token_time=r.first_token, finish_time=r.finish,
                     prompt_tokens=r.prompt, output_tokens=r.output, finish_reason="stop")
    spec = r.spec
    if spec is None:
        if speculated:
            summary.skip(NOT_REBUILT + "no spec_decode_acceptance in a run where other records have it "
                         "(no verify steps, n > 1, or a payload AIPerf dropped)")
            return
        if overrides.method not in (None, "none"):
            summary.skip(NOT_REBUILT + f"no spec_decode_acceptance, but --method is {overrides.method}")
            return
        tally.plain_requests += 1
    else:
        tally.spec_requests += 1
        if spec["engine"]:
            counts.engines[spec["engine"]] += 1
        if spec["num_spec_tokens"] is not None:
            counts.gammas[spec["num_spec_tokens"]] += 1
        mean = spec["mean_acceptance_length"]
        if mean is not None and spec["num_spec_steps"] and not math.isclose(
                mean, 1 + spec["num_accepted_draft_tokens"] / spec["num_spec_steps"], rel_tol=1e-9, abs_tol=1e-9):
            counts.mean_disagrees += 1
    if not r.server_output:
        summary.skip(NOT_REBUILT + "no server completion_tokens to reconcile the rounds with "
                     "(only AIPerf's own token count)")
        return
    steps = [] if spec is None else _steps(spec, overrides, summary, tally)
    if steps is None:
        return
    add_reconciled_rounds(job.rounds, tally, summary, deployment_id, r.request_id, steps, r.output,
                          spec is not None, STOP_REASON["stop"], r.arrival)


def _steps(spec: dict, overrides: Overrides, summary: ImportSummary, tally: Tally) -> list[tuple[int, int]] | None:
    """(drafted, accepted) per verify step, from the per-step arrays or the histogram; None: can't."""
    drafted, accepted = spec["per_step_drafted"], spec["per_step_accepted"]
    if drafted is not None and accepted is not None:
        if len(drafted) != len(accepted):
            summary.skip(NOT_REBUILT + "per_step_drafted and per_step_accepted differ in length")
            return None
        return list(zip(drafted, accepted))
    gamma = spec["num_spec_tokens"] if spec["num_spec_tokens"] is not None else overrides.num_speculative_tokens
    if gamma is None:
        summary.skip(NOT_REBUILT + "no fixed draft length (num_spec_tokens null, as under TensorRT-LLM's "
                     "draft_len_schedule) and no --num-speculative-tokens")
        return None
    reason = check_histogram(spec["histogram"], spec["num_spec_steps"], spec["num_draft_tokens"],
                             spec["num_accepted_draft_tokens"], gamma)
    if reason:
        summary.skip(NOT_REBUILT + reason)
        return None
    if spec["num_spec_steps"]:
        tally.rebuilt += 1
    return rebuild_from_histogram(spec["histogram"], gamma)


# --------------------------------------------------------------------------- notes


def _notes(summary: ImportSummary, tally: Tally, counts: _Counts, overrides: Overrides, deployment_id: str,
           n_requests: int) -> None:
    note = lambda text: summary.note(text, deployment_id)  # noqa: E731
    for text in tally.reconciliation_notes("acceptance_histogram"):
        note(text)
    note(f"finish_reason is not in AIPerf's records: {_n(n_requests, 'request')} imported as stop "
         "(one cut by max_tokens can't be told apart)")
    if counts.engines:
        note("engine per AIPerf: " + ", ".join(f"{e}: {n}" for e, n in sorted(counts.engines.items())))
    if len(counts.gammas) > 1:
        note("the records give several num_spec_tokens (" + ", ".join(str(g) for g in sorted(counts.gammas))
             + f"); the deployment takes {max(counts.gammas)}")
    if overrides.num_speculative_tokens is not None and counts.gammas and \
            max(counts.gammas) != overrides.num_speculative_tokens:
        note(f"the records give num_spec_tokens up to {max(counts.gammas)}, but --num-speculative-tokens is "
             f"{overrides.num_speculative_tokens}")
    if overrides.model is None:
        note("AIPerf's records don't name the model: pass --model (deployments.model is unknown otherwise)")
    if counts.mean_disagrees:
        note(f"{_n(counts.mean_disagrees, 'record')}: mean_acceptance_length disagrees with "
             "1 + num_accepted_draft_tokens / num_spec_steps; it is never copied, the rounds give 1 + C/R")
    if counts.client_prompt:
        note(f"prompt_tokens of {_n(counts.client_prompt, 'request')} is AIPerf's own token count "
             "(input_sequence_length, client tokenizer): no usage_prompt_tokens")
    if counts.client_output:
        note(f"output_tokens of {_n(counts.client_output, 'request')} is AIPerf's own token count "
             "(output_sequence_length, client tokenizer): no server completion_tokens")
    if counts.no_ttft:
        note(f"first_token_time unknown for {_n(counts.no_ttft, 'request')}: no time_to_first_token "
             "(AIPerf measures it on streaming runs only)")
    if counts.no_finish:
        note(f"finish_time unknown for {_n(counts.no_finish, 'request')}: no request_latency or request_end_ns")
    if tally.plain_requests and not tally.spec_requests:
        note("no record carries spec_decode_acceptance: imported as plain decoding (one token per round)")
    if tally.already_present:
        note(f"{tally.already_present} request ids were already in TRACES/requests: the loader will reject "
             "every copy as duplicate_key")


def _n(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
