"""The importers on a current llama.cpp's own output: the kept runs of e2e/llamacpp/run.sh.

tests/fixtures/llamacpp_e2e/SOURCES.md says how they were made (llama.cpp build, models, flags). These
tests run where the build is not: every channel of every kept run imports with exactly the totals that
llama.cpp printed, read here independently of the importers (tests/llamacpp_printed.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llamacpp_printed import (DEBUG_ROUND, channel_totals_agree, channels_agree, imported_rounds, log_request_totals, log_requests,
                             log_rounds, specan, sums)

FIXTURES = Path(__file__).parent / "fixtures" / "llamacpp_e2e"
RUNS = sorted(p.parent.relative_to(FIXTURES).as_posix() for p in FIXTURES.glob("*/*/server.log"))


def test_the_kept_runs_are_there():
    # two speculation lengths × same/other
    assert len(RUNS) == 4, RUNS


@pytest.mark.parametrize("run", RUNS)
def test_every_channel_imports_with_the_printed_totals(run, tmp_path):
    accepted, drafted = channel_totals_agree(FIXTURES / run, run.replace("/", "-"), tmp_path)
    assert drafted > 0


@pytest.mark.parametrize("n_max", sorted({r.split("/")[0] for r in RUNS}))
def test_same_draft_accepts_far_more_than_other(n_max):
    same_a, same_g = log_request_totals(FIXTURES / n_max / "same" / "server.log")
    other_a, other_g = log_request_totals(FIXTURES / n_max / "other" / "server.log")
    assert same_a / same_g >= 0.9
    assert other_a / other_g <= 0.5 * same_a / same_g


def test_debug_lines_alone_are_completed_by_the_round_they_skip(tmp_path):
    # Without LLAMA_TRACE only the debug per-round line is printed, and build 11434 returns before it
    # when a round ends the request: those rounds are the request's totals less its printed rounds.
    log = FIXTURES / "debug_lines_only" / "server.log"
    printed, debug = log_requests(log), log_rounds(log, DEBUG_ROUND)
    short = {r for r in printed if sums(debug).get(r) != printed[r]}
    assert sum(a for a, _ in sums(debug).values()) == 196 and log_request_totals(log) == (223, 223)
    assert len(short) == 10
    root = tmp_path / "t"
    result = specan("import", "llamacpp-log", log, "--deployment", "d", "--out", root)
    assert "10 requests: the debug lines miss the round that ended the request" in result.output
    expected = {r: debug[r] + ([(printed[r][0] - sums(debug)[r][0], printed[r][1] - sums(debug)[r][1])]
                               if r in short else []) for r in printed}
    assert imported_rounds(root) == expected
    assert sum(len(v) for v in expected.values()) == 59     # as many as the trace lines of the same run


@pytest.mark.parametrize("run", RUNS)
def test_all_channels_of_a_run_agree_in_the_report(run, tmp_path):
    doc, _ = channels_agree(FIXTURES / run, run.replace("/", "-"), tmp_path, FIXTURES / "plain", decides=True)
    verdict = next(v for v in doc["verdict"] if v["deployment_id"] == run.replace("/", "-"))
    # a draft that is never accepted costs its forward passes for nothing: well below the plain server
    # where the two ran at comparable concurrency (channels_agree checks the verdict where they did not)
    if run.endswith("other") and verdict["speedup_interval"] is not None:
        assert verdict["action"] == "dont_ship" and verdict["speedup_interval"][1] < 0.5, verdict
