"""A vectorised generator of large traces, for benchmarks: ``specan simulate --rounds N --no-tokens``.

It trades the realism of ``analyzer.simulate`` for speed (tens of millions of
rounds a minute) and for totals that have closed forms, so a test can check
them exactly:

- Two deployments of one model: ``fast-base`` (``none``) and ``fast-eagle``
  (``eagle``, γ = 4), each with half of the rounds.
- Requests of ``ROUNDS_PER_REQUEST`` decode rounds each; their ``round_idx``
  runs 0..ROUNDS_PER_REQUEST-1. Request ids are unique per deployment.
- Steps: consecutive rounds of a deployment share a step, ``batch_size`` of
  them, with batch sizes cycling through ``BATCH_CYCLE`` so that every batch
  bucket from 1 to 65-128 is present. A step's duration is
  ``base_ms(B) = 6 + 0.05·B`` for plain decoding and
  ``spec_ms(B) = 6.8 + 0.05·B·(γ + 1) + 0.2·γ`` for the speculative one.
- Acceptance: K of the speculative rounds repeats ``K_PATTERN``, 625 rounds
  whose K counts follow the truncated geometric law at a = 0.8 exactly
  (125, 100, 80, 64 and 256 rounds of K = 0..4), so over whole periods
  mean accept length = (1 − a^5)/(1 − a) = 3.3616. Every round commits K + 1
  (no truncation); the last round of a request has stop_reason ``eos``.
- No token ids (``--no-tokens``): repetition statistics are skipped, with a note.
- The link keys ``request_uid`` and ``step_uid`` (docs/trace-format.md), digested
  once per request and per step.

Files are written in chunks of ``CHUNK_ROUNDS`` rounds, as several Parquet
files per table, so memory stays bounded whatever N is.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..ingest.uids import link_uids

GAMMA = 4
ROUNDS_PER_REQUEST = 100
BATCH_CYCLE = (1, 2, 3, 6, 12, 24, 48, 96)
CHUNK_ROUNDS = 2_000_000
START = dt.datetime(2026, 11, 28, tzinfo=dt.timezone.utc)
K_PATTERN = np.concatenate([np.full(n, k, dtype=np.int32) for k, n in enumerate((125, 100, 80, 64, 256))])

DEPLOYMENTS = (("fast-base", "none", 0), ("fast-eagle", "eagle", GAMMA))


def base_ms(batch: np.ndarray) -> np.ndarray:
    return 6.0 + 0.05 * batch


def spec_ms(batch: np.ndarray) -> np.ndarray:
    return 6.8 + 0.05 * batch * (GAMMA + 1) + 0.2 * GAMMA


def step_batches(num_rounds: int) -> np.ndarray:
    """Batch sizes of consecutive steps until they hold ``num_rounds`` rounds (the last may be short)."""
    cycle = np.array(BATCH_CYCLE)
    reps = num_rounds // cycle.sum() + 1
    sizes = np.tile(cycle, reps)
    ends = np.cumsum(sizes)
    count = int(np.searchsorted(ends, num_rounds) + 1)
    sizes = sizes[:count].copy()
    sizes[-1] -= ends[count - 1] - num_rounds
    return sizes


def _ts(us: np.ndarray) -> pa.Array:
    return pa.array(us.astype("int64"), type=pa.int64()).cast(pa.timestamp("us", tz="UTC"))


def simulate_fast(outdir: str | Path, rounds: int, progress: Callable[[str], None] | None = None,
                  rounds_per_request: int = ROUNDS_PER_REQUEST) -> dict[str, int]:
    """Write about ``rounds`` rounds (rounded down to whole requests per deployment), in
    requests of ``rounds_per_request`` rounds (fewer: more requests for the same rounds)."""
    say = progress or (lambda _m: None)
    out = Path(outdir)
    per_dep = max(rounds // 2 // rounds_per_request, 1) * rounds_per_request
    counts = {"deployments": len(DEPLOYMENTS), "requests": 0, "steps": 0, "rounds": 0}
    for table in ("rounds", "steps", "requests"):
        (out / table).mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({
        "deployment_id": [d for d, _, _ in DEPLOYMENTS], "model": ["fast-model"] * len(DEPLOYMENTS),
        "method": [m for _, m, _ in DEPLOYMENTS], "num_speculative_tokens": pa.array([g for *_, g in DEPLOYMENTS],
                                                                                      pa.int32()),
        "kv_capacity_tokens": pa.array([1_000_000] * len(DEPLOYMENTS), pa.int64())}), out / "deployments.parquet")
    start_us = int(START.timestamp() * 1e6)
    for dep, method, gamma in DEPLOYMENTS:
        batches = step_batches(per_dep)
        durations = base_ms(batches) if method == "none" else spec_ms(batches)
        step_start = start_us + np.concatenate([[0], np.cumsum(np.round(durations * 1000))[:-1]]).astype(np.int64)
        step_end = step_start + np.round(durations * 1000).astype(np.int64)
        step_of_round = np.repeat(np.arange(len(batches)), batches)
        # the link keys, once per step and per request; the rounds take theirs by index
        step_uids = np.array(link_uids([dep] * len(batches), range(len(batches))), dtype=np.int64)
        pq.write_table(pa.table({
            "deployment_id": pa.array([dep] * len(batches)).dictionary_encode(),
            "step_id": pa.array(np.arange(len(batches), dtype=np.int64)),
            "step_uid": pa.array(step_uids),
            "start_time": _ts(step_start),
            "duration_ms": pa.array(np.round(durations * 1000) / 1000),
            "batch_size": pa.array(batches.astype(np.int32)),
            "num_prefill_tokens": pa.array(np.zeros(len(batches), np.int32)),
        }), out / "steps" / f"{dep}.parquet")
        counts["steps"] += len(batches)
        num_requests = per_dep // rounds_per_request
        ids = pa.array([f"{dep}-{i:08d}" for i in range(num_requests)])
        request_uids = np.array(link_uids([dep] * num_requests, ids.to_pylist()), dtype=np.int64)
        first_round = np.arange(num_requests) * rounds_per_request
        first_step = step_of_round[first_round]
        last_step = step_of_round[first_round + rounds_per_request - 1]
        arrival = step_start[first_step] - 50_000
        pq.write_table(pa.table({
            "deployment_id": pa.array([dep] * num_requests).dictionary_encode(),
            "request_id": ids,
            "request_uid": pa.array(request_uids),
            "category": pa.array(["chat"] * num_requests).dictionary_encode(),
            "arrival_time": _ts(arrival),
            "first_token_time": _ts(step_start[first_step] - 1),
            "finish_time": _ts(step_end[last_step]),
            "prompt_tokens": pa.array(np.full(num_requests, 512, np.int32)),
            "output_tokens": pa.array(_output_tokens(method, num_requests, rounds_per_request)),
            "finish_reason": pa.array(["stop"] * num_requests).dictionary_encode(),
        }), out / "requests" / f"{dep}.parquet")
        counts["requests"] += num_requests
        for lo in range(0, per_dep, CHUNK_ROUNDS):
            hi = min(lo + CHUNK_ROUNDS, per_dep)
            say(f"{dep}: rounds {lo:,}..{hi:,}")
            idx = np.arange(lo, hi)
            round_idx = (idx % rounds_per_request).astype(np.int32)
            request = idx // rounds_per_request
            if method == "none":
                drafts = np.zeros(len(idx), np.int32)
                accepted = np.zeros(len(idx), np.int32)
            else:
                drafts = np.full(len(idx), gamma, np.int32)
                accepted = K_PATTERN[idx % len(K_PATTERN)]
            stop = pa.array(np.where(round_idx == rounds_per_request - 1, "eos", None))
            pq.write_table(pa.table({
                "deployment_id": pa.DictionaryArray.from_arrays(np.zeros(len(idx), np.int32), [dep]),
                "request_id": pa.DictionaryArray.from_arrays(request.astype(np.int32), ids),
                "round_idx": pa.array(round_idx),
                "step_id": pa.array(step_of_round[lo:hi].astype(np.int64)),
                "request_uid": pa.array(request_uids[request]),
                "step_uid": pa.array(step_uids[step_of_round[lo:hi]]),
                "num_draft_tokens": pa.array(drafts),
                "num_accepted_tokens": pa.array(accepted),
                "num_committed_tokens": pa.array(accepted + 1),
                "stop_reason": stop,
                "context_len": pa.array((512 + round_idx * (gamma + 1)).astype(np.int32)),
            }), out / "rounds" / f"{dep}-{lo // CHUNK_ROUNDS:05d}.parquet")
            counts["rounds"] += hi - lo
    return counts


def _output_tokens(method: str, num_requests: int, rounds_per_request: int) -> np.ndarray:
    """1 prefill token plus the tokens its rounds commit (K + 1 each, K from the pattern)."""
    if method == "none":
        return np.full(num_requests, 1 + rounds_per_request, np.int32)
    idx = np.arange(num_requests * rounds_per_request)
    committed = K_PATTERN[idx % len(K_PATTERN)] + 1
    return (1 + committed.reshape(num_requests, rounds_per_request).sum(axis=1)).astype(np.int32)
