"""Requests to look at (request_anomalies, anomaly_checks, the report's section and JSON key).

Every expected value is counted by hand in the comments. One trace holds every case,
each kind in deployments of its own, so that one deployment's statistics (acceptance
rate, median max_stall) are exactly the ones worked out for it.
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from analyzer import api
from analyzer.analysis.config import Anomalies, load_config
from analyzer.cli import main
from analyzer.render import html, markdown
from tracebuilder import deployment, request, round_row, step, write_table, write_traces

CYCLE = [1, 2] * 32                  # 64 output tokens, a 2-token loop


def with_tokens(dep, rid, prompt, output, **extra):
    return request(dep, rid, output_tokens=len(output), prompt_token_ids=prompt, output_token_ids=output, **extra)


def cycle_after(distinct: int, cycle: int) -> list[int]:
    """``distinct`` tokens seen nowhere else, then a 2-token loop of ``cycle`` tokens."""
    return list(range(100, 100 + distinct)) + [1, 2] * (cycle // 2) + [1] * (cycle % 2)


PROMPT = list(range(1000, 1070))                     # 70 distinct tokens of "code"
EDIT = PROMPT[:35] + [5000] + PROMPT[36:]            # the same 70 tokens with one changed

# --- looping (deployment "loop"; no rounds) -------------------------------------------------
# n = 3: an output position t is self-eligible when t ≥ 3; a self-repeat when its 4-gram
# (output[t-3..t]) ended earlier inside the output.
LOOPING = [
    # 64-token 2-cycle after a 3-token prompt. Self: eligible t = 3..63 (61); the 4-grams are
    # (1,2,1,2) first at t=3 and (2,1,2,1) first at t=4, so t = 5..63 repeat: 59 of 61.
    # With the prompt: every t has 3 tokens of context (64 eligible); the grams ending at
    # t = 0, 1, 2 hold prompt tokens and are new, t = 3, 4 are new: 59 of 64 repeat.
    with_tokens("loop", "cycle", [90, 91, 92], CYCLE),
    # A code edit copies its prompt: s = prompt + output, 70 output positions all eligible;
    # the 4-gram ending at output t is in the prompt unless it crosses the prompt's end
    # (t < 3) or holds the changed token (t = 35..38): 70 − 3 − 4 = 63 prompt copies (0.9).
    # Inside the output every token differs: 0 self-repeats of 67 eligible. Not looping.
    with_tokens("loop", "edit", PROMPT, EDIT),
    # No prompt ids: only the output is read. (5,5,5,5) first ends at t=3: 60 of 61 repeat.
    with_tokens("loop", "no_prompt", None, [5] * 64),
    # 68 tokens: 11 distinct, then a 57-token loop. Eligible t = 3..67 (65). The loop's grams
    # end at t = 14..67 (54), the first two new: 52 of 65 = 0.8 exactly, flagged.
    with_tokens("loop", "at_ratio", [90], cycle_after(11, 57)),
    # one loop token fewer: 51 of 65 = 0.785, not flagged.
    with_tokens("loop", "below_ratio", [90], cycle_after(12, 56)),
    # a 63-token loop: 58 of 60 repeat, but output_tokens 63 < 64.
    with_tokens("loop", "short", [90], [1, 2] * 31 + [1]),
    # no output ids: not checked for looping.
    request("loop", "no_ids", output_tokens=100),
]

# --- no_acceptance (deployments "acc" and "low"; one drafted token per round) ---------------
def rounds(dep, rid, drafted_and_accepted: list[tuple[int, int]]) -> list[dict]:
    return [round_row(dep, rid, i, d, a) for i, (d, a) in enumerate(drafted_and_accepted)]


def acceptance_deployment(dep: str, good_accepted: int) -> tuple[list[dict], list[dict]]:
    """zero: 16 speculative rounds, none accepted; fifteen: 15; mixed: 15 speculative
    rounds and 5 that drafted nothing, none accepted; good: 14 drafts, ``good_accepted``
    accepted. Drafts 16 + 15 + 15 + 14 = 60: 12 accepted make acceptance_rate 0.2 exactly."""
    rows = (rounds(dep, "zero", [(1, 0)] * 16) + rounds(dep, "fifteen", [(1, 0)] * 15)
            + rounds(dep, "mixed", [(1, 0)] * 15 + [(0, 0)] * 5)
            + rounds(dep, "good", [(1, 1)] * good_accepted + [(1, 0)] * (14 - good_accepted)))
    reqs = [request(dep, rid) for rid in ("zero", "fifteen", "mixed", "good")]
    return reqs, rows


ACC_REQUESTS, ACC_ROUNDS = acceptance_deployment("acc", 12)     # 12/60 = 0.2: zero is flagged
LOW_REQUESTS, LOW_ROUNDS = acceptance_deployment("low", 11)     # 11/60 < 0.2: nothing is


# --- stall (one round per request, in its own step that starts at the first token, so the
# request's only streaming gap, its max_stall, is the step's duration) -----------------------
def stall_deployment(dep: str, gaps: list[float]) -> dict:
    reqs, steps, rows = [], [], []
    for i, gap in enumerate(gaps):
        first = 10_000.0 * i + 50
        reqs.append(request(dep, f"{dep}{i}", arrival=first - 50, first=first, finish=first + gap + 1))
        steps.append(step(dep, i + 1, gap, start_ms=first))
        rows.append(round_row(dep, f"{dep}{i}", 0, 2, 1, step_id=i + 1))
    return {"requests": reqs, "steps": steps, "rounds": rows}


STALLS = {
    "st": [250.0, 250.0, 1000.0],          # median 250: 4 × 250 = 1000 = max_stall, flagged
    "hi": [260.0, 260.0, 1000.0],          # median 260: 1000 < 1040, not flagged
    "lo": [100.0, 100.0, 100.0, 999.0],    # 999 < 1000 ms, not flagged
    "far": [100.0, 100.0, 2000.0],         # median 100: threshold max(1000, 400) = 1000, flagged
}


def all_tables() -> dict:
    deployments = [deployment("loop"), deployment("acc", gamma=1), deployment("low", gamma=1)]
    reqs = LOOPING + ACC_REQUESTS + LOW_REQUESTS
    steps, rows = [], ACC_ROUNDS + LOW_ROUNDS
    for dep, gaps in STALLS.items():
        deployments.append(deployment(dep))
        tables = stall_deployment(dep, gaps)
        reqs += tables["requests"]
        steps += tables["steps"]
        rows += tables["rounds"]
    # a request of "st" with no first token time: its one emission has no gap before it,
    # so its max_stall is unknown; it is not checked, and the median stays over the three
    reqs.append(request("st", "st_untimed", arrival=90_000, first=None, finish=96_000))
    steps.append(step("st", 10, 5000.0, start_ms=90_000))
    rows.append(round_row("st", "st_untimed", 0, 2, 1, step_id=10))
    return dict(deployments=deployments, requests=reqs, steps=steps, rounds=rows)


EXPECTED = [
    # (deployment_id, request_id, kind, value, threshold), in the report's order
    ("loop", "no_prompt", "looping", 60 / 61, 0.8),
    ("loop", "cycle", "looping", 59 / 61, 0.8),
    ("loop", "at_ratio", "looping", 0.8, 0.8),
    ("acc", "zero", "no_acceptance", 16.0, 16.0),
    ("far", "far2", "stall", 2000.0, 1000.0),
    ("st", "st2", "stall", 1000.0, 1000.0),
]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("anomalies")
    return write_traces(root, **all_tables())


@pytest.fixture(scope="module")
def document(traces):
    ws = api.open_traces(traces)
    try:
        assert ws.con.execute("select count(*) from rejected_rows").fetchone()[0] == 0
        yield api.report_document(ws)
    finally:
        ws.close()


def test_self_repeat_columns_by_hand(traces):
    ws = api.open_traces(traces)
    try:
        got = {r[0]: r[1:] for r in ws.con.execute(
            "select request_id, eligible_positions, repeats, prompt_copies, repeat_ratio, "
            "self_eligible_positions, self_repeats, self_repeat_ratio, output_tokens from request_repetition").fetchall()}
    finally:
        ws.close()
    assert got == {
        "cycle": (64, 59, 0, 59 / 64, 61, 59, 59 / 61, 64),
        "edit": (70, 63, 63, 0.9, 67, 0, 0.0, 70),
        "no_prompt": (None, None, None, None, 61, 60, 60 / 61, 64),
        # with the one-token prompt [90]: t = 0, 1 lack context, so 66 eligible; the loop's
        # 52 (51) repeats are the only repeats, none in the prompt
        "at_ratio": (66, 52, 0, 52 / 66, 65, 52, 0.8, 68),
        "below_ratio": (66, 51, 0, 51 / 66, 65, 51, 51 / 65, 68),
        "short": (61, 58, 0, 58 / 61, 60, 58, 58 / 60, 63),
    }


def test_the_flagged_requests(document):
    got = [(a["deployment_id"], a["request_id"], a["kind"], a["value"], a["threshold"])
           for a in document["anomalies"]]
    assert got == EXPECTED
    assert set(document["anomalies"][0]) == {"deployment_id", "request_id", "partition", "kind", "value", "threshold",
                                             "detail"}
    # an unpartitioned requests table: nothing to tell requests of one id apart by
    assert {a["partition"] for a in document["anomalies"]} == {None}
    detail = {(a["request_id"], a["kind"]): a["detail"] for a in document["anomalies"]}
    assert detail[("cycle", "looping")] == (
        "self_repeat_ratio(3): 59 of 61 output positions repeat the output; 64 output tokens")
    assert detail[("zero", "no_acceptance")] == (
        "0 of 16 drafts accepted over 16 speculative rounds; the deployment accepts 20.0%")
    assert detail[("st2", "stall")] == (
        "max_stall 1000.0 ms; the deployment's median max_stall is 250.0 ms over 3 requests")


def test_checks_count_what_each_rule_could_read(document):
    checks = {(c["deployment_id"], c["kind"]): (c["num_requests"], c["checked"], c["not_checked"], c["flagged"])
              for c in document["anomaly_checks"]}
    # "loop": 7 requests, 6 with output ids, none with rounds (so none with a max_stall)
    assert checks[("loop", "looping")] == (7, 6, 1, 3)
    assert checks[("loop", "no_acceptance")] == (7, 0, 7, 0)
    assert checks[("loop", "stall")] == (7, 0, 7, 0)
    assert checks[("acc", "no_acceptance")] == (4, 4, 0, 1)
    assert checks[("low", "no_acceptance")] == (4, 4, 0, 0)
    # "acc" and "low" rounds have no steps: no streaming gap has a time
    assert checks[("acc", "stall")] == (4, 0, 4, 0)
    assert checks[("st", "stall")] == (4, 3, 1, 1)
    assert checks[("far", "stall")] == (3, 3, 0, 1)
    assert checks[("hi", "stall")] == (3, 3, 0, 0)
    # token ids: only 6 of "loop" have them: 1 + 4 + 4 + 4 + 3 + 4 + 3 requests have none
    notes = [n for n in document["notes"] if "requests to look at" in n]
    assert notes == [
        "23 requests have no output_token_ids: they are not checked for looping (requests to look at)",
        "7 requests have no clean rounds: they are not checked for no_acceptance (requests to look at)",
        "16 requests have no known max_stall (no first_token_time or no round with a clean step): they are not "
        "checked for stall (requests to look at)",
    ]
    assert document["anomaly_thresholds"] == {
        "looping_min_output_tokens": 64, "looping_min_self_repeat_ratio": 0.8, "no_acceptance_min_spec_rounds": 16,
        "no_acceptance_min_deployment_acceptance": 0.2, "stall_min_ms": 1000.0, "stall_min_median_multiple": 4.0,
        "repeat_n": 3}


def test_a_config_file_moves_the_thresholds(traces, tmp_path):
    path = tmp_path / "gates.toml"
    path.write_text("[anomalies]\nlooping_min_self_repeat_ratio = 0.78\nno_acceptance_min_spec_rounds = 15\n"
                    "stall_min_ms = 999\nstall_min_median_multiple = 3.8\n", encoding="utf-8")
    config = load_config(path)
    assert config.anomalies == Anomalies(looping_min_self_repeat_ratio=0.78, no_acceptance_min_spec_rounds=15,
                                         stall_min_ms=999.0, stall_min_median_multiple=3.8)
    ws = api.open_traces(traces)
    try:
        doc = api.report_document(ws, config=load_config(path))
    finally:
        ws.close()
    got = [(a["deployment_id"], a["request_id"], a["kind"], a["value"], a["threshold"]) for a in doc["anomalies"]]
    assert got == [
        ("loop", "no_prompt", "looping", 60 / 61, 0.78),
        ("loop", "cycle", "looping", 59 / 61, 0.78),
        ("loop", "at_ratio", "looping", 0.8, 0.78),
        ("loop", "below_ratio", "looping", 51 / 65, 0.78),           # 0.785 ≥ 0.78
        ("acc", "zero", "no_acceptance", 16.0, 15.0),
        ("acc", "fifteen", "no_acceptance", 15.0, 15.0),             # mixed has 15 speculative rounds too,
        ("acc", "mixed", "no_acceptance", 15.0, 15.0),               # its 5 draftless rounds do not count
        ("far", "far2", "stall", 2000.0, 999.0),
        ("hi", "hi2", "stall", 1000.0, 999.0),                       # 3.8 × 260 = 988 < 999
        ("st", "st2", "stall", 1000.0, 999.0),
        ("lo", "lo3", "stall", 999.0, 999.0),
    ]


def test_sql_reads_the_defaults(traces):
    result = CliRunner().invoke(main, ["sql", str(traces), "select deployment_id, request_id, kind, value, threshold "
                                       "from request_anomalies order by kind, value desc, request_id", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert [tuple(r.values()) for r in json.loads(result.output)] == [tuple(e) for e in EXPECTED]


@pytest.mark.parametrize("text, key, problem", [
    ("[anomalies]\nstall_min_ms = -1\n", "anomalies.stall_min_ms", "a number of at least 0, found -1"),
    ("[anomalies]\nlooping_min_self_repeat_ratio = 1.5\n", "anomalies.looping_min_self_repeat_ratio", "between 0 and 1"),
    ("[anomalies]\nno_acceptance_min_spec_rounds = 2.5\n", "anomalies.no_acceptance_min_spec_rounds", "an integer"),
    ("[anomalies]\nstall_ms = 5\n", "anomalies.stall_ms", "unknown key"),
])
def test_a_bad_threshold_exits_2_naming_file_and_key(traces, tmp_path, text, key, problem):
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(main, ["report", str(traces), "--config", str(path)])
    assert result.exit_code == 2
    message = result.output.strip()
    assert len(message.splitlines()) == 1 and "Traceback" not in message
    assert f"{path}: {key}: " in message and problem in message


def test_markdown_section(document):
    text = markdown.render(document)
    start = text.index("## Requests to look at")
    section = text[start:text.index("\n## ", start)]
    assert "### looping: 3 flagged of 6 requests checked" in section
    assert "Rule: output_tokens ≥ 64 and self_repeat_ratio(3) ≥ 0.8. It usually means a generation stuck" in section
    assert "| loop | cycle | 0.967 | 0.800 | self_repeat_ratio(3): 59 of 61 output positions repeat the output; " \
           "64 output tokens |" in section
    # every request with clean rounds: acc 4, low 4, and the stall deployments' 4 + 3 + 4 + 3
    assert "### no_acceptance: 1 flagged of 22 requests checked" in section
    assert "| acc | zero | 16 | 16 | 0 of 16 drafts accepted over 16 speculative rounds; " \
           "the deployment accepts 20.0% |" in section
    assert "### stall: 2 flagged of 13 requests checked" in section
    assert "| far | far2 | 2,000.0 | 1,000.0 |" in section
    assert [line for line in section.splitlines() if "could not be checked" in line] == [
        f"{n} requests could not be checked (see the notes)." for n in (23, 7, 16)]


def test_only_the_top_20_of_a_kind_are_listed(document):
    many = dict(document, anomalies=[
        {"deployment_id": "d", "request_id": f"r{i:02d}", "kind": "stall", "value": 2000.0 - i,
         "threshold": 1000.0, "detail": ""} for i in range(23)])
    text = markdown.render(many)
    assert "| d | r19 |" in text and "| d | r20 |" not in text
    assert "3 more in the JSON key `anomalies`." in text
    page = html.render(many)
    assert "<td>r19</td>" in page and "<td>r20</td>" not in page


def test_html_section(document):
    """The page shows the Markdown section: a heading, rule and table per kind."""
    page = html.render(document)
    assert "<h2>Requests to look at</h2>" in page
    assert re.search(r"<h3>looping: [0-9,]+ flagged of [0-9,]+ requests checked</h3>", page)
    assert "<tr><td>loop</td><td>cycle</td><td>0.967</td><td>0.800</td>" in page
    assert "<p>Rule: max_stall ≥ 1000 ms and ≥ 4 × the deployment&#x27;s median max_stall. It usually means " in page


# --- partitions ------------------------------------------------------------------------------
def partitioned_traces(root):
    """Request ids that restart in each partition, under two partition columns of any name.
    region=eu/pool=blue: r1 (16 rounds drafting 1, accepting 0) and good (16 rounds drafting 1,
    accepting 1); region=us/pool=blue: another r1 like the first. Drafts 48, accepted 16:
    acceptance 1/3 ≥ 0.2, so both r1 are flagged no_acceptance with value 16."""
    write_traces(root, deployments=[deployment("acc")])
    eu, us = "region=eu/pool=blue", "region=us/pool=blue"
    write_table(root, "requests", {eu: [request("acc", "r1"), request("acc", "good")], us: [request("acc", "r1")]})
    write_table(root, "rounds", {eu: rounds("acc", "r1", [(1, 0)] * 16) + rounds("acc", "good", [(1, 1)] * 16),
                                 us: rounds("acc", "r1", [(1, 0)] * 16)})
    return root


def test_partition_values_tell_requests_of_one_id_apart(tmp_path):
    traces = partitioned_traces(tmp_path)
    result = CliRunner().invoke(main, ["report", str(traces), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    # the columns by name (pool before region), as rejected_rows.row_key spells them
    assert [(a["request_id"], a["partition"], a["kind"], a["value"]) for a in doc["anomalies"]] == [
        ("r1", "pool=blue, region=eu", "no_acceptance", 16.0),
        ("r1", "pool=blue, region=us", "no_acceptance", 16.0)]
    result = CliRunner().invoke(main, ["report", str(traces)])
    assert "| deployment | request | partition | value | threshold | detail |" in result.output
    assert "| acc | r1 | pool=blue, region=eu | 16 | 16 | 0 of 16 drafts accepted" in result.output
    assert "| acc | r1 | pool=blue, region=us | 16 | 16 | 0 of 16 drafts accepted" in result.output

