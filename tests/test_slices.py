"""`--by COLUMN` slices (report, sql, load) on a hand-built trace.

Every expected number is worked out by hand in the comments from the definitions
in docs/metrics.md (the categories' metrics, per value of a requests column),
never copied from the views' output.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from analyzer import api
from analyzer.cli import main
from tracebuilder import (deployment, lift_floors, no_floors_config, request, round_row, step, write_table,
                          write_traces)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    """A speculative deployment `spec` and its baseline `base`, requests tagged with the
    extra columns `tenant` and `region` (not in the trace format: kept from the input).

    The baseline's time per token at each batch size it ran (a round's time is its step's
    duration; a step may hold more requests than it has rounds here):
      batch 1: steps 1 and 2, 10 ms each, one round each   → t0(1) = 20 / 2 = 10 ms
      batch 2: step 3, 16 ms, two rounds                   → t0(2) = 32 / 2 = 16 ms
      batch 4: step 4, 20 ms, three rounds                 → t0(4) = 60 / 3 = 20 ms
      batch 6: step 5, 28 ms, three rounds                 → t0(6) = 84 / 3 = 28 ms
    Each of spec's decode steps is matched at its own batch size (matched_weights):
      batch 1 and 2 on the baseline's own cells: 10 and 16 ms;
      batch 3 between 2 and 4: 4 > 2 · 1.25 + 1 = 3.5, too far apart (load_gap): no t0;
      batch 5 between 4 and 6 (6 ≤ 4 · 1.25 + 1): w = (6 − 5) / (6 − 4) = 0.5,
        t0(5) = 0.5 · 20 + 0.5 · 28 = 24 ms.
    A slice weighs its committed tokens in each batch bucket by spec's matched t0 there
    (baseline_t0: Σ counterfactual / Σ matched tokens of spec's steps in the bucket):
      1 → 10, 2 → 16, 3-4 → none (load_gap), 5-8 → 24 (the baseline's own rounds in 5-8,
      all at batch 6, would say 28).
    """
    spec_requests = [
        request("spec", "r1", tenant="acme", region="eu"),
        request("spec", "r2", tenant="acme", region="us"),
        request("spec", "r3", tenant="globex", region="eu"),
        request("spec", "r4", tenant=None, region="us"),
        # first token before arrival: rejected (time_order), its rounds are still counted
        request("spec", "r5", arrival=50.0, first=10.0, tenant="acme", region="eu"),
    ]
    base_requests = [request("base", "q1", tenant="acme", region="eu"),
                     request("base", "q2", tenant="acme", region="eu"),
                     request("base", "q3", tenant="globex", region="eu")]
    steps = [
        step("base", 1, 10.0, batch_size=1), step("base", 2, 10.0, batch_size=1), step("base", 3, 16.0, batch_size=2),
        step("base", 4, 20.0, batch_size=4), step("base", 5, 28.0, batch_size=6),
        step("spec", 1, 12.0, batch_size=1),
        step("spec", 2, 20.0, batch_size=2),
        step("spec", 3, 9.0, batch_size=1),
        step("spec", 4, 30.0, batch_size=1, num_prefill_tokens=100),   # a prefill step: no speedup
        step("spec", 5, 11.0, batch_size=1),
        step("spec", 6, 8.0, batch_size=1),
        step("spec", 7, 10.0, batch_size=3),                           # bucket 3-4: load_gap, no t0
        step("spec", 8, 10.0, batch_size=5),                           # bucket 5-8: t0(5) = 24
    ]
    rounds = [
        round_row("base", "q1", 0, 0, 0, step_id=1),
        round_row("base", "q1", 1, 0, 0, step_id=2),
        round_row("base", "q2", 0, 0, 0, step_id=3),
        round_row("base", "q3", 0, 0, 0, step_id=3),
        round_row("base", "q1", 2, 0, 0, step_id=4),
        round_row("base", "q2", 1, 0, 0, step_id=4),
        round_row("base", "q3", 1, 0, 0, step_id=4),
        round_row("base", "q1", 3, 0, 0, step_id=5, stop_reason="eos"),
        round_row("base", "q2", 2, 0, 0, step_id=5, stop_reason="eos"),
        round_row("base", "q3", 2, 0, 0, step_id=5, stop_reason="eos"),
        # (drafted, accepted, committed)
        round_row("spec", "r1", 0, 4, 3, step_id=1),                     # (4, 3, 4)  bucket 1, 12 ms
        round_row("spec", "r1", 1, 4, 1, step_id=2, stop_reason="eos"),  # (4, 1, 2)  bucket 2, 20 ms
        round_row("spec", "r2", 0, 4, 4, step_id=3),                     # (4, 4, 5)  bucket 1, 9 ms
        round_row("spec", "r2", 1, 4, 0, step_id=4, stop_reason="eos"),  # (4, 0, 1)  prefill
        round_row("spec", "r3", 0, 4, 2, step_id=2),                     # (4, 2, 3)  bucket 2, 20 ms
        round_row("spec", "r3", 1, 4, 4, step_id=7),                     # (4, 4, 5)  bucket 3-4, 10 ms
        round_row("spec", "r3", 2, 4, 1, step_id=8, stop_reason="eos"),  # (4, 1, 2)  bucket 5-8, 10 ms
        round_row("spec", "r4", 0, 2, 1, step_id=5),                     # (2, 1, 2)  bucket 1, 11 ms
        round_row("spec", "r4", 1, 0, 0, stop_reason="eos"),             # (0, 0, 1)  no step
        round_row("spec", "r5", 0, 4, 2, step_id=6, stop_reason="eos"),  # (4, 2, 3)  bucket 1, 8 ms
    ]
    return write_traces(tmp_path_factory.mktemp("slices"),
                        deployments=[deployment("spec", gamma=4), deployment("base", method="none")],
                        requests=spec_requests + base_requests, steps=steps, rounds=rounds)


def FLOORS(traces) -> tuple[str, Path]:
    """--config lifting the [evidence] floors: the baseline here has 3 steps and 3 requests."""
    return "--config", no_floors_config(traces.parent)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


# By hand, per tenant of `spec` (matched t0 per bucket: 1 → 10, 2 → 16, 3-4 none, 5-8 → 24):
#   acme = r1, r2: rounds 4, speculative 4, drafted 16, accepted 3+1+4+0 = 8, committed 4+2+5+1 = 12
#     accept length 1 + 8/4 = 3, acceptance 8/16, tokens/round 12/4 = 3
#     speedup over decode rounds with a step (r2's prefill round left out):
#       bucket 1: committed 4 + 5 = 9, time 12 + 9 = 21; bucket 2: committed 2, time 20
#       (10·9 + 16·2) / (21 + 20) = 122/41
#   globex = r3: rounds 3, drafted 12, accepted 2+4+1 = 7, committed 3+5+2 = 10
#     → 1 + 7/3 = 10/3, 7/12, 10/3
#     bucket 2: committed 3, time 20; bucket 5-8: committed 2, time 10; bucket 3-4 has no t0 and
#     is left out of both sums: (16·3 + 24·2) / (20 + 10) = 96/30 = 3.2 (with the baseline's
#     own t0 of bucket 5-8, 28: 104/30), covering 5 of its 10 committed tokens
#   (null) = r4 (null tenant) and r5 (its requests row was rejected: no value):
#     rounds 3, speculative 2, drafted 6, accepted 3, committed 6 → 1 + 3/2 = 2.5, 3/6, 6/3 = 2
#     bucket 1: committed 2 + 3 = 5, time 11 + 8 = 19 → 10·5/19 = 50/19
# `base` (the baseline: no drafts, no speedup): acme = q1, q2 with 7 rounds, globex = q3 with 3.
TENANT = [
    {"deployment_id": "base", "value": "acme", "num_requests": 2, "mean_accept_length": None,
     "acceptance_rate": None, "tokens_per_round": 1.0, "speedup": None, "repeat_ratio": None,
     "repeat_accept_correlation": None},
    {"deployment_id": "base", "value": "globex", "num_requests": 1, "mean_accept_length": None,
     "acceptance_rate": None, "tokens_per_round": 1.0, "speedup": None, "repeat_ratio": None,
     "repeat_accept_correlation": None},
    {"deployment_id": "spec", "value": "acme", "num_requests": 2, "mean_accept_length": 3.0,
     "acceptance_rate": 0.5, "tokens_per_round": 3.0, "speedup": 122 / 41, "repeat_ratio": None,
     "repeat_accept_correlation": None},
    {"deployment_id": "spec", "value": "globex", "num_requests": 1, "mean_accept_length": 10 / 3,
     "acceptance_rate": 7 / 12, "tokens_per_round": 10 / 3, "speedup": 3.2, "repeat_ratio": None,
     "repeat_accept_correlation": None},
    {"deployment_id": "spec", "value": None, "num_requests": 2, "mean_accept_length": 2.5,
     "acceptance_rate": 0.5, "tokens_per_round": 2.0, "speedup": 50 / 19, "repeat_ratio": None,
     "repeat_accept_correlation": None},
]
# Per region of `spec`:
#   eu = r1, r3: drafted 8 + 12 = 20, accepted 3+1 + 2+4+1 = 11, committed 4+2 + 3+5+2 = 16, 5 rounds
#     → 1 + 11/5 = 3.2, 11/20, 16/5 = 3.2
#     bucket 1: r1 4 tokens in 12 ms; bucket 2: r1 2 + r3 3 tokens in 20 + 20 ms; bucket 5-8: r3 2
#     tokens in 10 ms; bucket 3-4 left out → (10·4 + 16·5 + 24·2) / (12 + 40 + 10) = 168/62
#   us = r2, r4: 4 rounds, 3 speculative, drafted 10, accepted 5, committed 9
#     → 1 + 5/3, 5/10, 9/4; bucket 1: r2 5 tokens in 9 ms, r4 2 tokens in 11 ms → 10·7/20 = 3.5
#   (null) = r5: 1 round (4, 2, 3) → 1 + 2/1 = 3, 2/4, 3; bucket 1: 10·3/8 = 3.75
# `base`: all three requests in eu, 10 rounds.
REGION = [
    {"deployment_id": "base", "value": "eu", "num_requests": 3, "mean_accept_length": None,
     "acceptance_rate": None, "tokens_per_round": 1.0, "speedup": None, "repeat_ratio": None,
     "repeat_accept_correlation": None},
    {"deployment_id": "spec", "value": "eu", "num_requests": 2, "mean_accept_length": 3.2,
     "acceptance_rate": 0.55, "tokens_per_round": 3.2, "speedup": 168 / 62, "repeat_ratio": None,
     "repeat_accept_correlation": None},
    {"deployment_id": "spec", "value": "us", "num_requests": 2, "mean_accept_length": 1 + 5 / 3,
     "acceptance_rate": 0.5, "tokens_per_round": 2.25, "speedup": 3.5, "repeat_ratio": None,
     "repeat_accept_correlation": None},
    {"deployment_id": "spec", "value": None, "num_requests": 1, "mean_accept_length": 3.0,
     "acceptance_rate": 0.5, "tokens_per_round": 3.0, "speedup": 3.75, "repeat_ratio": None,
     "repeat_accept_correlation": None},
]


def approx_rows(rows: list[dict]) -> list[dict]:
    return [{k: pytest.approx(v, rel=1e-12) if isinstance(v, float) else v for k, v in r.items()} for r in rows]


def test_report_json_slices_by_an_extra_column_match_the_hand_count(traces):
    result = run("report", traces, "--by", "tenant", "--format", "json", *FLOORS(traces))
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert [s["column"] for s in doc["slices"]] == ["tenant"]
    assert doc["slices"][0]["rows"] == approx_rows(TENANT)


def test_two_by_columns_each_get_their_slices_in_the_order_given(traces):
    result = run("report", traces, "--by", "region", "--by", "tenant", "--format", "json", *FLOORS(traces))
    assert result.exit_code == 0, result.output
    slices = json.loads(result.output)["slices"]
    assert [s["column"] for s in slices] == ["region", "tenant"]
    assert slices[0]["rows"] == approx_rows(REGION)
    assert slices[1]["rows"] == approx_rows(TENANT)


def test_speedup_coverage_of_a_slice_counts_the_buckets_without_t0(traces):
    ws = api.open_traces(traces, by=("tenant",))
    lift_floors(ws.con)
    try:
        got = dict(ws.con.execute("""select coalesce(slice_value, '(null)'), speedup_coverage from slice_metrics
                                     where deployment_id = 'spec'""").fetchall())
        t0 = {bucket: (t0_ms, guard) for bucket, t0_ms, guard in ws.con.execute(
            """select batch_bucket, t0_ms, t0_guard from baseline_t0
               where deployment_id = 'spec' and context_bucket is null""").fetchall()}
    finally:
        ws.close()
    # spec's matched t0 per bucket, the one the slices weigh by (fixture): batch 5 interpolated
    # halfway between the baseline's batch 4 and 6; batch 3 between 2 and 4, too far apart
    assert t0 == {"1": (pytest.approx(10.0, rel=1e-12), None), "2": (pytest.approx(16.0, rel=1e-12), None),
                  "3-4": (None, "load_gap"), "5-8": (pytest.approx(24.0, rel=1e-12), None)}
    # coverage is over decode rounds with a step: acme 11 and (null) 5 committed tokens, all in
    # buckets with a t0; globex 5 of its 10 (r3's round at batch 3 has none)
    assert got == {"acme": 1.0, "globex": pytest.approx(5 / 10, rel=1e-12), "(null)": 1.0}


def test_markdown_has_a_slices_section_with_a_table_per_column(traces):
    result = run("report", traces, "--by", "tenant", "--no-progress", *FLOORS(traces))
    assert result.exit_code == 0, result.output
    section = result.output.split("## Slices\n", 1)[1].split("\n## ", 1)[0]
    # the numbers above, rounded for display: 122/41 = 2.976, 10/3 = 3.333, 7/12 = 58.3%, 50/19 = 2.632
    assert section == (
        "\n"
        "The metrics of the categories table for each value of a requests column (`--by`); a request whose "
        "value is null, or that has no requests row, is in the slice (null). Speedup weighs each batch bucket's "
        "tokens by the deployment's matched t0 there (the baseline's time per token at the batch sizes and "
        "contexts its steps in the bucket ran at).\n"
        "\n"
        "### By tenant\n"
        "\n"
        "| deployment | value | requests | accept length | acceptance | tokens/round | speedup | repeat ratio | r |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
        "| base | acme | 2 | – | – | 1.000 | – | – | – |\n"
        "| base | globex | 1 | – | – | 1.000 | – | – | – |\n"
        "| spec | acme | 2 | 3.000 | 50.0% | 3.000 | 2.976× | – | – |\n"
        "| spec | globex | 1 | 3.333 | 58.3% | 3.333 | 3.200× | – | – |\n"
        "| spec | (null) | 2 | 2.500 | 50.0% | 2.000 | 2.632× | – | – |\n")


def test_html_shows_the_same_slices(traces):
    result = run("report", traces, "--by", "tenant", "--format", "html", "--no-progress", *FLOORS(traces))
    assert result.exit_code == 0, result.output
    assert "<h2>Slices</h2>" in result.output and "<h3>By tenant</h3>" in result.output
    assert ("<tr><td>spec</td><td>(null)</td><td>2</td><td>2.500</td><td>50.0%</td><td>2.000</td>"
            "<td>2.632×</td><td>–</td><td>–</td></tr>") in result.output


def test_without_by_slices_are_empty_and_the_views_exist(traces):
    result = run("report", traces, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["slices"] == []
    markdown = run("report", traces, "--no-progress")
    assert "## Slices" not in markdown.output
    empty = run("sql", traces, "select count(*) as n from slice_metrics", "--format", "csv")
    assert (empty.exit_code, empty.output) == (0, "n\n0\n")


def test_sql_by_keys_the_slice_views(traces):
    result = run("sql", traces, "--by", "tenant", "--format", "csv",
                 "select deployment_id, slice_column, slice_value, num_requests, num_committed_tokens "
                 "from slice_metrics order by deployment_id, slice_value nulls last")
    assert result.exit_code == 0, result.output
    # committed: base acme 7 rounds of 1, globex 3; spec acme 12, globex 10, (null) 6
    assert result.output == ("deployment_id,slice_column,slice_value,num_requests,num_committed_tokens\n"
                             "base,tenant,acme,2,7\n"
                             "base,tenant,globex,1,3\n"
                             "spec,tenant,acme,2,12\n"
                             "spec,tenant,globex,1,10\n"
                             "spec,tenant,,2,6\n")


def test_load_by_writes_a_database_keyed_by_the_column(traces, tmp_path):
    db = tmp_path / "t.duckdb"
    result = run("load", traces, "--db", db, "--by", "region")
    assert result.exit_code == 0, result.output
    con = duckdb.connect(str(db), read_only=True)
    try:
        got = con.execute("""select slice_value, num_requests from slice_metrics where deployment_id = 'spec'
                             order by slice_value nulls last""").fetchall()
    finally:
        con.close()
    assert got == [("eu", 2), ("us", 2), (None, 1)]


# The fixture's requests columns a person slices by, in the table's order: the trace
# format's labels and settings, then the extra columns (the ids, times, token ids,
# counts and quality_score are not offered).
# and the deployments columns, by each request's partition (a deployment split at an upgrade)
DEPLOYMENT_COLUMNS = ("; the deployments columns (a request takes its partition's configuration) are model, method, "
                      "num_speculative_tokens, target_quant, draft_quant, baseline_id, engine, engine_version, gpu, "
                      "tensor_parallel_size, kv_capacity_tokens, spec_config")
SLICEABLE = ("category, finish_reason, structured_output, temperature, matches_reference, region, tenant"
             + DEPLOYMENT_COLUMNS)


def test_unknown_column_is_a_usage_error_naming_the_columns_to_slice_by(traces):
    result = run("report", traces, "--by", "tenant", "--by", "tenent")
    assert result.exit_code == 2
    assert result.output == (f"Error: unknown --by column 'tenent': the requests columns to slice by are {SLICEABLE}\n")


@pytest.mark.parametrize("column, why", [
    ("request_uid", "a link key specan adds: one slice per request"),
    ("request_id", "the request's key: one slice per request"),
    ("deployment_id", "every slice is within a deployment already"),
    ("arrival_time", "a time: one slice per request"),
    ("output_tokens", "a count measured per request"),
    ("prompt_token_ids", "token ids"),
])
def test_a_column_nobody_slices_by_is_refused_naming_the_ones_to_slice_by(traces, column, why):
    result = run("report", traces, "--by", column)
    assert result.exit_code == 2
    assert result.output == (f"Error: --by {column}: not a column to slice by ({why}); "
                             f"the requests columns to slice by are {SLICEABLE}\n")


def test_extra_columns_are_offered_by_type_and_partitions_are_offered(tmp_path):
    # an extra list column and an extra timestamp are not labels; an extra number, an extra
    # text and the date= partition are
    at_noon = request("a", "r1")["arrival_time"]
    write_traces(tmp_path, deployments=[deployment("a")])
    write_table(tmp_path, "requests", {
        "date=2026-11-27": [request("a", "r1", tags=[1, 2], seen_at=at_noon, shard=3, team="x")],
        "date=2026-11-28": [request("a", "r1", tags=[3], seen_at=at_noon, shard=4, team="y")]})
    write_table(tmp_path, "rounds", {"date=2026-11-27": [round_row("a", "r1", 0, 4, 3)],
                                     "date=2026-11-28": [round_row("a", "r1", 0, 4, 1)]})
    offered = ("category, finish_reason, structured_output, temperature, matches_reference, tags, seen_at, shard, "
               "team, date")
    for column, why in (("tags", "it holds lists or nested values"), ("seen_at", "a time: one slice per request")):
        result = run("report", tmp_path, "--by", column)
        assert (result.exit_code, result.output) == (
            2, f"Error: --by {column}: not a column to slice by ({why}); the requests columns to slice by are "
               f"{offered.replace('tags, seen_at, ', '')}{DEPLOYMENT_COLUMNS}\n")
    result = run("report", tmp_path, "--by", "date", "--by", "shard", "--format", "json")
    assert result.exit_code == 0, result.output
    slices = {s["column"]: [(r["value"], r["num_requests"], r["mean_accept_length"]) for r in s["rows"]]
              for s in json.loads(result.output)["slices"]}
    # one request per date (the ids restart): accept length 1 + 3 and 1 + 1
    assert slices == {"date": [("2026-11-27", 1, 4.0), ("2026-11-28", 1, 2.0)],
                      "shard": [("3", 1, 4.0), ("4", 1, 2.0)]}


def test_a_column_is_matched_regardless_of_case_and_named_once(traces):
    result = run("report", traces, "--by", "Tenant", "--by", "tenant", "--format", "json", *FLOORS(traces))
    assert result.exit_code == 0, result.output
    slices = json.loads(result.output)["slices"]
    assert [s["column"] for s in slices] == ["tenant"]
    assert slices[0]["rows"] == approx_rows(TENANT)


ONLY_TRACES = ("Error: --by needs the rounds, so it runs on the DuckDB engine over trace files only "
               "(not --engine spark, nor reduced traces)")


@pytest.mark.parametrize("args, error", [
    (["report", "{traces}", "--by", "tenant", "--engine", "spark"], ONLY_TRACES),
    (["sql", "{traces}", "select 1", "--by", "tenant", "--engine", "spark"], ONLY_TRACES),
    (["load", "{traces}", "--out", "{out}", "--by", "tenant", "--engine", "spark"],
     "Error: --by runs on the DuckDB engine only: load --db FILE --by COLUMN"),
    (["sql", "--db", "{out}/t.duckdb", "select 1", "--by", "tenant"],
     "Error: --by applies to TRACES; a database keeps the --by columns it was loaded with (specan load --by)"),
])
def test_by_is_duckdb_over_trace_files_only(traces, tmp_path, args, error):
    # refused before Spark starts or a file is opened
    result = run(*[a.format(traces=traces, out=tmp_path) for a in args])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == error


def test_by_on_reduced_traces_is_refused(traces, tmp_path):
    (tmp_path / "_specan_reduced.json").write_text("{}")
    result = run("report", tmp_path, "--by", "tenant")
    assert (result.exit_code, result.output) == (2, ONLY_TRACES + "\n")


def test_slices_by_category_are_the_categories_table():
    """On the sample traces: the same definitions give the same numbers, repetition and r included."""
    ws = api.open_traces(ROOT / "sample_traces", by=("category",))
    try:
        doc = api.report_document(ws)
    finally:
        ws.close()
    keys = ("num_requests", "mean_accept_length", "acceptance_rate", "tokens_per_round", "speedup",
            "repeat_ratio", "repeat_accept_correlation")
    categories = [{"deployment_id": c["deployment_id"], "value": c["category"], **{k: c[k] for k in keys}}
                  for c in doc["categories"]]
    assert doc["slices"] == [{"column": "category", "rows": categories}]
