"""The prompt-lookup drafter and its greedy replay, checked by hand and against a brute force."""

import numpy as np
import pytest

from analyzer.analysis.ngram import propose, replay_request


# --------------------------------------------------------------------------- propose, by hand

def test_longest_match_wins_over_a_more_recent_shorter_one():
    #        0  1  2  3  4  5  6  7  8  9
    ctx = [1, 2, 3, 4, 2, 3, 5, 1, 2, 3]
    # n=3: the suffix [1,2,3] occurred at 0..2, followed by 4, 2.
    assert propose(ctx, 2, 3, 2) == [4, 2]
    # With n capped at 2, [2,3] last occurred at 4..5, followed by 5, 1.
    assert propose(ctx, 2, 2, 2) == [5, 1]


def test_most_recent_occurrence_is_used():
    #        0  1  2  3  4  5  6  7
    ctx = [5, 6, 7, 5, 6, 8, 5, 6]
    # [5,6] occurs at 0 and 3 (6 is the suffix itself); 3 is the most recent.
    assert propose(ctx, 2, 2, 3) == [8, 5, 6]


def test_drafts_stop_at_the_end_of_the_context():
    assert propose([7, 8, 9, 7, 8], 2, 2, 4) == [9, 7, 8]


def test_overlapping_occurrence_counts():
    # [4,4] at 0..1 ends before the last position; only one token follows it.
    assert propose([4, 4, 4], 2, 2, 3) == [4]


def test_no_match_and_too_short():
    assert propose([1, 2, 3, 4], 1, 3, 4) == []
    assert propose([3, 3], 2, 2, 4) == []  # fewer than n + 1 tokens
    assert propose([3, 3], 1, 2, 4) == [3]
    assert propose([], 1, 2, 4) == []


def test_first_n_that_matches_is_the_longest_one():
    # max_n=4: [9,1,2,3] never occurred before, [1,2,3] did (at 0..2).
    ctx = [1, 2, 3, 7, 8, 9, 1, 2, 3]
    assert propose(ctx, 2, 4, 3) == [7, 8, 9]


def test_numpy_input():
    ctx = np.array([5, 6, 7, 5, 6, 8, 5, 6], dtype=np.int32)
    assert propose(ctx, 2, 2, 3) == [8, 5, 6]


def test_bad_arguments():
    with pytest.raises(ValueError):
        propose([1, 2, 3], 3, 2, 1)
    with pytest.raises(ValueError):
        propose([1, 2, 3], 1, 2, 0)


# --------------------------------------------------------------------------- replay, by hand

PROMPT = [1, 2, 3, 4, 5]


def test_replay_full_acceptance_and_stop():
    # p=1: ctx ends [5, 1]; neither [4,5,1] nor [5,1] occurred: no drafts, commit 1.
    # p=2: ctx ends [1, 2]; [1,2] occurred at 0..1, drafts [3,4,5] = output[2:5]:
    #      K=3, commit min(4, 6-2) = 4 and stop.
    assert replay_request(PROMPT, [1, 2, 3, 4, 5, 9], 2, 3, 3) == [(0, 0, 1), (3, 3, 4)]


def test_replay_stop_truncation_on_the_last_round():
    # p=2 drafts [3,4,5]; output[2:] is [3,4]: K=2, but only 2 tokens remain.
    assert replay_request(PROMPT, [1, 2, 3, 4], 2, 3, 3) == [(0, 0, 1), (3, 2, 2)]


def test_replay_partial_acceptance():
    # p=2 drafts [3,4,5] against [3,7,7]: K=1, commit 2, p=4.
    # p=4: ctx ends [2,3,7]; nothing matches: commit 1. p=5: ends [3,7,7]: commit 1.
    rounds = replay_request(PROMPT, [1, 2, 3, 7, 7, 7], 2, 3, 3)
    assert rounds == [(0, 0, 1), (3, 1, 2), (0, 0, 1), (0, 0, 1)]
    assert sum(r[2] for r in rounds) == 6 - 1


def test_replay_of_one_token_has_no_rounds():
    assert replay_request(PROMPT, [1], 2, 3, 3) == []


# --------------------------------------------------------------------------- brute force

def _brute_propose(ctx, min_n, max_n, k):
    ctx = list(ctx)
    for n in range(max_n, min_n - 1, -1):
        if len(ctx) < n + 1:
            continue
        for start in range(len(ctx) - n - 1, -1, -1):  # occurrences ending before the last position
            if ctx[start:start + n] == ctx[-n:]:
                return ctx[start + n:start + n + k]
    return []


def _brute_replay(prompt, output, min_n, max_n, k):
    rounds, p = [], 1
    while p < len(output):
        draft = _brute_propose(list(prompt) + list(output[:p]), min_n, max_n, k)
        accepted = 0
        while accepted < len(draft) and p + accepted < len(output) and draft[accepted] == output[p + accepted]:
            accepted += 1
        committed = min(accepted + 1, len(output) - p)
        rounds.append((len(draft), accepted, committed))
        p += committed
    return rounds


def test_propose_matches_brute_force():
    rng = np.random.default_rng(7)
    for _ in range(3000):
        ctx = rng.integers(0, int(rng.integers(1, 5)), int(rng.integers(0, 30))).tolist()
        min_n = int(rng.integers(1, 4))
        max_n = min_n + int(rng.integers(0, 4))
        k = int(rng.integers(1, 6))
        assert propose(ctx, min_n, max_n, k) == _brute_propose(ctx, min_n, max_n, k), (ctx, min_n, max_n, k)


def test_replay_matches_brute_force():
    rng = np.random.default_rng(8)
    for _ in range(300):
        vocab = int(rng.integers(2, 6))
        prompt = rng.integers(0, vocab, int(rng.integers(0, 20))).tolist()
        output = rng.integers(0, vocab, int(rng.integers(1, 30))).tolist()
        assert replay_request(prompt, output, 2, 5, 4) == _brute_replay(prompt, output, 2, 5, 4)
