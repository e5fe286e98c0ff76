"""`specan import trtllm-responses`: TensorRT-LLM OpenAI-compatible responses (JSONL) → requests, rounds.

Each line is a ``chat.completion`` / ``text_completion`` response of
``trtllm-serve``, or the wrapper ``{"response": {...}, "sent_at", "category",
…}`` that vllm-responses reads. With ``per_request_spec_decode_stats: true`` in
the YAML given to ``--extra_llm_api_options`` (PyTorch backend), each choice
carries, beside ``avg_decoded_tokens_per_iter``, the object documented by
AIPerf's TensorRT-LLM adapter::

    "speculative_decoding": {"acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens",
                             "num_spec_steps", "acceptance_histogram": [dense, index = accepted drafts],
                             "num_spec_tokens": k or null under draft_len_schedule}

It is absent when the request never drafted. Rounds are rebuilt from the
histogram as a multiset when total_draft_tokens = num_spec_steps × k
(docs/importers.md). ``avg_decoded_tokens_per_iter`` is never copied.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .aiperf import FirstSkip, nothing_imported
from .common import STOP_REASON, ImportSummary, Overrides, rebuild_from_histogram
from .responses import (FINISH_REASON, NOT_REBUILT, ResponseImport, Tally, Where, add_reconciled_rounds,
                        arrival_from, get, unwrap, wrapper_values)
from .vllm_responses import check_histogram

SOURCE = "trtllm-responses"


_PAYLOAD = "speculative_decoding"
_REQUIRED = ("total_accepted_draft_tokens", "total_draft_tokens", "num_spec_steps", "acceptance_histogram")


@dataclass
class _Response:
    where: Where
    request_id: str
    arrival: int
    finish: str
    completion: int
    spec: dict | None


def import_trtllm_responses(files: Sequence[str | Path], out: str | Path, deployment_id: str,
                            overrides: Overrides | None = None) -> ImportSummary:
    """Import TensorRT-LLM responses into TRACES ``out`` under ``deployment_id``; returns what was written."""
    overrides = overrides or Overrides()
    job = ResponseImport(SOURCE, out, deployment_id, files, options=f"deployment={deployment_id} {overrides}")
    first = FirstSkip()
    found: list[_Response] = []
    avg_decoded = Counter()
    for where, obj in job.located(job.records(files)):
        item = _parse(obj, where, deployment_id, job, first, avg_decoded)
        if item is not None:
            found.append(item)
    if not found:
        raise nothing_imported(files, first, "TensorRT-LLM chat.completion or text_completion responses, one JSON "
                                             "object per line (or the specan wrapper {\"response\": ...})")

    speculated = any(r.spec is not None for r in found)
    gammas: Counter = Counter()
    for r in found:
        _rounds(r, deployment_id, speculated, overrides, job.summary, job.tally, job.rounds, gammas)

    _notes(job.summary, job.tally, gammas, avg_decoded, overrides, deployment_id)
    return job.write(overrides, max(gammas) if gammas else None)


def _parse(obj, where: Where, deployment_id: str, job: ResponseImport, first: FirstSkip,
           avg_decoded: Counter) -> _Response | None:
    skip = lambda reason: first.skip(job.summary, reason, where)  # noqa: E731
    wrapper, response = unwrap(obj, where)
    if response is None:
        skip("wrapper with a null response")
        return None
    if response.get("object") == "error" or ("error" in response and "choices" not in response):
        skip("error response")
        return None
    if str(response.get("object", "")).endswith(".chunk"):
        skip("streaming chunk, not a whole response")
        return None
    request_id = get(response, "id", "string", where)
    choices = get(response, "choices", "list", where)
    usage = get(response, "usage", "object", where)
    if request_id is None or choices is None:
        skip("not a completion response (no id or choices)")
        return None
    if usage is None:
        skip("no usage (completion_tokens unknown)")
        return None
    if len(choices) != 1:
        skip("not exactly one choice (n > 1): per-request counts can't be split")
        return None
    choice = choices[0]
    if not isinstance(choice, dict):
        raise where.fail("choices[0]: expected an object")
    finish = get(choice, "finish_reason", "string", where, "choices[0].finish_reason")
    if finish is None:
        skip("no finish_reason (unfinished response)")
        return None
    if finish not in FINISH_REASON:
        skip(f"finish_reason {finish!r} not understood")
        return None
    completion = get(usage, "completion_tokens", "integer", where, "usage.completion_tokens")
    prompt = get(usage, "prompt_tokens", "integer", where, "usage.prompt_tokens")
    if completion is None or prompt is None:
        skip("no usage.completion_tokens or usage.prompt_tokens")
        return None
    arrival, arrival_field = arrival_from(wrapper, response.get("created"), where)
    if arrival is None:
        skip("no time: neither sent_at nor created")
        return None
    if request_id in job.requests.ids:
        skip("request id repeated in this import")
        return None
    spec = get(choice, _PAYLOAD, "object", where, f"choices[0].{_PAYLOAD}")
    if spec is not None:
        spec = _payload(spec, where)
    if get(choice, "avg_decoded_tokens_per_iter", "number", where, "choices[0].avg_decoded_tokens_per_iter") \
            is not None:
        avg_decoded["seen"] += 1

    tally = job.tally
    if request_id in job.existing:
        tally.already_present += 1
    if arrival_field == "created":
        tally.from_created += 1
    model = get(response, "model", "string", where)
    if model:
        job.models[model] += 1
    extra = wrapper_values(wrapper, where) if wrapper is not None else {}
    job.requests.add(deployment_id=deployment_id, request_id=request_id, arrival_time=arrival,
                     first_token_time=None, finish_time=None, prompt_tokens=prompt, output_tokens=completion,
                     finish_reason=FINISH_REASON[finish], **extra)
    return _Response(where, request_id, arrival, FINISH_REASON[finish], completion, spec)


def _payload(spec: dict, where: Where) -> dict:
    """The per-choice speculative_decoding object, typed; missing keys stay None."""
    label = f"choices[0].{_PAYLOAD}."
    kinds = {"total_accepted_draft_tokens": "integer", "total_draft_tokens": "integer", "num_spec_steps": "integer",
             "acceptance_histogram": "integer list", "num_spec_tokens": "integer", "acceptance_rate": "number"}
    found = {key: get(spec, key, kind, where, label + key) for key, kind in kinds.items()}
    for key in ("total_accepted_draft_tokens", "total_draft_tokens", "num_spec_steps", "num_spec_tokens"):
        if found[key] is not None and found[key] < 0:
            raise where.fail(f"{label}{key}: expected a count ≥ 0, found {found[key]}")
    return found


def _rounds(r: _Response, deployment_id: str, speculated: bool, overrides: Overrides, summary: ImportSummary,
            tally: Tally, rounds, gammas: Counter) -> None:
    spec = r.spec
    if spec is None:
        if not speculated and overrides.method not in (None, "none"):
            summary.skip(NOT_REBUILT + f"no {_PAYLOAD} in any response, but --method is {overrides.method}")
            return
        tally.plain_requests += 1     # TensorRT-LLM omits the object when the request never drafted
        steps: list[tuple[int, int]] = []
    else:
        tally.spec_requests += 1
        if spec["num_spec_tokens"] is not None:
            gammas[spec["num_spec_tokens"]] += 1
        steps = _steps(spec, overrides, summary, tally)
        if steps is None:
            return
    add_reconciled_rounds(rounds, tally, summary, deployment_id, r.request_id, steps, r.completion,
                          spec is not None, STOP_REASON[r.finish], r.arrival)


def _steps(spec: dict, overrides: Overrides, summary: ImportSummary, tally: Tally) -> list[tuple[int, int]] | None:
    missing = [key for key in _REQUIRED if spec[key] is None]
    if missing:
        summary.skip(NOT_REBUILT + f"{_PAYLOAD} without " + ", ".join(missing))
        return None
    gamma = spec["num_spec_tokens"] if spec["num_spec_tokens"] is not None else overrides.num_speculative_tokens
    if gamma is None:
        summary.skip(NOT_REBUILT + "no fixed draft length (num_spec_tokens null, as under draft_len_schedule) "
                     "and no --num-speculative-tokens")
        return None
    histogram = spec["acceptance_histogram"]
    if spec["num_spec_tokens"] is not None and len(histogram) != gamma + 1:
        summary.skip(NOT_REBUILT + "acceptance_histogram does not have num_spec_tokens + 1 buckets")
        return None
    reason = check_histogram(histogram, spec["num_spec_steps"], spec["total_draft_tokens"],
                             spec["total_accepted_draft_tokens"], gamma)
    if reason:
        reason = (reason.replace("num_draft_tokens", "total_draft_tokens")
                  .replace("the accepted draft tokens", "total_accepted_draft_tokens"))
        summary.skip(NOT_REBUILT + reason)
        return None
    if spec["num_spec_steps"]:
        tally.rebuilt += 1
    return rebuild_from_histogram(histogram, gamma)


def _notes(summary: ImportSummary, tally: Tally, gammas: Counter, avg_decoded: Counter, overrides: Overrides,
           deployment_id: str) -> None:
    note = lambda text: summary.note(text, deployment_id)  # noqa: E731
    for text in tally.reconciliation_notes("acceptance_histogram"):
        note(text)
    note("first_token_time and finish_time are unknown for TensorRT-LLM responses (no per-request timings "
         "specan can verify)")
    if avg_decoded["seen"]:
        note("avg_decoded_tokens_per_iter is not copied (it averages over every iteration, drafting or not): "
             "mean_accept_length is 1 + C/R from the rounds")
    if tally.plain_requests and tally.spec_requests:
        note(f"{tally.plain_requests} response{'s' if tally.plain_requests != 1 else ''} without {_PAYLOAD} "
             "imported as plain decoding beside "
             f"{tally.spec_requests} speculative ones (TensorRT-LLM omits it when a request never drafted)")
    elif tally.plain_requests:
        note(f"no response carries choices[].{_PAYLOAD}: imported as plain decoding (one token per round); "
             "a server without per_request_spec_decode_stats, or on the C++ backend, looks the same")
    if len(gammas) > 1:
        note("the responses give several num_spec_tokens (" + ", ".join(str(g) for g in sorted(gammas))
             + f"); the deployment takes {max(gammas)}")
    if overrides.num_speculative_tokens is not None and gammas and max(gammas) != overrides.num_speculative_tokens:
        note(f"the responses give num_spec_tokens up to {max(gammas)}, but --num-speculative-tokens is "
             f"{overrides.num_speculative_tokens}")
    if tally.from_created:
        note(f"arrival_time of {tally.from_created} request{'s' if tally.from_created != 1 else ''} is "
             f"response.created, in whole seconds (no sent_at)")
    if tally.already_present:
        note(f"{tally.already_present} request ids were already in TRACES/requests: the loader will reject "
             "every copy as duplicate_key")
