"""Traces whose true speedup is a closed form: the test bed of the decision.

The sample traces (``traces.py``) are realistic, so nobody knows their true speedup.
These are not realistic, on purpose: every step costs what a formula says, up to a
stated noise, so the speedup a report should find is known exactly and a verdict can
be checked against it (tests/test_decide_closed_form.py, bench/coverage_study.py).

Step costs (ms), for a step of batch size b whose requests hold X tokens of context
in all (Σ context_len over the step's rounds) and that prefills P prompt tokens of a
request joining the batch (a chunk: vLLM's chunked prefill)::

    plain decoding     T0(b, X, P) = A + S·b + c·X + p·P
    speculation at γ   T(b, X, P)  = A + S·b·(γ + 1) + D·γ + c·X + p·P

A is the fixed cost of a forward pass, S the cost of one scored position of one
request, D the cost of one drafting pass, c the cost of a token of context (the KV a
step reads once, whatever the number of positions it scores) and p the cost of a
prefilled token. Each step's time is its formula's value times a noise multiplier
(log-normal, mean 1, ``noise`` its standard deviation) and a drift multiplier (uniform
in 1 ± ``drift``, a new draw every ``drift_period`` steps of the deployment); a
``Pause`` adds a fixed time to one step (a stall outside the engine's normal spread).

Acceptance: each draft position is accepted with probability a given the ones before
it were, so a round of γ drafts accepts K = min(G, γ), G geometric, and

    E[L] = 1 + Σ_{i=1..γ} a^i = (1 − a^(γ+1)) / (1 − a).

a is the side's ``acceptance``, or, where the side has ``kinds`` of requests (code and
chat, greedy and sampled), the request's kind's: each request draws its kind (category,
temperature, acceptance) by the kinds' shares, or takes them in turn (``alternate``).

At one batch size b and context X, on steps without prefill, the true speedup is
therefore the seed's

    speedup(b, X) = T0(b, X) · E[L] / T(b, X)

(``closed_form_speedup``), up to stop truncation (a request's last round commits what
is left), which ``true_speedup`` counts: it weighs the formula by the deployment's own
rounds, (Σ committed · T0(step) + Σ p · P(step)) / Σ T(step) over its rounds (a step's
time counts once per round it holds), with noise-free costs and no pause. Plain decoding
would need T0 per token of the deployment's, at each step's load and context, and the
same prefill work: a chunk is prefilled once, delaying each request of its step once, so
its p · P counts once per round, not per token (docs/metrics.md, "The baseline's cost
model"). That is the number the report's speedup estimates.

Load: a deployment runs in ``phases``, each at a fixed batch size for a number of
steps (and, where a phase says so, with prompts of its own lengths, its own
speculation length — a dynamic config's γ at that batch size — and a share of steps
that carry a prefill chunk). A phase starts with ``batch_size`` requests; whenever one
finishes, a new one takes its slot at once, so every step of the phase has exactly that
batch size. When the phase's steps are done, the requests still running are cut off
(finish_reason ``length``). Phases follow each other after a minute of idle time. A
request's first token comes ``ttft_ms`` after its arrival, at the start of its first
decode step; its finish is the end of its last step.

Configuration: each side's deployments row carries its ``config`` (gpu, engine_version,
target_quant, tensor_parallel_size, kv_cache_quant), so matching on configuration can
be tested. ``write(..., by_date=True)`` writes every table under ``date=`` folders, one
per side's start date, so one deployment_id may run plain decoding on one date and
speculate on a later one (a rollout).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..ingest.schema import ARROW
from ..ingest.schema import load_schemas

START = dt.datetime(2026, 11, 28, 8, 0, 0, tzinfo=dt.timezone.utc)
PHASE_GAP_MS = 60_000.0
MODEL = "closed-form-8b"
CONFIG_COLUMNS = ("gpu", "engine_version", "target_quant", "tensor_parallel_size", "kv_cache_quant")


@dataclass(frozen=True)
class Costs:
    """The step-cost formulas of the module docstring (ms)."""

    fixed_ms: float = 6.0          # A
    per_position_ms: float = 0.05  # S: one scored position of one request
    per_draft_ms: float = 0.4      # D: one drafting pass (the drafter runs γ times a step)
    per_context_ms: float = 0.0    # c: one token of context in the batch
    per_prefill_ms: float = 0.0    # p: one prefilled prompt token in the step

    def plain_ms(self, batch_size, context_tokens=0.0, prefill_tokens=0.0):
        return (self.fixed_ms + self.per_position_ms * batch_size + self.per_context_ms * context_tokens
                + self.per_prefill_ms * prefill_tokens)

    def spec_ms(self, batch_size, gamma, context_tokens=0.0, prefill_tokens=0.0):
        return (self.fixed_ms + self.per_position_ms * batch_size * (gamma + 1) + self.per_draft_ms * gamma
                + self.per_context_ms * context_tokens + self.per_prefill_ms * prefill_tokens)


@dataclass(frozen=True)
class Kind:
    """A kind of request: its label, its sampling temperature and its acceptance."""

    share: float = 1.0
    acceptance: float | None = None   # None: the side's
    category: str = "chat"
    temperature: float = 0.0


@dataclass(frozen=True)
class Phase:
    batch_size: int
    steps: int
    prompt_tokens: tuple[int, int] | None = None   # this phase's prompts (default: the side's)
    gamma: int | None = None                       # this phase's speculation length (default: the side's)
    prefill_share: float = 0.0                     # the share of its steps that carry a prefill chunk
    prefill_tokens: int = 512                      # the chunk's prompt tokens


@dataclass(frozen=True)
class Pause:
    """``ms`` more on the side's step number ``step`` (0-based, in time order)."""

    step: int
    ms: float


@dataclass(frozen=True)
class Side:
    """One deployment of a closed-form trace."""

    deployment_id: str
    phases: tuple[Phase, ...]
    gamma: int = 0                              # 0: plain decoding (method none)
    acceptance: float = 0.0                     # a, per draft position
    costs: Costs = field(default_factory=Costs)
    prompt_tokens: tuple[int, int] = (200, 800)  # uniform, inclusive
    output_tokens: tuple[int, int] = (100, 300)  # uniform, inclusive: tokens after the first
    noise: float = 0.02
    drift: float = 0.0
    drift_period: int = 1000
    failed_requests: int = 0                    # extra requests that fail before their first token
    ttft_ms: float = 30.0
    start: dt.datetime = START
    baseline_id: str | None = None
    method: str | None = None                   # default: none for γ = 0, else eagle
    kinds: tuple[Kind, ...] = ()                # () : one kind, chat at temperature 0, the side's acceptance
    alternate: bool = False                     # kinds in turn, not drawn by their shares
    pauses: tuple[Pause, ...] = ()
    config: tuple[tuple[str, object], ...] = ()  # deployments columns: (("gpu", "H100"), ...)
    model: str = MODEL

    @property
    def method_name(self) -> str:
        if self.method:
            return self.method
        spec = self.gamma or any(p.gamma for p in self.phases)
        return "eagle" if spec else "none"

    @property
    def max_gamma(self) -> int:
        return max([self.gamma] + [p.gamma or 0 for p in self.phases])


def expected_length(acceptance: float, gamma: int) -> float:
    """E[L] = 1 + Σ_{i ≤ γ} a^i."""
    return float(sum(acceptance ** i for i in range(gamma + 1)))


def closed_form_speedup(costs: Costs, acceptance: float, gamma: int, batch_size: float,
                        context_tokens: float = 0.0, baseline_costs: Costs | None = None,
                        prefill_tokens: float = 0.0) -> float:
    """T0(b, X, P) · E[L] / T(b, X, P): the speedup at one load, context and prefill, without
    stop truncation. ``baseline_costs``: the plain deployment's formula when it differs."""
    plain = (baseline_costs or costs).plain_ms(batch_size, context_tokens, prefill_tokens)
    return plain * expected_length(acceptance, gamma) / costs.spec_ms(batch_size, gamma, context_tokens,
                                                                      prefill_tokens)


@dataclass
class SideTrace:
    """What ``run_side`` simulated: the rows of each table (column dicts) and the noise-free
    costs behind ``true_speedup``."""

    side: Side
    requests: dict
    steps: dict
    rounds: dict
    # per step: batch size, context tokens, prefill tokens, committed tokens, γ, noise-free
    # plain decode cost (the baseline's formula without the prefill), the baseline's cost of
    # the step's prefill, and its own cost (without pause)
    step_batch: np.ndarray
    step_context: np.ndarray
    step_prefill: np.ndarray
    step_committed: np.ndarray
    step_gamma: np.ndarray
    step_plain_ms: np.ndarray
    step_prefill_ms: np.ndarray
    step_nominal_ms: np.ndarray
    # per round: its step (index into the step arrays), its committed tokens, its request's kind
    round_step: np.ndarray
    round_committed: np.ndarray
    round_kind: np.ndarray


def run_side(side: Side, rng: np.random.Generator, baseline_costs: Costs | None = None) -> SideTrace:
    """Simulate one deployment (module docstring)."""
    req: dict[str, list] = {k: [] for k in ("request_id", "arrival_ms", "first_ms", "finish_ms", "prompt",
                                            "output", "reason", "category", "temperature")}
    steps: dict[str, list] = {k: [] for k in ("step_id", "start_ms", "duration_ms", "draft_ms", "batch_size",
                                              "prefill")}
    rounds: dict[str, list] = {k: [] for k in ("request_id", "round_idx", "step_id", "drafted", "accepted",
                                               "committed", "stop", "context_len")}
    sums: dict[str, list] = {k: [] for k in ("batch", "context", "prefill", "committed", "gamma", "plain",
                                             "prefill_ms", "nominal")}
    per_round: dict[str, list] = {"step": [], "committed": [], "kind": []}
    plain_costs = baseline_costs or side.costs
    pauses = {p.step: p.ms for p in side.pauses}
    kinds = side.kinds or (Kind(acceptance=side.acceptance),)
    shares = np.array([k.share for k in kinds], dtype=float)
    shares = shares / shares.sum()
    clock = 0.0
    step_id = 0
    drift_level = 1.0
    next_id = 0
    prompts = side.prompt_tokens

    def new_request(now: float) -> dict:
        nonlocal next_id
        next_id += 1
        prompt = int(rng.integers(prompts[0], prompts[1] + 1))
        target = int(rng.integers(side.output_tokens[0], side.output_tokens[1] + 1))
        if len(kinds) == 1:
            kind = 0
        elif side.alternate:
            kind = (next_id - 1) % len(kinds)
        else:
            kind = int(rng.choice(len(kinds), p=shares))
        return {"id": f"req-{next_id:06d}", "arrival": now - side.ttft_ms, "first": now, "prompt": prompt,
                "target": target, "done": 0, "rounds": 0, "kind": kind}

    def finish(r: dict, end: float, reason: str) -> None:
        req["request_id"].append(r["id"])
        req["arrival_ms"].append(r["arrival"])
        req["first_ms"].append(r["first"])
        req["finish_ms"].append(end)
        req["prompt"].append(r["prompt"])
        req["output"].append(1 + r["done"])
        req["reason"].append(reason)
        req["category"].append(kinds[r["kind"]].category)
        req["temperature"].append(kinds[r["kind"]].temperature)

    for p_index, phase in enumerate(side.phases):
        if p_index:
            clock += PHASE_GAP_MS
        prompts = phase.prompt_tokens or side.prompt_tokens
        gamma = side.gamma if phase.gamma is None else phase.gamma
        active = [new_request(clock) for _ in range(phase.batch_size)]
        for _ in range(phase.steps):
            if side.drift and step_id % side.drift_period == 0:
                drift_level = float(rng.uniform(1 - side.drift, 1 + side.drift))
            b = len(active)
            context = np.array([r["prompt"] + r["done"] for r in active], dtype=np.int64)
            x_total = float(context.sum())
            prefill = 0
            if phase.prefill_share >= 1 or (phase.prefill_share > 0 and rng.random() < phase.prefill_share):
                prefill = phase.prefill_tokens
            nominal = (side.costs.spec_ms(b, gamma, x_total, prefill) if gamma
                       else side.costs.plain_ms(b, x_total, prefill))
            noise = math.exp(side.noise * float(rng.standard_normal()) - side.noise ** 2 / 2) if side.noise else 1.0
            duration = nominal * noise * drift_level + pauses.get(step_id, 0.0)
            if gamma:
                # K = min(G, γ): G leading successes of probability a (the request's kind's)
                rates = np.array([side.acceptance if kinds[r["kind"]].acceptance is None
                                  else kinds[r["kind"]].acceptance for r in active])
                if len(kinds) == 1:
                    a = float(rates[0])
                    accepted = np.minimum(rng.geometric(1 - a, size=b) - 1, gamma) if a < 1 else np.full(b, gamma)
                else:
                    draws = rng.geometric(np.maximum(1 - rates, 1e-12), size=b) - 1
                    accepted = np.where(rates >= 1, gamma, np.minimum(draws, gamma))
            else:
                accepted = np.zeros(b, dtype=np.int64)
            committed_total = 0
            end = clock + duration
            for i, r in enumerate(active):
                left = r["target"] - r["done"]
                commit = int(min(accepted[i] + 1, left))
                last = commit == left
                rounds["request_id"].append(r["id"])
                rounds["round_idx"].append(r["rounds"])
                rounds["step_id"].append(step_id)
                rounds["drafted"].append(gamma)
                rounds["accepted"].append(int(accepted[i]))
                rounds["committed"].append(commit)
                rounds["stop"].append("eos" if last else None)
                rounds["context_len"].append(int(context[i]))
                per_round["step"].append(step_id)
                per_round["committed"].append(commit)
                per_round["kind"].append(r["kind"])
                r["done"] += commit
                r["rounds"] += 1
                committed_total += commit
            steps["step_id"].append(step_id)
            steps["start_ms"].append(clock)
            steps["duration_ms"].append(duration)
            steps["draft_ms"].append(side.costs.per_draft_ms * gamma * noise * drift_level)
            steps["batch_size"].append(b)
            steps["prefill"].append(prefill)
            sums["batch"].append(b)
            sums["context"].append(x_total)
            sums["prefill"].append(prefill)
            sums["committed"].append(committed_total)
            sums["gamma"].append(gamma)
            sums["plain"].append(plain_costs.plain_ms(b, x_total))
            sums["prefill_ms"].append(plain_costs.per_prefill_ms * prefill)
            sums["nominal"].append(nominal)
            step_id += 1
            clock = end
            for i, r in enumerate(active):
                if r["done"] >= r["target"]:
                    finish(r, end, "stop")
                    active[i] = new_request(end)
        for r in active:
            if r["rounds"]:
                finish(r, clock, "length")
            # a request admitted at the phase's last step never ran: it is not part of the trace
    for i in range(side.failed_requests):
        at = clock * (i + 1) / (side.failed_requests + 1)
        next_id += 1
        req["request_id"].append(f"req-{next_id:06d}")
        req["arrival_ms"].append(at)
        req["first_ms"].append(None)
        req["finish_ms"].append(at + 5.0)
        req["prompt"].append(int(rng.integers(side.prompt_tokens[0], side.prompt_tokens[1] + 1)))
        req["output"].append(0)
        req["reason"].append("error")
        req["category"].append(kinds[0].category)
        req["temperature"].append(kinds[0].temperature)
    arrays = {k: np.array(v, dtype=float) for k, v in sums.items()}
    return SideTrace(side, req, steps, rounds, arrays["batch"], arrays["context"], arrays["prefill"],
                     arrays["committed"], arrays["gamma"], arrays["plain"], arrays["prefill_ms"], arrays["nominal"],
                     np.array(per_round["step"], dtype=np.int64), np.array(per_round["committed"], dtype=float),
                     np.array(per_round["kind"], dtype=np.int64))


def true_speedup(trace: SideTrace, mask: np.ndarray | None = None, *, kind: int | None = None,
                 category: str | None = None) -> float:
    """(Σ committed · T0(step) + Σ p · P(step)) / Σ T(step) over the deployment's rounds,
    noise-free and without pauses: the speedup on its own traffic (module docstring). ``mask``: some of its steps;
    ``kind`` or ``category``: the rounds of one kind of request (or of the kinds with that
    category) only."""
    keep = np.ones(len(trace.round_step), dtype=bool)
    if mask is not None:
        keep &= np.asarray(mask, dtype=bool)[trace.round_step]
    kinds = trace.side.kinds or (Kind(),)
    if kind is not None:
        keep &= trace.round_kind == kind
    if category is not None:
        keep &= np.isin(trace.round_kind, [i for i, k in enumerate(kinds) if k.category == category])
    s = trace.round_step[keep]
    plain = (trace.round_committed[keep] * trace.step_plain_ms[s]).sum() + trace.step_prefill_ms[s].sum()
    return float(plain / trace.step_nominal_ms[s].sum())


def _timestamps(start: dt.datetime, ms: list) -> pa.Array:
    base = int(start.timestamp() * 1_000_000)
    values = [None if v is None else base + int(round(v * 1000)) for v in ms]
    return pa.array(values, type=pa.timestamp("us", tz="UTC"))


def _table(name: str, columns: dict) -> pa.Table:
    declared = {c.name: ARROW[c.type] for c in load_schemas()[name].columns}
    return pa.table({k: pa.array(v, type=declared[k]) if not isinstance(v, pa.Array) else v.cast(declared[k])
                     for k, v in columns.items()})


def tables(trace: SideTrace, *, with_steps: bool = True, with_rounds: bool = True,
           context_lengths: bool = True) -> dict[str, pa.Table]:
    """The trace tables of one simulated deployment (``context_lengths``: rounds.context_len
    written, or left null as a trace that does not record it)."""
    side = trace.side
    dep = side.deployment_id
    r = trace.requests
    out = {"requests": _table("requests", {
        "deployment_id": [dep] * len(r["request_id"]),
        "request_id": r["request_id"],
        "category": r["category"],
        "arrival_time": _timestamps(side.start, r["arrival_ms"]),
        "first_token_time": _timestamps(side.start, r["first_ms"]),
        "finish_time": _timestamps(side.start, r["finish_ms"]),
        "prompt_tokens": r["prompt"],
        "output_tokens": r["output"],
        "finish_reason": r["reason"],
        "temperature": r["temperature"],
    })}
    if with_steps:
        s = trace.steps
        out["steps"] = _table("steps", {
            "deployment_id": [dep] * len(s["step_id"]),
            "step_id": s["step_id"],
            "start_time": _timestamps(side.start, s["start_ms"]),
            "duration_ms": s["duration_ms"],
            "draft_ms": s["draft_ms"],
            "verify_ms": [d - x for d, x in zip(s["duration_ms"], s["draft_ms"])],
            "batch_size": s["batch_size"],
            "num_prefill_tokens": s["prefill"],
        })
    if with_rounds:
        q = trace.rounds
        out["rounds"] = _table("rounds", {
            "deployment_id": [dep] * len(q["request_id"]),
            "request_id": q["request_id"],
            "round_idx": q["round_idx"],
            "step_id": q["step_id"] if with_steps else [None] * len(q["request_id"]),
            "num_draft_tokens": q["drafted"],
            "num_accepted_tokens": q["accepted"],
            "num_committed_tokens": q["committed"],
            "stop_reason": q["stop"],
            "context_len": q["context_len"] if context_lengths else [None] * len(q["request_id"]),
        })
    return out


def deployments_table(sides: list[Side]) -> pa.Table:
    configs = [dict(s.config) for s in sides]
    unknown = {k for c in configs for k in c} - set(CONFIG_COLUMNS)
    if unknown:
        raise ValueError(f"unknown config columns {sorted(unknown)}: expected some of {CONFIG_COLUMNS}")
    columns = {
        "deployment_id": [s.deployment_id for s in sides],
        "model": [s.model for s in sides],
        "method": [s.method_name for s in sides],
        "num_speculative_tokens": [s.max_gamma for s in sides],
        "baseline_id": [s.baseline_id for s in sides],
    }
    declared = {c.name for c in load_schemas()["deployments"].columns}
    for name in CONFIG_COLUMNS:
        if name in declared and any(name in c for c in configs):
            columns[name] = [c.get(name) for c in configs]
    return _table("deployments", columns)


def write(outdir: str | Path, sides: list[Side], *, seed: int = 0, with_steps: bool = True,
          with_rounds: bool = True, context_lengths: bool = True, by_date: bool = False) -> dict[str, SideTrace]:
    """Simulate ``sides`` (each from its own stream of ``seed``) and write their traces to
    ``outdir``: deployments, requests and, unless left out, steps and rounds; ``by_date``:
    each table under ``date=`` folders, a side's rows under its start date (then two sides
    may share a deployment_id on different dates). Returns each side's SideTrace (keyed by
    deployment_id, or by deployment_id@date with ``by_date``), for ``true_speedup``. A
    speculative side's true speedup uses the plain formula of the plain side it names in
    ``baseline_id``, else of the first plain side of its model and config, else of the first
    plain side."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    plain = {s.deployment_id: s for s in sides if s.method_name == "none"}
    first_plain = next(iter(plain.values()), None)
    traces: dict[str, SideTrace] = {}
    parts: dict[tuple[str, str], list[pa.Table]] = {}
    keys = [(s.deployment_id, s.start.date().isoformat() if by_date else "") for s in sides]
    if len(set(keys)) < len(keys):
        raise ValueError("two sides share a deployment_id" + (" and a date" if by_date else ""))
    for index, side in enumerate(sides):
        same = [p for p in plain.values() if dict(p.config) == dict(side.config) and p.model == side.model]
        base = plain.get(side.baseline_id) if side.baseline_id else (same[0] if same else first_plain)
        rng = np.random.default_rng([seed, index])
        spec = side.method_name != "none"
        trace = run_side(side, rng, baseline_costs=base.costs if base is not None and spec else None)
        date = keys[index][1]
        traces[f"{side.deployment_id}@{date}" if by_date else side.deployment_id] = trace
        found = tables(trace, with_steps=with_steps, with_rounds=with_rounds, context_lengths=context_lengths)
        found["deployments"] = deployments_table([side])
        for name, table in found.items():
            parts.setdefault((name, date), []).append(table)
    for (name, date), found in parts.items():
        table = pa.concat_tables(found, promote_options="default")
        if by_date:
            folder = outdir / name / f"date={date}"
            folder.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, folder / "part-0.parquet")
        else:
            pq.write_table(table, outdir / f"{name}.parquet")
    return traces
