"""`specan import sglang-responses`: SGLang responses with ``meta_info`` (JSONL) → requests, rounds.

A line is a ``/generate`` response ``{"text", "output_ids", "meta_info": {...}}``
(or a JSON array of them, as a batched ``/generate`` returns), an
OpenAI-compatible response carrying ``meta_info`` or ``sglext.spec_tokens_details``
(the same counts, copied from meta_info by SGLang), or a wrapper
``{"response": {...}, "sent_at", ...}`` around either.

``meta_info`` names changed across SGLang releases; both are read:
accepted drafts ``spec_accepted_drafts`` / ``spec_num_correct_drafts``, proposed
drafts ``spec_proposed_drafts`` / ``spec_num_proposed_drafts``, histogram
``spec_accept_histogram`` / ``spec_correct_drafts_histogram``. SGLang's own
``spec_accept_length`` (completion_tokens / spec_verify_ct) is never copied:
the rounds give 1 + C/R.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from .common import STOP_REASON, ImportSummary, Overrides, RoundsBuffer, epoch_us, rebuild_from_histogram
from .responses import (FINISH_REASON, NOT_REBUILT, RequestsBuffer, ResponseImport, Tally, Where,
                        add_reconciled_rounds, arrival_from, get, unwrap, wrapper_values)

SOURCE = "sglang-responses"


# (newer name, older name)
ACCEPTED = ("spec_num_correct_drafts", "spec_accepted_drafts")
PROPOSED = ("spec_num_proposed_drafts", "spec_proposed_drafts")
HISTOGRAM = ("spec_correct_drafts_histogram", "spec_accept_histogram")


def import_sglang_responses(files: Sequence[str | Path], out: str | Path, deployment_id: str,
                            overrides: Overrides | None = None) -> ImportSummary:
    """Import SGLang responses into TRACES ``out`` under ``deployment_id``; returns what was written."""
    overrides = overrides or Overrides()
    job = ResponseImport(SOURCE, out, deployment_id, files, options=f"deployment={deployment_id} {overrides}")
    gammas: list[int] = []
    names: Counter = Counter()
    for where, obj in job.located(job.records(files)):
        for item in (obj if isinstance(obj, list) else [obj]):
            _one(item, where, deployment_id, job.summary, job.requests, job.rounds, job.tally, job.models, gammas,
                 names, job.existing)

    _notes(job.summary, job.tally, job.models, names, gammas, overrides, deployment_id)
    return job.write(overrides, max(gammas) if gammas else None)


def _either(meta: dict, pair: tuple[str, str], kind: str, where: Where, names: Counter, prefix: str = "meta_info"):
    new, old = pair
    value = get(meta, new, kind, where, f"{prefix}.{new}")
    if kind == "integer list" and value == []:
        value = None            # SGLang writes [] for a histogram it has not got
    if value is not None:
        names["new"] += 1
        return value
    value = get(meta, old, kind, where, f"{prefix}.{old}")
    if value is not None:
        names["old"] += 1
    return value


SGLEXT = "sglext.spec_tokens_details"
_SEVERAL = object()


def _spec_tokens_details(response: dict, where: Where):
    """The OpenAI-compatible response's ``sglext.spec_tokens_details`` (``return_spec_tokens_details``):
    an object for one choice, a list of them for ``n`` > 1 (``_SEVERAL``); None when absent."""
    sglext = get(response, "sglext", "object", where)
    if sglext is None:
        return None
    details = sglext.get("spec_tokens_details")
    if isinstance(details, list):
        if len(details) > 1:
            return _SEVERAL
        details = details[0] if details else None
    if details is not None and not isinstance(details, dict):
        raise where.fail(f"{SGLEXT}: expected an object, found {type(details).__name__}")
    return details


def _finish_reason(meta: dict, response: dict, where: Where) -> str | None:
    """SGLang gives {"type": "stop"|"length"|"abort", ...} in meta_info, or an OpenAI string in choices."""
    value = meta.get("finish_reason")
    if isinstance(value, dict):
        kind = value.get("type")
        if kind is not None and not isinstance(kind, str):
            raise where.fail("meta_info.finish_reason.type: expected a string")
        return kind
    if isinstance(value, str):
        return value
    if value is not None:
        raise where.fail("meta_info.finish_reason: expected an object or a string")
    choices = response.get("choices")
    if isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict):
        return get(choices[0], "finish_reason", "string", where, "choices[0].finish_reason")
    return None


def _one(obj, where: Where, deployment_id: str, summary: ImportSummary, requests: RequestsBuffer,
         rounds: RoundsBuffer, tally: Tally, models: Counter, gammas: list[int], names: Counter,
         existing: set[str]) -> None:
    wrapper, response = unwrap(obj, where)
    if response is None:
        summary.skip("wrapper with a null response")
        return
    meta = get(response, "meta_info", "object", where)
    if meta is None:
        choices = response.get("choices")
        if isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict):
            meta = get(choices[0], "meta_info", "object", where, "choices[0].meta_info")
    details = _spec_tokens_details(response, where)
    if details is _SEVERAL:
        summary.skip("sglext.spec_tokens_details of several choices (n > 1): one request per response is read")
        return
    if meta is None and details is None:
        summary.skip("no meta_info or sglext.spec_tokens_details")
        return
    if details is not None:
        names["sglext"] += 1
    meta = meta if meta is not None else {}     # the OpenAI fields give id, usage and finish_reason
    usage = get(response, "usage", "object", where) or {}
    request_id = get(meta, "id", "string", where, "meta_info.id") or get(response, "id", "string", where)
    if request_id is None:
        summary.skip("no request id (meta_info.id or id)")
        return
    completion = get(meta, "completion_tokens", "integer", where, "meta_info.completion_tokens")
    if completion is None:
        completion = get(usage, "completion_tokens", "integer", where, "usage.completion_tokens")
    prompt = get(meta, "prompt_tokens", "integer", where, "meta_info.prompt_tokens")
    if prompt is None:
        prompt = get(usage, "prompt_tokens", "integer", where, "usage.prompt_tokens")
    if completion is None or prompt is None:
        summary.skip("no completion_tokens or prompt_tokens")
        return
    finish = _finish_reason(meta, response, where)
    if finish is None:
        summary.skip("no finish_reason (unfinished response)")
        return
    if finish not in FINISH_REASON:
        summary.skip(f"finish_reason {finish!r} not understood")
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
    if arrival_field == "created":
        tally.from_created += 1
    latency = get(meta, "e2e_latency", "number", where, "meta_info.e2e_latency")
    finish_time = arrival + epoch_us(latency) if latency is not None else None
    model = get(response, "model", "string", where)
    if model:
        models[model] += 1
    extra = wrapper_values(wrapper, where) if wrapper is not None else {}
    requests.add(deployment_id=deployment_id, request_id=request_id, arrival_time=arrival, first_token_time=None,
                 finish_time=finish_time, prompt_tokens=prompt, output_tokens=completion,
                 finish_reason=FINISH_REASON[finish], **extra)

    # sglext.spec_tokens_details copies meta_info's counts (SGLang's spec_tokens_details_from_meta_info)
    counts, prefix = (details, SGLEXT) if details is not None else (meta, "meta_info")
    verify_ct = get(counts, "spec_verify_ct", "integer", where, f"{prefix}.spec_verify_ct")
    accepted = _either(counts, ACCEPTED, "integer", where, names, prefix)
    proposed = _either(counts, PROPOSED, "integer", where, names, prefix)
    histogram = _either(counts, HISTOGRAM, "integer list", where, names, prefix)
    speculated = bool(verify_ct) or bool(proposed)
    if not speculated:
        tally.plain_requests += 1
        steps: list[tuple[int, int]] = []
    else:
        tally.spec_requests += 1
        steps = _steps(verify_ct, accepted, proposed, histogram, summary, tally, gammas)
        if steps is None:
            return
    add_reconciled_rounds(rounds, tally, summary, deployment_id, request_id, steps, completion, speculated,
                          STOP_REASON[FINISH_REASON[finish]], arrival)


def _steps(verify_ct: int | None, accepted: int | None, proposed: int | None, histogram: list[int] | None,
           summary: ImportSummary, tally: Tally, gammas: list[int]) -> list[tuple[int, int]] | None:
    if not verify_ct or proposed is None or histogram is None:
        summary.skip(NOT_REBUILT + "no spec_verify_ct, proposed drafts or histogram")
        return None
    if proposed % verify_ct:
        summary.skip(NOT_REBUILT + "drafts per step vary (proposed drafts not divisible by spec_verify_ct)")
        return None
    gamma = proposed // verify_ct
    if sum(histogram) != verify_ct or any(n < 0 for n in histogram):
        summary.skip(NOT_REBUILT + "histogram does not count spec_verify_ct steps")
        return None
    if accepted is not None and sum(j * n for j, n in enumerate(histogram)) != accepted:
        summary.skip(NOT_REBUILT + "histogram does not add up to the accepted drafts")
        return None
    if any(n for j, n in enumerate(histogram) if j > gamma):
        summary.skip(NOT_REBUILT + "histogram has steps accepting more drafts than were proposed per step")
        return None
    gammas.append(gamma)
    tally.rebuilt += 1
    return rebuild_from_histogram(histogram, gamma)


def _notes(summary: ImportSummary, tally: Tally, models: Counter, names: Counter, gammas: list[int],
           overrides: Overrides, deployment_id: str) -> None:
    note = lambda text: summary.note(text, deployment_id)  # noqa: E731
    for text in tally.reconciliation_notes("the acceptance histogram"):
        note(text)
    if tally.spec_requests or tally.plain_requests:
        note("first_token_time is unknown for SGLang responses; finish_time = arrival_time + e2e_latency. "
             "spec_accept_length is not copied: mean_accept_length is 1 + C/R from the rounds")
    if gammas and overrides.num_speculative_tokens is None and overrides.method != "none":
        note(f"num_speculative_tokens taken as the most drafts proposed per verify step ({max(gammas)})")
    if names["sglext"]:
        note(f"speculative counts of {names['sglext']} response{'s' if names['sglext'] != 1 else ''} read from "
             f"sglext.spec_tokens_details (return_spec_tokens_details), the OpenAI-compatible copy of meta_info's")
    if names["old"] and names["new"]:
        note("both old (spec_accepted_drafts, …) and new (spec_num_correct_drafts, …) meta_info names were read")
    if tally.plain_requests and tally.spec_requests:
        note(f"{tally.plain_requests} responses without speculative counts imported as plain decoding "
             f"beside {tally.spec_requests} speculative ones")
    if tally.from_created:
        note(f"arrival_time of {tally.from_created} request{'s' if tally.from_created != 1 else ''} is "
             f"created, in whole seconds (no sent_at)")
    if tally.already_present:
        note(f"{tally.already_present} request ids were already in TRACES/requests: the loader will reject "
             f"every copy as duplicate_key")
    if len(models) > 1:
        note("the responses name several models (" + ", ".join(f"{m}: {n}" for m, n in models.most_common())
             + f"); the deployment takes {models.most_common(1)[0][0]}")
