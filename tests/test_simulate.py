"""The synthetic trace generator: format, invariants, determinism, and the shape of its results."""

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from analyzer.analysis.ngram import replay_request
from analyzer.ingest.schema import load_schemas
from analyzer.simulate.traces import DEPLOYMENTS, LAST_DATE, NGRAM_K, NGRAM_MAX, NGRAM_MIN, simulate

BUCKETS = ((1, 1, "1"), (2, 2, "2"), (3, 4, "3-4"), (5, 8, "5-8"), (9, 16, "9-16"),
           (17, 32, "17-32"), (33, 64, "33-64"), (65, 128, "65-128"))
ARROW_TYPES = {"VARCHAR": "string", "INTEGER": "int32", "BIGINT": "int64", "DOUBLE": "double",
               "BOOLEAN": "bool", "INTEGER[]": "list<element: int32>", "TIMESTAMP": "timestamp[us, tz=UTC]"}


def read(outdir: Path, table: str) -> pl.DataFrame:
    """A table with its `date` partition column, like the loader sees it."""
    frames = []
    for path in sorted((outdir / table).glob("date=*/part-0.parquet")):
        frame = pl.from_arrow(pq.read_table(path))
        frames.append(frame.with_columns(date=pl.lit(path.parent.name.split("=", 1)[1])))
    return pl.concat(frames)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """One day at the default size: enough load for every batch bucket."""
    outdir = tmp_path_factory.mktemp("full")
    counts = simulate(outdir, seed=0, days=1)
    return outdir, counts


@pytest.fixture(scope="module")
def tables(full):
    outdir, _ = full
    return {t: read(outdir, t) for t in ("deployments", "requests", "steps", "rounds")}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("small")
    simulate(outdir, seed=3, requests=25, days=2)
    return outdir


# --------------------------------------------------------------------------- format

def test_layout_and_counts(full):
    outdir, counts = full
    files = sorted(p.relative_to(outdir).as_posix() for p in outdir.rglob("*.parquet"))
    day = LAST_DATE.isoformat()
    assert files == [f"{t}/date={day}/part-0.parquet" for t in ("deployments", "requests", "rounds", "steps")]
    for table, n in counts.items():
        assert pq.read_metadata(outdir / table / f"date={day}" / "part-0.parquet").num_rows == n


def test_columns_and_types_follow_the_schemas(full):
    outdir, _ = full
    for table, schema in load_schemas().items():
        for path in (outdir / table).glob("date=*/*.parquet"):
            found = pq.read_schema(path)
            assert found.names == list(schema.column_names)  # and no `date` column inside
            for column in schema.columns:
                assert str(found.field(column.name).type) == ARROW_TYPES[column.type], (table, column.name)


def test_dates_end_on_the_fixed_last_date(small):
    days = sorted(p.name for p in (small / "rounds").iterdir())
    assert days == ["date=2026-11-27", "date=2026-11-28"]
    deployments = read(small, "deployments")
    assert deployments.height == 2 * len(DEPLOYMENTS)
    assert deployments.drop("date").unique().height == len(DEPLOYMENTS)  # identical copies


def test_deployments(tables):
    d = {row["deployment_id"]: row for row in tables["deployments"].to_dicts()}
    assert set(d) == {dep.deployment_id for dep in DEPLOYMENTS}
    assert {row["model"] for row in d.values()} == {"qwen3-8b"}
    assert d["base-bf16"]["method"] == "none" and d["base-bf16"]["num_speculative_tokens"] == 0
    assert d["base-fp8"]["target_quant"] == "fp8"
    assert d["eagle-bf16"]["baseline_id"] is None and d["eagle-fp8"]["baseline_id"] == "base-fp8"
    assert d["ngram-bf16"]["spec_config"] == ('{"method": "ngram", "num_speculative_tokens": 4, '
                                              '"prompt_lookup_min": 2, "prompt_lookup_max": 5}')
    assert '"num_speculative_tokens_per_batch_size"' in d["eagle-dyn-bf16"]["spec_config"]
    assert d["eagle-dyn-bf16"]["method"] == "eagle3"


# --------------------------------------------------------------------------- invariants

def test_requests(tables):
    req = tables["requests"]
    assert (req["prompt_token_ids"].list.len() == req["prompt_tokens"]).all()
    assert (req["output_token_ids"].list.len() == req["output_tokens"]).all()
    assert set(req["finish_reason"].unique()) == {"stop", "length", "abort", "error"}
    errors = req.filter(pl.col("finish_reason") == "error")
    assert errors["first_token_time"].is_null().all() and (errors["output_tokens"] == 0).all()
    ok = req.filter(pl.col("finish_reason") != "error")
    assert ok["first_token_time"].is_not_null().all() and ok["finish_time"].is_not_null().all()
    assert (ok["first_token_time"] >= ok["arrival_time"]).all()
    assert (ok["finish_time"] >= ok["first_token_time"]).all()
    assert set(req["temperature"].unique()) == {0.0, 0.7, 1.0, 1.3}
    quality = req.group_by("deployment_id").agg(pl.col("quality_score").mean())
    assert all(0.75 < q < 0.87 for q in quality["quality_score"])


def test_committed_tokens_add_up_to_the_output(tables):
    per_request = (tables["rounds"].group_by("deployment_id", "request_id", "date")
                   .agg(pl.col("num_committed_tokens").sum().alias("committed"), pl.len().alias("n"),
                        pl.col("round_idx").min().alias("lo"), pl.col("round_idx").max().alias("hi")))
    req = tables["requests"].join(per_request, on=["deployment_id", "request_id", "date"], how="left")
    done = req.filter(pl.col("finish_reason") != "error")
    assert (done["committed"] == done["output_tokens"] - 1).all()
    assert (done["lo"] == 0).all() and (done["hi"] == done["n"] - 1).all()
    assert req.filter(pl.col("finish_reason") == "error")["n"].is_null().all()  # no rounds


def test_round_rules(tables):
    r = tables["rounds"].join(tables["deployments"].select("deployment_id", "num_speculative_tokens"),
                              on="deployment_id")
    assert (r["num_accepted_tokens"] <= r["num_draft_tokens"]).all()
    assert (r["num_draft_tokens"] + r["num_invalidated_tokens"] <= r["num_speculative_tokens"]).all()
    assert (r["num_committed_tokens"] <= r["num_accepted_tokens"] + 1).all()
    assert (r["num_committed_tokens"] >= 1).all()
    assert (r["num_verified_nodes"] == r["num_draft_tokens"]).all()
    truncated = r.filter(pl.col("num_committed_tokens") < pl.col("num_accepted_tokens") + 1)
    assert truncated.height > 0 and truncated["stop_reason"].is_not_null().all()


def test_stop_reason_only_on_the_last_round(tables):
    last = (tables["rounds"].with_columns(
        is_last=pl.col("round_idx") == pl.col("round_idx").max().over("deployment_id", "request_id", "date")))
    assert (last["is_last"] == last["stop_reason"].is_not_null()).all()
    stops = last.filter("is_last").join(tables["requests"], on=["deployment_id", "request_id", "date"])
    expected = {"eos": "stop", "stop_string": "stop", "length": "length", "abort": "abort"}
    assert all(expected[s] == f for s, f in zip(stops["stop_reason"], stops["finish_reason"]))
    assert set(stops["stop_reason"]) == set(expected)


def test_ngram_rounds_are_the_replay(tables):
    rounds = tables["rounds"].filter(pl.col("deployment_id") == "ngram-bf16").sort("request_id", "round_idx")
    by_request = rounds.partition_by("request_id", as_dict=True)
    req = tables["requests"].filter((pl.col("deployment_id") == "ngram-bf16") & (pl.col("finish_reason") != "error"))
    for row in req.iter_rows(named=True):
        expected = replay_request(row["prompt_token_ids"], row["output_token_ids"], NGRAM_MIN, NGRAM_MAX, NGRAM_K)
        got = by_request[(row["request_id"],)].select(
            "num_draft_tokens", "num_accepted_tokens", "num_committed_tokens").rows()
        assert got == expected, row["request_id"]
    assert (rounds["num_draft_tokens"] == 0).any() and (rounds["num_invalidated_tokens"] == 0).all()


def test_structured_output_invalidates_eagle_drafts(tables):
    r = tables["rounds"].join(tables["requests"], on=["deployment_id", "request_id", "date"])
    cut = r.filter(pl.col("num_invalidated_tokens") > 0)
    assert cut["structured_output"].all()
    assert set(cut["deployment_id"]) == {"eagle-bf16", "eagle-fp8", "eagle-dyn-bf16"}
    assert (cut["num_draft_tokens"] == 0).any()  # the grammar sometimes removes every draft


def test_steps(tables):
    steps, rounds = tables["steps"], tables["rounds"]
    per_step = rounds.group_by("deployment_id", "date", "step_id").agg(pl.len().alias("n"))
    s = steps.join(per_step, on=["deployment_id", "date", "step_id"], how="left").with_columns(pl.col("n").fill_null(0))
    assert (s["batch_size"] == s["n"]).all()
    assert ((s["batch_size"] > 0) | (s["num_prefill_tokens"] > 0)).all()
    assert (s["duration_ms"] > s["draft_ms"] + s["verify_ms"]).all()  # other_ms > 0
    assert ((s["kv_usage"] >= 0) & (s["kv_usage"] <= 1)).all()
    assert s["num_preempted"].sum() > 0
    for (dep,), frame in steps.sort("step_id").partition_by("deployment_id", as_dict=True).items():
        assert frame["step_id"].to_list() == list(range(frame.height)), dep
        start = frame["start_time"].dt.epoch("us").to_numpy()
        end = start + np.round(frame["duration_ms"].to_numpy() * 1000).astype(np.int64)
        assert (start[1:] >= end[:-1]).all(), dep  # back to back, or an idle gap
        assert (start[1:] == end[:-1]).mean() > 0.9, dep
        assert (frame["start_time"].dt.date().cast(pl.String) == frame["date"]).all()


def test_request_times_are_step_ends(tables):
    steps = tables["steps"].with_columns(
        end=pl.col("start_time") + pl.duration(microseconds=(pl.col("duration_ms") * 1000).round().cast(pl.Int64)))
    last = (tables["rounds"].filter(pl.col("stop_reason").is_not_null())
            .join(steps, on=["deployment_id", "date", "step_id"])
            .join(tables["requests"], on=["deployment_id", "request_id", "date"]))
    assert (last["end"] == last["finish_time"]).all()
    prefill_ends = steps.filter(pl.col("num_prefill_tokens") > 0).select("deployment_id", "date", "end")
    ft = tables["requests"].filter(pl.col("first_token_time").is_not_null())
    joined = ft.join(prefill_ends, left_on=["deployment_id", "date", "first_token_time"],
                     right_on=["deployment_id", "date", "end"], how="left", coalesce=False)
    assert joined["end"].is_not_null().all()
    assert (tables["requests"]["num_preemptions"] > 0).any()


# --------------------------------------------------------------------------- load and speed

def _decode_rounds(tables) -> pl.DataFrame:
    bucket = pl.lit(None, dtype=pl.String)
    for low, high, name in reversed(BUCKETS):
        bucket = pl.when(pl.col("batch_size").is_between(low, high)).then(pl.lit(name)).otherwise(bucket)
    return (tables["rounds"].join(tables["steps"], on=["deployment_id", "date", "step_id"])
            .filter(pl.col("num_prefill_tokens") == 0).with_columns(bucket=bucket))


def test_every_batch_bucket_has_decode_rounds(tables):
    rounds = _decode_rounds(tables)
    for dep in DEPLOYMENTS:
        present = set(rounds.filter(pl.col("deployment_id") == dep.deployment_id)["bucket"].drop_nulls())
        assert present == {name for _, _, name in BUCKETS}, dep.deployment_id


def _speedup_by_bucket(tables, spec: str, base: str) -> dict[str, float]:
    """Σ base duration / Σ base committed × Σ spec committed / Σ spec duration, per bucket."""
    sums = (_decode_rounds(tables).group_by("deployment_id", "bucket")
            .agg(pl.col("duration_ms").sum().alias("t"), pl.col("num_committed_tokens").sum().alias("c")))
    b = {row["bucket"]: row for row in sums.filter(pl.col("deployment_id") == base).iter_rows(named=True)}
    s = {row["bucket"]: row for row in sums.filter(pl.col("deployment_id") == spec).iter_rows(named=True)}
    return {k: b[k]["t"] / b[k]["c"] * s[k]["c"] / s[k]["t"] for k in b.keys() & s.keys()}


def test_eagle_speedup_falls_with_batch_size(tables):
    speedup = _speedup_by_bucket(tables, "eagle-bf16", "base-bf16")
    order = [name for _, _, name in BUCKETS if name in speedup]
    assert speedup["1"] > 1.5
    assert speedup[order[-1]] < 1
    assert speedup["1"] > speedup["9-16"] > speedup["33-64"]


def test_fp8_pair_and_dynamic_gamma(tables):
    fp8 = _speedup_by_bucket(tables, "eagle-fp8", "base-fp8")
    assert fp8["1"] > 1.2 and fp8["65-128"] < 1
    rounds = _decode_rounds(tables).filter(pl.col("deployment_id") == "eagle-dyn-bf16")
    gamma = rounds.with_columns(g=pl.col("num_draft_tokens") + pl.col("num_invalidated_tokens"))
    per_bucket = gamma.group_by("bucket").agg(pl.col("g").mean().alias("mean"), pl.col("g").n_unique().alias("k"))
    means = {row["bucket"]: row["mean"] for row in per_bucket.iter_rows(named=True)}
    assert means["1"] > means["9-16"] > means["33-64"] > means["65-128"]
    assert (per_bucket["k"] >= 2).all()  # the jitter shows several γ per bucket


def test_categories_differ_in_repetition(tables):
    rounds = tables["rounds"].join(tables["requests"], on=["deployment_id", "request_id", "date"])
    ngram = (rounds.filter(pl.col("deployment_id") == "ngram-bf16").group_by("category")
             .agg((pl.col("num_committed_tokens").sum() / pl.len()).alias("tokens_per_round")))
    tpr = dict(ngram.iter_rows())
    assert tpr["code_edit"] > tpr["extraction"] > tpr["chat"]
    assert tpr["chat"] < 1.1 and tpr["code_edit"] > 2
    eagle = (rounds.filter(pl.col("deployment_id") == "eagle-bf16").group_by("category", "request_id")
             .agg((pl.col("num_committed_tokens").sum() / pl.len()).alias("tpr")))
    spread = dict(eagle.group_by("category").agg(pl.col("tpr").std()).iter_rows())
    assert all(value > 0.1 for value in spread.values())  # requests differ within a category


# --------------------------------------------------------------------------- determinism

def test_same_seed_same_files(small, tmp_path):
    simulate(tmp_path, seed=3, requests=25, days=2)
    for path in sorted(small.rglob("*.parquet")):
        again = tmp_path / path.relative_to(small)
        assert pq.read_table(path).equals(pq.read_table(again)), path
        assert path.read_bytes() == again.read_bytes(), path


def test_other_seed_other_traces(small, tmp_path):
    simulate(tmp_path, seed=4, requests=25, days=2)
    assert not read(small, "rounds").equals(read(tmp_path, "rounds"))
    assert not read(small, "requests").equals(read(tmp_path, "requests"))


def test_a_date_does_not_depend_on_the_number_of_days(small, tmp_path):
    simulate(tmp_path, seed=3, requests=25, days=1)
    name = f"rounds/date={LAST_DATE.isoformat()}/part-0.parquet"
    assert (small / name).read_bytes() == (tmp_path / name).read_bytes()


def test_progress_messages(tmp_path):
    messages = []
    simulate(tmp_path, seed=1, requests=5, days=1, progress=messages.append)
    assert messages and all(isinstance(m, str) for m in messages)


def test_sample_traces_are_the_default_output(tmp_path):
    # sample_traces/ is committed; regenerating it must give the same data.
    # To refresh it after a model change: specan simulate sample_traces
    shipped = Path(__file__).resolve().parents[1] / "sample_traces"
    simulate(tmp_path)
    shipped_files = sorted(p.relative_to(shipped) for p in shipped.rglob("*.parquet"))
    assert shipped_files == sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.parquet"))
    for relative in shipped_files:
        assert pq.read_table(shipped / relative).equals(pq.read_table(tmp_path / relative)), relative
