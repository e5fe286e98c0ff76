"""What would n-gram drafting give on this traffic? Replay it over the logged requests.

``replay_ngram(con, ...)`` reads every request whose ``prompt_token_ids`` and
``output_token_ids`` are known, replays a model-free drafter over prompt +
output (``analyzer.ngram``), and reports per deployment and per (deployment,
category) what it would have drafted, accepted and committed, with a predicted
speedup. Random-token benchmarks have no repetition to copy, so only real
prompts can say what n-gram or suffix drafting is worth (seed, section 4).

Variants
--------
- ``prompt_lookup``: vLLM's ``method: ngram``. The longest suffix of the text
  so far, min_n <= n <= max_n tokens, that occurred earlier; its most recent
  occurrence; the up to k tokens that followed it.
- ``suffix``: SuffixDecoding-style, within the request. The longest earlier
  match m (min_n <= m <= ``max_match``, 32 by default), and
  γ = min(k, m) drafts: a longer match earns more drafts.

Greedy assumption
-----------------
The target's token at each position is taken to be the logged output token
whatever was drafted: a draft is accepted exactly while it equals the output.
That is exact for greedy decoding (temperature 0). Under sampling a real
engine accepts by rejection sampling and its output would differ once a draft
is rejected, so the replay is approximate there; the share of replayed
requests with temperature > 0 is reported.

Per group: num_rounds, num_spec_rounds (rounds with drafts), num_draft_tokens,
num_accepted_tokens, num_committed_tokens, and from them, as in docs/metrics.md,
mean_accept_length = 1 + C / R over rounds with drafts, acceptance_rate =
C / drafted, tokens_per_round = committed / rounds, and no_draft_share =
rounds without drafts / rounds.

Predicted speedup
-----------------
``analyzer.analysis.replay_cost`` prices every row with one formula, tpr · Σ_b
t0(b)·n(b) / Σ_b n(b)·T_round(b), and gives its 95 % interval (a bootstrap of
the replayed requests in the report's 256 request groups). For a baseline (method none) it is what
turning the drafter on would give, with the round-cost assumption stated
(``round_cost_statement``) and the free-verify upper bound beside; see that
module. For a speculative deployment, with its own round-cost figures: its decode-only rounds (with a
clean step) per batch bucket b, their measured time, and its matched
baseline's t0(b) are kept; only the tokens per round are replaced by the
replay's:

    predicted_speedup = Σ_b t0(b) · rounds(b) · tpr_pred / Σ_b rounds(b) · round_ms(b)

over the buckets the baseline covers. Where the measured tokens per round is
the same in every bucket, this is the measured speedup × tpr_pred /
tpr_measured over those buckets. Per deployment the buckets come
from ``speedup_by_batch``; per category from that category's decode-only
rounds (``round_facts``), with the baseline's t0(b) over all of its rounds,
as for ``category_speedup``. It is an approximation: the measured
deployment's round cost is kept, but an n-gram lookup costs almost nothing to
draft (cheaper than a draft model's passes, so a draft-model deployment's
prediction is pessimistic there), verifying more or fewer drafts changes the
verify time, and with more tokens per round a request needs fewer rounds, so
the batch mix would shift. It is null, with a note, when the deployment has
no matched baseline, no steps, or no decode-only rounds in a bucket the
baseline covers (a baseline: when no bucket clears the [evidence] floors, or
fewer than min_baseline_requests requests were replayed).

Deployments whose method is ``ngram`` also get their measured values
(``measured``) beside the prediction; with the same parameters as the
deployment, a greedy replay reproduces them.

Timing
------
``replay_seconds`` and ``tokens_per_s`` in the result are the replay's
wall-clock time and rate, for progress and benchmarks. They differ from run to
run, so they are not part of the document: ``analyzer.render.replay`` leaves
them out of the Markdown, and its ``move_timing_to_stderr`` prints them on
stderr and drops them before the results are written as JSON.
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ..errors import InputProblem
from .config import Evidence, Intervals
from .ngram import VARIANTS, replay_batch
from .replay_cost import GROUPS, Replayed, bootstrap_weights, deployment_costs, predict

DEFAULT_MIN_N = 2
DEFAULT_MAX_N = 5
DEFAULT_K = 4
SUFFIX_MAX_MATCH = 32

READ_ROWS = 1024           # requests per Arrow batch read from DuckDB
TOKEN_BUDGET = 1_000_000   # tokens replayed in one vectorized call (about 100 MB of arrays)

SUMS = ("num_requests", "num_rounds", "num_spec_rounds", "num_draft_tokens", "num_accepted_tokens",
        "num_committed_tokens", "sampled_requests", "unknown_temperature_requests")
MEASURED_SUMS = ("num_requests", "num_rounds", "num_spec_rounds", "num_draft_tokens",
                 "num_accepted_tokens", "num_committed_tokens")
MEASURED_RATIOS = ("mean_accept_length", "acceptance_rate", "tokens_per_round", "speedup")

# Requests whose two token lists are present and hold no null token.
_HAS_IDS = ("prompt_token_ids is not null and output_token_ids is not null "
            "and list_count(prompt_token_ids) = len(prompt_token_ids) "
            "and list_count(output_token_ids) = len(output_token_ids)")

Progress = Callable[[str], None]


def replay_ngram(
    con: duckdb.DuckDBPyConnection,
    *,
    min_n: int = DEFAULT_MIN_N,
    max_n: int = DEFAULT_MAX_N,
    k: int = DEFAULT_K,
    category: str | None = None,
    variant: str = "prompt_lookup",
    max_match: int = SUFFIX_MAX_MATCH,
    verify_cost_ms_per_token: float | None = None,
    evidence: Evidence | None = None,
    intervals: Intervals | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Replay one drafter variant over the requests in ``con`` (clean tables and views).

    ``verify_cost_ms_per_token`` prices a baseline's verification (analysis.replay_cost);
    ``evidence`` and ``intervals`` are the config's floors and bootstrap settings.
    Raises ValueError on bad parameters, when the requests table is absent, when
    ``category`` names no request, or when no request has both token lists.
    """
    evidence = evidence or Evidence()
    intervals = intervals or Intervals()
    variant = variant.replace("-", "_")
    if variant not in VARIANTS:
        raise InputProblem(f"unknown variant {variant!r}; expected prompt_lookup or suffix")
    if min_n < 1 or k < 1:
        raise InputProblem(f"need min_n >= 1 and k >= 1, got min_n={min_n} k={k}")
    if max_n < min_n:
        raise InputProblem(f"need min_n <= max_n, got min_n={min_n} max_n={max_n}")
    if variant == "suffix" and max_match < min_n:
        raise InputProblem(f"need min_n <= max_match, got min_n={min_n} max_match={max_match}")
    if verify_cost_ms_per_token is not None and not 0 <= verify_cost_ms_per_token < math.inf:
        raise InputProblem(f"need a finite verify_cost_ms_per_token >= 0, got {verify_cost_ms_per_token}")
    longest = max_n if variant == "prompt_lookup" else max_match
    parameters: dict[str, Any] = (
        {"min_n": min_n, "max_n": max_n, "k": k} if variant == "prompt_lookup"
        else {"min_n": min_n, "max_match": max_match, "max_k": k, "gamma": "min(max_k, match length)"})
    parameters["category"] = category

    _check_input(con, category)
    where, params = ("coalesce(category, 'unlabeled') = ?", [category]) if category is not None else ("true", [])
    counts = con.execute(f"""
        select deployment_id, count(*) as requests, count(*) filter (where not ({_HAS_IDS})) as missing
        from requests where {where} group by deployment_id order by deployment_id""", params).fetchall()
    missing = {dep: n for dep, _, n in counts if n}
    to_replay = sum(total - n for _, total, n in counts)
    if to_replay == 0:
        raise InputProblem("no request has both prompt_token_ids and output_token_ids: nothing to replay")

    # ------------------------------------------------------------------ the replay
    started = time.perf_counter()
    sums: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: dict.fromkeys(SUMS, 0))
    # per request group (request_uid mod GROUPS): rounds, committed, drafted, for the intervals
    group_sums: dict[tuple[str, str], np.ndarray] = defaultdict(lambda: np.zeros((GROUPS, 3), dtype=np.int64))
    tokens_replayed = requests_done = 0
    last_report = started
    rel = con.sql(f"""
        select deployment_id, coalesce(category, 'unlabeled') as category, temperature,
               request_group(deployment_id, request_id, epoch_us(arrival_time)) as request_group,
               prompt_token_ids, output_token_ids
        from requests where {where} and {_HAS_IDS}""", params=params or None)
    for batch in _arrow_batches(rel, READ_ROWS):
        for chunk in _chunks(batch, TOKEN_BUDGET):
            tokens_replayed += _replay_chunk(chunk, sums, group_sums, min_n, longest, k, variant)
            requests_done += chunk.num_rows
            if progress and time.perf_counter() - last_report > 2:
                last_report = time.perf_counter()
                progress(f"{variant}: replayed {requests_done:,}/{to_replay:,} requests")
    seconds = time.perf_counter() - started
    if progress:
        progress(f"{variant}: replayed {requests_done:,} requests, {tokens_replayed:,} tokens "
                 f"in {seconds:.1f}s")

    # ------------------------------------------------------------------ costs and measured values
    methods = dict(con.execute("select deployment_id, method from deployments").fetchall())
    configs = dict(con.execute("select deployment_id, spec_config from deployments").fetchall())
    speedup = {d: (b, note) for d, b, note in con.execute(
        "select deployment_id, baseline_id, speedup_note from speedup").fetchall()}
    costs = deployment_costs(con, methods, {d: note for d, (_, note) in speedup.items()}, evidence=evidence,
                             per_token_ms=verify_cost_ms_per_token)
    cells_dep, cells_cat, no_draft = _cells(con)
    ngram_deps = sorted({d for d, _ in sums if methods.get(d) == "ngram"})
    measured_dep, measured_cat = _measured(con, ngram_deps, no_draft)
    weights = bootstrap_weights(intervals)

    def row(dep: str, cat: str | None, s: dict[str, int], groups: np.ndarray, cells: tuple | None,
            measured: dict | None, mix: Replayed | None = None) -> dict:
        out: dict[str, Any] = {"deployment_id": dep}
        if cat is not None:
            out["category"] = cat
        out.update(method=methods.get(dep), baseline_id=speedup.get(dep, (None, None))[0])
        out.update({key: s[key] for key in SUMS[:6]})
        out.update(_ratios(s))
        out["sampled_share"] = s["sampled_requests"] / s["num_requests"] if s["num_requests"] else None
        out["unknown_temperature_share"] = (s["unknown_temperature_requests"] / s["num_requests"]
                                            if s["num_requests"] else None)
        replayed = Replayed(s["num_rounds"], s["num_committed_tokens"], s["num_draft_tokens"], groups)
        bucket_cells, all_rounds = cells or ([], 0)
        out.update(predict(replayed, bucket_cells, all_rounds, costs.get(dep), mix=mix, evidence=evidence,
                           weights=weights, min_requests=evidence.min_baseline_requests,
                           num_requests=s["num_requests"]))
        out["measured"] = measured
        return out

    deployments, categories = [], []
    by_dep: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(SUMS, 0))
    groups_dep: dict[str, np.ndarray] = defaultdict(lambda: np.zeros((GROUPS, 3), dtype=np.int64))
    for (dep, cat), s in sorted(sums.items()):
        for key in SUMS:
            by_dep[dep][key] += s[key]
        groups_dep[dep] += group_sums[dep, cat]
    # A category's requests share steps with the deployment's others: its round cost is
    # priced at the deployment's drafts per round (with --category, the category's own).
    mixes = {dep: Replayed(s["num_rounds"], s["num_committed_tokens"], s["num_draft_tokens"], groups_dep[dep])
             for dep, s in by_dep.items()}
    for (dep, cat), s in sorted(sums.items()):
        measured = measured_cat.get((dep, cat)) if dep in ngram_deps else None
        mix = mixes[dep] if mixes[dep].rounds else None
        categories.append(row(dep, cat, s, group_sums[dep, cat], cells_cat.get((dep, cat)), measured, mix))
    if category is None:
        for dep, s in sorted(by_dep.items()):
            measured = measured_dep.get(dep) if dep in ngram_deps else None
            deployments.append(row(dep, None, s, groups_dep[dep], cells_dep.get(dep), measured))

    notes = _notes(variant, parameters, by_dep, missing, ngram_deps, configs, category, costs, evidence, intervals)
    return {
        "variant": variant,
        "parameters": parameters,
        "deployments": deployments,
        "categories": categories,
        "requests_without_token_ids": missing,
        "num_requests_replayed": requests_done,
        "tokens_replayed": tokens_replayed,
        "replay_seconds": seconds,
        "tokens_per_s": tokens_replayed / seconds if seconds > 0 else None,
        "notes": notes,
    }


# --------------------------------------------------------------------------- reading and replaying

def _check_input(con: duckdb.DuckDBPyConnection, category: str | None) -> None:
    present = con.execute("select present from trace_tables where table_name = 'requests'").fetchone()
    if not present or not present[0]:
        raise InputProblem("the requests table is absent: the replay needs prompt_token_ids and output_token_ids")
    if category is None:
        return
    known = [c for (c,) in con.execute(
        "select distinct coalesce(category, 'unlabeled') as c from requests order by c").fetchall()]
    if category not in known:
        raise InputProblem(f"no request has category {category!r} (categories: {', '.join(known) or 'none'})")


def _arrow_batches(rel: duckdb.DuckDBPyRelation, rows: int):
    reader = getattr(rel, "to_arrow_reader", None) or rel.fetch_arrow_reader  # duckdb < 1.4
    return reader(rows)


def _chunks(batch: pa.RecordBatch, budget: int):
    """Slices of consecutive requests holding about ``budget`` tokens each (at least one request)."""
    sizes = (_list_lengths(batch.column("prompt_token_ids"))
             + _list_lengths(batch.column("output_token_ids")))
    start, total = 0, 0
    for i, size in enumerate(sizes.tolist()):
        if total and total + size > budget:
            yield batch.slice(start, i - start)
            start, total = i, 0
        total += size
    if batch.num_rows > start:
        yield batch.slice(start)


def _list_lengths(column: pa.Array) -> np.ndarray:
    offsets = column.offsets.to_numpy()
    return np.diff(offsets).astype(np.int64)


def _flat(column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A list column as (values, lengths), without a Python loop."""
    offsets = column.offsets.to_numpy().astype(np.int64)
    values = column.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    return values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False), np.diff(offsets)


def _replay_chunk(chunk: pa.RecordBatch, sums: dict, group_sums: dict, min_n: int, longest: int, k: int,
                  variant: str) -> int:
    """Replay the requests of ``chunk`` and add their totals to ``sums``, and their rounds,
    committed and drafted tokens per request group to ``group_sums``; return the tokens replayed."""
    prompt, prompt_len = _flat(chunk.column("prompt_token_ids"))
    output, output_len = _flat(chunk.column("output_token_ids"))
    num = chunk.num_rows
    length = prompt_len + output_len
    bounds = np.zeros(num + 1, dtype=np.int64)
    np.cumsum(length, out=bounds[1:])
    # Interleave: request r is its prompt, then its output, from bounds[r].
    tokens = np.empty(int(bounds[-1]), dtype=np.int64)
    prompt_starts = np.concatenate([[0], np.cumsum(prompt_len)[:-1]])
    output_starts = np.concatenate([[0], np.cumsum(output_len)[:-1]])
    tokens[np.repeat(bounds[:-1] - prompt_starts, prompt_len) + np.arange(len(prompt))] = prompt
    tokens[np.repeat(bounds[:-1] + prompt_len - output_starts, output_len) + np.arange(len(output))] = output

    rounds, owner = replay_batch(tokens, bounds, prompt_len, min_n, longest, k, variant)
    per_request = {
        "num_rounds": np.bincount(owner, minlength=num),
        "num_spec_rounds": np.bincount(owner, weights=rounds[:, 0] > 0, minlength=num),
        "num_draft_tokens": np.bincount(owner, weights=rounds[:, 0], minlength=num),
        "num_accepted_tokens": np.bincount(owner, weights=rounds[:, 1], minlength=num),
        "num_committed_tokens": np.bincount(owner, weights=rounds[:, 2], minlength=num),
    }
    temperature = chunk.column("temperature").to_numpy(zero_copy_only=False)
    temperature = np.asarray(temperature, dtype=np.float64)  # null -> NaN
    per_request["sampled_requests"] = temperature > 0
    per_request["unknown_temperature_requests"] = np.isnan(temperature)
    per_request["num_requests"] = np.ones(num, dtype=np.int64)
    # Sum per (deployment, category) group of the chunk.
    keys = list(zip(chunk.column("deployment_id").to_pylist(), chunk.column("category").to_pylist()))
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        groups[key].append(i)
    request_group = chunk.column("request_group").to_numpy(zero_copy_only=False)
    per_group = np.stack([per_request["num_rounds"], per_request["num_committed_tokens"],
                          per_request["num_draft_tokens"]], axis=1).round().astype(np.int64)
    for key, members in groups.items():
        target = sums[key]
        for name, values in per_request.items():
            target[name] += int(round(float(values[members].sum())))
        np.add.at(group_sums[key], request_group[members].astype(np.intp), per_group[members])
    return int(bounds[-1])


def _ratios(s: dict[str, int]) -> dict[str, float | None]:
    rounds, spec = s["num_rounds"], s["num_spec_rounds"]
    drafted, accepted, committed = s["num_draft_tokens"], s["num_accepted_tokens"], s["num_committed_tokens"]
    return {
        "mean_accept_length": 1 + accepted / spec if spec else None,
        "acceptance_rate": accepted / drafted if drafted else None,
        "tokens_per_round": committed / rounds if rounds else None,
        "no_draft_share": (rounds - spec) / rounds if rounds else None,
    }


# --------------------------------------------------------------------------- cost and measured values

def _cells(con: duckdb.DuckDBPyConnection) -> tuple[dict, dict, dict]:
    """The decode cells per deployment and per (deployment, category): ([(batch_bucket,
    decode-only rounds with a step, their time in ms)], all rounds), bucket by bucket in
    order; and the share of rounds without drafts, keyed (deployment, category) and
    (deployment, None).

    The rows are read in a fixed order and the times summed exactly (exact_ms), so the
    float sums that follow come out the same in every run."""
    per_dep: dict[str, tuple[list, list]] = {}
    for dep, bucket, rounds, round_ms in con.execute(
            "select deployment_id, batch_bucket, num_rounds, round_ms from speedup_by_batch "
            "order by deployment_id, bucket_min").fetchall():
        per_dep.setdefault(dep, ([], [0]))[0].append((bucket, rounds, round_ms * rounds))
    per_cat: dict[tuple[str, str], tuple[list, list]] = {}
    no_draft: dict[tuple[str, str | None], list[int]] = {}
    # One pass over the rounds: per (deployment, category, batch bucket), all rounds,
    # rounds without drafts, and the decode-only rounds with a step and their time.
    for dep, cat, bucket, rounds, without, decode, time_ms in con.execute("""
            select deployment_id, category, batch_bucket, count(*),
                   count(*) filter (where num_draft_tokens = 0),
                   count(*) filter (where decode_only and has_step),
                   cast(sum(exact_ms(duration_ms)) filter (where decode_only and has_step) as double)
            from round_facts
            group by deployment_id, category, batch_bucket
            order by deployment_id, category, batch_bucket_min(batch_bucket) nulls last""").fetchall():
        cells, total = per_cat.setdefault((dep, cat), ([], [0]))
        total[0] += rounds
        per_dep.setdefault(dep, ([], [0]))[1][0] += rounds
        if decode:
            cells.append((bucket, decode, time_ms))
        for key in ((dep, cat), (dep, None)):
            counts = no_draft.setdefault(key, [0, 0])
            counts[0] += without
            counts[1] += rounds
    shares = {key: without / rounds for key, (without, rounds) in no_draft.items() if rounds}
    return ({d: (c, t[0]) for d, (c, t) in per_dep.items()}, {k: (c, t[0]) for k, (c, t) in per_cat.items()},
            shares)


def _measured(con: duckdb.DuckDBPyConnection, deps: list[str], no_draft: dict) -> tuple[dict, dict]:
    """The measured acceptance, no-draft share and speedup of the ngram deployments."""
    if not deps:
        return {}, {}
    marks = ", ".join("?" for _ in deps)
    columns = ", ".join(MEASURED_SUMS + MEASURED_RATIOS[:-1])
    per_dep = {}
    for dep, *values in con.execute(f"""
            select a.deployment_id, {", ".join("a." + c for c in MEASURED_SUMS + MEASURED_RATIOS[:-1])},
                   s.speedup
            from accept_length as a left join speedup as s on s.deployment_id = a.deployment_id
            where a.deployment_id in ({marks})""", deps).fetchall():
        per_dep[dep] = _ordered(dict(zip(MEASURED_SUMS + MEASURED_RATIOS, values)), no_draft.get((dep, None)))
    per_cat = {}
    for dep, cat, *values in con.execute(f"""
            select deployment_id, category, {columns}, speedup
            from accept_length_by_category where deployment_id in ({marks})""", deps).fetchall():
        per_cat[(dep, cat)] = _ordered(dict(zip(MEASURED_SUMS + MEASURED_RATIOS, values)), no_draft.get((dep, cat)))
    return per_dep, per_cat


def _ordered(m: dict, no_draft_share: float | None) -> dict:
    m["no_draft_share"] = no_draft_share
    keys = MEASURED_SUMS + ("mean_accept_length", "acceptance_rate", "tokens_per_round", "no_draft_share",
                            "speedup")
    return {key: m.get(key) for key in keys}


def _ngram_config(spec_config: str | None) -> tuple[int | None, int | None, int | None]:
    try:
        config = json.loads(spec_config) if spec_config else {}
    except (TypeError, ValueError):
        return None, None, None
    if not isinstance(config, dict):
        return None, None, None
    return (config.get("prompt_lookup_min"), config.get("prompt_lookup_max"),
            config.get("num_speculative_tokens"))


def _notes(variant, parameters, by_dep, missing, ngram_deps, configs, category, costs, evidence,
           intervals) -> list[str]:
    replayed = sum(s["num_requests"] for s in by_dep.values())
    sampled = sum(s["sampled_requests"] for s in by_dep.values())
    unknown = sum(s["unknown_temperature_requests"] for s in by_dep.values())
    notes = []
    if variant == "prompt_lookup":
        notes.append(f"Prompt lookup (vLLM method ngram): the longest suffix of the text so far, "
                     f"n = {parameters['min_n']}..{parameters['max_n']} tokens, that occurred earlier in "
                     f"the request; up to k = {parameters['k']} drafts from its most recent occurrence.")
    else:
        notes.append(f"Suffix drafting (SuffixDecoding-style, within one request): the longest earlier "
                     f"match m, {parameters['min_n']} <= m <= {parameters['max_match']} tokens, and "
                     f"γ = min({parameters['max_k']}, m) drafts from its most recent occurrence. Unlike "
                     f"SuffixDecoding it keeps no tree over other requests and no frequency statistics.")
    temperature = f"{sampled / replayed:.1%} of the {replayed:,} replayed requests have temperature > 0"
    if unknown:
        temperature += f", and {unknown / replayed:.1%} an unknown temperature"
    notes.append("Greedy assumption: a draft is accepted exactly while it equals the logged output. "
                 "This is exact for greedy decoding (temperature 0) and approximate under sampling, "
                 f"where a real engine accepts by rejection sampling; {temperature}.")
    notes.append("For a speculative deployment, predicted_speedup keeps its measured round cost: its "
                 "decode-only rounds per batch bucket and their measured time, and the matched baseline's "
                 "t0(b); only tokens per round are replaced by the replay's (Σ_b t0(b)·rounds(b)·tpr_pred / "
                 "Σ_b rounds(b)·round_ms(b)). n-gram drafting is cheaper than a draft model's passes, "
                 "verifying more tokens costs more, and more tokens per round would change the batch mix: "
                 "treat it as an estimate of the order of magnitude.")
    baselines = sorted(dep for dep in by_dep if costs.get(dep) and costs[dep].is_baseline)
    if baselines:
        notes.append(f"For a baseline (method none), predicted_speedup is what turning this drafter on would "
                     f"give: t0(b)·tpr_pred / T_round(b) per batch bucket, throughput-weighted over its decode "
                     f"rounds, with the lookup free and T_round(b) the round time assumed (its statement "
                     f"stands beside it); predicted_speedup_upper_bound prices verification at 0. A batch "
                     f"bucket needs {evidence.min_baseline_steps} decode steps and "
                     f"{evidence.min_baseline_requests} requests of the baseline ([evidence] "
                     f"min_baseline_steps, min_baseline_requests), a row {evidence.min_baseline_requests} "
                     f"replayed requests; below that it says not enough data.")
    for dep in baselines:
        if costs[dep].source_note:
            notes.append(f"{costs[dep].source_note[0].upper()}{costs[dep].source_note[1:]}: its "
                         f"predicted_speedup is the upper bound.")
    notes.append(f"Intervals: 95%, a Poisson bootstrap of the replayed requests in {GROUPS} groups "
                 f"({intervals.replicates:,} replicates, seed {intervals.seed}); t0 and the round cost are held "
                 f"fixed.")
    if missing:
        listed = ", ".join(f"{dep} {n:,}" for dep, n in sorted(missing.items()))
        notes.append(f"Requests without prompt_token_ids or output_token_ids are left out: {listed}.")
    for dep in ngram_deps:
        lo, hi, gamma = _ngram_config(configs.get(dep))
        used = (parameters["min_n"], parameters.get("max_n"), parameters.get("k"))
        if variant == "prompt_lookup" and (lo, hi, gamma) != used:
            notes.append(f"{dep} is configured with prompt_lookup_min={lo}, prompt_lookup_max={hi}, "
                         f"num_speculative_tokens={gamma}; the replay used min_n={used[0]}, max_n={used[1]}, "
                         f"k={used[2]}, so its measured values are not the replay's target.")
    if category is not None:
        notes.append(f"Only category {category!r} was replayed; deployment totals are left out."
                     + (" A baseline's rounds are priced at this category's drafts per round, as if its steps "
                        "held only this category's requests (a full replay prices them at the deployment's)."
                        if baselines else ""))
    notes.append("Random-token benchmarks have no repetition to copy: only real prompts can tell what "
                 "n-gram or suffix drafting is worth.")
    return notes
