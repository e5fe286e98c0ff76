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
    if len(ends) == 0:
        return []
    # Grow each candidate's match backwards one token at a time, up to max_n;
    # `matched` is how many trailing tokens each candidate shares with the suffix.
    matched = np.ones(len(ends), dtype=np.int64)
    alive = np.ones(len(ends), dtype=bool)
    for back in range(1, max_n):
        pos = ends - back
        ok = alive & (pos >= 0)
        ok[ok] = ctx[pos[ok]] == ctx[size - 1 - back]
        alive = ok
        if not alive.any():
            break
        matched += alive
    longest = int(matched.max())
    if longest < min_n:
        return []
    # Longest n first; among occurrences of that n-gram, the most recent one.
    n = min(longest, max_n)
    end = int(ends[np.flatnonzero(matched >= n)[-1]])
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
    rounds: list[Round] = []
    p = 1
    while p < total:
        # A view, not a copy: prompt + output[:p].
        draft = propose(sequence[: base + p], min_n, max_n, k)
        accepted = _common_prefix(draft, output_arr[p: p + len(draft)])
        committed = min(accepted + 1, total - p)
        rounds.append((len(draft), accepted, committed))
        p += committed
    return rounds


def _common_prefix(draft: list[int], truth: np.ndarray) -> int:
    if not draft:
        return 0
    same = np.asarray(draft[: len(truth)]) == truth[: len(draft)]
    mismatch = np.flatnonzero(~same)
    return int(mismatch[0]) if len(mismatch) else len(same)
