"""What the recorder costs a vLLM engine: microseconds per ``record`` call.

Run in the environment of e2e/vllm/build.sh (a real vLLM), from the checkout:

    VLLM_TARGET_DEVICE=cpu PYTHONPATH=. ~/.cache/specan-e2e/vllm-0.33.0/bin/python \\
        bench/recorder.py MODEL_DIR --out bench/results/recorder-issue40.json

MODEL_DIR holds a config.json only (tests/test_vllm_recorder.py writes one). For each batch
size it builds the objects one engine iteration hands its stat loggers (vLLM's own
``SchedulerStats`` with ``SpecDecodingStats`` and ``SchedulerIterationDetails``, and an
``IterationStats`` with one inter-token latency per decoding request, a first token and a
finished request now and then) and times ``record`` on them: specan's recorder (its writer
thread running, as in production), and beside it vLLM's own two loggers on the same objects,
the log line's (``LoggingStatLogger``) and Prometheus' (``PrometheusStatLogger``), which every
``vllm serve`` runs. The recorder's buffers are sized so that nothing is dropped, and the files
it writes are counted at the end: a fast ``record`` that wrote nothing would prove nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

BATCHES = (1, 32, 256)
GAMMA = 3
CALLS = 20_000          # per batch size and logger
CHUNK = 1_000           # calls timed together; the median chunk is reported


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--out", default=None)
    parser.add_argument("--calls", type=int, default=CALLS)
    args = parser.parse_args()

    folder = tempfile.mkdtemp(prefix="specan-recorder-bench-")
    os.environ["SPECAN_RECORD_DIR"] = folder
    os.environ["SPECAN_RECORD_MAX_ROWS"] = str(10 * args.calls)
    os.environ["SPECAN_RECORD_FLUSH_SECONDS"] = "1"

    import vllm
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine import FinishReason
    from vllm.v1.metrics.loggers import LoggingStatLogger, PrometheusStatLogger
    from vllm.v1.metrics.stats import (FinishedRequestStats, IterationStats, SchedulerIterationDetails,
                                       SchedulerStats)
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    from analyzer.record.vllm_plugin import SpecanStatLogger

    config = EngineArgs(model=args.model, skip_tokenizer_init=True, load_format="dummy", enforce_eager=True,
                        enable_logging_iteration_details=True,
                        speculative_config={"method": "ngram", "num_speculative_tokens": GAMMA,
                                            "prompt_lookup_max": 4, "prompt_lookup_min": 2}).create_engine_config()
    loggers = {"specan recorder": SpecanStatLogger(config, 0),
               "vLLM LoggingStatLogger": LoggingStatLogger(config, 0),
               "vLLM PrometheusStatLogger": PrometheusStatLogger(config, [0])}
    assert loggers["specan recorder"].writer is not None, "the recorder did not start"

    def iteration(b: int, i: int, now: float):
        spec = SpecDecodingStats.new(GAMMA)
        for r in range(b):
            spec.observe_draft(num_draft_tokens=GAMMA, num_accepted_tokens=(i + r) % (GAMMA + 1))
        details = SchedulerIterationDetails(iteration_index=i, num_ctx_requests=0, num_ctx_tokens=0,
                                            num_generation_requests=b, num_generation_tokens=b * (GAMMA + 1),
                                            elapsed_ms=10.0 + 0.05 * b)
        scheduler = SchedulerStats(num_running_reqs=b, num_waiting_reqs=0, kv_cache_usage=0.5,
                                   spec_decoding_stats=spec, iteration_details=details)
        stats = IterationStats()
        stats.iteration_timestamp = now
        stats.num_generation_tokens = spec.num_accepted_tokens + b
        stats.inter_token_latencies_iter = [0.012] * b
        if i % 64 == 0:             # a request finishes and another starts now and then
            stats.num_generation_tokens += 1
            stats.time_to_first_tokens_iter = [0.2]
            stats.finished_requests.append(FinishedRequestStats(
                finish_reason=FinishReason.STOP, request_id=f"req-{b}-{i}", e2e_latency=3.0, num_prompt_tokens=512,
                num_generation_tokens=256, queued_time=0.01, prefill_time=0.1, inference_time=2.9, decode_time=2.8))
        return scheduler, stats

    results = []
    for b in BATCHES:
        start = time.time()
        # the objects are built before the timing: only record() is timed
        inputs = [iteration(b, i, start + i * 0.02) for i in range(args.calls)]
        for name, logger in loggers.items():
            per_call = []
            for c in range(0, args.calls, CHUNK):
                chunk = inputs[c:c + CHUNK]
                t = time.perf_counter_ns()
                for scheduler, stats in chunk:
                    logger.record(scheduler, stats, None, 0)
                per_call.append((time.perf_counter_ns() - t) / len(chunk) / 1000)
            results.append({"batch_size": b, "logger": name, "us_per_call_median": statistics.median(per_call),
                            "us_per_call_max_chunk": max(per_call), "calls": args.calls})
            print(f"batch {b:>3}  {name:<26} {statistics.median(per_call):8.2f} µs per record()", file=sys.stderr)

    recorder = loggers["specan recorder"]
    recorder._finish()
    writer = recorder.writer
    import pyarrow.parquet as pq

    steps = sum(pq.read_metadata(os.path.join(root, f)).num_rows
                for root, _, files in os.walk(os.path.join(folder, "steps")) for f in files)
    dropped = sum(v[0] for v in writer.dropped.values())
    assert steps == len(BATCHES) * args.calls and dropped == 0, (steps, dropped)
    print(f"writer thread: {writer.busy_seconds / max(sum(writer.written.values()), 1) * 1e6:.2f} µs per row written",
          file=sys.stderr)
    rows = sum(writer.written.values()) + len(writer.replicated_dates)
    doc = {"what": "microseconds per StatLoggerBase.record call, median over chunks of 1,000 calls; "
                   "the writer thread's time per row it wrote (Arrow conversion, Parquet, fsync, rename)",
           "writer_us_per_row": writer.busy_seconds / rows * 1e6, "rows_written": rows,
           "vllm": vllm.__version__, "python": platform.python_version(), "machine": platform.machine(),
           "cpus": os.cpu_count(), "gamma": GAMMA, "steps_written": steps, "rows_dropped": dropped,
           "results": results}
    text = json.dumps(doc, indent=2)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
