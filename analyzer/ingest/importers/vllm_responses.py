"""`specan import vllm-responses`: vLLM OpenAI-compatible responses (JSONL) → requests, rounds.

Each line is a chat.completion / text_completion response, or a wrapper
``{"response": {...}, "sent_at", "category", "structured_output", "temperature",
"prompt_token_ids", "output_token_ids"}``. The per-request ``metrics`` object
gives the timings and, with ``--per-request-spec-decode-metrics``,
``metrics.speculative_decoding`` gives the rounds (docs/importers.md).

Streamed responses are read too: server-sent events (``data: {...}`` lines,
``data: [DONE]``) or bodies a proxy wrapped as ``{"data": {...}}``, mixed with
whole responses in any file. The chunks of one response (one ``id``) are
assembled into the whole response they stand for, which then takes the same
path as a response read whole.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .common import STOP_REASON, ImportSummary, Overrides, RoundsBuffer, is_int, ms_us, rebuild_from_histogram
from .responses import (FINISH_REASON, NOT_REBUILT, RequestsBuffer, ResponseImport, Tally, Where,
                        add_reconciled_rounds, arrival_from, get, unwrap, wrapper_values)

SOURCE = "vllm-responses"

_NO_USAGE = "stream without a usage chunk: request it with stream_options.include_usage"
DONE = "[DONE]"
_END = object()                 # what unframe() gives for data: [DONE]
_MAX_ACCEPTED = 1024            # a larger key of a sparse histogram is not a draft length


def import_vllm_responses(files: Sequence[str | Path], out: str | Path, deployment_id: str,
                          overrides: Overrides | None = None) -> ImportSummary:
    """Import vLLM responses into TRACES ``out`` under ``deployment_id``; returns what was written."""
    overrides = overrides or Overrides()
    job = ResponseImport(SOURCE, out, deployment_id, files, options=f"deployment={deployment_id} {overrides}")
    spec_tokens: list[int] = []
    streams = Streams()

    def one(obj, where: Where) -> None:
        _one(obj, where, deployment_id, overrides, job.summary, job.requests, job.rounds, job.tally, job.models,
             spec_tokens, job.existing)

    for where, obj in job.located(job.records(files, sse=True)):
        body, framed = unframe(obj, where)
        if body is _END or streams.take(body, framed, where, job.summary):
            continue
        one(body, where)
    for where, response in streams.assembled(job.summary, job.tally):
        one(response, where)

    _notes(job.summary, job.tally, job.models, deployment_id)
    if overrides.num_speculative_tokens is not None and spec_tokens and \
            max(spec_tokens) != overrides.num_speculative_tokens:
        job.summary.note(f"the responses give num_spec_tokens up to {max(spec_tokens)}, but "
                         f"--num-speculative-tokens is {overrides.num_speculative_tokens}", deployment_id)
    return job.write(overrides, max(spec_tokens) if spec_tokens else None)


def unframe(obj, where: Where) -> tuple[object, bool]:
    """(body, framed): a record's body, and whether it came in stream framing, an SSE
    ``data:`` line (read as ``{"data": ...}``) or a proxy's ``{"data": ...}`` wrapper.
    The body of ``data: [DONE]`` is ``_END``; a body given as JSON text is parsed."""
    if not (isinstance(obj, dict) and "data" in obj and not {"object", "choices", "response"} & obj.keys()):
        return obj, False
    data = obj["data"]
    if isinstance(data, str):
        if data.strip() == DONE:
            return _END, True
        try:
            data = json.loads(data)
        except json.JSONDecodeError:
            raise where.fail(f"data: expected a JSON object or {DONE}, found text {data[:40]!r}") from None
    if not isinstance(data, dict):
        raise where.fail(f"data: expected a JSON object (a response or a streamed chunk) or {DONE}, "
                         f"found {type(data).__name__}")
    return data, True


@dataclass
class _Stream:
    """What the chunks of one streamed response said so far."""

    kind: str                                               # chat.completion or text_completion
    model: str | None = None
    created: object = None
    choices: dict[int, dict] = field(default_factory=dict)  # index → finish_reason, speculative_decoding_stats
    usage: dict | None = None
    usage_at: Where | None = None
    metrics: dict | None = None


@dataclass
class Streams:
    """Streamed chunks, assembled by response id into the whole responses they stand for.

    A chunk is a ``*.chunk`` object, or a ``text_completion`` that came in stream
    framing (vLLM's completion chunks name the object like a whole response). Per
    id: model and created from the chunks; each choice's finish_reason and
    ``speculative_decoding_stats`` from the last chunk carrying them; usage from
    the last chunk carrying it, metrics from the last non-empty ``metrics`` (both
    ride vLLM's final chunk, ``"choices": []``). That final chunk closes the
    stream: a later chunk with the same id starts another one.
    """

    open: dict[str, _Stream] = field(default_factory=dict)
    closed: list[tuple[str, _Stream]] = field(default_factory=list)

    @staticmethod
    def is_chunk(body, framed: bool) -> bool:
        kind = body.get("object") if isinstance(body, dict) and "response" not in body else None
        return isinstance(kind, str) and (kind.endswith(".chunk") or (framed and kind == "text_completion"))

    def take(self, body, framed: bool, where: Where, summary: ImportSummary) -> bool:
        """Keep ``body`` if it is a streamed chunk (True), else leave it (False)."""
        if not self.is_chunk(body, framed):
            return False
        request_id = get(body, "id", "string", where)
        if request_id is None:
            summary.skip("streamed chunk without an id")
            return True
        stream = self.open.get(request_id)
        if stream is None:
            kind = body["object"]
            stream = self.open[request_id] = _Stream(kind[:-len(".chunk")] if kind.endswith(".chunk") else kind)
        model = get(body, "model", "string", where)
        if stream.model is None:
            stream.model = model
        if stream.created is None:
            stream.created = body.get("created")
        choices = get(body, "choices", "list", where) or []
        for k, choice in enumerate(choices):
            label = f"choices[{k}]"
            if not isinstance(choice, dict):
                raise where.fail(f"{label}: expected an object")
            index = get(choice, "index", "integer", where, label + ".index")
            slot = stream.choices.setdefault(index or 0, {"index": index or 0, "finish_reason": None})
            finish = get(choice, "finish_reason", "string", where, label + ".finish_reason")
            if finish is not None:
                slot["finish_reason"] = finish
            stats = get(choice, "speculative_decoding_stats", "object", where,
                        label + ".speculative_decoding_stats")
            if stats is not None:   # made dense here, so a bad histogram names this chunk's line
                slot["speculative_decoding_stats"] = dense_histogram(stats, where,
                                                                     label + ".speculative_decoding_stats.")
        usage = get(body, "usage", "object", where)
        if usage is not None:
            stream.usage, stream.usage_at = usage, where
        metrics = get(body, "metrics", "object", where)
        if metrics:
            stream.metrics = metrics
        if usage is not None and not choices:   # the final chunk
            self.closed.append((request_id, self.open.pop(request_id)))
        return True

    def assembled(self, summary: ImportSummary, tally: Tally) -> Iterator[tuple[Where, dict]]:
        """(where, the whole response) per stream that has a usage chunk; the others are skipped."""
        for request_id, stream in self.closed + list(self.open.items()):
            if stream.usage is None:
                summary.skip(_NO_USAGE)
                continue
            tally.streams += 1
            response = {"id": request_id, "object": stream.kind, "created": stream.created, "model": stream.model,
                        "choices": [stream.choices[i] for i in sorted(stream.choices)]
                        or [{"index": 0, "finish_reason": None}],
                        "usage": stream.usage}
            if stream.metrics is not None:
                response["metrics"] = stream.metrics
            yield stream.usage_at, response


def _one(obj, where: Where, deployment_id: str, overrides: Overrides, summary: ImportSummary,
         requests: RequestsBuffer, rounds: RoundsBuffer, tally: Tally, models: Counter, spec_tokens: list[int],
         existing: set[str]) -> None:
    wrapper, response = unwrap(obj, where)
    if response is None:
        summary.skip("wrapper with a null response")
        return
    if response.get("object") == "error" or ("error" in response and "choices" not in response):
        summary.skip("error response")
        return
    if str(response.get("object", "")).endswith(".chunk"):
        summary.skip("streaming chunk, not a whole response")
        return
    request_id = get(response, "id", "string", where)
    choices = get(response, "choices", "list", where)
    usage = get(response, "usage", "object", where)
    if request_id is None or choices is None:
        summary.skip("not a completion response (no id or choices)")
        return
    if usage is None:
        summary.skip("no usage (completion_tokens unknown)")
        return
    if len(choices) != 1:
        summary.skip("not exactly one choice (n > 1): per-request counts can't be split")
        return
    choice = choices[0]
    if not isinstance(choice, dict):
        raise where.fail("choices[0]: expected an object")
    finish = get(choice, "finish_reason", "string", where, "choices[0].finish_reason")
    if finish is None:
        summary.skip("no finish_reason (unfinished response)")
        return
    if finish not in FINISH_REASON:
        summary.skip(f"finish_reason {finish!r} not understood")
        return
    completion = get(usage, "completion_tokens", "integer", where, "usage.completion_tokens")
    prompt = get(usage, "prompt_tokens", "integer", where, "usage.prompt_tokens")
    if completion is None or prompt is None:
        summary.skip("no usage.completion_tokens or usage.prompt_tokens")
        return
    arrival, arrival_field = arrival_from(wrapper, response.get("created"), where)
    if arrival is None:
        summary.skip("no time: neither sent_at nor created")
        return
    if request_id in requests.ids:
        summary.skip("request id repeated in this import")
        return
    if request_id in existing:
        tally.already_present += 1

    metrics = get(response, "metrics", "object", where) or {}
    first, finish_time = _times(metrics, arrival, where)
    if first is None:
        tally.no_timing += 1
    if arrival_field == "created":
        tally.from_created += 1
    extra = wrapper_values(wrapper, where) if wrapper is not None else {}
    model = get(response, "model", "string", where)
    if model:
        models[model] += 1

    requests.add(deployment_id=deployment_id, request_id=request_id, arrival_time=arrival,
                 first_token_time=first, finish_time=finish_time, prompt_tokens=prompt, output_tokens=completion,
                 finish_reason=FINISH_REASON[finish], **extra)

    spec = get(metrics, "speculative_decoding", "object", where, "metrics.speculative_decoding")
    label = "speculative_decoding."
    if spec is None:
        stats = get(choice, "speculative_decoding_stats", "object", where, "choices[0].speculative_decoding_stats")
        if stats is not None:
            label = "choices[0].speculative_decoding_stats."
            spec = dense_histogram(stats, where, label)
            tally.per_choice_spec += 1
    if spec is None:
        tally.plain_requests += 1
        steps: list[tuple[int, int]] = []
    else:
        tally.spec_requests += 1
        gamma = get(spec, "num_spec_tokens", "integer", where, label + "num_spec_tokens")
        if gamma is not None:
            spec_tokens.append(gamma)
        steps = _steps(spec, where, gamma if gamma is not None else overrides.num_speculative_tokens,
                       summary, tally, label)
        if steps is None:
            return
    add_reconciled_rounds(rounds, tally, summary, deployment_id, request_id, steps, completion, spec is not None,
                          STOP_REASON[FINISH_REASON[finish]], arrival)


def _times(metrics: dict, arrival: int, where: Where) -> tuple[int | None, int | None]:
    ttft = get(metrics, "time_to_first_token_ms", "number", where, "metrics.time_to_first_token_ms")
    queue = get(metrics, "queue_time_ms", "number", where, "metrics.queue_time_ms")
    generation = get(metrics, "generation_time_ms", "number", where, "metrics.generation_time_ms")
    if ttft is None or queue is None:
        return None, None
    first = arrival + ms_us(queue + ttft)
    return first, (first + ms_us(generation) if generation is not None else None)


def dense_histogram(stats: dict, where: Where, label: str) -> dict:
    """``stats`` with a sparse ``acceptance_histogram`` (``{"0": 39, "1": 1, "3": 3}``: steps per
    accepted draft count, zero counts left out) made the dense list ``metrics.speculative_decoding``
    has, ``num_spec_tokens`` + 1 long; a dense list is kept as it is."""
    sparse = stats.get("acceptance_histogram")
    if not isinstance(sparse, dict):
        return stats
    gamma = get(stats, "num_spec_tokens", "integer", where, label + "num_spec_tokens")
    counts: dict[int, int] = {}
    for key, n in sparse.items():
        if not (key.isascii() and key.isdigit() and int(key) <= _MAX_ACCEPTED) or not is_int(n):
            raise where.fail(f"{label}acceptance_histogram: expected step counts keyed by accepted draft count "
                             f"(like {{\"0\": 39, \"3\": 3}}), found {key!r}: {n!r}")
        counts[int(key)] = n
    width = max([gamma + 1 if gamma is not None else 0] + [j + 1 for j in counts])
    return {**stats, "acceptance_histogram": [counts.get(j, 0) for j in range(width)]}


def _steps(spec: dict, where: Where, gamma: int | None, summary: ImportSummary,
           tally: Tally, label: str = "speculative_decoding.") -> list[tuple[int, int]] | None:
    """(drafted, accepted) per speculative step, from the detailed arrays or the histogram; None: can't."""
    drafted = get(spec, "per_step_drafted", "integer list", where, label + "per_step_drafted")
    accepted = get(spec, "per_step_accepted", "integer list", where, label + "per_step_accepted")
    if drafted is not None and accepted is not None:
        if len(drafted) != len(accepted):
            summary.skip(NOT_REBUILT + "per_step_drafted and per_step_accepted differ in length")
            return None
        return list(zip(drafted, accepted))
    steps = get(spec, "num_spec_steps", "integer", where, label + "num_spec_steps")
    draft_tokens = get(spec, "num_draft_tokens", "integer", where, label + "num_draft_tokens")
    accepted_tokens = get(spec, "num_accepted_draft_tokens", "integer", where, label + "num_accepted_draft_tokens")
    histogram = get(spec, "acceptance_histogram", "integer list", where, label + "acceptance_histogram")
    if histogram is None or steps is None or draft_tokens is None:
        summary.skip(NOT_REBUILT + "neither per-step arrays nor a complete summary "
                     "(acceptance_histogram, num_spec_steps, num_draft_tokens)")
        return None
    if gamma is None:
        summary.skip(NOT_REBUILT + "summary without num_spec_tokens (and no --num-speculative-tokens)")
        return None
    reason = check_histogram(histogram, steps, draft_tokens, accepted_tokens, gamma)
    if reason:
        summary.skip(NOT_REBUILT + reason)
        return None
    if steps:
        tally.rebuilt += 1
    return rebuild_from_histogram(histogram, gamma)


def check_histogram(histogram: list[int], steps: int, draft_tokens: int, accepted_tokens: int | None,
                    gamma: int) -> str | None:
    """Why a summary can't be rebuilt exactly as a multiset of rounds, or None when it can."""
    if draft_tokens != steps * gamma:
        return "drafts per step vary (num_draft_tokens ≠ num_spec_steps × num_spec_tokens)"
    if sum(histogram) != steps or any(n < 0 for n in histogram):
        return "acceptance_histogram does not count num_spec_steps steps"
    if accepted_tokens is not None and sum(j * n for j, n in enumerate(histogram)) != accepted_tokens:
        return "acceptance_histogram does not add up to the accepted draft tokens"
    if any(n for j, n in enumerate(histogram) if j > gamma):
        return "acceptance_histogram has steps accepting more than num_spec_tokens"
    return None


def _notes(summary: ImportSummary, tally: Tally, models: Counter, deployment_id: str) -> None:
    note = lambda text: summary.note(text, deployment_id)  # noqa: E731
    for text in tally.reconciliation_notes("acceptance_histogram"):
        note(text)
    if tally.streams:
        note(f"{tally.streams} request{'s' if tally.streams != 1 else ''} assembled from streamed chunks "
             "(the final chunk's usage and metrics, finish_reason from the chunk that carries it)")
    if tally.per_choice_spec:
        note(f"speculative counts of {tally.per_choice_spec} request{'s' if tally.per_choice_spec != 1 else ''} "
             "read from choices[0].speculative_decoding_stats (the per-choice layout of vLLM pull request "
             "#48915 before it moved to metrics.speculative_decoding), its sparse acceptance_histogram made dense")
    if tally.plain_requests and tally.spec_requests:
        note(f"{tally.plain_requests} responses without metrics.speculative_decoding imported as plain decoding "
             f"(one token per round) beside {tally.spec_requests} speculative ones")
    if tally.no_timing:
        note(f"first_token_time and finish_time unknown for {tally.no_timing} request"
             f"{'s' if tally.no_timing != 1 else ''}: no per-request timing metrics "
             f"(vLLM --enable-per-request-metrics)")
    if tally.from_created:
        note(f"arrival_time of {tally.from_created} request{'s' if tally.from_created != 1 else ''} is "
             f"response.created, in whole seconds (no sent_at)")
    if tally.already_present:
        note(f"{tally.already_present} request ids were already in TRACES/requests: the loader will reject "
             f"every copy as duplicate_key")
    if len(models) > 1:
        note("the responses name several models (" + ", ".join(f"{m}: {n}" for m, n in models.most_common())
             + f"); the deployment takes {models.most_common(1)[0][0]}")
