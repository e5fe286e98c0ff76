"""Which source a file's content is: one check per source, on the file's head.

Each check returns STRONG (markers only that source prints), WEAK (the shape fits but
nothing is that source's own: an OpenAI-compatible response is vLLM's unless another
engine's fields say otherwise) or NO. Checks look at text, not parsed JSON, so one
object per line, one object or array per file and pretty-printed JSON read alike, and
a layout a check does not know yet is at worst WEAK or NO, never refused for it.

An importer refuses a file when its own check is not STRONG and another source's is:
the file is that source's (``refusal``). ``specan import auto`` takes the one STRONG
source, else the one WEAK source (``pick``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

STRONG, WEAK, NO = 2, 1, 0
HEAD_BYTES = 256 * 1024

WHAT = {"vllm-responses": "vLLM per-request output", "vllm-log": "a vLLM log", "prometheus": "a metrics scrape",
        "sglang-responses": "SGLang per-request output", "sglang-log": "an SGLang log",
        "aiperf-records": "AIPerf records", "trtllm-responses": "TensorRT-LLM per-request output",
        "trtllm-iter": "TensorRT-LLM iteration output",
        "llamacpp-log": "llama.cpp output", "vllm-bench": "a `vllm bench serve` summary",
        "sglang-bench": "an SGLang bench_serving summary"}


def _found(pattern: str, flags: int = 0) -> Callable[[str], bool]:
    regex = re.compile(pattern, flags)
    return lambda head: regex.search(head) is not None


_OPENAI = _found(r'"choices"\s*:|"object"\s*:\s*"(chat\.)?(completion|text_completion)')
_VLLM_RESPONSE = _found(r'"(kv_transfer_params|prompt_logprobs|stop_reason)"\s*:|"metrics"\s*:\s*\{\s*"'
                        r'(time_to_first_token_ms|generation_time_ms|queue_time_ms|speculative_decoding)')
_BENCH_HEADER = _found(r"=+ Serving Benchmark Result =+|^-+Speculative Decoding-+\s*$", re.M)


def vllm_responses(head: str) -> int:
    if _VLLM_RESPONSE(head) and not (trtllm_responses(head) or sglang_responses(head) or llamacpp_log(head)):
        return STRONG
    return WEAK if _OPENAI(head) else NO


def vllm_log(head: str) -> int:
    # `Iteration(N): C context requests, …`: vLLM's per-iteration line (--enable-logging-iteration-details)
    return STRONG if _found(r"SpecDecoding metrics|Speculative metrics|Avg (prompt|generation) throughput"
                            r"|\bIteration\(\d+\): \d+ context requests")(head) else NO


def prometheus(head: str) -> int:
    if _found(r'^(# (HELP|TYPE) (vllm|sglang|llamacpp|trtllm)[:_]\w+|(vllm|sglang|llamacpp|trtllm)[:_]\w+'
              r'(\{[^}\n]*\})?[ \t]+[-+0-9.eEaNIinf]+([ \t]+\d+)?[ \t]*$)', re.M)(head) \
            or _found(r'"resultType"\s*:')(head):
        return STRONG
    return WEAK if _found(r"^# (HELP|TYPE) \w", re.M)(head) else NO


def sglang_responses(head: str) -> int:
    return STRONG if _found(r'"(meta_info|sglext)"\s*:')(head) else NO


def sglang_log(head: str) -> int:
    return STRONG if _found(r"(Decode|Prefill) batch[.,]")(head) else NO


def aiperf_records(head: str) -> int:
    return STRONG if _found(r'"(request_start_ns|x_request_id|benchmark_phase|record_processor_id)"\s*:')(head) \
        else NO


def trtllm_responses(head: str) -> int:
    return STRONG if _found(r'"avg_decoded_tokens_per_iter"\s*:|"speculative_decoding"\s*:\s*\{[^{}]*'
                            r'"(total_draft_tokens|total_accepted_draft_tokens)"')(head) else NO


def trtllm_iter(head: str) -> int:
    # print_iter_log lines (py_executor.py), or IterationStats JSON (jsonSerialization.cpp's camelCase keys)
    return STRONG if _found(r"\biter = \d+, global_rank = \d+, rank = \d+")(head) \
        or (_found(r'"iterLatencyMS"\s*:')(head) and _found(r'"inflightBatchingStats"\s*:')(head)) else NO


def llamacpp_log(head: str) -> int:
    # the per-round line names its function: update_slots, or operator() in a current build's lambda
    return STRONG if _found(r"print_timing|update_slots|accepted +\d+/ *\d+ draft tokens|draft acceptance|"
                            r"#calls\(b,g,a\)|\bn_drafted\b|"
                            r'"timings"\s*:|"(draft_n|predicted_per_token_ms)"\s*:|\bllama_perf_')(head) else NO


def vllm_bench(head: str) -> int:
    if _BENCH_HEADER(head) and not sglang_bench(head) \
            and _found(r"^(Failed requests|Mean E2EL \(ms\)|Acceptance length|Drafts):", re.M)(head):
        return STRONG
    return STRONG if _found(r'"(spec_decode_num_drafts|spec_decode_acceptance_length|request_goodput)"\s*:')(head) \
        else NO


def sglang_bench(head: str) -> int:
    if _BENCH_HEADER(head) and _found(r"^(Backend|Concurrency|Accept length|Total generated tokens "
                                      r"\(retokenized\)):", re.M)(head):
        return STRONG
    return STRONG if _found(r'"(total_output_tokens_retokenized|accept_length)"\s*:')(head) \
        and _found(r'"(backend|mean_e2e_latency_ms)"\s*:')(head) else NO


CHECKS: dict[str, Callable[[str], int]] = {
    "vllm-responses": vllm_responses, "vllm-log": vllm_log, "prometheus": prometheus,
    "sglang-responses": sglang_responses, "sglang-log": sglang_log, "aiperf-records": aiperf_records,
    "trtllm-responses": trtllm_responses, "trtllm-iter": trtllm_iter, "llamacpp-log": llamacpp_log,
    "vllm-bench": vllm_bench,
    "sglang-bench": sglang_bench}


def head_of(path: str | Path) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return ""   # the importer names the unreadable file itself


def scores(path: str | Path) -> dict[str, int]:
    head = head_of(path)
    return {source: check(head) for source, check in CHECKS.items()}


def refusal(source: str, path: str | Path) -> str | None:
    """Why ``source``'s importer must not read ``path`` (it is another source's), or None."""
    found = scores(path)
    if found.get(source, NO) == STRONG:
        return None
    others = [s for s, level in found.items() if level == STRONG and s != source]
    if len(others) != 1:
        return None
    other = others[0]
    return f"{path}: this is {WHAT[other]}, not {source} input: use `specan import {other}`"


def pick(path: str | Path) -> tuple[str | None, list[str]]:
    """(the one source that fits ``path``, or None; the sources that fit equally well)."""
    found = scores(path)
    for level in (STRONG, WEAK):
        fits = [s for s, v in found.items() if v == level]
        if fits:
            return (fits[0] if len(fits) == 1 else None), fits
    return None, []


def resemblance(path: str | Path) -> str:
    """What a file no source fits looks like, for the refusal to say: empty, binary (a
    Parquet file's columns, compressed), JSON's keys, else its first line."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(HEAD_BYTES)
    except OSError as exc:
        return f"it cannot be read: {exc.strerror or exc}"
    if not raw.strip():
        return "it is empty"
    if raw.startswith(b"PAR1"):
        return f"it is a Parquet file{_parquet_columns(path)}: trace tables are read where they are " \
               "(specan report TRACES), not imported"
    for magic, kind in ((b"\x1f\x8b", "gzip"), (b"PK\x03\x04", "zip"), (b"\x28\xb5\x2f\xfd", "zstd"),
                        (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz")):
        if raw.startswith(magic):
            return f"it is {kind}-compressed: decompress it first"
    if b"\x00" in raw[:4096]:
        return "it is binary, not text"
    head = raw.decode("utf-8", errors="replace").lstrip("\ufeff")
    if head.lstrip()[:1] in ("{", "["):
        keys = _json_keys(head)
        if keys:
            shown = ", ".join(keys[:8]) + (", ..." if len(keys) > 8 else "")
            return f"it is JSON whose first object has the keys {shown}"
    first = next((line.strip() for line in head.splitlines() if line.strip()), "")
    return f"its first line is {first[:80] + ('...' if len(first) > 80 else '')!r}"


def _parquet_columns(path: str | Path) -> str:
    try:
        import pyarrow.parquet as pq

        names = pq.read_schema(path).names
    except Exception:       # a damaged footer: the file is still named as Parquet
        return ""
    return f" (columns {', '.join(names[:8])}{', ...' if len(names) > 8 else ''})"


def _json_keys(head: str) -> list[str]:
    """The keys of the first JSON object of ``head``: one object per line, one object or
    array per file, or (cut off, pretty-printed) the keys in the order they appear."""
    stripped = head.strip()
    for text in (stripped.splitlines()[0], stripped):
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, list):
            value = next((v for v in value if isinstance(v, dict)), None)
        if isinstance(value, dict):
            return [str(k) for k in value]
    found: list[str] = []
    for key in re.findall(r'"((?:[^"\\\n]|\\.){1,60})"\s*:', head[:4096]):
        if key not in found:
            found.append(key)
    return found
