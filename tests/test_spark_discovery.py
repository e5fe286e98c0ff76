"""The Spark engine's discovery (analyzer.spark.load): how files are grouped into
reads and what paths reach Spark's readers."""

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet  # noqa: F401  (pa.parquet)
import pytest

from analyzer.ingest.load import discover
from analyzer.spark.load import read_groups
from tracebuilder import deployment, request, round_row, step, write_traces

pytestmark = pytest.mark.xdist_group("spark")


@pytest.fixture(scope="module")
def spark():
    import os

    from analyzer.spark.session import spark_session

    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--driver-memory 2g pyspark-shell")
    return spark_session("local[2]")


def pandas_rounds(root: Path, files: int = 20) -> Path:
    """Rounds in ``files`` files written by pandas: each footer's metadata carries its own row count."""
    write_traces(root, deployments=[deployment("a")], requests=[request("a", "r1")],
                 steps=[step("a", i) for i in range(files + 1)])
    (root / "rounds").mkdir()
    for i in range(files):
        rows = [round_row("a", "r1", 100 * i + j, 4, 2, step_id=i) for j in range(i + 1)]
        pd.DataFrame(rows).to_parquet(root / "rounds" / f"part-{i:02}.parquet")
    return root


def test_files_with_the_same_columns_are_one_read_whatever_their_metadata(tmp_path):
    found = discover(pandas_rounds(tmp_path))
    rounds = found["rounds"]
    assert len({s.metadata[b"pandas"] for s in rounds.file_schemas.values()}) == 20   # row counts differ
    groups = read_groups(rounds)
    assert [len(g) for g in groups] == [20]


def test_local_paths_reach_spark_as_file_uris(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pandas_rounds(tmp_path / "traces", files=2)
    found = discover(Path("traces"))       # relative, as a user types it
    paths = [p for t in found.values() for g in read_groups(t) for p in g]
    assert paths and all(p.startswith(f"file://{tmp_path}/traces/") for p in paths)


def test_pandas_written_rounds_on_spark(spark, tmp_path):
    from analyzer import spark as engine

    summary, _tables, fetched = engine.validate(str(pandas_rounds(tmp_path)))
    assert summary.rows_read["rounds"] == sum(range(1, 21)) and fetched.rejected_total == 0


def test_uri_footers_read_as_spark_reads_each_file(spark, tmp_path):
    # the JVM's footers, not a Spark job per file: the same types spark.read gives
    from pyspark.sql.pandas.types import to_arrow_schema

    from analyzer.spark.load import _discover_uri
    from test_spark import partitioned_traces

    traces = partitioned_traces(tmp_path)
    found = _discover_uri(spark, f"file://{traces}", None, lambda _m: None)
    files = [(t, p) for t in found for p in found[t].files]
    assert len(files) == 1 + 4 + 2 + 4
    for table, path in files:
        by_spark = to_arrow_schema(spark.read.parquet(path).schema, timezone="UTC")
        partitions = found[table].file_partitions[path]
        assert found[table].file_schemas[path] == pa.schema([f for f in by_spark if f.name not in partitions])


def test_an_unreadable_footer_under_a_uri_names_the_file(spark, tmp_path):
    from analyzer.errors import InputProblem
    from analyzer.spark.load import _discover_uri

    pandas_rounds(tmp_path, files=3)
    (tmp_path / "rounds" / "part-01.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(InputProblem) as caught:
        _discover_uri(spark, f"file://{tmp_path}", None, lambda _m: None)
    assert str(caught.value).startswith(f"file://{tmp_path}/rounds/part-01.parquet: table rounds: not readable Parquet (")
    assert "not a Parquet file" in str(caught.value)


def test_a_uri_gives_the_notes_and_document_a_path_gives(spark, tmp_path):
    from test_spark import differences, document

    traces = pandas_rounds(tmp_path / "traces", files=3)
    (traces / "step").mkdir()                              # a misspelt table: noted, not read
    (traces / "import_notes").mkdir()
    pa.parquet.write_table(pa.table({"note": ["llamacpp: 2 lines skipped"]}), traces / "import_notes" / "n.parquet")
    uri = f"file://{traces}"
    as_path, as_uri = document(traces, "spark"), document(uri, "spark")
    notes = [str(n) for n in as_path["notes"]]
    assert any(f"step/ in {traces} is not a trace table and was not read; did you mean steps/?" in n for n in notes)
    assert any("llamacpp: 2 lines skipped" in n for n in notes)
    assert [str(n) for n in as_uri["notes"]] == [n.replace(str(traces), uri) for n in notes]
    assert differences(as_path, {**as_uri, "notes": as_path["notes"]}) == []


def test_an_uncastable_value_under_a_uri_names_the_first_file_as_duckdb_does(spark, tmp_path):
    # one Spark job over the three files, not one per file: the first offending one by path
    from click.testing import CliRunner

    from analyzer.cli import main
    from tracebuilder import write_table

    write_traces(tmp_path, deployments=[deployment("a")], requests=[request("a", "r1")], steps=[step("a", 0)])
    good = [round_row("a", "r1", 0, 4, 2, step_id=0)]
    bad = [{**good[0], "num_draft_tokens": "four"}]
    for part, rows in (("part=0", good), ("part=1", bad), ("part=2", bad)):
        write_table(tmp_path, "rounds", {part: [{**r, "num_draft_tokens": str(r["num_draft_tokens"])} for r in rows]},
                    types={"num_draft_tokens": pa.string()})
    runner = CliRunner()
    duck = runner.invoke(main, ["validate", str(tmp_path)])
    on_spark = runner.invoke(main, ["validate", f"file://{tmp_path}", "--engine", "spark"])
    assert (duck.exit_code, on_spark.exit_code) == (2, 2)
    assert f"{tmp_path}/rounds/part=1/part-0.parquet: table rounds, column num_draft_tokens: expected INTEGER" \
        in duck.output
    assert on_spark.output == duck.output.replace(str(tmp_path), f"file://{tmp_path}")
