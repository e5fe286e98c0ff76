"""The wheel carries the SQL and schema files and works from another directory."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_installs_and_runs_from_another_directory(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(wheels), str(ROOT)], check=True)
    (wheel,) = wheels.glob("specan-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "analyzer/schemas/rounds.json" in names
    assert "analyzer/sql/macros.sql" in names
    assert "analyzer/sql/materialized.toml" in names and "analyzer/sql/seeds/buckets.csv" in names
    assert any(n.startswith("analyzer/sql/marts/") and n.endswith(".sql") for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "specan = analyzer.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()

    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
                    str(wheel)], check=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run([sys.executable, "-c", "import analyzer.resources as r; print(r.resource_dir('sql'))"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=True)
    assert Path(where.stdout.strip()) == site / "analyzer" / "sql"
    run = subprocess.run([sys.executable, "-m", "analyzer", "validate", str(ROOT / "sample_traces")],
                         cwd=elsewhere, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("table ")
    assert "rejected rows: 0" in run.stdout
    # the views, their macros and the round aggregates, from the installed package
    run = subprocess.run([sys.executable, "-m", "analyzer", "sql", str(ROOT / "sample_traces"),
                          "select count(*) as n, sum(num_rounds) as rounds from request_rounds", "--format", "csv"],
                         cwd=elsewhere, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "n,rounds\n3546,470316\n"  # every sample round (470,316) in its request's row


def test_a_loaded_database_opens_in_the_duckdb_cli_users_install(tmp_path):
    """`specan load` writes DuckDB's storage format v1.5.0, so the duckdb CLI 1.5.x
    (the registry's duckdb-cli, a test dependency) opens it and runs its views."""
    cli = Path(sys.executable).parent / "duckdb"
    assert cli.is_file(), "duckdb-cli is a test dependency: pip install '.[test]'"
    version = subprocess.run([str(cli), "--version"], capture_output=True, text=True, check=True).stdout
    assert version.startswith("v1.5."), version
    db = tmp_path / "traces.duckdb"
    subprocess.run([sys.executable, "-m", "analyzer", "load", str(ROOT / "sample_traces"), "--db", str(db)],
                   check=True, capture_output=True)
    run = subprocess.run([str(cli), "-csv", str(db), "-c",
                          "select count(*) as n, sum(num_rounds) as rounds from request_rounds; "
                          "select deployment_id, round(mean_accept_length, 6) as l from accept_length "
                          "where deployment_id = 'eagle-bf16'; select batch_bucket(5) as b"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "n,rounds\n3546,470316\ndeployment_id,l\neagle-bf16,2.597823\nb\n5-8\n"


def test_the_sdist_carries_what_its_tests_need(tmp_path):
    """The sdist's own tests read sample_traces/, tests/golden/ and docs/; they ship with it."""
    import tarfile

    subprocess.run([sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-d", str(tmp_path)],
                   cwd=ROOT, check=True, capture_output=True)
    (sdist,) = tmp_path.glob("specan-*.tar.gz")
    names = {n.split("/", 1)[1] for n in tarfile.open(sdist).getnames() if "/" in n}
    shipped = {p.relative_to(ROOT).as_posix() for p in (ROOT / "sample_traces").rglob("*.parquet")}
    assert shipped and shipped <= names
    assert {"tests/golden/sample_report.json", "tests/golden/sample_report.md", "tests/conftest.py",
            "docs/trace-format.md", "sql/seeds/buckets.csv", "sql/materialized.toml", ".ci/run"} <= names
