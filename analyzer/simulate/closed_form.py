"""Traces whose true speedup is a closed form: the test bed of the decision.

The sample traces (``traces.py``) are realistic, so nobody knows their true speedup.
These are not realistic, on purpose: every step costs what a formula says, up to a
stated noise, so the speedup a report should find is known exactly and a verdict can
be checked against it (tests/test_decide_closed_form.py, bench/coverage_study.py).

Step costs (ms), for a step of batch size b whose requests hold X tokens of context
in all (Σ context_len over the step's rounds)::

    plain decoding     T0(b, X) = A + S·b + c·X
    speculation at γ   T(b, X)  = A + S·b·(γ + 1) + D·γ + c·X

A is the fixed cost of a forward pass, S the cost of one scored position of one
request, D the cost of one drafting pass, c the cost of a token of context (the KV a
step reads once, whatever the number of positions it scores). Each step's time is its
formula's value times a noise multiplier (log-normal, mean 1, ``noise`` its standard
deviation) and a drift multiplier (uniform in 1 ± ``drift``, a new draw every
``drift_period`` steps of the deployment).

Acceptance: each draft position is accepted with probability ``acceptance`` given the
ones before it were, so a round of γ drafts accepts K = min(G, γ), G geometric, and

    E[L] = 1 + Σ_{i=1..γ} a^i = (1 − a^(γ+1)) / (1 − a).

At one batch size b and context X the true speedup is therefore the seed's

    speedup(b, X) = T0(b, X) · E[L] / T(b, X)

(``closed_form_speedup``), up to stop truncation (a request's last round commits what
is left), which ``true_speedup`` counts: it weighs the formula by the deployment's own
steps, Σ_s committed_s · T0(b_s, X_s) / Σ_s rounds_s · T(b_s, X_s), with noise-free
costs. That is the number the report's speedup estimates: the time plain decoding
would need for the deployment's tokens at its own loads and contexts, over its time.

Load: a deployment runs in ``phases``, each at a fixed batch size for a number of
steps (and, where a phase says so, with prompts of its own lengths). A phase starts with ``batch_size`` requests; whenever one finishes, a new one
takes its slot at once, so every step of the phase has exactly that batch size. When
the phase's steps are done, the requests still running are cut off (finish_reason
``length``). Phases follow each other after a minute of idle time. A request's
first token comes ``ttft_ms`` after its arrival, at the start of its first decode
step; its finish is the end of its last step. There are no prefill steps: every step
is decode-only.
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


@dataclass(frozen=True)
class Costs:
    """The step-cost formulas of the module docstring (ms)."""

    fixed_ms: float = 6.0          # A
    per_position_ms: float = 0.05  # S: one scored position of one request
    per_draft_ms: float = 0.4      # D: one drafting pass (the drafter runs γ times a step)
    per_context_ms: float = 0.0    # c: one token of context in the batch

    def plain_ms(self, batch_size, context_tokens=0.0):
        return self.fixed_ms + self.per_position_ms * batch_size + self.per_context_ms * context_tokens

    def spec_ms(self, batch_size, gamma, context_tokens=0.0):
        return (self.fixed_ms + self.per_position_ms * batch_size * (gamma + 1) + self.per_draft_ms * gamma
                + self.per_context_ms * context_tokens)


@dataclass(frozen=True)
class Phase:
    batch_size: int
    steps: int
    prompt_tokens: tuple[int, int] | None = None   # this phase's prompts (default: the side's)


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

    @property
    def method_name(self) -> str:
        return self.method or ("none" if self.gamma == 0 else "eagle")


def expected_length(acceptance: float, gamma: int) -> float:
    """E[L] = 1 + Σ_{i ≤ γ} a^i."""
    return float(sum(acceptance ** i for i in range(gamma + 1)))


def closed_form_speedup(costs: Costs, acceptance: float, gamma: int, batch_size: float,
                        context_tokens: float = 0.0, baseline_costs: Costs | None = None) -> float:
    """T0(b, X) · E[L] / T(b, X): the speedup at one load and context, without stop truncation.
    ``baseline_costs``: the plain deployment's formula when it differs from the speculative one's."""
    plain = (baseline_costs or costs).plain_ms(batch_size, context_tokens)
    return plain * expected_length(acceptance, gamma) / costs.spec_ms(batch_size, gamma, context_tokens)


@dataclass
class SideTrace:
    """What ``run_side`` simulated: the rows of each table (column dicts) and the noise-free sums
    behind ``true_speedup``."""

    side: Side
    requests: dict
    steps: dict
    rounds: dict
    # per step: batch size, context tokens, committed tokens, noise-free plain and own cost
    step_batch: np.ndarray
    step_context: np.ndarray
    step_committed: np.ndarray
    step_plain_ms: np.ndarray
    step_nominal_ms: np.ndarray


def run_side(side: Side, rng: np.random.Generator, baseline_costs: Costs | None = None) -> SideTrace:
    """Simulate one deployment (module docstring)."""
    gamma, a = side.gamma, side.acceptance
    req: dict[str, list] = {k: [] for k in ("request_id", "arrival_ms", "first_ms", "finish_ms", "prompt",
                                            "output", "reason")}
    steps: dict[str, list] = {k: [] for k in ("step_id", "start_ms", "duration_ms", "draft_ms", "batch_size")}
    rounds: dict[str, list] = {k: [] for k in ("request_id", "round_idx", "step_id", "drafted", "accepted",
                                               "committed", "stop", "context_len")}
    sums: dict[str, list] = {k: [] for k in ("batch", "context", "committed", "plain", "nominal")}
    plain_costs = baseline_costs or side.costs
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
        return {"id": f"req-{next_id:06d}", "arrival": now - side.ttft_ms, "first": now, "prompt": prompt,
                "target": target, "done": 0, "rounds": 0}

    def finish(r: dict, end: float, reason: str) -> None:
        req["request_id"].append(r["id"])
        req["arrival_ms"].append(r["arrival"])
        req["first_ms"].append(r["first"])
        req["finish_ms"].append(end)
        req["prompt"].append(r["prompt"])
        req["output"].append(1 + r["done"])
        req["reason"].append(reason)

    for p_index, phase in enumerate(side.phases):
        if p_index:
            clock += PHASE_GAP_MS
        prompts = phase.prompt_tokens or side.prompt_tokens
        active = [new_request(clock) for _ in range(phase.batch_size)]
        for _ in range(phase.steps):
            if side.drift and step_id % side.drift_period == 0:
                drift_level = float(rng.uniform(1 - side.drift, 1 + side.drift))
            b = len(active)
            context = np.array([r["prompt"] + r["done"] for r in active], dtype=np.int64)
            x_total = float(context.sum())
            nominal = (side.costs.spec_ms(b, gamma, x_total) if gamma else side.costs.plain_ms(b, x_total))
            noise = math.exp(side.noise * float(rng.standard_normal()) - side.noise ** 2 / 2) if side.noise else 1.0
            duration = nominal * noise * drift_level
            if gamma:
                # K = min(G, γ): G leading successes of probability a
                accepted = np.minimum(rng.geometric(1 - a, size=b) - 1, gamma) if a < 1 else np.full(b, gamma)
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
                r["done"] += commit
                r["rounds"] += 1
                committed_total += commit
            steps["step_id"].append(step_id)
            steps["start_ms"].append(clock)
            steps["duration_ms"].append(duration)
            steps["draft_ms"].append(side.costs.per_draft_ms * gamma * noise * drift_level)
            steps["batch_size"].append(b)
            sums["batch"].append(b)
            sums["context"].append(x_total)
            sums["committed"].append(committed_total)
            sums["plain"].append(plain_costs.plain_ms(b, x_total))
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
    return SideTrace(side, req, steps, rounds, *(np.array(sums[k], dtype=float) for k in
                                                ("batch", "context", "committed", "plain", "nominal")))


def true_speedup(trace: SideTrace, mask: np.ndarray | None = None) -> float:
    """Σ committed · T0(b, X) / Σ rounds · T(b, X) over the deployment's steps (``mask``: some of
    them), noise-free: the speedup on its own traffic (module docstring)."""
    m = np.ones(len(trace.step_batch), dtype=bool) if mask is None else mask
    return float((trace.step_committed[m] * trace.step_plain_ms[m]).sum()
                 / (trace.step_batch[m] * trace.step_nominal_ms[m]).sum())


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
        "category": ["chat"] * len(r["request_id"]),
        "arrival_time": _timestamps(side.start, r["arrival_ms"]),
        "first_token_time": _timestamps(side.start, r["first_ms"]),
        "finish_time": _timestamps(side.start, r["finish_ms"]),
        "prompt_tokens": r["prompt"],
        "output_tokens": r["output"],
        "finish_reason": r["reason"],
        "temperature": [0.0] * len(r["request_id"]),
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
            "num_prefill_tokens": [0] * len(s["step_id"]),
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
    return _table("deployments", {
        "deployment_id": [s.deployment_id for s in sides],
        "model": [MODEL] * len(sides),
        "method": [s.method_name for s in sides],
        "num_speculative_tokens": [s.gamma for s in sides],
        "baseline_id": [s.baseline_id for s in sides],
    })


def write(outdir: str | Path, sides: list[Side], *, seed: int = 0, with_steps: bool = True,
          with_rounds: bool = True, context_lengths: bool = True) -> dict[str, SideTrace]:
    """Simulate ``sides`` (each from its own stream of ``seed``) and write their traces to
    ``outdir``: deployments, requests and, unless left out, steps and rounds. Returns each
    deployment's SideTrace, for ``true_speedup``. A speculative side's true speedup uses the
    plain formula of the plain side it names in ``baseline_id`` (or of the first plain side)."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    plain = {s.deployment_id: s for s in sides if s.gamma == 0}
    first_plain = next(iter(plain.values()), None)
    traces: dict[str, SideTrace] = {}
    parts: dict[str, list[pa.Table]] = {"requests": [], "steps": [], "rounds": []}
    for index, side in enumerate(sides):
        base = plain.get(side.baseline_id) if side.baseline_id else first_plain
        rng = np.random.default_rng([seed, index])
        trace = run_side(side, rng, baseline_costs=base.costs if base is not None and side.gamma else None)
        traces[side.deployment_id] = trace
        for name, table in tables(trace, with_steps=with_steps, with_rounds=with_rounds,
                                  context_lengths=context_lengths).items():
            parts[name].append(table)
    pq.write_table(deployments_table(sides), outdir / "deployments.parquet")
    for name, found in parts.items():
        if found:
            pq.write_table(pa.concat_tables(found), outdir / f"{name}.parquet")
    return traces
