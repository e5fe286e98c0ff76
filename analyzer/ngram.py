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
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Round = tuple[int, int, int]  # (num_draft_tokens, num_accepted_tokens, num_committed_tokens)


def propose(context: Sequence[int] | np.ndarray, min_n: int, max_n: int, k: int) -> list[int]:
    """The drafts for the next position: see the module docstring."""
    if min_n < 1 or max_n < min_n or k < 1:
        raise ValueError(f"need 1 <= min_n <= max_n and k >= 1, got min_n={min_n} max_n={max_n} k={k}")
    ctx = np.asarray(context)
    size = len(ctx)
    if size < min_n + 1:
        return []
    # Every earlier position holding the last token ends a candidate occurrence.
    # Restricting ends to <= size - 2 excludes the suffix itself and leaves
    # at least one following token.
    ends = np.flatnonzero(ctx[: size - 1] == ctx[size - 1])
    # Extend the match backwards one token at a time, keeping the candidates
    # that still agree with the suffix; the last non-empty set holds the
    # occurrences of the longest match, n tokens long.
    n = 1
    while len(ends) and n < max_n:
        pos = ends - n
        keep = pos >= 0
        keep[keep] = ctx[pos[keep]] == ctx[size - 1 - n]
        if not keep.any():
            break
        ends, n = ends[keep], n + 1
    if len(ends) == 0 or n < min_n:
        return []
    end = int(ends[-1])  # positions ascend: the last one is the most recent
    return ctx[end + 1: end + 1 + k].tolist()


def replay_request(
    prompt: Sequence[int] | np.ndarray,
    output: Sequence[int] | np.ndarray,
    min_n: int,
    max_n: int,
    k: int,
) -> list[Round]:
    """The greedy n-gram rounds of one request: see the module docstring."""
    prompt_arr = np.asarray(prompt, dtype=np.int64)
    output_arr = np.asarray(output, dtype=np.int64)
    sequence = np.concatenate([prompt_arr, output_arr])
    base, total = len(prompt_arr), len(output_arr)
    output_list = output_arr.tolist()
    rounds: list[Round] = []
    p = 1
    while p < total:
        # A view, not a copy: prompt + output[:p].
        draft = propose(sequence[: base + p], min_n, max_n, k)
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
