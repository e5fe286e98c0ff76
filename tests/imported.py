"""Helpers the importer tests share: run the CLI, read back what an import wrote."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow.parquet as pq
from click.testing import CliRunner

from analyzer.cli import main

UTC = dt.timezone.utc


def run(*args):
    """`specan ARGS...` in process; stdout and stderr apart."""
    return CliRunner().invoke(main, [str(a) for a in args])


def t(text: str) -> dt.datetime:
    """An ISO time read as UTC."""
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


def rows(root: Path, table: str) -> list[dict]:
    """Every row an import wrote under TRACES/<table>/, file by file in name order."""
    out = []
    for path in sorted((root / table).rglob("*.parquet")) if (root / table).is_dir() else []:
        out += pq.read_table(path, partitioning=None).to_pylist()
    return out
