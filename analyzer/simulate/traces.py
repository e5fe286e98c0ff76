"""Synthetic speculative-decoding traces, written in specan's trace format.

``simulate(outdir, seed=0, requests=200, days=3)`` writes a trace directory
with the logs of six vLLM 0.32.0 deployments of one model (``qwen3-8b``),
each on one H200, serving the same workload. It produces ``sample_traces/``
and the test fixtures. Every random draw comes from numpy Generators seeded
by ``seed`` and the date, so the same arguments always give byte-identical
files, and a date's traces do not depend on ``days``.

Deployments
-----------
==============  ======  ===  ======  =====  ========  ===============================
deployment_id   method  γ    target  draft  KV cap.   notes
==============  ======  ===  ======  =====  ========  ===============================
base-bf16       none    0    bf16           70 000    plain decoding
base-fp8        none    0    fp8            100 000   plain decoding, fp8 weights
eagle-bf16      eagle   4    bf16    bf16   64 000    baseline matched implicitly
ngram-bf16      ngram   4    bf16           70 000    prompt lookup, n = 2..5
eagle-fp8       eagle   4    fp8     fp8    94 000    ``baseline_id`` base-fp8
eagle-dyn-bf16  eagle3  ≤5   bf16    bf16   64 000    Dynamic SD: γ per step
==============  ======  ===  ======  =====  ========  ===============================

KV capacity is in tokens: fp8 weights leave more room, a draft head less.
The dynamic deployment's ``spec_config`` holds
``num_speculative_tokens_per_batch_size = [[1, 8, 5], [9, 32, 3], [33, 64, 2],
[65, 1024, 1]]``. Each step takes that table's γ for its batch size and, on
40% of steps, one more or one less (within 1..5), so that several γ occur
in every batch bucket (a round-cost fit needs that).

Workload
--------
Each day has ``requests`` logical requests, and every deployment serves the
same ones, like one benchmark replayed on each: the same request ids,
arrival times, prompts and output tokens. Outputs do not depend on the
deployment. Speculative decoding is lossless; that fp8 gives the same tokens
as bf16 is a simplification (its quality score is lower all the same).

Arrivals come in sessions at random times between 00:15 and 22:30, with
idle time between them: one burst of 95-130 requests within 0.8 s (at most
60% of ``requests``; none below 20 requests), then sessions of 1, 2, 3-6,
8-24 or 30-60 requests (weights 35/20/20/15/10%) until the day's requests
are used up. Batch sizes therefore range from 1 to over 100, and every batch
bucket up to 65-128 has decode rounds on every deployment. Request ids count
from ``req-00001`` in arrival order and restart every day, as step ids do.

Four categories, a quarter each, differ in how much the output repeats its
context. Each request draws its own copy propensity c, so repetition also
varies within a category. Token ids are in a 32 000-token vocabulary;
"novel" text is drawn from a Zipf law, so exact 4-gram repeats by chance are
rare. Mean repeat(3) ratios come out near 0.82 (code_edit), 0.45
(extraction), 0.24 (agent) and 0.02 (chat).

- ``code_edit``: the prompt holds a source file made of lines built from a
  small per-request identifier pool. The output walks through the file,
  copying spans (mean 25 tokens) with probability ``c ~ Beta(5, 1.8)`` per
  segment; otherwise it writes 1-3 new lines and may skip old ones (an edit).
- ``extraction``: the prompt holds a field schema and a document. The output
  is a JSON-like list of records with those fields; each value is copied
  from the document (2-10 tokens) with probability ``c ~ Beta(2, 1.5)``,
  else written anew.
- ``agent``: the prompt holds tool descriptions, earlier Thought/Action
  steps and tool results. The output repeats the step template, copying
  tool results into its reasoning and arguments with probability
  ``c ~ Beta(3, 2.5)``.
- ``chat``: novel sentences, quoting the user (3-10 tokens) with
  probability ``c ~ Beta(1, 10)`` per sentence.

Output lengths are log-normal (medians 220, 120, 160 and 220 tokens). An
output ends with ``eos`` or a stop string (``finish_reason`` stop), or at
``max_tokens`` (``length``; 1024 for code_edit, 512 otherwise). About 3% of
requests are aborted by the client once a random number of tokens exist
(``abort``, at the end of that round), and about 1.5% fail before their
first token (``error``: no rounds, ``output_tokens`` 0, ``first_token_time``
null, ``finish_time`` set on about half). Temperatures: code_edit 0 (70%)
or 0.7, extraction 0 (90%) or 0.7, agent 0 or 0.7, chat 0.7, 1.0 or 1.3.
Structured output: 60% of extraction and 40% of agent requests.

Acceptance
----------
- ``none``: every round drafts nothing and commits one token.
- ``ngram``: the rounds are a real greedy replay of ``analyzer.ngram`` over
  the request's tokens, ``replay_request(prompt_token_ids,
  output_token_ids, 2, 5, 4)``. The number of drafts varies, and is 0 when
  the lookup finds nothing. Temperature and structured output do not change
  them.
- ``eagle`` and ``eagle3``: draft position i is accepted, given that
  positions 1..i-1 were, with probability a_i. a_i is 0.93 x (1 - 0.05 T)
  when the output token it guesses is a repeat (its 3 preceding tokens and
  it occur earlier in the context), else a category base (code_edit 0.72,
  extraction 0.62, agent 0.66, chat 0.60) x (1 - 0.2 T), at temperature T.
  The novel-token base has a per-request log-normal factor (sd 0.1); both
  are multiplied by the deployment's factor (eagle-fp8 0.85: its draft head
  reads fp8 features; eagle3 1.04), capped at 0.98, and by 0.96 per position
  of depth. K, the accepted prefix, is at most γ. On structured-output
  requests, 30% of rounds have the grammar cut the last 1..γ drafts before
  verification (``num_invalidated_tokens``); when it cuts all of them,
  ``num_draft_tokens`` is 0.

A round commits K + 1 tokens, except the request's last round, which commits
only what is left of the output (stop truncation, so possibly fewer) and
carries the ``stop_reason``. The first output token comes from the prefill
step, so a request's rounds commit ``output_tokens - 1`` tokens in all.
``num_verified_nodes`` equals ``num_draft_tokens`` (chains, not trees).

Scheduler
---------
Each deployment and day is simulated as continuous batching in discrete
steps. A step decodes one round of every running request (``batch_size``),
and prefills waiting requests whole, first come first served (preempted
ones first), while the step stays within 8192 tokens and the KV cache within
98% of capacity. A request emits its first token at the end of its prefill
step and joins the decode batch from the next step. ``finish_time`` is the
end of the step of its last round. ``context_len`` is the prompt plus the
tokens generated so far, less the newest one (not yet in the KV cache).
``kv_usage`` is the step's context (decoded and prefilled requests) over the
capacity. When the running requests' context plus γ + 1 draft slots each
would exceed the capacity, the most recently arrived are preempted: each
skips 4-24 steps (a visible streaming stall), then is prefilled again with
its prompt and output so far. This happens now and then in bursts, more on
speculative deployments, whose drafts need KV slots too.

Cost model
----------
A step with B requests decoded, T = Σ (num_draft_tokens + 1) tokens
verified, P prefill tokens and context c_r for request r costs, in ms:

- ``draft_ms``: 0 for ``none``; 0.04 + 0.003 B for ``ngram`` (a CPU
  lookup); γ (0.20 + 0.02 B) for EAGLE (one draft-head pass per position);
- ``verify_ms``: W + 0.02 T + 0.00005 T² + 0.04 P + 0.03 Σ c_r (1 + 0.25
  drafts_r) / 1000. W, the weight read, is 6.0 for bf16 and 3.6 for fp8,
  whose per-token terms are also 0.75x. The T² term is the batch leaving the
  memory-bound regime; the last is attention over the KV cache;
- other: 0.5 + 0.012 B, plus 0.004 T on speculative deployments (sampling
  and rejection);
- ``duration_ms`` = draft + verify + other. Each part gets 3% log-normal
  noise and is rounded to µs. Steps follow each other back to back
  (``start_time`` + ``duration_ms`` is the next ``start_time``), with idle
  gaps when nothing runs.

With these constants eagle-bf16 decodes about 2.2x faster than base-bf16 at
batch 1; the gain shrinks as batches grow and turns into a loss (about
0.85x) at 65-128. eagle-fp8 gains less (verification is cheaper, drafting
is not) and loses from 33-64 on. The dynamic deployment keeps a gain at
every batch size. n-gram lookup pays mainly on code_edit and extraction.

Tables
------
Hive-partitioned by day, ``TABLE/date=YYYY-MM-DD/part-0.parquet`` for
``deployments``, ``requests``, ``steps`` and ``rounds``, over ``days``
consecutive dates ending 2026-11-28. The ``date`` column comes from the path
only. Each day's ``deployments`` file holds the same six rows.

- ``requests``: one row per deployment and request, with
  ``prompt_token_ids`` and ``output_token_ids`` (the output as generated, cut
  where the request stopped), ``num_preemptions``, ``quality_score`` (about
  0.82 on bf16 and 0.80 on fp8 targets, sd 0.03; null on errors) and
  ``matches_reference`` (true; null on errors).
- ``steps``: one row per engine step, with the cost parts above, the number
  of prefill tokens, ``kv_usage`` (rounded to 4 decimals) and
  ``num_preempted``.
- ``rounds``: one row per request per step that decoded it.

Timestamps are µs UTC within their date. Files are zstd-compressed; their
sizes are kept small by the row order (by deployment, then request and
round) and the encodings chosen in ``_write``.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..analysis.ngram import replay_request
from ..ingest.schema import arrow_schema
from ..ingest.uids import uid_columns

DEFAULT_REQUESTS = 200
DEFAULT_DAYS = 3
LAST_DATE = date(2026, 11, 28)
MODEL = "qwen3-8b"
VOCAB = 32000
NGRAM_MIN, NGRAM_MAX, NGRAM_K = 2, 5, 4

Progress = Callable[[str], None]

# --------------------------------------------------------------------------- deployments

DYNAMIC_GAMMA = ((1, 8, 5), (9, 32, 3), (33, 64, 2), (65, 1024, 1))


@dataclass(frozen=True)
class Deployment:
    deployment_id: str
    method: str
    gamma: int  # configured maximum γ
    target_quant: str
    draft_quant: str | None
    baseline_id: str | None
    kv_capacity_tokens: int
    spec_config: str | None
    accept_factor: float = 1.0  # multiplies EAGLE's a_i
    dynamic: bool = False

    @property
    def kind(self) -> str:
        """How rounds are made: 'none', 'ngram', or 'eagle' (chain acceptance)."""
        return self.method if self.method in ("none", "ngram") else "eagle"


def _spec(method: str, gamma: int, **extra) -> str:
    return json.dumps({"method": method, "num_speculative_tokens": gamma, **extra})


DEPLOYMENTS = (
    Deployment("base-bf16", "none", 0, "bf16", None, None, 70_000, None),
    Deployment("base-fp8", "none", 0, "fp8", None, None, 100_000, None),
    Deployment("eagle-bf16", "eagle", 4, "bf16", "bf16", None, 64_000,
               _spec("eagle", 4, model="qwen3-8b-eagle")),
    Deployment("ngram-bf16", "ngram", 4, "bf16", None, None, 70_000,
               _spec("ngram", 4, prompt_lookup_min=NGRAM_MIN, prompt_lookup_max=NGRAM_MAX)),
    Deployment("eagle-fp8", "eagle", 4, "fp8", "fp8", "base-fp8", 94_000,
               _spec("eagle", 4, model="qwen3-8b-eagle", quantization="fp8"), accept_factor=0.85),
    Deployment("eagle-dyn-bf16", "eagle3", 5, "bf16", "bf16", None, 64_000,
               _spec("eagle3", 5, model="qwen3-8b-eagle3",
                     num_speculative_tokens_per_batch_size=[list(r) for r in DYNAMIC_GAMMA]),
               accept_factor=1.04, dynamic=True),
)

# --------------------------------------------------------------------------- token model

# Token ids: a few structural tokens, code keywords, then words.
NEWLINE, INDENT, LBRACE, RBRACE, QUOTE, COLON, COMMA, LBRACKET, RBRACKET = range(1, 10)
LPAREN, RPAREN, EQUALS, DOT, PERIOD, THOUGHT, ACTION, OBSERVATION, TOOLS = range(10, 19)
KEYWORDS = np.arange(32, 96)
FIRST_WORD = 96
CATEGORIES = ("code_edit", "extraction", "agent", "chat")

# Code line shapes: 'K' keyword, 'I' identifier, 'W' word, ints are literal tokens.
LINE_SHAPES = (
    ("K", "I", LPAREN, "I", COMMA, "I", RPAREN, COLON),
    ("I", EQUALS, "I", DOT, "I", LPAREN, "I", RPAREN),
    ("K", "I", EQUALS, "I"),
    ("K", "I"),
    ("K", "I", "K", "I", COLON),
    ("I", DOT, "I", EQUALS, "I"),
    ("I", LPAREN, "I", COMMA, QUOTE, "W", "W", QUOTE, RPAREN),
)


class _Words:
    """Zipf-distributed word tokens (exponent 1), ranks scattered over the vocabulary."""

    def __init__(self) -> None:
        n = VOCAB - FIRST_WORD
        weights = 1.0 / np.arange(1, n + 1)
        self.cdf = np.cumsum(weights) / weights.sum()
        # 7919 is coprime with n = 2^5 * 997, so this maps ranks onto all word ids.
        self.ids = (FIRST_WORD + (np.arange(n) * 7919) % n).astype(np.int32)

    def draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        ranks = np.searchsorted(self.cdf, rng.random(size))
        return self.ids[np.minimum(ranks, len(self.ids) - 1)]


_WORDS = _Words()


def _zipf_cdf(size: int, exponent: float = 0.8) -> np.ndarray:
    """CDF for picking from a small pool, the first items most often."""
    weights = 1.0 / np.arange(1, size + 1) ** exponent
    return np.cumsum(weights) / weights.sum()


def _lognormal_int(rng: np.random.Generator, median: float, sigma: float, low: int, high: int) -> int:
    return int(np.clip(round(median * np.exp(sigma * rng.standard_normal())), low, high))


def _span(rng: np.random.Generator, source: np.ndarray, length: int) -> np.ndarray:
    """A random contiguous span of `source` (shorter if the source is)."""
    length = min(length, len(source))
    start = int(rng.integers(0, len(source) - length + 1))
    return source[start: start + length]


_KEYWORD_CDF = _zipf_cdf(len(KEYWORDS))


def _code_line(rng: np.random.Generator, idents: np.ndarray, ident_cdf: np.ndarray) -> list[int]:
    shape = LINE_SHAPES[int(rng.integers(len(LINE_SHAPES)))]
    u = rng.random(len(shape))
    line = [INDENT] * int(rng.integers(0, 4))
    for slot, x in zip(shape, u):
        if slot == "K":
            line.append(int(KEYWORDS[np.searchsorted(_KEYWORD_CDF, x)]))
        elif slot == "I":
            line.append(int(idents[min(np.searchsorted(ident_cdf, x), len(idents) - 1)]))
        elif slot == "W":
            line.append(int(_WORDS.draw(rng, 1)[0]))
        else:
            line.append(slot)
    line.append(NEWLINE)
    return line


def _code_edit(rng: np.random.Generator, target: int) -> tuple[np.ndarray, list[int]]:
    copy_p = rng.beta(5, 1.8)
    idents = _WORDS.draw(rng, int(rng.integers(30, 80)))
    ident_cdf = _zipf_cdf(len(idents))
    code: list[int] = []
    for _ in range(_lognormal_int(rng, 90, 0.4, 25, 260)):
        code += _code_line(rng, idents, ident_cdf)
    code_arr = np.asarray(code, dtype=np.int32)
    prompt = np.concatenate([_WORDS.draw(rng, int(rng.integers(15, 60))), [NEWLINE], code_arr])
    out: list[int] = []
    pos = int(rng.integers(0, max(1, len(code_arr) // 3)))
    while len(out) < target:
        if rng.random() < copy_p:
            length = int(rng.geometric(1 / 25))
            if pos >= len(code_arr):
                pos = int(rng.integers(0, len(code_arr)))
            out += code_arr[pos: pos + length].tolist()
            pos += length
        else:
            for _ in range(int(rng.integers(1, 4))):
                out += _code_line(rng, idents, ident_cdf)
            if rng.random() < 0.5:
                pos += int(rng.geometric(1 / 8))  # lines deleted by the edit
    return prompt.astype(np.int32), out


def _extraction(rng: np.random.Generator, target: int) -> tuple[np.ndarray, list[int]]:
    copy_p = rng.beta(2, 1.5)
    fields = [_WORDS.draw(rng, int(rng.integers(1, 4))).tolist() for _ in range(int(rng.integers(3, 8)))]
    document = _WORDS.draw(rng, _lognormal_int(rng, 600, 0.5, 100, 2500))
    schema: list[int] = [LBRACE]
    for name in fields:
        schema += [QUOTE, *name, QUOTE, COLON, int(_WORDS.draw(rng, 1)[0]), COMMA]
    schema.append(RBRACE)
    prompt = np.concatenate([_WORDS.draw(rng, int(rng.integers(15, 40))), schema, [NEWLINE], document])
    out: list[int] = [LBRACKET]
    while len(out) < target:
        out.append(LBRACE)
        for name in fields:
            if rng.random() < copy_p:
                value = _span(rng, document, int(rng.integers(2, 11))).tolist()
            else:
                value = _WORDS.draw(rng, int(rng.integers(1, 6))).tolist()
            out += [QUOTE, *name, QUOTE, COLON, QUOTE, *value, QUOTE, COMMA]
        out += [RBRACE, COMMA]
    return prompt.astype(np.int32), out


def _agent_step(rng, tools, results, copy_p) -> list[int]:
    step = [THOUGHT, COLON]
    if rng.random() < copy_p:
        step += _span(rng, results, int(rng.integers(5, 31))).tolist()
    step += _WORDS.draw(rng, int(rng.integers(8, 41))).tolist()
    args = (_span(rng, results, int(rng.integers(2, 9))) if rng.random() < copy_p
            else _WORDS.draw(rng, int(rng.integers(2, 7))))
    step += [NEWLINE, ACTION, COLON, *tools[int(rng.integers(len(tools)))], LPAREN, *args.tolist(), RPAREN, NEWLINE]
    return step


def _agent(rng: np.random.Generator, target: int) -> tuple[np.ndarray, list[int]]:
    copy_p = rng.beta(3, 2.5)
    tools = [_WORDS.draw(rng, int(rng.integers(1, 3))).tolist() for _ in range(int(rng.integers(3, 7)))]
    prompt: list[int] = _WORDS.draw(rng, int(rng.integers(80, 200))).tolist() + [TOOLS, COLON]
    for tool in tools:
        prompt += [*tool, COLON, *_WORDS.draw(rng, int(rng.integers(10, 31))).tolist(), NEWLINE]
    results = _WORDS.draw(rng, int(rng.integers(40, 200)))
    for _ in range(int(rng.integers(0, 4))):  # earlier steps of the trajectory
        prompt += _agent_step(rng, tools, results, copy_p) + [OBSERVATION, COLON, *results.tolist()]
        results = _WORDS.draw(rng, int(rng.integers(40, 200)))
    results = np.concatenate([results, _WORDS.draw(rng, int(rng.integers(60, 300)))])
    prompt += [OBSERVATION, COLON, *results.tolist(), NEWLINE]
    out: list[int] = []
    while len(out) < target:
        out += _agent_step(rng, tools, results, copy_p)
    return np.asarray(prompt, dtype=np.int32), out


def _chat(rng: np.random.Generator, target: int) -> tuple[np.ndarray, list[int]]:
    copy_p = rng.beta(1, 10)
    user = _WORDS.draw(rng, _lognormal_int(rng, 120, 0.8, 10, 1500))
    prompt = np.concatenate([_WORDS.draw(rng, int(rng.integers(20, 60))), [NEWLINE], user])
    out: list[int] = []
    while len(out) < target:
        if rng.random() < copy_p:
            out += _span(rng, user, int(rng.integers(3, 11))).tolist()
        out += _WORDS.draw(rng, int(rng.integers(8, 26))).tolist() + [PERIOD]
        if rng.random() < 0.2:
            out.append(NEWLINE)
    return prompt.astype(np.int32), out


# Per category: generator, output-length median and sigma, max_tokens,
# temperatures and their weights, share of structured output, share of stop strings.
CATEGORY_MODEL = {
    "code_edit": (_code_edit, 220, 0.6, 1024, (0.0, 0.7), (0.7, 0.3), 0.0, 0.0),
    "extraction": (_extraction, 120, 0.5, 512, (0.0, 0.7), (0.9, 0.1), 0.6, 0.3),
    "agent": (_agent, 160, 0.6, 512, (0.0, 0.7), (0.5, 0.5), 0.4, 0.5),
    "chat": (_chat, 220, 0.6, 512, (0.7, 1.0, 1.3), (0.4, 0.4, 0.2), 0.0, 0.1),
}
# EAGLE's conditional acceptance of a non-repeat token, by category.
EAGLE_NOVEL_ACCEPT = {"code_edit": 0.72, "extraction": 0.62, "agent": 0.66, "chat": 0.60}
EAGLE_REPEAT_ACCEPT = 0.93
EAGLE_DEPTH_DECAY = 0.96

REP_PAD = 8  # at least the largest γ
STOP_NONE, STOP_EOS, STOP_STRING, STOP_LENGTH, STOP_ABORT = range(5)
STOP_NAMES = (None, "eos", "stop_string", "length", "abort")


def repeat_flags(prompt: np.ndarray, output: np.ndarray, n: int = 3) -> np.ndarray:
    """For each output position t: does (ctx[-n:], output[t]) occur inside ctx = prompt + output[:t]?

    This is docs/metrics.md's repeat(n). Positions with fewer than n tokens of
    context are False.
    """
    seq = np.concatenate([prompt, output]).astype(np.int64)
    flags = np.zeros(len(output), dtype=bool)
    if len(seq) < n + 1:
        return flags
    # Pack each (n+1)-gram into one integer key (token ids < 2^15).
    keys = np.zeros(len(seq) - n, dtype=np.int64)
    for j in range(n + 1):
        keys = (keys << 15) | seq[j: len(seq) - n + j]
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    # The gram ending at sequence index e repeats if its key first ended earlier.
    ends = np.arange(n, len(seq))
    repeated = first[inverse] + n < ends
    out_start = len(prompt)
    sel = ends >= out_start
    flags[ends[sel] - out_start] = repeated[sel]
    return flags


# --------------------------------------------------------------------------- workload

@dataclass
class Workload:
    """One day's logical requests, shared by every deployment (index = arrival order)."""

    arrival_us: np.ndarray  # µs since midnight
    category: list[str]
    temperature: np.ndarray
    structured: np.ndarray
    prompts: list[np.ndarray]
    outputs: list[np.ndarray]  # the whole output, up to its natural stop or max_tokens
    natural_stop: np.ndarray  # STOP_EOS, STOP_STRING or STOP_LENGTH
    abort_at: np.ndarray  # client aborts once this many tokens exist; 0 = never
    error: np.ndarray
    accept_novel: np.ndarray  # EAGLE a for non-repeat tokens, before deployment and depth factors
    accept_repeat: np.ndarray
    rep_flat: np.ndarray  # repeat(3) flags of all outputs, concatenated with padding
    rep_off: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray

    @property
    def size(self) -> int:
        return len(self.prompts)


# Session kinds after the burst: (size low, size high, arrival spread s, weight).
SESSION_KINDS = ((1, 1, 0.0, 0.35), (2, 2, 0.3, 0.20), (3, 6, 1.5, 0.20), (8, 24, 4.0, 0.15), (30, 60, 6.0, 0.10))


def _arrivals(rng: np.random.Generator, n: int) -> np.ndarray:
    """Arrival times (µs since midnight, sorted) in sessions spread over the day."""
    sizes, spreads = [], []
    if n >= 20:  # a burst, so that the 65-128 batch bucket is reached
        sizes.append(min(int(rng.integers(95, 131)), round(0.6 * n)))
        spreads.append(0.8)
    weights = np.array([k[3] for k in SESSION_KINDS])
    while sum(sizes) < n:
        low, high, spread, _ = SESSION_KINDS[int(rng.choice(len(SESSION_KINDS), p=weights / weights.sum()))]
        sizes.append(min(int(rng.integers(low, high + 1)), n - sum(sizes)))
        spreads.append(spread)
    order = rng.permutation(len(sizes))
    # Sessions start between 00:15 and 22:30, so every request ends within its day.
    starts = np.sort(rng.uniform(0.25 * 3600, 22.5 * 3600, len(sizes)))
    times = [starts[rank] + rng.uniform(0, spreads[s], sizes[s]) for rank, s in enumerate(order)]
    return np.sort(np.round(np.concatenate(times) * 1e6)).astype(np.int64)


def make_workload(rng: np.random.Generator, n: int) -> Workload:
    """Draw one day's `n` requests: arrivals, categories, tokens, stops and EAGLE difficulty."""
    arrival = _arrivals(rng, n)
    cats = [CATEGORIES[i] for i in rng.integers(0, len(CATEGORIES), n)]
    prompts, outputs, rep = [], [], []
    temperature = np.zeros(n)
    structured = np.zeros(n, dtype=bool)
    natural_stop = np.zeros(n, dtype=np.int64)
    accept_novel = np.zeros(n)
    accept_repeat = np.zeros(n)
    for i, cat in enumerate(cats):
        gen, median, sigma, max_tokens, temps, temp_w, p_structured, p_stop_string = CATEGORY_MODEL[cat]
        natural = _lognormal_int(rng, median, sigma, 4, 4000)
        prompt, out = gen(rng, natural)
        out_arr = np.asarray(out[:min(natural, max_tokens)], dtype=np.int32)
        if natural > max_tokens:
            natural_stop[i] = STOP_LENGTH
        else:
            natural_stop[i] = STOP_STRING if rng.random() < p_stop_string else STOP_EOS
        temperature[i] = temps[int(rng.choice(len(temps), p=temp_w))]
        structured[i] = rng.random() < p_structured
        prompts.append(prompt)
        outputs.append(out_arr)
        rep.append(repeat_flags(prompt, out_arr))
        # Acceptance falls with temperature; each request gets its own difficulty.
        cooling = 1 - 0.2 * temperature[i]
        difficulty = np.exp(0.1 * rng.standard_normal())
        accept_novel[i] = EAGLE_NOVEL_ACCEPT[cat] * cooling * difficulty
        accept_repeat[i] = EAGLE_REPEAT_ACCEPT * (1 - 0.05 * temperature[i])
    out_len = np.array([len(o) for o in outputs], dtype=np.int64)
    aborts = rng.random(n) < 0.03
    abort_at = np.where(aborts, rng.integers(2, np.maximum(out_len, 3)), 0)
    error = rng.random(n) < 0.015
    # Each output's flags are followed by REP_PAD False values, so a draft
    # looking past the end of the output reads "not a repeat".
    rep = [np.concatenate([r, np.zeros(REP_PAD, dtype=bool)]) for r in rep]
    rep_off = np.concatenate([[0], np.cumsum(out_len + REP_PAD)[:-1]]).astype(np.int64)
    return Workload(arrival, cats, temperature, structured, prompts, outputs, natural_stop,
                    abort_at.astype(np.int64), error, accept_novel, accept_repeat,
                    np.concatenate(rep).astype(bool), rep_off,
                    np.array([len(p) for p in prompts], dtype=np.int64), out_len)


# --------------------------------------------------------------------------- rounds

@dataclass
class _Planned:
    """Rounds fixed in advance (none, ngram), flattened over requests."""

    draft: np.ndarray
    accepted: np.ndarray
    committed: np.ndarray
    offset: np.ndarray
    count: np.ndarray
    stop: np.ndarray  # stop reason of each request's last round


def _plan_rounds(dep: Deployment, wl: Workload) -> _Planned:
    """Rounds that do not depend on the schedule: plain decoding, or the n-gram replay.

    A client abort ends the request after the first round that reaches
    abort_at tokens. Cutting there keeps the n-gram replay exact: a replay of
    the shortened output gives the same rounds, because each kept round's
    accepted prefix lies inside it.
    """
    draft, accepted, committed, offset, count, stop = [], [], [], [], [], []
    total = 0
    for i in range(wl.size):
        out = wl.outputs[i]
        if wl.error[i]:  # never scheduled
            rounds = np.zeros((0, 3), dtype=np.int64)
        elif dep.kind == "ngram":
            rounds = np.array(replay_request(wl.prompts[i], out, NGRAM_MIN, NGRAM_MAX, NGRAM_K),
                              dtype=np.int64).reshape(-1, 3)
        else:
            rounds = np.zeros((len(out) - 1, 3), dtype=np.int64)
            rounds[:, 2] = 1
        reason = wl.natural_stop[i]
        if wl.abort_at[i]:
            produced = 1 + np.cumsum(rounds[:, 2])
            hit = np.flatnonzero((produced >= wl.abort_at[i]) & (produced < len(out)))
            if len(hit):
                rounds = rounds[: hit[0] + 1]
                reason = STOP_ABORT
        draft.append(rounds[:, 0])
        accepted.append(rounds[:, 1])
        committed.append(rounds[:, 2])
        offset.append(total)
        count.append(len(rounds))
        stop.append(reason)
        total += len(rounds)
    return _Planned(np.concatenate(draft), np.concatenate(accepted), np.concatenate(committed),
                    np.array(offset), np.array(count), np.array(stop))


def _dynamic_gamma(batch: int) -> int:
    for low, high, gamma in DYNAMIC_GAMMA:
        if low <= batch <= high:
            return gamma
    return DYNAMIC_GAMMA[-1][2]


def _step_gamma(dep: Deployment, batch: int, noise: "_Noise") -> int:
    if dep.kind != "eagle":
        return 0
    if not dep.dynamic:
        return dep.gamma
    # Jitter, one up or down on 40% of steps (|z| > 0.8416), so several γ
    # occur within one batch bucket.
    (z,) = noise.take(1)
    gamma = _dynamic_gamma(batch) + (1 if z > 0.8416 else -1 if z < -0.8416 else 0)
    return min(max(gamma, 1), dep.gamma)


class _EagleDrafter:
    """EAGLE's chain acceptance for one deployment (see "Acceptance" above)."""

    def __init__(self, dep: Deployment, wl: Workload, rng: np.random.Generator) -> None:
        self.wl, self.rng = wl, rng
        self.a_novel = np.minimum(wl.accept_novel * dep.accept_factor, 0.98)
        self.a_repeat = np.minimum(wl.accept_repeat * dep.accept_factor, 0.98)
        self.decay = EAGLE_DEPTH_DECAY ** np.arange(dep.gamma)
        self.depth = np.arange(dep.gamma)

    def rounds(self, dec: np.ndarray, produced: np.ndarray, gamma: int):
        """One round per request in `dec`: (draft, invalidated, accepted)."""
        wl, rng, b = self.wl, self.rng, len(dec)
        invalid = np.zeros(b, dtype=np.int64)
        structured = wl.structured[dec]
        if structured.any():
            # The grammar sometimes cuts the tail of the drafts.
            cut = structured & (rng.random(b) < 0.3)
            invalid[cut] = rng.integers(1, gamma + 1, int(cut.sum()))
        draft = gamma - invalid
        depth = self.depth[:gamma]
        # Flags of the output tokens the drafts guess (padding past the end is False).
        repeat = wl.rep_flat[(wl.rep_off[dec] + produced[dec])[:, None] + depth]
        a = np.where(repeat, self.a_repeat[dec][:, None], self.a_novel[dec][:, None]) * self.decay[:gamma]
        ok = (rng.random((b, gamma)) < a) & (depth < draft[:, None])
        return draft, invalid, np.cumprod(ok, axis=1).sum(axis=1)


# --------------------------------------------------------------------------- scheduler

MAX_BATCHED_TOKENS = 8192
ADMIT_KV = 0.98
PREEMPT_KV = 1.0

# Per target precision: weight read W, then per decoded token, per decoded
# token squared (large verify batches leave the memory-bound regime), and per
# prefill token, in ms.
COST = {
    "bf16": (6.0, 0.02, 0.00005, 0.04),
    "fp8": (3.6, 0.015, 0.0000375, 0.03),
}
EAGLE_DRAFT_MS = (0.20, 0.02)  # per draft position: fixed, per request in the batch


class _Noise:
    """Standard normal draws, taken a few at a time from large pre-drawn blocks (speed)."""

    def __init__(self, rng: np.random.Generator, block: int = 3 * 4096) -> None:
        self.rng, self.block = rng, block
        self.values: list[float] = []
        self.pos = 0

    def take(self, k: int) -> list[float]:
        if self.pos + k > len(self.values):
            self.values, self.pos = self.rng.standard_normal(self.block).tolist(), 0
        self.pos += k
        return self.values[self.pos - k: self.pos]


def _step_cost(dep, batch, tokens, prefill, ctx_cost, gamma, noise: _Noise):
    """(draft_ms, verify_ms, duration_ms) of one step."""
    weights, per_token, per_token2, per_prefill = COST[dep.target_quant]
    if dep.kind == "none" or batch == 0:
        draft = 0.0
    elif dep.kind == "ngram":
        draft = 0.04 + 0.003 * batch
    else:
        draft = gamma * (EAGLE_DRAFT_MS[0] + EAGLE_DRAFT_MS[1] * batch)
    attention = 0.03 * ctx_cost / 1000
    verify = weights + per_token * tokens + per_token2 * tokens**2 + per_prefill * prefill + attention
    other = 0.5 + 0.012 * batch + (0.004 * tokens if dep.kind != "none" else 0.0)
    e1, e2, e3 = noise.take(3)
    draft = round(draft * math.exp(0.03 * e1), 3)
    verify = round(verify * math.exp(0.03 * e2), 3)
    other = round(other * math.exp(0.03 * e3), 3)
    return draft, verify, round(draft + verify + other, 3)


class _Log:
    """Columns that grow by one value (steps) or one array (rounds) at a time."""

    def __init__(self, *names: str) -> None:
        self.parts: dict[str, list] = {name: [] for name in names}

    def add(self, **columns) -> None:
        for name, values in columns.items():
            self.parts[name].append(values)

    def arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for name, parts in self.parts.items():
            if parts and isinstance(parts[0], np.ndarray):
                out[name] = np.concatenate(parts)
            else:
                out[name] = np.array(parts, dtype=float if parts and isinstance(parts[0], float) else np.int64)
        return out


STEP_FIELDS = ("step_id", "start_us", "duration_ms", "draft_ms", "verify_ms", "batch_size",
               "num_prefill_tokens", "kv_usage", "num_preempted")
ROUND_FIELDS = ("req", "round_idx", "step_id", "draft", "invalid", "accepted", "committed", "stop", "context_len")


def run_deployment(dep: Deployment, wl: Workload, rng: np.random.Generator) -> dict:
    """Simulate one deployment serving one day's workload. Times are µs since midnight."""
    n = wl.size
    prompt_len = wl.prompt_len
    planned = _plan_rounds(dep, wl) if dep.kind != "eagle" else None
    drafter = _EagleDrafter(dep, wl, rng) if dep.kind == "eagle" else None
    noise = _Noise(rng)
    produced = np.zeros(n, dtype=np.int64)  # output tokens so far
    next_round = np.zeros(n, dtype=np.int64)
    first_token = np.full(n, -1, dtype=np.int64)
    finish = np.full(n, -1, dtype=np.int64)
    stop = np.zeros(n, dtype=np.int64)
    preemptions = np.zeros(n, dtype=np.int64)
    resume_step = np.zeros(n, dtype=np.int64)
    no_invalid = np.zeros(n, dtype=np.int64)

    pending = [i for i in range(n) if not wl.error[i]]  # not yet arrived, in arrival order
    pending.reverse()
    waiting: list[int] = []  # arrived, not yet prefilled
    preempted: list[int] = []
    running: list[int] = []  # kept sorted: index order is arrival order
    steps, rounds = _Log(*STEP_FIELDS), _Log(*ROUND_FIELDS)
    now, step = 0, 0

    while pending or waiting or preempted or running:
        if not (waiting or running or preempted):
            now = max(now, int(wl.arrival_us[pending[-1]]))  # idle until the next arrival
        while pending and wl.arrival_us[pending[-1]] <= now:
            waiting.append(pending.pop())

        dec = np.array(running, dtype=np.int64)
        gamma = _step_gamma(dep, len(dec), noise)
        context = prompt_len[dec] + produced[dec]  # tokens in KV once the newest is fed
        kv_used = int(context.sum())
        # Preempt the latest arrivals when the running requests' KV and draft slots overflow.
        n_preempted = 0
        while len(dec) > 1 and kv_used + len(dec) * (gamma + 1) > PREEMPT_KV * dep.kv_capacity_tokens:
            victim = running.pop()
            kv_used -= int(context[-1])
            dec, context = dec[:-1], context[:-1]
            preemptions[victim] += 1
            resume_step[victim] = step + int(rng.integers(4, 25))
            preempted.append(victim)
            n_preempted += 1

        admitted, prefill = [], 0
        if waiting or preempted:
            admitted, prefill = _admit(dep, waiting, preempted, running, resume_step, step,
                                       prompt_len, produced, kv_used, len(dec) * (gamma + 1))
        if len(dec) == 0 and not admitted:
            if pending:
                now = max(now, int(wl.arrival_us[pending[-1]]))
            continue

        if planned is not None:
            idx = planned.offset[dec] + next_round[dec]
            draft, accepted, committed = planned.draft[idx], planned.accepted[idx], planned.committed[idx]
            invalid = no_invalid[: len(dec)]
            reason = np.where(next_round[dec] + 1 == planned.count[dec], planned.stop[dec], STOP_NONE)
        else:
            draft, invalid, accepted = drafter.rounds(dec, produced, gamma)
            committed, reason = _eagle_commit(wl, dec, produced, accepted)

        ctx_len = context - 1
        tokens = int(draft.sum()) + len(dec)
        ctx_cost = float(ctx_len.sum() + 0.25 * (ctx_len * draft).sum())
        draft_ms, verify_ms, duration_ms = _step_cost(dep, len(dec), tokens, prefill, ctx_cost, gamma, noise)
        end = now + round(duration_ms * 1000)
        steps.add(step_id=step, start_us=now, duration_ms=duration_ms, draft_ms=draft_ms, verify_ms=verify_ms,
                  batch_size=len(dec), num_prefill_tokens=prefill,
                  kv_usage=round((kv_used + prefill) / dep.kv_capacity_tokens, 4), num_preempted=n_preempted)
        if len(dec):
            rounds.add(req=dec, round_idx=next_round[dec], step_id=np.full(len(dec), step), draft=draft,
                       invalid=invalid, accepted=accepted, committed=committed, stop=reason, context_len=ctx_len)
            produced[dec] += committed
            next_round[dec] += 1
            if reason.any():
                done = dec[reason != STOP_NONE]
                finish[done] = end
                stop[done] = reason[reason != STOP_NONE]
                for i in done.tolist():
                    running.remove(i)
        for i in admitted:
            if first_token[i] < 0:
                first_token[i] = end
                produced[i] = 1
            bisect.insort(running, i)
        now, step = end, step + 1

    return {
        "produced": produced, "first_token": first_token, "finish": finish, "stop": stop,
        "preemptions": preemptions,
        "steps": steps.arrays(),
        "rounds": rounds.arrays(),
    }


def _admit(dep, waiting, preempted, running, resume_step, step, prompt_len, produced,
           kv_used, decode_tokens) -> tuple[list[int], int]:
    """Prefill preempted requests that may resume, then new ones, first come first served.

    A request is admitted whole while the step's token budget and the KV
    cache allow; the first one in line blocks the rest. A preempted request
    is prefilled again with its prompt and output so far (recompute). Returns
    the admitted requests and the prefill tokens.
    """
    admitted: list[int] = []
    budget = MAX_BATCHED_TOKENS - decode_tokens
    prefill = 0
    idle = not running
    ready = [i for i in preempted if idle or resume_step[i] <= step]
    for queue, line in ((preempted, ready), (waiting, list(waiting))):
        for i in line:
            need = int(prompt_len[i] + produced[i])
            fits = need <= budget - prefill and kv_used + need <= ADMIT_KV * dep.kv_capacity_tokens
            if not (fits or (idle and not admitted)):
                return admitted, prefill
            queue.remove(i)
            admitted.append(i)
            prefill += need
            kv_used += need
    return admitted, prefill


def _eagle_commit(wl, dec, produced, accepted):
    """Committed tokens and stop reason of each EAGLE round."""
    remaining = wl.output_len[dec] - produced[dec]
    ends = accepted + 1 >= remaining
    committed = np.where(ends, remaining, accepted + 1)
    reason = np.where(ends, wl.natural_stop[dec], STOP_NONE)
    after = produced[dec] + committed
    abort = ~ends & (wl.abort_at[dec] > 0) & (after >= wl.abort_at[dec])
    reason = np.where(abort, STOP_ABORT, reason)
    return committed, reason


# --------------------------------------------------------------------------- tables

def _table(name: str, columns: dict) -> pa.Table:
    schema = arrow_schema(name)
    missing = set(schema.names) ^ set(columns)
    if missing:
        raise AssertionError(f"simulate: {name} columns differ from the schema: {sorted(missing)}")
    return pa.table({f.name: _arrow(columns[f.name], f.type) for f in schema}, schema=schema)


def _arrow(values, type_: pa.DataType) -> pa.Array:
    if isinstance(values, pa.Array):
        return values.cast(type_)
    if pa.types.is_list(type_):  # a list of int arrays
        lengths = np.array([len(v) for v in values], dtype=np.int32)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        flat = np.concatenate(values).astype(np.int32) if len(values) else np.zeros(0, np.int32)
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat)).cast(type_)
    return pa.array(values, type=type_)


def _deployments_table() -> pa.Table:
    rows = [{
        "deployment_id": d.deployment_id, "model": MODEL, "method": d.method,
        "num_speculative_tokens": d.gamma, "target_quant": d.target_quant, "draft_quant": d.draft_quant,
        "baseline_id": d.baseline_id, "engine": "vllm", "engine_version": "0.32.0", "gpu": "H200",
        "tensor_parallel_size": 1, "kv_capacity_tokens": d.kv_capacity_tokens, "spec_config": d.spec_config,
    } for d in DEPLOYMENTS]
    return _table("deployments", {k: [r[k] for r in rows] for k in rows[0]})


def _timestamps(day_us: int, offsets: np.ndarray) -> pa.Array:
    values = np.where(offsets >= 0, day_us + offsets, 0)
    return pa.array(values, type=pa.timestamp("us", tz="UTC"), mask=offsets < 0)


def _request_columns(dep, wl, res, day_us, rng) -> dict:
    n = wl.size
    finished = res["finish"] >= 0
    out_tokens = np.where(wl.error, 0, res["produced"])
    reason = np.full(n, "stop", dtype=object)
    reason[res["stop"] == STOP_LENGTH] = "length"
    reason[res["stop"] == STOP_ABORT] = "abort"
    reason[wl.error] = "error"
    # A request that fails before its first token reports a finish time on half of the cases.
    error_finish = wl.arrival_us + np.round(rng.uniform(2, 40, n) * 1000).astype(np.int64)
    finish = np.where(wl.error, np.where(rng.random(n) < 0.5, error_finish, -1), res["finish"])
    assert (finished | wl.error).all(), "simulate: a request never finished"
    quality = (0.82 if dep.target_quant == "bf16" else 0.80) + 0.03 * rng.standard_normal(n)
    ok = ~wl.error
    return {
        "deployment_id": [dep.deployment_id] * n,
        "request_id": [f"req-{i + 1:05d}" for i in range(n)],
        "category": wl.category,
        "arrival_time": _timestamps(day_us, wl.arrival_us),
        "first_token_time": _timestamps(day_us, res["first_token"]),
        "finish_time": _timestamps(day_us, finish),
        "prompt_tokens": wl.prompt_len,
        "output_tokens": out_tokens,
        "finish_reason": reason.tolist(),
        "structured_output": wl.structured,
        "temperature": wl.temperature,
        "num_preemptions": res["preemptions"],
        "prompt_token_ids": wl.prompts,
        "output_token_ids": [wl.outputs[i][: out_tokens[i]] for i in range(n)],
        "quality_score": pa.array(np.clip(quality, 0, 1), mask=~ok),
        "matches_reference": pa.array(np.ones(n, dtype=bool), mask=~ok),
    }


def _step_columns(dep, res, day_us) -> dict:
    s = res["steps"]
    return {
        "deployment_id": [dep.deployment_id] * len(s["step_id"]),
        "step_id": s["step_id"],
        "start_time": _timestamps(day_us, s["start_us"]),
        **{k: s[k] for k in ("duration_ms", "draft_ms", "verify_ms", "batch_size", "num_prefill_tokens",
                             "kv_usage", "num_preempted")},
        # a simulated step's tokens are its rounds': the step-level counts are for traces without rounds
        **{k: pa.nulls(len(s["step_id"]), pa.int32()) for k in ("num_draft_tokens", "num_accepted_tokens",
                                                                  "num_committed_tokens")},
        "counts_from": pa.nulls(len(s["step_id"]), pa.string()),
    }


def _round_columns(dep, res) -> dict:
    r = res["rounds"]
    order = np.lexsort((r["round_idx"], r["req"]))
    r = {k: v[order] for k, v in r.items()}
    names = np.array(STOP_NAMES, dtype=object)
    return {
        "deployment_id": [dep.deployment_id] * len(order),
        "request_id": [f"req-{i + 1:05d}" for i in r["req"]],
        "round_idx": r["round_idx"],
        "step_id": r["step_id"],
        "num_draft_tokens": r["draft"],
        "num_invalidated_tokens": r["invalid"],
        "num_accepted_tokens": r["accepted"],
        "num_committed_tokens": r["committed"],
        "stop_reason": names[r["stop"]].tolist(),
        "num_verified_nodes": r["draft"],  # chain methods verify exactly their drafts
        "context_len": r["context_len"],
    }


def _concat(parts: list[dict]) -> dict:
    out = {}
    for name in parts[0]:
        values = [p[name] for p in parts]
        if isinstance(values[0], (pa.Array, pa.ChunkedArray)):
            out[name] = pa.chunked_array(values).combine_chunks()
        elif isinstance(values[0], np.ndarray):
            out[name] = np.concatenate(values)
        else:
            out[name] = [v for part in values for v in part]
    return out


# Encodings that keep sample_traces/ small. Sorted counters and times are
# delta-encoded. Token lists skip the dictionary and go in large pages with
# a large zstd window, so the copies of one request on six deployments
# compress to almost nothing.
_DELTA = {
    "steps": ("step_id", "start_time"),
    "rounds": ("round_idx", "step_id", "context_len"),
}
_NO_DICTIONARY = ("prompt_token_ids", "output_token_ids")


def _write(table: pa.Table, outdir: Path, name: str, day: date) -> None:
    folder = outdir / name / f"date={day.isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    delta = _DELTA.get(name, ())
    pq.write_table(
        table, folder / "part-0.parquet", compression="zstd", compression_level=9,
        use_dictionary=[c for c in table.column_names if c not in delta and c not in _NO_DICTIONARY],
        column_encoding={c: "DELTA_BINARY_PACKED" for c in delta} or None,
        data_page_size=64 << 20,
    )


def simulate(outdir, *, seed: int = 0, requests: int = DEFAULT_REQUESTS, days: int = DEFAULT_DAYS,
             progress: Progress | None = None) -> dict[str, int]:
    """Write synthetic traces to `outdir` (see the module docstring). Returns rows written per table."""
    if requests < 1 or days < 1:
        raise ValueError("requests and days must be at least 1")
    say = progress or (lambda _msg: None)
    outdir = Path(outdir)
    counts = {"deployments": 0, "requests": 0, "steps": 0, "rounds": 0}
    deployments = _deployments_table()
    for back in range(days - 1, -1, -1):
        day = LAST_DATE - timedelta(days=back)
        day_us = int(datetime(day.year, day.month, day.day, tzinfo=timezone.utc).timestamp()) * 1_000_000
        # Streams keyed by the date, so a date's traces do not depend on `days`.
        day_key = day.toordinal()
        wl = make_workload(np.random.default_rng([seed, day_key, 0]), requests)
        say(f"{day}: {requests} requests")
        req_parts, step_parts, round_parts = [], [], []
        for dep_index, dep in enumerate(DEPLOYMENTS):
            rng = np.random.default_rng([seed, day_key, 1, dep_index])
            res = run_deployment(dep, wl, rng)
            req_parts.append(_request_columns(dep, wl, res, day_us, rng))
            step_parts.append(_step_columns(dep, res, day_us))
            round_parts.append(_round_columns(dep, res))
            say(f"{day}: {dep.deployment_id}: {len(res['steps']['step_id'])} steps, "
                f"{len(res['rounds']['req'])} rounds")
        tables = {"deployments": deployments}
        for name, parts in (("requests", req_parts), ("steps", step_parts), ("rounds", round_parts)):
            columns = _concat(parts)
            tables[name] = _table(name, columns | uid_columns(name, columns))
        for name, table in tables.items():
            _write(table, outdir, name, day)
            counts[name] += table.num_rows
    return counts
