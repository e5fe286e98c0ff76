"""output_tokens_mismatch (docs/trace-format.md): requests whose output_tokens differ from
1 + the tokens their clean rounds commit are counted per deployment, in the JSON's `input`
and in the notes with three example keys; their rounds stay analysed.

Every expected value is counted by hand in the comments."""

from __future__ import annotations

import json

from click.testing import CliRunner

from analyzer.cli import main
from tracebuilder import deployment, request, round_row, write_table, write_traces

D27, D28 = "date=2026-11-27", "date=2026-11-28"


def mismatch_traces(root):
    """`spec` (request ids restart per date), and `resp`, which has requests but no rounds.

    Each round drafts 4, accepts 3 and commits 4 (the last commits K + 1 too: no truncation).
      2026-11-27  r1  output 9,  rounds commit 4 + 4 = 8  → 1 + 8 = 9   agrees
                  r2  output 12, one round left: 4        → 5 ≠ 12      mismatch (rounds lost)
                  r3  output 0, no round, no first token  →             agrees (failed before its first token)
                  r4  output 7, no round                  → 1 ≠ 7       mismatch (every round lost)
      2026-11-28  r1  output 9,  one round: 4             → 5 ≠ 9       mismatch (same id, other date)
                  r2  output 5,  one round: 4             → 5           agrees
                  r5  output 3,  one round: 4             → 5 ≠ 3       mismatch (more than it says)
                  r6  output 9,  a clean round (4) and one accepting 3 of 2 drafts (rejected:
                      accepted_exceeds_drafted)           → 5 ≠ 9       mismatch (rounds rejected)
    spec: 8 requests checked, 5 mismatch. resp has no clean round: not checked.
    """
    write_traces(root, deployments=[deployment("spec"), deployment("resp")])
    write_table(root, "requests", {
        D27: [request("spec", "r1", output_tokens=9), request("spec", "r2", output_tokens=12),
              request("spec", "r3", first=None, output_tokens=0, finish_reason="error"),
              request("spec", "r4", output_tokens=7), request("resp", "x1", output_tokens=50)],
        D28: [request("spec", "r1", output_tokens=9), request("spec", "r2", output_tokens=5),
              request("spec", "r5", output_tokens=3), request("spec", "r6", output_tokens=9)]})
    write_table(root, "rounds", {
        D27: [round_row("spec", "r1", 0, 4, 3), round_row("spec", "r1", 1, 4, 3), round_row("spec", "r2", 0, 4, 3)],
        D28: [round_row("spec", "r1", 0, 4, 3), round_row("spec", "r2", 0, 4, 3), round_row("spec", "r5", 0, 4, 3),
              round_row("spec", "r6", 0, 4, 3), round_row("spec", "r6", 1, 2, 3, committed=4)]})
    return root


# the first three keys in key order, as rejected_rows.row_key spells them
EXPECTED = {"spec": {"requests": 5, "checked_requests": 8, "examples": [
    "deployment_id=spec, request_id=r1, date=2026-11-28",
    "deployment_id=spec, request_id=r2, date=2026-11-27",
    "deployment_id=spec, request_id=r4, date=2026-11-27"]}}


def report_json(traces) -> dict:
    result = CliRunner().invoke(main, ["report", str(traces), "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_the_input_counts_the_mismatching_requests_per_deployment(tmp_path):
    doc = report_json(mismatch_traces(tmp_path))
    assert doc["input"]["output_tokens_mismatch"] == EXPECTED
    # the rounds stay analysed: 7 clean rounds (r1 2, r2 1 on the 27th; r1, r2, r5, r6 1 each on the 28th)
    (spec,) = [d for d in doc["deployments"] if d["deployment_id"] == "spec"]
    assert (spec["num_rounds"], spec["num_committed_tokens"]) == (7, 28)
    assert doc["input"]["rejected_by_reason"] == {"accepted_exceeds_drafted": 1}


def test_a_note_names_three_examples(tmp_path):
    doc = report_json(mismatch_traces(tmp_path))
    assert [n for n in doc["notes"] if "output_tokens_mismatch" in n] == [
        "spec: output_tokens differs from 1 + the tokens its clean rounds commit for 5 of 8 requests "
        "(output_tokens_mismatch: rounds missing, rejected or miscounted); their rounds are still analysed. "
        "E.g. deployment_id=spec, request_id=r1, date=2026-11-28; deployment_id=spec, request_id=r2, date=2026-11-27; "
        "deployment_id=spec, request_id=r4, date=2026-11-27"]
    markdown = CliRunner().invoke(main, ["report", str(tmp_path)]).output
    assert "- spec: output_tokens differs from 1 + the tokens its clean rounds commit for 5 of 8 requests" in markdown


def test_the_view_lists_every_mismatching_request(tmp_path):
    result = CliRunner().invoke(main, ["sql", str(mismatch_traces(tmp_path)),
                                       "select request_id, partition, output_tokens, rounds_output_tokens, clean_rounds "
                                       "from output_tokens_mismatch order by request_key", "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "request_id,partition,output_tokens,rounds_output_tokens,clean_rounds",
        "r1,date=2026-11-28,9,5,1", "r2,date=2026-11-27,12,5,1", "r4,date=2026-11-27,7,1,0",
        "r5,date=2026-11-28,3,5,1", "r6,date=2026-11-28,9,5,1"]


def test_agreeing_requests_give_an_empty_count(tmp_path):
    # 1 + (4 + 2) = 7 output tokens over two rounds; a deployment without rounds is not checked
    write_traces(tmp_path, deployments=[deployment("spec"), deployment("resp")],
                 requests=[request("spec", "r1", output_tokens=7), request("resp", "x1", output_tokens=50)],
                 rounds=[round_row("spec", "r1", 0, 4, 3), round_row("spec", "r1", 1, 4, 1)])
    doc = report_json(tmp_path)
    assert doc["input"]["output_tokens_mismatch"] == {}
    assert not [n for n in doc["notes"] if "output_tokens_mismatch" in n]
