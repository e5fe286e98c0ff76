"""specan as a vLLM stat-logger plugin: a live engine writes specan traces.

vLLM loads this class through the entry point group ``vllm.stat_logger_plugins``
(``vllm.v1.metrics.loggers.load_stat_logger_plugin_factories``) and makes one instance
per engine (data-parallel rank), whose ``record`` it calls in its frontend for every
engine iteration's outputs. Installing specan changes nothing until
``SPECAN_RECORD_DIR`` names a folder: without it every instance records nothing and
the first says so once, when the engine starts (docs/recorder.md).

What it writes (specan's trace format, partitioned by date, or by hour too):

- ``deployments``: one row from the engine's config (model, method, γ, quantization,
  parallel sizes, KV capacity, vLLM's version), in each date partition it writes to;
- ``steps``: one row per engine iteration, from the scheduler's iteration details
  (``vllm serve --enable-logging-iteration-details``: its elapsed time, decode requests
  and prefill tokens), KV usage, preemptions, the iteration's drafted and accepted
  tokens and the tokens it appended to decoding requests (``counts_from`` iteration);
- ``requests``: one row per finished request (times, token counts, finish reason,
  preemptions);
- ``intervals``: per engine and ``interval_seconds`` window, the speculative counters
  summed (drafts, drafted and accepted tokens, accepted per draft position), the
  running and waiting requests and KV usage at its end, its generation throughput
  (source ``vllm_recorder``);
- ``import_notes``: what the report should say about these traces (rows dropped,
  iteration details missing).

No per-request, per-round counts reach a stat logger, so these traces have no rounds:
the report decides on the steps basis (docs/recorder.md, "What this source lacks").

``record`` costs a few tuple appends (bench/recorder.py measures it); the writing is a
thread of its own (``record.writer``). Nothing here raises into vLLM: a failure is
logged once and recording stops.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time

from vllm.logger import init_logger
from vllm.v1.metrics.loggers import StatLoggerBase

from .writer import RECORD_DIR_ENV, RecorderUnusable, Settings, TraceWriter, utc_us

logger = init_logger("vllm.plugins.specan")

SOURCE = "vllm_recorder"

# The columns written, in the order record() builds its tuples (each a column of
# schemas/<table>.json), and the column that places a row in its partition.
COLUMNS = {
    "steps": ["deployment_id", "step_id", "start_time", "duration_ms", "batch_size", "num_prefill_tokens",
              "kv_usage", "num_preempted", "num_draft_tokens", "num_accepted_tokens", "num_committed_tokens",
              "counts_from"],
    "requests": ["deployment_id", "request_id", "arrival_time", "first_token_time", "finish_time", "prompt_tokens",
                 "output_tokens", "finish_reason", "num_preemptions"],
    "intervals": ["deployment_id", "series", "start_time", "end_time", "num_drafts", "num_draft_tokens",
                  "num_accepted_tokens", "accepted_per_position", "source", "running_requests", "waiting_requests",
                  "generation_tokens_per_s", "kv_cache_usage"],
    "deployments": ["deployment_id", "model", "method", "num_speculative_tokens", "target_quant", "draft_quant",
                    "baseline_id", "engine", "engine_version", "gpu", "tensor_parallel_size", "kv_capacity_tokens",
                    "spec_config"],
}
TIMES = {"steps": "start_time", "requests": "arrival_time", "intervals": "end_time"}

# vLLM's FinishReason names (vllm.v1.engine.FINISH_REASON_STRINGS) → the trace format's
# (repetition: vLLM's detector stopped the output, a stop of the engine's own)
FINISH_REASONS = {"stop": "stop", "length": "length", "abort": "abort", "error": "error", "repetition": "stop"}

# step_id = start time in µs × STEP_ID_ENGINES + engine index: it grows with time and
# stays unique across the engines of a deployment and across restarts
STEP_ID_ENGINES = 1024

_said_not_recording = threading.Event()


class SpecanStatLogger(StatLoggerBase):
    """One engine's recorder (vLLM makes one per data-parallel engine)."""

    def __init__(self, vllm_config, engine_index: int = 0):
        self.engine_index = engine_index
        self.writer: TraceWriter | None = None
        self.problem: str | None = None
        self.said: set[str] = set()
        try:
            self._start(vllm_config)
        except Exception as exc:        # never into vLLM: said at engine start, nothing recorded
            self.problem = f"specan recorder not started: {exc}"
            self.writer = None

    def _start(self, vllm_config) -> None:
        try:
            settings = Settings.from_environment()
        except RecorderUnusable as exc:
            self.problem = f"specan recorder not started: {exc}"
            return
        if settings is None:
            return
        self.settings = settings
        self.config = vllm_config
        spec = getattr(vllm_config, "speculative_config", None)
        self.method = (str(spec.method) if spec is not None and spec.method is not None else "none")
        self.gamma = int(spec.num_speculative_tokens or 0) if spec is not None else 0
        self.deployment_id = settings.deployment_id or default_deployment_id(vllm_config, self.method, self.gamma)
        self.details = bool(getattr(getattr(vllm_config, "observability_config", None),
                                    "enable_logging_iteration_details", False))
        # With several API servers (--api-server-count, the default under data parallelism),
        # each frontend sees the tokens of its own requests only, and one of them an
        # iteration's scheduler stats: a step's committed tokens are then not known here
        parallel = getattr(vllm_config, "parallel_config", None)
        self.api_servers = int(getattr(parallel, "_api_process_count", 1) or 1)
        api_rank = int(getattr(parallel, "_api_process_rank", 0) or 0)
        self.series = f"engine {self.engine_index:03d}" + (f" api {api_rank}" if self.api_servers > 1 else "")
        run = f"{os.getpid()}-e{self.engine_index}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        self.last_step_id = 0
        self.window = _Window(None, self.gamma)
        self.requests_seen = 0
        self.dummy_iterations = 0
        try:
            self.writer = TraceWriter(settings, run, {t: COLUMNS[t] for t in TIMES}, TIMES, SOURCE,
                                      self.deployment_id, logger.warning,
                                      replicated={"deployments": (COLUMNS["deployments"], self._deployment_row)})
        except RecorderUnusable as exc:
            self.problem = f"specan recorder not started: {exc}"
            return
        # at exit (vLLM's shutdown): the interval under way, then every file closed and renamed
        atexit.register(self._finish)
        if self.api_servers > 1:
            self.writer.note(f"vLLM ran {self.api_servers} API servers: each sees only its own requests' tokens, "
                             "so the recorded steps carry no committed tokens and the speedup has no steps "
                             "basis; start vllm with --api-server-count 1 for it (docs/recorder.md)")
        if not self.details:
            self.writer.note("the recorder wrote no steps: vLLM was started without "
                             "--enable-logging-iteration-details, so no iteration's duration reached it "
                             "(requests and the speculative counters per interval were recorded)")

    # -- vLLM's interface

    def log_engine_initialized(self):
        if self.writer is not None:
            steps = "" if self.details else "; no steps: start vllm with --enable-logging-iteration-details"
            logger.info("specan recorder: engine %d writes traces of %s to %s%s", self.engine_index,
                        self.deployment_id, self.settings.folder, steps)
        elif self.problem is not None:
            logger.warning("%s; the engine runs without it", self.problem)
        elif not _said_not_recording.is_set():
            _said_not_recording.set()
            logger.info("specan recorder installed but not recording: set %s to a folder to record "
                        "(docs/recorder.md)", RECORD_DIR_ENV)

    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0):
        writer = self.writer
        if writer is None or writer.failed:
            return
        try:
            self._record(writer, scheduler_stats, iteration_stats)
        except Exception as exc:        # a stats layout this code does not know: stop, say once
            writer.failed = True
            logger.warning("specan recorder stopped: %s: %s; the engine goes on without it",
                           type(exc).__name__, exc)

    def log(self):
        pass

    def _finish(self) -> None:
        writer = self.writer
        if writer is None:
            return
        window = self.window
        if not writer.failed and window.observed:
            end = max(time.time(), window.last)
            writer.add("intervals", window.row(self.deployment_id, self.series, end))
        writer.close()

    # -- the rows

    def _record(self, writer: TraceWriter, scheduler_stats, iteration_stats) -> None:
        now = iteration_stats.iteration_timestamp if iteration_stats is not None else time.time()
        spec = scheduler_stats.spec_decoding_stats if scheduler_stats is not None else None
        # iteration details since vLLM 0.26 (SchedulerIterationDetails): earlier, no steps
        details = getattr(scheduler_stats, "iteration_details", None)
        window = self.window
        window.observe(scheduler_stats, iteration_stats, spec, now)
        if details is not None:
            if details.is_dummy:
                self.dummy_iterations += 1      # a data-parallel rank's filler iteration: no work
            else:
                self._step(writer, now, details, scheduler_stats, iteration_stats, spec)
        if iteration_stats is not None:
            for finished in iteration_stats.finished_requests:
                self._request(writer, now, finished)
        if now - window.start >= self.settings.interval_seconds:
            writer.add("intervals", window.row(self.deployment_id, self.series, now))
            self.window = _Window(now, self.gamma, first=False)

    def _step(self, writer, now: float, details, scheduler_stats, iteration_stats, spec) -> None:
        start_us = utc_us(now - details.elapsed_ms / 1000)
        step_id = max(start_us * STEP_ID_ENGINES + self.engine_index % STEP_ID_ENGINES,
                      self.last_step_id + STEP_ID_ENGINES)
        self.last_step_id = step_id
        committed = None
        if iteration_stats is not None and self.api_servers == 1:
            # every token the iteration appended, less the first token of each request whose
            # prefill ended here (one each): what its decoding requests committed
            committed = iteration_stats.num_generation_tokens - len(iteration_stats.time_to_first_tokens_iter)
        # no speculative stats: the iteration drafted nothing (plain decoding, a prefill-only step)
        drafted, accepted = (spec.num_draft_tokens, spec.num_accepted_tokens) if spec is not None else (0, 0)
        preempted = iteration_stats.num_preempted_reqs if iteration_stats is not None and self.api_servers == 1 else None
        writer.add("steps", (self.deployment_id, step_id, start_us, float(details.elapsed_ms),
                             details.num_generation_requests, details.num_ctx_tokens,
                             float(scheduler_stats.kv_cache_usage), preempted, drafted, accepted, committed,
                             None if committed is None else "iteration"))

    def _request(self, writer, now: float, finished) -> None:
        self.requests_seen += 1
        arrival = now - finished.e2e_latency
        first_token = None
        if finished.num_generation_tokens > 0:
            # the frontend's clock: the request finished at its last token, decode_time
            # (engine timestamps) after its first
            first_token = max(arrival, now - finished.decode_time)
        reason = FINISH_REASONS.get(str(finished.finish_reason).lower(), str(finished.finish_reason).lower())
        # FinishedRequestStats names its request since vLLM 0.20
        request_id = getattr(finished, "request_id", None) or f"{writer.run}-{self.requests_seen}"
        writer.add("requests", (self.deployment_id, request_id, utc_us(arrival),
                                None if first_token is None else utc_us(first_token), utc_us(now),
                                finished.num_prompt_tokens, finished.num_generation_tokens, reason,
                                finished.num_preemptions))

    def _deployment_row(self) -> tuple:
        """The deployments row, read from the config when first written (the KV capacity is
        known once the engine has sized its cache)."""
        config = self.config
        model = config.model_config
        spec = config.speculative_config
        served = model.served_model_name
        name = served[0] if isinstance(served, (list, tuple)) and served else served
        cache = config.cache_config
        blocks = getattr(cache, "num_gpu_blocks", None)
        spec_config = None
        draft_quant = None
        if spec is not None:
            spec_config = json.dumps({k: _jsonable(getattr(spec, k, None)) for k in (
                "method", "num_speculative_tokens", "num_speculative_tokens_per_batch_size", "model",
                "draft_tensor_parallel_size", "prompt_lookup_min", "prompt_lookup_max", "quantization")
                if getattr(spec, k, None) is not None}, sort_keys=True)
            draft = getattr(spec, "draft_model_config", None)
            draft_quant = spec.quantization or (precision(draft.quantization, draft.dtype) if draft is not None
                                                and draft is not model else None)
        return (self.deployment_id, name or model.model, self.method, self.gamma,
                precision(model.quantization, model.dtype), draft_quant,
                os.environ.get("SPECAN_RECORD_BASELINE") or None, "vllm", _vllm_version(), _device_name(),
                config.parallel_config.tensor_parallel_size,
                blocks * cache.block_size if blocks and cache.block_size else None, spec_config)


class _Window:
    """The speculative counters of one interval of one engine, summed as they arrive."""

    def __init__(self, start: float | None, gamma: int, first: bool = True):
        # the first window starts at the engine's first iteration (None until then): an idle
        # start-up is no part of its throughput
        self.start = start
        self.first = first
        self.drafts = self.drafted = self.accepted = 0
        self.per_position = [0] * gamma
        self.spec_seen = False
        self.generation_tokens = 0
        self.running = self.waiting = self.kv = None
        self.observed = False
        self.last = start

    def observe(self, scheduler_stats, iteration_stats, spec, now: float) -> None:
        if self.start is None:
            self.start = now
        self.observed = True
        self.last = now
        if spec is not None:
            self.spec_seen = True
            self.drafts += spec.num_drafts
            self.drafted += spec.num_draft_tokens
            self.accepted += spec.num_accepted_tokens
            if len(spec.num_accepted_tokens_per_pos) > len(self.per_position):
                self.per_position += [0] * (len(spec.num_accepted_tokens_per_pos) - len(self.per_position))
            for i, n in enumerate(spec.num_accepted_tokens_per_pos):
                self.per_position[i] += n
        if iteration_stats is not None:
            self.generation_tokens += iteration_stats.num_generation_tokens
        if scheduler_stats is not None:
            self.running, self.waiting = scheduler_stats.num_running_reqs, scheduler_stats.num_waiting_reqs
            self.kv = float(scheduler_stats.kv_cache_usage)

    def row(self, deployment_id: str, series: str, end: float) -> tuple:
        speculative = bool(self.per_position) or self.spec_seen
        return (deployment_id, series, utc_us(self.start), utc_us(end),
                self.drafts if speculative else None, self.drafted if speculative else None,
                self.accepted if speculative else None, list(self.per_position) if speculative else None,
                SOURCE, self.running, self.waiting,
                self.generation_tokens / (end - self.start) if end > self.start else None, self.kv)


def default_deployment_id(config, method: str, gamma: int) -> str:
    """``<served model>-<method>-k<γ>`` (``<model>-none`` for plain decoding): a config
    change makes another deployment, as specan needs (a deployment's rows of one date are
    one configuration)."""
    served = config.model_config.served_model_name
    name = served[0] if isinstance(served, (list, tuple)) and served else served
    model = (name or config.model_config.model).rstrip("/").rsplit("/", 1)[-1]
    return f"{model}-none" if method == "none" else f"{model}-{method}-k{gamma}"


def precision(quantization, dtype) -> str | None:
    """The trace format's precision: the quantization method, else the dtype (bf16, fp16, fp32)."""
    if quantization:
        return str(quantization)
    text = str(dtype).removeprefix("torch.")
    return {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}.get(text, text)


def _jsonable(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


def _vllm_version() -> str | None:
    try:
        import vllm

        return vllm.__version__
    except Exception:
        return None


def _device_name() -> str | None:
    try:
        from vllm.platforms import current_platform

        return current_platform.get_device_name()
    except Exception:
        return None

