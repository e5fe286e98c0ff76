"""Rendering details (issue 12, section 8): the faster/slower word matches the ratio shown,
replay timing stays out of the document, a note holding '; ' stays one note, Markdown
table cells are escaped and NaN shows as the dash, and the HTML module leaves
matplotlib's global settings alone."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer import api
from analyzer.analysis import quant
from analyzer.cli import main
from analyzer.render import markdown
from analyzer.render.cells import DASH, num, pct, shown_ratio, table, times
from analyzer.render.replay import move_timing_to_stderr, render_markdown, timing_lines
from test_replay import hand_trace  # noqa: F401  (the fixture)
from tracebuilder import at, write_traces

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------- 1. faster / slower


@pytest.mark.parametrize("value, shown, word", [
    (1.1902639680999523, "1.19", "faster"),
    (0.7864532972116923, "0.79", "slower"),
    (0.9962, "0.996", "slower"),        # was "1.00× (slower)"
    (1.0038, "1.004", "faster"),        # was "1.00× (faster)"
    (0.9951, "0.995", "slower"),
    (1.0, "1.000", "no faster"),
    (1.0004, "1.000", "no faster"),     # was "1.00× (faster)"
    (0.9996, "1.000", "no faster"),     # was "1.00× (slower)"
    (0.994, "0.99", "slower"),
    (1.006, "1.01", "faster"),
])
def test_the_word_fits_the_ratio_shown(value, shown, word):
    assert shown_ratio(value) == (shown, word)


def finding_doc(speedup: float) -> dict:
    latency = {"tpot": {"p99": 10.0}, "itl": {"p99": 10.0}, "max_stall": {"p99": 10.0}}
    return {
        "deployments": [
            {"deployment_id": "base", "method": "none", "latency_ms": latency},
            {"deployment_id": "spec", "method": "eagle", "num_speculative_tokens": 4, "baseline_id": "base",
             "speedup": speedup, "speedup_coverage": 0.9, "mean_accept_length": 2.5, "latency_ms": latency},
        ],
        "load_curve": [],
    }


def test_findings_sentence_near_one():
    text = markdown._findings(finding_doc(0.9962))
    assert "- **spec** (eagle, γ=4): 0.996× the throughput of base at the same batch sizes (slower), over 90.0% of its tokens" in text
    assert "1.00×" not in text
    text = markdown._findings(finding_doc(1.00001))
    assert "1.000× the throughput of base at the same batch sizes (no faster)" in text
    assert "1.19× the throughput of base at the same batch sizes (faster)" in markdown._findings(finding_doc(1.19))


def test_findings_nan_speedup_is_unknown():
    text = markdown._findings(finding_doc(float("nan")))
    assert "- **spec** (eagle): speedup unknown, see the notes." in text


def test_a_single_request_shows_no_interval_and_an_unknown_gamma_the_dash():
    """Issue 37: an interval resampled from one request is [x, x], no interval; a speculative
    deployment whose row gives γ = 0 did not say its length. The findings line and the summary
    show the value with "(1 request)" and γ as the dash; more requests keep the interval, even a
    one-point one."""
    one = dict(finding_doc(1.19)["deployments"][1], num_requests=1, num_speculative_tokens=0, method="unknown",
               mean_accept_length_interval=[2.5, 2.5])
    assert markdown.with_interval_of(one, "mean_accept_length") == "2.500 (1 request)"
    assert "- **spec** (unknown, γ=–): 1.19× the throughput of base" in markdown._findings(
        {"deployments": [finding_doc(1.19)["deployments"][0], one], "load_curve": []})
    assert "; mean accept length 2.500 (1 request)." in markdown._findings(
        {"deployments": [finding_doc(1.19)["deployments"][0], one], "load_curve": []})
    forty = dict(one, num_requests=40, num_speculative_tokens=4, method="eagle")
    assert markdown.with_interval_of(forty, "mean_accept_length") == "2.500 [2.500, 2.500]"
    # γ: the dash only for a speculative method with 0; a baseline's 0 is its length
    from analyzer.render.cells import gamma_text
    assert [gamma_text(d) for d in (one, forty, {"method": "none", "num_speculative_tokens": 0})] == ["–", "4", "0"]
    # the bootstrap's note on its replicates speaks of an interval not shown: left out for that deployment only
    doc = {"deployments": [one, dict(forty, deployment_id="other")],
           "notes": ["spec: the mean accept length interval rests on 10,028 of 16,000 bootstrap replicates; the "
                     "others resampled its speculative rounds to none and were dropped",
                     "other: the mean accept length interval rests on 15,999 of 16,000 bootstrap replicates; the "
                     "others resampled its speculative rounds to none and were dropped"]}
    assert markdown._notes(doc) == "## Notes\n\n- " + doc["notes"][1] + "\n"


def test_without_steps_the_summary_names_what_the_verdict_rests_on():
    """Issue 37: "The verdict rests on the TPOT speedup" was said of every trace without steps,
    also where no verdict had a speedup at all."""
    tpot = {"verdict": [{"basis": "tpot", "speedup": 1.2}, {"basis": None, "speedup": None}]}
    logs = {"verdict": [{"basis": "logs", "speedup": 1.1}, {"basis": "tpot", "speedup": 1.3}]}
    none = {"verdict": [{"basis": "logs", "speedup": None}]}
    assert markdown._stepless_basis(tpot) == " The verdict rests on the TPOT speedup."
    assert markdown._stepless_basis(logs) == " The verdict rests on the TPOT speedup and the speedup from engine logs."
    assert markdown._stepless_basis(none) == (" No verdict has a speedup to rest on (What to do says what would "
                                              "decide it).")


# --------------------------------------------------------------------------- 2. replay timing


def test_replay_markdown_has_no_timing(hand_trace):  # noqa: F811
    runner = CliRunner()
    args = ["replay-ngram", str(hand_trace), "--min-n", "2", "--max-n", "2", "--k", "3"]
    first, second = runner.invoke(main, args), runner.invoke(main, args)
    assert first.exit_code == 0 and second.exit_code == 0, first.output
    assert first.stdout == second.stdout
    assert "tokens/s" not in first.stdout and " s (" not in first.stdout
    # r1 and the baseline's b0-b9 have token ids, 12 + 5 tokens each; r2 has none
    assert first.stdout.count("- Replayed 187 tokens of 11 requests.\n") == 2


def replay_result(**extra) -> dict:
    return {"variant": "suffix", "parameters": {"min_n": 2, "max_match": 32, "max_k": 4},
            "deployments": [], "categories": [], "notes": ["a note"], "tokens_replayed": 1_234_567,
            "num_requests_replayed": 89, **extra}


def test_replay_markdown_ignores_the_timing_keys():
    text = render_markdown([replay_result(replay_seconds=2.46, tokens_per_s=501_856.7)])
    assert "- Replayed 1,234,567 tokens of 89 requests.\n- a note\n" in text
    assert "2.5" not in text and "501,857" not in text
    assert text == render_markdown([replay_result()])


def test_timing_goes_to_stderr_and_out_of_the_document():
    timed = replay_result(replay_seconds=2.46, tokens_per_s=501_856.7)
    stream = io.StringIO()
    document = move_timing_to_stderr([timed], stream)
    assert stream.getvalue() == "suffix: replayed 1,234,567 tokens of 89 requests in 2.5 s (501,857 tokens/s)\n"
    assert document == [replay_result()]
    assert "replay_seconds" in timed                                   # the caller's results are left alone
    assert timing_lines([replay_result(replay_seconds=0.0, tokens_per_s=None)]) == \
        "suffix: replayed 1,234,567 tokens of 89 requests in 0.0 s"


def test_replay_json_has_no_timing(hand_trace):  # noqa: F811
    args = ["replay-ngram", str(hand_trace), "--variant", "suffix", "--format", "json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (replay,) = json.loads(result.stdout)["replays"]
    assert "replay_seconds" not in replay and "tokens_per_s" not in replay
    assert replay["tokens_replayed"] == 187                       # 11 requests of 17 tokens
    assert "suffix: replayed 187 tokens of 11 requests in " in result.stderr


# --------------------------------------------------------------------------- 3. notes holding '; '

HARDWARE_NOTE = ("q-fp8 runs on A100; SXM4, the reference ref-bf16 on H200: "
                 "its ratio mixes hardware with quantization")


@pytest.fixture(scope="module")
def semicolon_ws(tmp_path_factory):
    """Model m: ref-bf16 (none, bf16, H200) is the reference; q-fp8 (none, fp8) runs on a
    gpu whose name holds '; ', so its hardware note does too. No steps: both also get the
    steps-absent note."""
    def dep(deployment_id, quant, gpu):
        return {"deployment_id": deployment_id, "model": "m", "method": "none", "num_speculative_tokens": 0,
                "target_quant": quant, "gpu": gpu}

    def req(deployment_id):
        return {"deployment_id": deployment_id, "request_id": "r1", "arrival_time": at(0),
                "first_token_time": at(10), "finish_time": at(100), "prompt_tokens": 10, "output_tokens": 1,
                "finish_reason": "stop"}

    def rnd(deployment_id):
        return {"deployment_id": deployment_id, "request_id": "r1", "round_idx": 0, "num_draft_tokens": 0,
                "num_accepted_tokens": 0, "num_committed_tokens": 1}

    path = write_traces(tmp_path_factory.mktemp("semicolon"),
                        deployments=[dep("ref-bf16", "bf16", "H200"), dep("q-fp8", "fp8", "A100; SXM4")],
                        requests=[req("ref-bf16"), req("q-fp8")], rounds=[rnd("ref-bf16"), rnd("q-fp8")])
    workspace = api.open_traces(path)
    yield workspace
    workspace.close()


def test_a_note_with_a_semicolon_stays_one_note(semicolon_ws):
    (entry,) = quant.quant_matrix(semicolon_ws.con)["models"]
    steps_absent = "no throughput ratio: the steps table is absent, so round times are unknown"
    assert entry["notes"] == [
        steps_absent,                                # ref-bf16's, the baseline first
        HARDWARE_NOTE,                               # q-fp8's: before, "q-fp8 runs on A100" and "SXM4, the ..."
        "model m: no spec_only deployment (speculative with a bf16 target): speculation alone is not measured",
        "model m: no combined deployment (speculative with a lower-precision target)"]
    # the views give the list, and the one-line note for reading
    notes, note = semicolon_ws.con.execute(
        "select notes, note from quant_matrix where deployment_id = 'q-fp8'").fetchone()
    assert notes == [HARDWARE_NOTE, steps_absent]
    assert note == f"{HARDWARE_NOTE}; {steps_absent}"
    variant_notes, = semicolon_ws.con.execute(
        "select variant_notes from quant_variants where deployment_id = 'q-fp8'").fetchone()
    assert variant_notes == [HARDWARE_NOTE]
    assert semicolon_ws.con.execute(
        "select variant_notes, variant_note from quant_variants where deployment_id = 'ref-bf16'").fetchone() \
        == ([], None)


# --------------------------------------------------------------------------- 4. Markdown cells


def test_table_cells_are_escaped():
    text = table(["name|x", "value"], [["a|b", "x\ny"], ["<b>", num(float("nan"))], ["R&D", "line\r\nbreak"]])
    assert text == ("| name\\|x | value |\n"
                    "|---|---|\n"
                    "| a\\|b | x y |\n"
                    "| &lt;b> | – |\n"
                    "| R&amp;D | line break |\n")
    assert text.count("\n") == 5


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), None])
def test_missing_numbers_show_the_dash(value):
    assert num(value) == num(value, 2) == pct(value) == times(value) == DASH


def test_numbers_still_print():
    assert (num(0.123456), num(1234567), num(True), pct(0.1234), times(1.5)) == \
        ("0.123", "1,234,567", "yes", "12.3%", "1.500×")


def test_category_r_of_one_request_is_the_dash():
    row = {"deployment_id": "d", "category": "chat", "num_requests": 1, "mean_accept_length": 2.0,
           "acceptance_rate": 0.5, "tokens_per_round": 2.0, "speedup": None, "repeat_ratio": 0.25,
           "prompt_copy_ratio": 0.1, "repeat_accept_correlation": math.nan}
    text = markdown._categories({"categories": [row], "deployments": [{"deployment_id": "d", "method": "eagle"}]})
    assert "| d | chat | 1 | 2.000 | 50.0% | 2.000 | – | 0.250 | 0.100 | – |\n" in text
    assert "nan" not in text


# --------------------------------------------------------------------------- 5. matplotlib settings

RC_PROBE = r"""
import datetime as dt, json, sys
import matplotlib
import polars as pl

calls = []
matplotlib.use = lambda *args, **kwargs: calls.append(args)
before = dict(matplotlib.rcParams.copy())

from analyzer.render import html

doc = json.loads(open(sys.argv[1]).read())
history = pl.DataFrame({"deployment_id": ["a", "a"], "date": [dt.date(2026, 1, 1), dt.date(2026, 1, 2)],
                        "mean_accept_length": [2.0, 2.1], "speedup": [1.1, 1.2], "tpot_p99": [30.0, 31.0]})
page = html.render(doc, history=history)
again = html.render(doc, history=history)
after = dict(matplotlib.rcParams.copy())
print(json.dumps({
    "use_calls": len(calls),
    "changed": sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)),
    "pyplot": "matplotlib.pyplot" in sys.modules,
    "svgs": page.count("<svg"),
    "text_as_text": page.count("<text"),
    "same_page": page == again,
}))
"""


def test_html_leaves_matplotlib_settings_alone():
    """In a fresh interpreter, so nothing imported the module before."""
    out = subprocess.run([sys.executable, "-c", RC_PROBE, str(ROOT / "tests" / "golden" / "sample_report.json")],
                         capture_output=True, text=True, cwd=ROOT, check=True, timeout=300)
    probe = json.loads(out.stdout)
    assert probe["use_calls"] == 0                 # matplotlib.use is never called
    assert probe["changed"] == []                  # rcParams as before: style applied per chart
    assert probe["pyplot"] is False                # Figure objects, no pyplot state
    assert probe["svgs"] == 4                      # survival, load, latency, trend
    assert probe["text_as_text"] > 0               # svg.fonttype none did apply inside the charts
    assert probe["same_page"] is True              # and svg.hashsalt: the same data gives the same page
