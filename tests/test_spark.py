"""The Spark engine (analyzer.spark, `--engine spark`): on the same traces it gives the
DuckDB engine's report document (floats to 1e-9 relative, the bootstrap intervals included:
both engines draw the same request groups), the same rejected rows and
the same exit status and message for a structural error.

Spark runs in local mode; every test here shares one session, on one xdist worker."""

import json
import math
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from click.testing import CliRunner

from analyzer import api
from analyzer.cli import main
from test_anomalies import EXPECTED as EXPECTED_ANOMALIES, all_tables as anomaly_tables
from test_anomalies import partitioned_traces as partitioned_anomaly_traces
from test_output_tokens_mismatch import EXPECTED as EXPECTED_MISMATCH, mismatch_traces
from test_metrics_seed import cheap, write_seed_traces
from test_reconciliation import write_four_channels
from tracebuilder import at, deployment, request, round_row, step, write_columns, write_table, write_traces

pytestmark = pytest.mark.xdist_group("spark")

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces"


@pytest.fixture(scope="module")
def spark():
    import os

    from analyzer.spark.session import spark_session

    # Spark's default driver heap (1 GB) once ran out building a broadcast of the sample's
    # tables while another xdist worker shared the machine; the JVM is started with 2 GB
    # (it reads PYSPARK_SUBMIT_ARGS when it launches, so only before the first session)
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--driver-memory 2g pyspark-shell")
    # the CLI and the API find this session (SparkSession.getActiveSession), as they would
    # inside spark-submit
    return spark_session("local[2]")


def documents(traces, spark) -> tuple[dict, dict]:
    return document(traces, "duckdb"), document(traces, "spark")


def document(traces, engine: str) -> dict:
    ws = api.open_traces(traces, engine=engine)
    try:
        # the bootstrap intervals too: the request groups are md5's on both engines
        return json.loads(api.to_json(api.report_document(ws)))
    finally:
        ws.close()


def differences(a, b, path="") -> list[str]:
    """Where two documents differ: floats beyond 1e-9 relative, anything else at all.

    A float that is a difference of nearly equal numbers (a fit's residual, measured
    minus predicted ms) may be exactly 0 on one engine and an ulp of its operands
    (1e-15) on the other: below 1e-12 in absolute value, floats count as equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(a.keys() ^ b.keys())}"]
        return [d for k in a for d in differences(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items vs {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12):
            return []
        return [f"{path}: {a!r} vs {b!r}"]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


def document_and_rejected(traces, engine: str) -> tuple[dict, list[tuple]]:
    ws = api.open_traces(traces, engine=engine)
    try:
        rows = ws.con.execute("select table_name, row_key, reason from rejected_rows order by all").fetchall()
        return json.loads(api.to_json(api.report_document(ws))), rows
    finally:
        ws.close()


def test_sample_traces_give_the_same_document(spark, sample_report):
    spark_doc = document(SAMPLE, "spark")
    assert differences(json.loads(api.to_json(sample_report["doc"])), spark_doc) == []
    assert len(spark_doc["deployments"]) == 6


def test_the_seed_ledger_on_spark(spark, tmp_path):
    # seed 8.1: a = 0.8, gamma = 4, cheap drafts -> speedup 2.334 (to the seed's 3 decimals)
    write_seed_traces(tmp_path, 4, cheap)
    duck, spark_doc = documents(tmp_path, spark)
    assert differences(duck, spark_doc) == []
    (row,) = [d for d in spark_doc["deployments"] if d["deployment_id"] == "spec"]
    assert round(row["speedup"], 3) == 2.334


def test_steps_with_their_own_counts_on_spark(spark, tmp_path):
    # a vLLM iteration-log pair (tests/test_vllm_iteration_pair.py): the speedup 2.04 matched step by step
    from test_vllm_iteration_pair import OVERALL, write_pair

    write_pair(tmp_path)
    for log, args in (("spec.log", ["--deployment", "spec", "--method", "eagle3"]),
                      ("plain.log", ["--deployment", "plain", "--method", "none"])):
        done = CliRunner().invoke(main, ["import", "vllm-log", str(tmp_path / log), *args, "--model", "m",
                                         "--year", "2025", "--out", str(tmp_path / "traces")])
        assert done.exit_code == 0, done.output
    duck, spark_doc = documents(tmp_path / "traces", spark)
    assert differences(duck, spark_doc) == []
    (row,) = [d for d in spark_doc["deployments"] if d["deployment_id"] == "spec"]
    assert row["matched"]["steps"]["speedup"] == pytest.approx(OVERALL, rel=1e-9)


def test_channels_agree_on_spark(spark, tmp_path):
    # channel_counts and reconciliation run on Spark; reconciliation's rows come back
    write_four_channels(tmp_path)
    duck, spark_doc = documents(tmp_path, spark)
    assert differences(duck, spark_doc) == []
    assert [(r["channel"], r["accepted"], r["drafted"], r["disagrees"]) for r in spark_doc["reconciliation"]] == [
        ("rounds", 7, 12, False), ("llamacpp_log", 7, 12, False), ("llamacpp_response", 7, 12, False),
        ("prometheus", 8, 12, True)]


def test_requests_to_look_at_on_spark(spark, tmp_path):
    # request_repetition's self_repeat columns and the rules run on Spark; the listing comes back
    write_traces(tmp_path, **anomaly_tables())
    duck, spark_doc = documents(tmp_path, spark)
    assert differences(duck, spark_doc) == []
    assert [tuple(a[k] for k in ("deployment_id", "request_id", "kind", "value", "threshold"))
            for a in spark_doc["anomalies"]] == EXPECTED_ANOMALIES


def test_the_anomaly_thresholds_and_listing_of_a_config_apply_on_the_cluster(spark, tmp_path):
    # the requests to look at are found on Spark: --config's [anomalies] must reach it.
    # At a ratio of 0.9 "at_ratio" (0.8) is no longer looping; of the two that are, the
    # listing keeps the larger one, and anomaly_checks still counts both
    traces = write_traces(tmp_path / "traces", **anomaly_tables())
    config = tmp_path / "gates.toml"
    config.write_text("[anomalies]\nlooping_min_self_repeat_ratio = 0.9\nlisted_per_kind = 1\n")
    runner = CliRunner()
    docs = []
    for engine in ("duckdb", "spark"):
        run = runner.invoke(main, ["report", str(traces), "--format", "json", "--config", str(config),
                                   "--engine", engine])
        assert run.exit_code == 0, run.output
        docs.append(json.loads(run.output))
    duck, spark_doc = docs
    assert differences(duck, spark_doc) == []
    assert [tuple(a[k] for k in ("deployment_id", "request_id", "kind", "value", "threshold"))
            for a in spark_doc["anomalies"]] == [("loop", "no_prompt", "looping", 60 / 61, 0.9),
                                                  *EXPECTED_ANOMALIES[3:]]
    (loop,) = [c for c in spark_doc["anomaly_checks"] if (c["deployment_id"], c["kind"]) == ("loop", "looping")]
    assert loop["flagged"] == 2


def test_partitions_and_output_tokens_mismatch_on_spark(spark, tmp_path):
    # request_partitions and the two views run on Spark; the listing and the mismatch examples come back
    mismatch = mismatch_traces(tmp_path / "mismatch")
    duck, spark_doc = documents(mismatch, spark)
    assert differences(duck, spark_doc) == []
    assert spark_doc["input"]["output_tokens_mismatch"] == EXPECTED_MISMATCH
    duck, spark_doc = documents(partitioned_anomaly_traces(tmp_path / "anomalies"), spark)
    assert differences(duck, spark_doc) == []
    assert [(a["request_id"], a["partition"]) for a in spark_doc["anomalies"]] == [
        ("r1", "pool=blue, region=eu"), ("r1", "pool=blue, region=us")]


def dirty_traces(root: Path, extra_rounds=()) -> Path:
    """Every row rule broken at least once, and clean rows around them."""
    deployments = [deployment("a"), deployment("b", method="none", gamma=0),
                   deployment("c"), deployment("c", gamma=5)]                  # c: copies differ
    requests = [request("a", "r1"), request("a", "r2"), request("a", "r2"),   # r2 twice: duplicate_key
                request("a", "r3", first=200.0, finish=100.0),                # time order
                request("b", "q1"), request("zz", "r9"),                       # unknown deployment
                {**request("a", "r4"), "prompt_tokens": -3}]                   # negative_count
    steps = [step("a", i, duration_ms=10.0 + i, batch_size=1 + i % 3) for i in range(6)]
    steps += [step("b", i, duration_ms=8.0) for i in range(4)]
    steps += [{**step("a", 6), "duration_ms": -1.0}, step("a", 2)]            # negative duration; duplicate
    rounds = [round_row("a", "r1", i, 4, i % 5, step_id=i) for i in range(5)]
    rounds += [round_row("a", "r1", 5, 3, 4, step_id=5),                        # accepted > drafted
               round_row("a", "r1", 6, 4, 1, step_id=5, committed=5),           # committed > accepted + 1
               round_row("a", "r7", 0, 4, 2, step_id=1),                        # unknown request
               round_row("a", "r1", 7, 4, 2, step_id=99),                       # unknown step
               round_row("a", "r1", 1, 4, 0, step_id=1),                        # duplicate round key
               {**round_row("a", "r1", 8, 4, 2, step_id=2), "num_draft_tokens": None}]   # null_required
    rounds += [round_row("b", "q1", i, 0, 0, step_id=i) for i in range(4)] + list(extra_rounds)
    return write_traces(root, deployments=deployments, requests=requests, steps=steps, rounds=rounds)


def test_dirty_traces_reject_the_same_rows_and_report_the_same(spark, tmp_path):
    traces = dirty_traces(tmp_path)
    duck_doc, duck_rows = document_and_rejected(traces, "duckdb")
    assert len(duck_rows) >= 10 and {reason for *_, reason in duck_rows} >= {
        "duplicate_key", "null_required", "negative_count", "accepted_exceeds_drafted",
        "committed_exceeds_accepted", "unknown_request", "unknown_step", "unknown_deployment"}
    spark_doc, spark_rows = document_and_rejected(traces, "spark")
    assert spark_rows == duck_rows
    assert differences(duck_doc, spark_doc) == []


def test_rejected_rows_are_written_by_the_executors_and_only_examples_come_back(spark, tmp_path):
    # 40 more rounds of unknown requests: 45 rejected rounds in all; the driver gets the
    # counts and 3 examples per (table, reason), the executors write every row
    traces = dirty_traces(tmp_path / "traces", [round_row("a", f"gone-{i:02}", 0, 4, 1, step_id=1)
                                                for i in range(40)])
    duck_doc, duck_rows = document_and_rejected(traces, "duckdb")
    out = tmp_path / "rejected"
    ws = api.open_traces(traces, engine="spark", rejected_out=str(out))
    try:
        assert differences(duck_doc, json.loads(api.to_json(api.report_document(ws)))) == []
        here = ws.con.execute("select table_name, reason, count(*) from rejected_rows group by all order by all").fetchall()
        fetched = ws.fetched
    finally:
        ws.close()
    per_reason = {}
    for table, _key, reason in duck_rows:
        per_reason[(table, reason)] = per_reason.get((table, reason), 0) + 1
    assert per_reason[("rounds", "unknown_request")] == 41
    assert here == [(t, r, min(n, 3)) for (t, r), n in sorted(per_reason.items())]
    assert fetched.rejected_total == len(duck_rows) and fetched.rows["rejected_rows"] == sum(n for *_, n in here)
    written = duckdb.sql(f"select table_name, row_key, reason from read_parquet('{out}/*.parquet') "
                         "order by all").fetchall()
    assert written == duck_rows
    # without --rejected-out the CLI says where the other rows are (on stderr: stdout is the report)
    result = CliRunner().invoke(main, ["report", str(traces), "--engine", "spark", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert (f"specan: {len(duck_rows)} rejected rows stayed on the cluster; rejected_rows here holds up to 3 "
            "per table and reason (--rejected-out URI writes them all)") in result.stderr
    assert json.loads(result.stdout)["input"]["rejected_rows"] == len(duck_rows)


def partitioned_traces(root: Path) -> Path:
    """Rounds and requests partitioned by date= and region=, steps by date= only, the
    deployments one file: the link keys must match the partitions the tables share."""
    write_table(root, "deployments", [deployment("a"), deployment("base", method="none", gamma=0)])
    for day in ("2026-11-26", "2026-11-27"):
        for region in ("eu", "us"):
            ids = [f"{region}-{i}" for i in range(3)] + ["shared"]       # 'shared' in both regions
            write_columns(root, "requests", {
                "deployment_id": ["a"] * 4 + ["base"] * 4, "request_id": ids * 2,
                "arrival_time": [at(0)] * 8, "first_token_time": [at(20)] * 8, "finish_time": [at(200)] * 8,
                "prompt_tokens": [100] * 8, "output_tokens": [12] * 8, "category": ["chat"] * 8,
                "finish_reason": ["stop"] * 8},
                partition=f"date={day}/region={region}")
            dep, req, idx, step_ids, drafted, accepted, committed = [], [], [], [], [], [], []
            for d, gamma in (("a", 4), ("base", 0)):
                for n, rid in enumerate(ids):
                    for i in range(4):
                        dep.append(d); req.append(rid); idx.append(i)
                        step_ids.append(i + 10 * n + (0 if region == "eu" else 5))
                        drafted.append(gamma); acc = (i + n) % (gamma + 1) if gamma else 0
                        accepted.append(acc); committed.append(acc + 1)
            write_columns(root, "rounds", {
                "deployment_id": dep, "request_id": req, "round_idx": idx, "step_id": step_ids,
                "num_draft_tokens": drafted, "num_accepted_tokens": accepted,
                "num_committed_tokens": committed}, partition=f"date={day}/region={region}")
        sids = sorted(set(range(0, 40)))
        write_columns(root, "steps", {
            "deployment_id": ["a"] * len(sids) + ["base"] * len(sids), "step_id": sids * 2,
            "start_time": [at(10 * s) for s in sids] * 2,
            "duration_ms": [12.0 + s % 4 for s in sids] + [9.0 + s % 3 for s in sids],
            "batch_size": [1 + s % 4 for s in sids] * 2, "num_prefill_tokens": [0] * (2 * len(sids))},
            partition=f"date={day}")
    return root


def test_partitioned_traces_give_the_same_document(spark, tmp_path):
    traces = partitioned_traces(tmp_path)
    duck_doc, duck_rows = document_and_rejected(traces, "duckdb")
    spark_doc, spark_rows = document_and_rejected(traces, "spark")
    assert spark_rows == duck_rows
    assert differences(duck_doc, spark_doc) == []
    assert duck_doc["input"]["rounds"] == 2 * 2 * 2 * 4 * 4


@pytest.mark.parametrize("breakage, message", [
    ("missing_column", "column num_accepted_tokens: required column is missing"),
    ("bad_value", "column num_draft_tokens: expected INTEGER"),
    ("missing_table", "table rounds: required table is missing"),
])
def test_structural_errors_exit_2_with_the_same_line(spark, tmp_path, breakage, message):
    rows = [round_row("a", "r1", 0, 4, 2, step_id=0)]
    if breakage == "missing_column":
        rows = [{k: v for k, v in r.items() if k != "num_accepted_tokens"} for r in rows]
    if breakage == "bad_value":
        rows = [{**r, "num_draft_tokens": "four"} for r in rows]
    write_traces(tmp_path, deployments=[deployment("a")], requests=[request("a", "r1")],
                 # without rounds, steps (or intervals) would stand in for them: a trace of requests alone
                 steps=None if breakage == "missing_table" else [step("a", 0)],
                 rounds=None if breakage == "missing_table" else rows,
                 types={"rounds": {"num_draft_tokens": pa.string()}} if breakage == "bad_value" else None)
    runner = CliRunner()
    duck = runner.invoke(main, ["report", str(tmp_path)])
    spark_run = runner.invoke(main, ["report", str(tmp_path), "--engine", "spark"])
    assert (duck.exit_code, spark_run.exit_code) == (2, 2)
    assert message in duck.output
    assert spark_run.output == duck.output


def test_load_out_then_report_the_directory_on_a_laptop(spark, tmp_path):
    # a URI (file://) goes through Hadoop's FileSystem listing, as s3a:// would
    traces = partitioned_traces(tmp_path / "traces")
    out = tmp_path / "reduced"
    runner = CliRunner()
    load = runner.invoke(main, ["load", f"file://{traces}", "--engine", "spark", "--out", str(out)])
    assert load.exit_code == 0, load.output
    assert (out / "_specan_reduced.json").is_file() and (out / "request_group_cells").is_dir()
    # nothing per round, step, request or interval
    for name in ("rounds", "steps", "requests", "intervals", "request_rounds", "request_repetition"):
        assert not (out / name).exists()
    laptop = runner.invoke(main, ["report", str(out), "--format", "json"])
    assert laptop.exit_code == 0, laptop.output
    duck = runner.invoke(main, ["report", str(traces), "--format", "json"])
    assert differences(json.loads(duck.output), json.loads(laptop.output)) == []
    rounds = runner.invoke(main, ["sql", str(out), "select count(*) from round_facts"])
    assert rounds.exit_code == 2
    # the input tables that stayed, then every view that reads them (the per-request ones
    # ran on the cluster and came back reduced)
    assert ("(reduced traces: rounds, steps, requests, intervals, baseline_decode_buckets, batch_size_requests, "
            "channel_counts, cost_steps, iteration_loads, iteration_steps, itl_gaps, log_intervals, matched_units, "
            "output_tokens_mismatch, "
            "request_acceptance, request_anomalies, request_decode_buckets, request_gaps_unpacked, request_latency, "
            "request_loads, request_repetition, request_rounds, request_stalls, round_facts, round_group_cells, "
            "slice_metrics, slice_requests, slice_speedup, step_loads, step_rounds, stream_emissions stay on the "
            "cluster; the other views are here)") in rounds.output


def test_validate_and_sql_on_spark(spark, tmp_path):
    traces = dirty_traces(tmp_path)
    runner = CliRunner()
    duck = runner.invoke(main, ["validate", str(traces)])
    on_spark = runner.invoke(main, ["validate", str(traces), "--engine", "spark"])
    assert (duck.exit_code, on_spark.exit_code) == (0, 0)
    assert on_spark.stdout == duck.stdout
    assert on_spark.stderr.startswith("specan: 17 rejected rows stayed on the cluster;")
    query = "select deployment_id, num_requests, mean_accept_length from accept_length order by 1"
    duck = runner.invoke(main, ["sql", str(traces), query, "--format", "csv"])
    on_spark = runner.invoke(main, ["sql", str(traces), query, "--format", "csv", "--engine", "spark"])
    assert on_spark.exit_code == 0 and on_spark.stdout == duck.output


def test_a_uri_needs_the_spark_engine(tmp_path):
    result = CliRunner().invoke(main, ["report", "s3a://bucket/traces"])
    assert result.exit_code == 2
    assert "s3a://bucket/traces: a URI needs --engine spark" in result.output


def test_a_corrupt_data_page_names_the_same_file(spark, tmp_path):
    # the footer reads (the structure check passes); the data pages are garbage, so the
    # read fails inside Spark's job: the file is named as the DuckDB engine names it
    write_traces(tmp_path, deployments=[deployment("a")], requests=[request("a", "r1")], steps=[step("a", 0)])
    write_table(tmp_path, "rounds", {"date=2026-11-27": [round_row("a", "r1", 0, 2, 1, step_id=0)],
                                     "date=2026-11-28": [round_row("a", "r1", 0, 2, 1, step_id=0)]})
    bad = tmp_path / "rounds" / "date=2026-11-28" / "part-0.parquet"
    data = bytearray(bad.read_bytes())
    footer_len = int.from_bytes(data[-8:-4], "little")
    for i in range(4, len(data) - 8 - footer_len):
        data[i] = 0xFF
    bad.write_bytes(bytes(data))
    runner = CliRunner()
    duck = runner.invoke(main, ["validate", str(tmp_path)])
    on_spark = runner.invoke(main, ["validate", str(tmp_path), "--engine", "spark"])
    assert (duck.exit_code, on_spark.exit_code) == (2, 2)
    prefix = f"Error: {bad}: table rounds: not readable Parquet ("
    assert duck.output.startswith(prefix) and on_spark.output.startswith(prefix)


# ----------------------------------------------------------------------------- the rules, one case each

from test_load_paths import CASES as RULE_CASES, write_case  # noqa: E402


@pytest.mark.parametrize("table, reason, adds, expected, options", RULE_CASES)
def test_spark_rejects_the_rows_each_rule_names(spark, tmp_path, table, reason, adds, expected, options):
    # the third evaluation of the one definition (analyzer/ingest/rules.py): the cases of
    # tests/test_load_paths.py, whose exact and in-place paths reject these same rows
    traces = write_case(tmp_path / "traces", adds)
    want = sorted((t, key, other[0] if other else reason) for t, key, *other in expected)
    from analyzer.spark import validate

    validate(str(traces), rejected_out=str(tmp_path / "rejected"))     # every rejected row, as the executors wrote it
    rejected = duckdb.sql(f"select table_name, row_key, reason from read_parquet('{tmp_path}/rejected/*.parquet')")
    assert sorted(rejected.fetchall()) == want


def test_deployment_versions_and_conflicts_on_spark(spark, tmp_path):
    # tests/test_deployment_versions.py's traces: an upgrade between dates, and rows that
    # differ within a date; both engines keep the same versions and name the same conflicts
    from test_deployment_versions import DAY2, base, spec, write_dated

    for name, day1, day2 in (("upgraded", [spec(), base()], [spec(engine_version="0.99.0"), base()]),
                             ("conflict", [spec(), base()], [spec(), spec(gpu="A100"), base()])):
        traces = write_dated(tmp_path / name, day1, day2)
        (duck, duck_rejected), (sp, sp_rejected) = (document_and_rejected(traces, e) for e in ("duckdb", "spark"))
        assert differences(duck, sp) == []
        assert sorted(duck_rejected) == sorted(sp_rejected)
    assert duck["input"]["deployment_conflicts"][0]["partition"] == DAY2
    assert sorted(duck_rejected) == [("deployments", f"deployment_id=a, {DAY2}", "duplicate_key")] * 2


def test_written_link_keys_on_spark(spark, tmp_path):
    # valid uids are the link keys on Spark too, and give the DuckDB engine's document;
    # a wrong uid in rounds falls back to hashing on both, with the same note
    from test_link_keys import r2_named_by_r1s_uid, tables, with_uid_tables

    good = write_traces(tmp_path / "good", **with_uid_tables(tables(True)))
    bad = write_traces(tmp_path / "bad", **r2_named_by_r1s_uid(True))
    for traces in (good, bad):
        (duck, duck_rejected), (on_spark, spark_rejected) = (document_and_rejected(traces, e)
                                                             for e in ("duckdb", "spark"))
        assert differences(duck, on_spark) == []
        assert duck_rejected == spark_rejected == [
            ("rounds", "deployment_id=a, request_id=r3, round_idx=0", "unknown_request")]
    notes = [n for n in on_spark["notes"] if "request_uid" in str(n)]
    assert len(notes) == 1 and "not a valid link key" in str(notes[0])
    from analyzer import spark as engine

    assert engine.validate(str(good))[0].written_links == {"request_uid", "step_uid"}
    assert engine.validate(str(bad))[0].written_links == {"step_uid"}     # request_uid hashed the second time


def test_the_recipe_in_spark_sql_gives_the_same_uids(spark):
    # docs/trace-format.md's Spark SQL: conv() to base -10 reads the hex digits as signed
    from analyzer.ingest.uids import link_uid

    rows = spark.sql("select cast(conv(substring(md5(concat(d, char(31), k)), 1, 16), 16, -10) as bigint) as uid "
                     "from values ('a', 'r1'), ('a', 'r2'), ('dép', 'ü') as t(d, k)").collect()
    assert [r.uid for r in rows] == [link_uid("a", "r1"), link_uid("a", "r2"), link_uid("dép", "ü")]


def test_the_users_session_is_left_as_it_was(spark, tmp_path):
    # a notebook's session: its settings, its own view and its cached data are as the run
    # found them; the run's views and kept tables are gone; shuffles ran in 2 x its cores
    write_seed_traces(tmp_path, 4, cheap)
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    spark.conf.unset("spark.sql.shuffle.partitions")
    spark.range(3).createOrReplaceTempView("users_own")
    users_cached = spark.range(5).persist()
    users_cached.count()
    views = {t.name for t in spark.catalog.listTables() if t.isTemporary}
    kept = set(spark.sparkContext._jsc.getPersistentRDDs().keys())
    during = set()
    try:
        ws = api.open_traces(tmp_path, engine="spark", progress=lambda msg: msg.endswith("on Spark") and during.add(
            (spark.conf.get("spark.sql.session.timeZone"), spark.conf.get("spark.sql.shuffle.partitions"))))
        try:
            (row,) = [d for d in api.report_document(ws)["deployments"] if d["deployment_id"] == "spec"]
        finally:
            ws.close()
        assert round(row["speedup"], 3) == 2.334
        assert during == {("UTC", str(2 * spark.sparkContext.defaultParallelism))}
        assert spark.conf.get("spark.sql.session.timeZone") == "America/New_York"
        assert spark.conf.get("spark.sql.shuffle.partitions") == "200"       # unset again: Spark's default
        assert {t.name for t in spark.catalog.listTables() if t.isTemporary} == views
        assert set(spark.sparkContext._jsc.getPersistentRDDs().keys()) == kept
    finally:
        users_cached.unpersist()
        spark.catalog.dropTempView("users_own")
        spark.conf.set("spark.sql.session.timeZone", "UTC")


def test_views_used_twice_are_kept_once_and_the_others_computed_where_read():
    # Spark recomputes a view in every job that reads it: the heavy views that two heavy
    # views read, or one reads and the fetch brings back, are kept; a view used once is
    # computed inside the job that uses it. Which they are follows from the SQL's references
    from analyzer.analysis.views import discover_views, scaleout_split
    from analyzer.spark.heavy import kept_views

    views, split = discover_views(), scaleout_split()
    kept = kept_views(views, split)
    assert {"matched_units", "request_acceptance", "request_anomalies", "request_latency",
            "request_rounds", "step_rounds", "round_group_cells"} <= kept

    def uses(name):
        return sum(name in views[r].references for r in split.heavy if r != name) + (name in split.fetched)

    assert all(uses(name) >= 2 for name in kept)
    # fetched and read by nothing else: computed by the fetch, materialised in DuckDB or not
    assert {"cost_model", "matched_sums", "round_cells", "itl_histogram"} <= {
        n for n in split.heavy if uses(n) == 1} and not {"cost_model", "matched_sums"} & kept
    # a plain heavy view with one heavy reader stays a view
    assert {"stream_emissions", "matched_baseline"} & set(split.heavy) - kept
