"""Prompt-lookup (n-gram) drafting, and a greedy replay of it over a finished request.

The drafter is the one vLLM calls ``method: ngram`` (prompt lookup decoding).
It needs no model: it looks for the end of the text so far earlier in the text
and proposes whatever followed it there.

``propose(context, min_n, max_n, k)``
    For n = max_n, max_n - 1, ..., min_n, the pattern is the last n tokens of
    ``context``. The drafter looks for the **most recent earlier occurrence**
    of that pattern: one that ends before the last position, so the suffix
    itself never matches and at least one token follows the occurrence. The
    first n that has an occurrence wins (longest match first), and the drafts
    are the up to k tokens that followed that occurrence; fewer when the
    context ends first. Nothing matches, or the context is shorter than
    n + 1 tokens for every n: no drafts (a plain decode round).

``replay_request(prompt, output, min_n, max_n, k)``
    Rebuilds the rounds an n-gram deployment would have run for a request
    whose tokens are known. It **assumes greedy decoding**: the target's token
    at each position is the one in ``output`` whatever was drafted, so a draft
    is accepted exactly while it equals the output. ``output[0]`` comes from
    the prefill step, not from a round, so the replay starts at position 1.
    Each round drafts from ``prompt + output[:p]``, accepts the common prefix
    K of the drafts and the output, and commits K + 1 tokens (the accepted
    drafts plus the target's own next token), or only the tokens left when
    the output ends inside the round (stop truncation, last round only).
    Under sampling (temperature > 0) a real engine accepts differently, so the
    replay is an estimate there.

``propose_suffix(context, min_n, max_match, max_k)``
    A suffix-decoding-style drafter (after SuffixDecoding / vLLM ``method:
    suffix``, restricted to one request's own prompt and output). It finds the
    **longest** suffix of ``context``, m tokens with min_n <= m <= max_match,
    that also occurred earlier (same rule as ``propose``: the occurrence ends
    before the last position), and proposes the tokens that followed its most
    recent occurrence. The number of drafts grows with the match:
    γ = min(max_k, m), fewer when the context ends first. A long match is
    strong evidence that the continuation repeats too, so it earns more drafts;
    a 2-token match earns 2. This is SuffixDecoding's rule γ = α · m with the
    scale α = 1, capped at max_k. Unlike the real method it keeps no tree over
    other requests and no frequency statistics: the continuation is the one
    after the most recent occurrence, as in prompt lookup.

``replay_request_suffix(prompt, output, min_n, max_match, max_k)``
    The greedy replay of ``propose_suffix``, round by round as in
    ``replay_request``.

``replay_rounds(prompt, output, min_n, max_n, k, variant=...)`` and ``replay_batch``
    The same rounds as ``replay_request`` (``variant="prompt_lookup"``) or
    ``replay_request_suffix`` (``variant="suffix"``, max_n is max_match and k
    is max_k), as an (R, 3) array, for one request or for many laid back to
    back, computed without searching the context round by round.
    ``match_table`` first finds, for every position of prompt + output, the
    longest n-gram (n <= max_n) ending there that also ended earlier, and its
    most recent earlier end. It works level by level, n = 1, 2, ...: an
    n-gram's key is the pair (id of its (n-1)-gram, its last token), exact in
    an int64; a stable sort by key puts each occurrence right after the
    previous one, and the sorted groups number the n-grams for the next level.
    Only n-grams that occur at least twice are carried on. Tokens are tagged
    with their request, so requests replayed together never match each other.
    The drafts and the accepted prefix of a round starting at every output
    position then follow from k vectorized comparisons, and the replay itself
    is a walk over positions with O(1) work per round: O(L log L) per level
    for L tokens, instead of O(L) numpy work per round.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

Round = tuple[int, int, int]  # (num_draft_tokens, num_accepted_tokens, num_committed_tokens)


def propose(context: Sequence[int] | np.ndarray, min_n: int, max_n: int, k: int) -> list[int]:
    """The drafts for the next position: see the module docstring."""
    if min_n < 1 or max_n < min_n or k < 1:
        raise ValueError(f"need 1 <= min_n <= max_n and k >= 1, got min_n={min_n} max_n={max_n} k={k}")
    ctx = np.asarray(context)
    if len(ctx) < min_n + 1:
        return []
    end, n = _longest_earlier_match(ctx, max_n)
    if n < min_n:
        return []
    return ctx[end + 1: end + 1 + k].tolist()


def propose_suffix(context: Sequence[int] | np.ndarray, min_n: int, max_match: int, max_k: int) -> list[int]:
    """Suffix-decoding-style drafts, γ = min(max_k, match length): see the module docstring."""
    if min_n < 1 or max_match < min_n or max_k < 1:
        raise ValueError(f"need 1 <= min_n <= max_match and max_k >= 1, "
                         f"got min_n={min_n} max_match={max_match} max_k={max_k}")
    ctx = np.asarray(context)
    if len(ctx) < min_n + 1:
        return []
    end, m = _longest_earlier_match(ctx, max_match)
    if m < min_n:
        return []
    return ctx[end + 1: end + 1 + min(max_k, m)].tolist()


def _longest_earlier_match(ctx: np.ndarray, max_n: int) -> tuple[int, int]:
    """(end, n): the longest suffix of ctx, n <= max_n tokens, that also ends at an
    earlier position ``end`` <= len(ctx) - 2 (the most recent such end); (-1, 0) if none."""
    size = len(ctx)
    if size < 2:
        return -1, 0
    # Every earlier position holding the last token ends a candidate occurrence.
    # Restricting ends to <= size - 2 excludes the suffix itself and leaves
    # at least one following token.
    ends = np.flatnonzero(ctx[: size - 1] == ctx[size - 1])
    if len(ends) == 0:
        return -1, 0
    # Extend the match backwards one token at a time, keeping the candidates
    # that still agree with the suffix; the last non-empty set holds the
    # occurrences of the longest match, n tokens long.
    n = 1
    while n < max_n:
        pos = ends - n
        keep = pos >= 0
        keep[keep] = ctx[pos[keep]] == ctx[size - 1 - n]
        if not keep.any():
            break
        ends, n = ends[keep], n + 1
    return int(ends[-1]), n  # positions ascend: the last one is the most recent


def replay_request(
    prompt: Sequence[int] | np.ndarray,
    output: Sequence[int] | np.ndarray,
    min_n: int,
    max_n: int,
    k: int,
) -> list[Round]:
    """The greedy n-gram rounds of one request: see the module docstring."""
    return _replay(prompt, output, lambda ctx: propose(ctx, min_n, max_n, k))


def replay_request_suffix(
    prompt: Sequence[int] | np.ndarray,
    output: Sequence[int] | np.ndarray,
    min_n: int,
    max_match: int,
    max_k: int,
) -> list[Round]:
    """The greedy rounds of the suffix drafter over one request: see the module docstring."""
    return _replay(prompt, output, lambda ctx: propose_suffix(ctx, min_n, max_match, max_k))


def _replay(prompt, output, drafter: Callable[[np.ndarray], list[int]]) -> list[Round]:
    prompt_arr = np.asarray(prompt, dtype=np.int64)
    output_arr = np.asarray(output, dtype=np.int64)
    sequence = np.concatenate([prompt_arr, output_arr])
    base, total = len(prompt_arr), len(output_arr)
    output_list = output_arr.tolist()
    rounds: list[Round] = []
    p = 1
    while p < total:
        # A view, not a copy: prompt + output[:p].
        draft = drafter(sequence[: base + p])
        accepted = _common_prefix(draft, output_list[p: p + len(draft)])
        committed = min(accepted + 1, total - p)
        rounds.append((len(draft), accepted, committed))
        p += committed
    return rounds


def _common_prefix(draft: list[int], truth: list[int]) -> int:
    accepted = 0
    for guess, token in zip(draft, truth):
        if guess != token:
            break
        accepted += 1
    return accepted


# --------------------------------------------------------------------------- fast replay

VARIANTS = ("prompt_lookup", "suffix")


def match_table(sequence: Sequence[int] | np.ndarray, max_n: int,
                segments: Sequence[int] | np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """For every position j of ``sequence``: (length[j], end[j]).

    length[j] is the largest n <= max_n such that the n tokens ending at j also
    end at an earlier position, and end[j] is the most recent such earlier end
    (end[j] < j). length[j] is 0 and end[j] is -1 when sequence[j] never
    occurred before. For the context ``sequence[:j + 1]`` this is the match
    ``propose`` looks for, for all j at once.

    ``segments`` (one non-decreasing id per position, e.g. the request) keeps
    matches inside a segment: each segment gets the table it would get alone.
    Tokens are tagged with their segment, so an n-gram that crosses a segment
    boundary is unique and never matches.
    """
    if max_n < 1:
        raise ValueError(f"need max_n >= 1, got {max_n}")
    seq = np.asarray(sequence).ravel()
    size = len(seq)
    length = np.zeros(size, dtype=np.int64)
    end = np.full(size, -1, dtype=np.int64)
    if size < 2:
        return length, end
    _, token = np.unique(seq, return_inverse=True)
    token = token.astype(np.int64).ravel()
    if segments is not None:
        tagged = np.asarray(segments, dtype=np.int64).ravel() * (int(token.max()) + 1) + token
        _, token = np.unique(tagged, return_inverse=True)
        token = token.astype(np.int64).ravel()
    vocab = int(token.max()) + 1
    ident = np.zeros(size, dtype=np.int64)  # each candidate position's n-gram id at the current level
    cand, key = np.arange(size, dtype=np.int64), token
    for n in range(1, max_n + 1):
        if len(cand) == 0:
            break
        # A stable sort by n-gram keeps the occurrences of one n-gram in position
        # order, so each one's predecessor in the sorted order is its most recent
        # earlier occurrence.
        order = np.argsort(key, kind="stable")
        ordered = key[order]
        first = np.empty(len(ordered), dtype=bool)  # the first occurrence of its n-gram
        first[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
        later, earlier = order[1:][~first[1:]], order[:-1][~first[1:]]
        if len(later) == 0:
            break
        length[cand[later]] = n
        end[cand[later]] = cand[earlier]
        if n == max_n:
            break
        ident[cand[order]] = np.cumsum(first) - 1
        # Only an n-gram that occurs twice can extend to an (n+1)-gram that repeats.
        repeated = np.zeros(len(cand), dtype=bool)
        repeated[later] = True
        repeated[earlier] = True
        active = cand[repeated]
        # The (n+1)-gram ending at j is the n-gram ending at j - 1 plus token[j].
        cand = active[active + 1 < size] + 1
        key = ident[cand - 1] * vocab + token[cand]  # < size * vocab: exact in int64
    return length, end


def replay_batch(
    tokens: Sequence[int] | np.ndarray,
    bounds: Sequence[int] | np.ndarray,
    prompt_lengths: Sequence[int] | np.ndarray,
    min_n: int,
    max_n: int,
    k: int,
    variant: str = "prompt_lookup",
) -> tuple[np.ndarray, np.ndarray]:
    """The greedy replay of many requests at once.

    ``tokens`` holds each request's prompt + output back to back: request r is
    ``tokens[bounds[r]:bounds[r + 1]]`` and its first ``prompt_lengths[r]``
    tokens are the prompt. Returns ``(rounds, request)``: an int64 (R, 3)
    array of (num_draft_tokens, num_accepted_tokens, num_committed_tokens) in
    request and round order, and the request index of each round. Each
    request's rounds equal ``replay_request`` (prompt_lookup) or
    ``replay_request_suffix`` (suffix, with max_n as max_match and k as max_k).
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {', '.join(VARIANTS)}")
    if min_n < 1 or max_n < min_n or k < 1:
        raise ValueError(f"need 1 <= min_n <= max_n and k >= 1, got min_n={min_n} max_n={max_n} k={k}")
    seq = np.asarray(tokens).ravel()
    bounds = np.asarray(bounds, dtype=np.int64).ravel()
    prompt_lengths = np.asarray(prompt_lengths, dtype=np.int64).ravel()
    size, num = len(seq), len(bounds) - 1
    if num < 0 or len(prompt_lengths) != num or bounds[0] != 0 or bounds[-1] != size \
            or (np.diff(bounds) < prompt_lengths).any() or (prompt_lengths < 0).any():
        raise ValueError("replay_batch: bounds must run from 0 to len(tokens), with room for each prompt")
    empty = np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64)
    if size < 2:
        return empty
    segment = np.repeat(np.arange(num, dtype=np.int64), np.diff(bounds))
    length, end = match_table(seq, max_n, segment)
    # Every position i >= 1 as the start of a round: the context is the request's
    # tokens before i, whose last one is at i - 1. Positions that start no round
    # (prompt tokens, a request's first output token) are computed and ignored.
    i = np.arange(1, size, dtype=np.int64)
    m, e = length[:-1], end[:-1]
    stop = bounds[1:][segment[1:]]  # the end of i's request
    cap = np.minimum(k, m) if variant == "suffix" else k
    # The drafts stop at the end of the context: i - 1 - e tokens follow the occurrence.
    drafted = np.where(m >= min_n, np.minimum(cap, i - 1 - e), 0)
    accepted = np.zeros(len(i), dtype=np.int64)
    alive = np.ones(len(i), dtype=bool)
    for t in range(k):
        truth = i + t
        ok = (t < drafted) & (truth < stop)
        ok &= seq[np.minimum(e + 1 + t, size - 1)] == seq[np.minimum(truth, size - 1)]
        alive &= ok
        accepted += alive
    # Walk each request's rounds: O(1) per round. Entry i - 1 of the list is position i.
    acc_list = accepted.tolist()
    starts: list[int] = []
    for at, stop_r in zip((bounds[:-1] + prompt_lengths + 1).tolist(), bounds[1:].tolist()):
        # A request's first round is at its output position 1: output[0] comes from
        # the prefill step. A round that reaches the end of the output is the last.
        while at < stop_r:
            starts.append(at)
            at += acc_list[at - 1] + 1
    if not starts:
        return empty
    at = np.asarray(starts, dtype=np.int64) - 1
    acc = accepted[at]
    committed = np.minimum(acc + 1, stop[at] - i[at])
    owner = segment[at + 1]
    return np.stack([drafted[at], acc, committed], axis=1), owner


def replay_rounds(
    prompt: Sequence[int] | np.ndarray,
    output: Sequence[int] | np.ndarray,
    min_n: int,
    max_n: int,
    k: int,
    variant: str = "prompt_lookup",
) -> np.ndarray:
    """The rounds of ``replay_request`` (prompt_lookup) or ``replay_request_suffix``
    (suffix; max_n is max_match, k is max_k) for one request, as an int64 array of
    shape (R, 3), computed by ``replay_batch``."""
    prompt_arr = np.asarray(prompt, dtype=np.int64).ravel()
    output_arr = np.asarray(output, dtype=np.int64).ravel()
    seq = np.concatenate([prompt_arr, output_arr])
    rounds, _ = replay_batch(seq, [0, len(seq)], [len(prompt_arr)], min_n, max_n, k, variant)
    return rounds
