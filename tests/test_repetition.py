"""Repetition statistics (request_repetition, category_repetition, repetition_quartiles).

Expected values are counted by hand below, and checked against a brute-force
reading of docs/metrics.md's definition on random sequences.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from analyzer import api
from tracebuilder import at, deployment, round_row, write_traces


def request(request_id, prompt, output, category="c", **extra):
    return {"deployment_id": "d", "request_id": request_id, "category": category, "arrival_time": at(0),
            "prompt_tokens": len(prompt or []), "output_tokens": len(output or []), "finish_reason": "stop",
            "prompt_token_ids": prompt, "output_token_ids": output, **extra}


def repetition(tmp_path, requests, rounds=None, repeat_n=3):
    write_traces(tmp_path, deployments=[deployment("d")], requests=requests, rounds=rounds or [])
    ws = api.open_traces(tmp_path, repeat_n=repeat_n)
    try:
        by_request = {r[0]: r[1:] for r in ws.con.execute(
            "select request_id, eligible_positions, repeats, prompt_copies, repeat_ratio, prompt_copy_ratio "
            "from request_repetition").fetchall()}
        names = [d[0] for d in ws.con.execute("select * from category_repetition order by category").description]
        categories = [dict(zip(names, row)) for row in ws.con.execute(
            "select * from category_repetition order by category").fetchall()]
    finally:
        ws.close()
    return by_request, categories


def test_hand_counted_sequences(tmp_path):
    by_request, _ = repetition(tmp_path, [
        # s = 1 2 3 4 5 | 1 2 3 4 9 1 2 3 4 (prompt length 5). Output positions 5..13 all have
        # 3 tokens of context. The 4-gram (1,2,3,4) first ends at position 3, inside the prompt;
        # it ends again at 8 and 13: two repeats, both prompt copies. No other 4-gram recurs.
        request("copy", [1, 2, 3, 4, 5], [1, 2, 3, 4, 9, 1, 2, 3, 4]),
        # s = 7 | 1 2 3 4 1 2 3 4: eligible output positions 3..8 (6). (1,2,3,4) ends at 4 then 8:
        # one repeat, and it lies inside the output only, so no prompt copy.
        request("self", [7], [1, 2, 3, 4, 1, 2, 3, 4]),
        # empty prompt: s = 5 5 5 5 5; eligible 3 and 4; (5,5,5,5) recurs at 4: one repeat of two.
        request("empty_prompt", [], [5, 5, 5, 5, 5]),
        # output shorter than n, no prompt: no position has 3 tokens of context.
        request("short", [], [1, 2]),
        # output shorter than n but a long enough prompt: s = 1 2 3 1, position 3 eligible, not a repeat.
        request("short_out", [1, 2, 3], [1]),
    ])
    assert by_request["copy"] == (9, 2, 2, 2 / 9, 2 / 9)
    assert by_request["self"] == (6, 1, 0, 1 / 6, 0.0)
    assert by_request["empty_prompt"] == (2, 1, 0, 0.5, 0.0)
    assert by_request["short"] == (0, 0, 0, None, None)
    assert by_request["short_out"] == (1, 0, 0, 0.0, 0.0)


def test_n_is_configurable(tmp_path):
    # n = 1: s = 1 2 1 2 (prompt 1 2). Output positions 2, 3; bigrams (2,1) at 2 is new,
    # (1,2) at 3 first ended at 1, in the prompt: one repeat, one prompt copy.
    by_request, categories = repetition(tmp_path, [request("r", [1, 2], [1, 2])], repeat_n=1)
    assert by_request["r"] == (2, 1, 1, 0.5, 0.5)
    assert categories[0]["repeat_n"] == 1


def brute_force(prompt, output, n):
    """docs/metrics.md's definition, read literally."""
    eligible = repeats = copies = 0
    for t, token in enumerate(output):
        ctx = prompt + output[:t]
        if len(ctx) < n:
            continue
        eligible += 1
        gram = tuple(ctx[len(ctx) - n:]) + (token,)
        ends = [j + n for j in range(len(ctx) - n) if tuple(ctx[j:j + n + 1]) == gram]
        repeats += bool(ends)
        copies += any(end < len(prompt) for end in ends)
    return eligible, repeats, copies


@settings(max_examples=12, deadline=None)
@given(prompt=st.lists(st.integers(0, 3), max_size=12), output=st.lists(st.integers(0, 3), max_size=12),
       n=st.integers(1, 4))
def test_matches_the_definition_on_random_sequences(tmp_path_factory, prompt, output, n):
    by_request, _ = repetition(tmp_path_factory.mktemp("rep"), [request("r", prompt, output)], repeat_n=n)
    assert by_request["r"][:3] == brute_force(prompt, output, n)


def test_category_means_correlation_and_missing_tokens(tmp_path):
    # Four requests in category c with known repeat ratios, and rounds giving known accept lengths.
    prompts_outputs = {
        "a": ([1, 2, 3, 4, 5], [1, 2, 3, 4, 9, 1, 2, 3, 4]),   # repeat ratio 2/9
        "b": ([7], [1, 2, 3, 4, 1, 2, 3, 4]),                  # 1/6
        "c": ([], [5, 5, 5, 5, 5]),                            # 1/2
        "e": ([1, 2, 3], [1]),                                 # 0
    }
    requests = [request(r, p, o) for r, (p, o) in prompts_outputs.items()]
    requests.append(request("no_tokens", None, None))                # counted, left out
    requests.append(request("short", [], [1, 2]))                    # no eligible position: left out
    accepted = {"a": [4, 2], "b": [1, 1], "c": [3, 3], "e": [0, 2]}  # accept length 1 + C/R: 4, 2, 4, 2
    rounds = [round_row("d", r, i, 4, k) for r, ks in accepted.items() for i, k in enumerate(ks)]
    _, categories = repetition(tmp_path, requests, rounds)
    (c,) = categories
    ratios = np.array([2 / 9, 1 / 6, 1 / 2, 0.0])
    lengths = np.array([4.0, 2.0, 4.0, 2.0])
    assert c["num_requests"] == 4
    assert c["requests_without_tokens"] == 1
    assert c["output_tokens"] == 9 + 8 + 5 + 1
    assert c["repeat_ratio"] == pytest.approx(ratios.mean())
    assert c["repeat_accept_correlation"] == pytest.approx(np.corrcoef(ratios, lengths)[0, 1])
    assert [c["repeat_ratio_q1"], c["repeat_ratio_median"], c["repeat_ratio_q3"]] == pytest.approx(
        np.percentile(ratios, [25, 50, 75]))
    assert c["prompt_copy_ratio"] == pytest.approx(np.mean([2 / 9, 0, 0, 0]))


def test_quartiles_rank_requests_by_repeat_ratio(tmp_path):
    # Eight requests: repeat ratio rises with k (k copies of the 4-gram after a novel run),
    # and accept length rises with it; each quartile holds two requests.
    requests, rounds = [], []
    for k in range(8):
        output = [9, 8, 7, 6] * 1 + [10 + k] + [9, 8, 7, 6] * k
        requests.append(request(f"r{k}", [], output))
        rounds += [round_row("d", f"r{k}", i, 4, min(k, 4) if i == 0 else 0) for i in range(2)]
    write_traces(tmp_path, deployments=[deployment("d")], requests=requests, rounds=rounds)
    ws = api.open_traces(tmp_path)
    rows = ws.con.execute("select quartile, num_requests, mean_accept_length from repetition_quartiles "
                          "order by quartile").fetchall()
    ws.close()
    # accepted counts per request: 0,1,2,3,4,4,4,4 on the first of two rounds each
    assert rows == [(1, 2, 1 + (0 + 1) / 4), (2, 2, 1 + (2 + 3) / 4), (3, 2, 1 + 8 / 4), (4, 2, 1 + 8 / 4)]
