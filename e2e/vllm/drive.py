"""Drive specan's recorder through vLLM's own stat-logger machinery, as a serving engine would.

Run inside the environment of e2e/vllm/build.sh (a real vLLM), with specan installed there
and SPECAN_RECORD_DIR set:

    python drive.py MODEL_DIR --method ngram --engines 2 > expected.json

It builds a real ``VllmConfig`` (``EngineArgs.create_engine_config``) for a tiny local model
config (no weights: nothing is loaded), finds the recorder with vLLM's
``load_stat_logger_plugin_factories``, makes the loggers with vLLM's ``StatLoggerManager``
(one recorder per data-parallel engine, as the frontend does), and feeds them a recorded
sequence of engine iterations built from vLLM's own ``SchedulerStats``,
``SpecDecodingStats``, ``SchedulerIterationDetails``, ``IterationStats`` and
``FinishedRequestStats``. It prints the totals of what it fed as JSON, then exits; the
recorder writes its last files at exit.

The iterations follow closed forms (tests/test_vllm_recorder.py): a plain decode step at
batch b takes A + S·b ms, a speculative one A + S·b·(γ+1) + D·γ; each speculating request
drafts γ and accepts γ − 1. Decode steps at batch 1 and batch 4 take turns, N of each; every
K-th is preceded by a prefill-only iteration (one prompt of 64 tokens, its first token),
and a request finishes every K decode steps.

``--kill-after K`` kills the process with SIGKILL before the K-th decode iteration (files
closed before stay; what was buffered is lost); ``--pace`` spreads the iterations in time.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

A, S, D = 8.0, 0.5, 1.0
BATCHES = (1, 4)
STEP_GAP_S = 0.1            # a decode step starts every 100 ms
PREFILL_MS = 20.0           # a prefill-only iteration takes 20 ms, 30 ms after a decode step starts
PREFILL_GAP_S = 0.03


def durations(base: float, n: int, step: float = 0.01) -> list[float]:
    """n durations rising by ``step`` ms around ``base`` (as tests/tracebuilder.trend_ms): their sum
    is n·base exactly, and every block of time differs from the next (the interval has blocks to
    resample)."""
    return [base + step * (i - (n - 1) / 2) for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--method", default="ngram")
    parser.add_argument("--gamma", type=int, default=3)
    parser.add_argument("--engines", type=int, default=1)
    parser.add_argument("--steps", type=int, default=40, help="steps per batch size")
    parser.add_argument("--requests-every", type=int, default=8, help="a request finishes every K steps")
    parser.add_argument("--start", type=float, default=None, help="epoch seconds of the first step")
    parser.add_argument("--kill-after", type=int, default=None, help="SIGKILL before the K-th decode iteration")
    parser.add_argument("--pace", type=float, default=0.0, help="seconds to wait before each decode iteration")
    parser.add_argument("--api-servers", type=int, default=1, help="as vllm serve --api-server-count")
    parser.add_argument("--progress", action="store_true", help="a line on stderr per decode iteration")
    args = parser.parse_args()

    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine import FinishReason
    from vllm.v1.metrics.loggers import StatLoggerManager, load_stat_logger_plugin_factories
    from vllm.v1.metrics.stats import (FinishedRequestStats, IterationStats, SchedulerIterationDetails,
                                       SchedulerStats)
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    speculative = args.method != "none"
    gamma = args.gamma if speculative else 0
    engine_args = EngineArgs(
        model=args.model, skip_tokenizer_init=True, load_format="dummy", enforce_eager=True,
        enable_logging_iteration_details=True, data_parallel_size=1, _api_process_count=args.api_servers,
        speculative_config=({"method": args.method, "num_speculative_tokens": gamma, "prompt_lookup_max": 4,
                             "prompt_lookup_min": 2} if speculative else None))
    config = engine_args.create_engine_config()

    factories = load_stat_logger_plugin_factories()
    ours = [f for f in factories if f.__module__ == "analyzer.record.vllm_plugin"]
    if len(ours) != 1:
        sys.exit(f"the recorder was not found among vLLM's stat-logger plugins: {factories}")
    engines = list(range(args.engines))
    manager = StatLoggerManager(config, engine_idxs=engines, custom_stat_loggers=ours,
                                enable_default_loggers=False)
    manager.log_engine_initialized()
    recorders = [getattr(a, "per_engine_stat_loggers", {}) for a in manager.stat_loggers]
    recorder = next(r for r in recorders if r)
    totals = {"steps": 0, "decode_steps": 0, "prefill_steps": 0, "drafted": 0, "accepted": 0, "committed": 0, "generation_tokens": 0,
              "drafts": 0, "accepted_per_position": [0] * gamma, "requests": 0, "prompt_tokens": 0,
              "output_tokens": 0, "by_batch": {str(b): {"steps": 0, "committed": 0, "ms": 0.0} for b in BATCHES}}
    cost = {b: (A + S * b * (gamma + 1) + D * gamma if speculative else A + S * b) for b in BATCHES}
    plan = {b: durations(cost[b], args.steps) for b in BATCHES}
    start = args.start if args.start is not None else time.time() - 2 * args.steps * STEP_GAP_S - 60
    for i in range(2 * args.steps):
        if args.kill_after is not None and i == args.kill_after:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        if args.pace:
            time.sleep(args.pace)
        engine = engines[i % len(engines)]
        if i % args.requests_every == 0:
            # a prefill-only iteration: one request's prompt, its first token; no decode request
            details = SchedulerIterationDetails(iteration_index=i, num_ctx_requests=1, num_ctx_tokens=64,
                                                num_generation_requests=0, num_generation_tokens=0,
                                                elapsed_ms=PREFILL_MS)
            iteration = IterationStats()
            iteration.iteration_timestamp = start + i * STEP_GAP_S + PREFILL_GAP_S + PREFILL_MS / 1000
            iteration.num_generation_tokens = 1
            iteration.time_to_first_tokens_iter = [0.2]
            manager.record(scheduler_stats=SchedulerStats(num_running_reqs=1, num_waiting_reqs=1, kv_cache_usage=0.25,
                                                          iteration_details=details),
                           iteration_stats=iteration, engine_idx=engine)
            totals["steps"] += 1
            totals["prefill_steps"] += 1
            totals["generation_tokens"] += 1
        b = BATCHES[i % 2]
        ms = plan[b][i // 2]
        spec = None
        if speculative:
            spec = SpecDecodingStats.new(gamma)
            for _ in range(b):
                spec.observe_draft(num_draft_tokens=gamma, num_accepted_tokens=gamma - 1)
        committed = b * (gamma if speculative else 1)
        details = SchedulerIterationDetails(iteration_index=i, num_ctx_requests=0, num_ctx_tokens=0,
                                            num_generation_requests=b, num_generation_tokens=b * (gamma + 1),
                                            elapsed_ms=ms)
        scheduler = SchedulerStats(num_running_reqs=b, num_waiting_reqs=1, kv_cache_usage=0.25,
                                   spec_decoding_stats=spec, iteration_details=details)
        iteration = IterationStats()
        iteration.iteration_timestamp = start + (i + 1) * STEP_GAP_S + ms / 1000
        iteration.num_generation_tokens = committed
        if i % args.requests_every == args.requests_every - 1:
            iteration.finished_requests.append(FinishedRequestStats(
                finish_reason=FinishReason.STOP, request_id=f"req-{os.getpid()}-{engine}-{i}", e2e_latency=2.5,
                num_prompt_tokens=64, num_preemptions=0, num_generation_tokens=33, queued_time=0.01,
                prefill_time=0.05, inference_time=2.4, decode_time=2.3))
            totals["requests"] += 1
            totals["prompt_tokens"] += 64
            totals["output_tokens"] += 33
        manager.record(scheduler_stats=scheduler, iteration_stats=iteration, engine_idx=engine)
        totals["steps"] += 1
        totals["decode_steps"] += 1
        totals["committed"] += committed
        totals["generation_tokens"] += committed
        totals["by_batch"][str(b)]["steps"] += 1
        totals["by_batch"][str(b)]["committed"] += committed
        totals["by_batch"][str(b)]["ms"] += ms
        if spec is not None:
            totals["drafted"] += spec.num_draft_tokens
            totals["accepted"] += spec.num_accepted_tokens
            totals["drafts"] += spec.num_drafts
            totals["accepted_per_position"] = [a + n for a, n in zip(totals["accepted_per_position"],
                                                                      spec.num_accepted_tokens_per_pos)]
        if args.progress:
            print(json.dumps({"fed": i + 1}), file=sys.stderr, flush=True)
    import vllm

    totals["vllm"] = vllm.__version__
    totals["engines"] = len(engines)
    totals["deployment_ids"] = sorted({r.deployment_id for r in recorder.values() if r.writer is not None})
    print(json.dumps(totals))


if __name__ == "__main__":
    main()
