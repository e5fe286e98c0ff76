"""Build small trace directories for tests, typed from the schemas.

    write_traces(tmp_path, deployments=[{...}], rounds=[{...}])

Each table is a list of row dicts; only the keys that appear in some row become
columns, so a test can leave optional columns out entirely. A table given as
``{"date=2026-11-27": [...], "date=2026-11-28": [...]}`` is written Hive-partitioned.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from analyzer.ingest.schema import load_schemas

from analyzer.ingest.schema import ARROW  # noqa: E402  the declared type → Arrow type map

T0 = dt.datetime(2026, 11, 28, 12, 0, 0, tzinfo=dt.timezone.utc)


def at(ms: float) -> dt.datetime:
    """A timestamp ``ms`` milliseconds after a fixed instant."""
    return T0 + dt.timedelta(milliseconds=ms)


def arrow_table(table: str, rows: list[dict], types: dict[str, pa.DataType] | None = None) -> pa.Table:
    schema = load_schemas()[table]
    declared = {c.name: ARROW[c.type] for c in schema.columns}
    # An empty table still carries the required columns, as a zero-row file would.
    names: list[str] = [] if rows else list(schema.required_columns)
    for row in rows:
        for key in row:
            if key not in names:
                names.append(key)
    fields = []
    for name in names:
        typ = (types or {}).get(name) or declared.get(name)
        if typ is None:
            values = [r.get(name) for r in rows if r.get(name) is not None]
            typ = pa.array(values).type if values else pa.null()
        fields.append(pa.field(name, typ))
    arrow_schema = pa.schema(fields)
    return pa.Table.from_pylist([{n: r.get(n) for n in names} for r in rows], schema=arrow_schema)


def write_table(root: Path, table: str, rows, types=None, name: str = "part-0.parquet") -> None:
    root = Path(root)
    if isinstance(rows, dict):
        for partition, part_rows in rows.items():
            folder = root / table / partition
            folder.mkdir(parents=True, exist_ok=True)
            pq.write_table(arrow_table(table, part_rows, types), folder / name)
    else:
        root.mkdir(parents=True, exist_ok=True)
        pq.write_table(arrow_table(table, rows, types), root / f"{table}.parquet")


def write_traces(root: Path, *, deployments=None, requests=None, steps=None, rounds=None, types=None) -> Path:
    for table, rows in (("deployments", deployments), ("requests", requests), ("steps", steps), ("rounds", rounds)):
        if rows is not None:
            write_table(root, table, rows, (types or {}).get(table))
    return Path(root)


def deployment(deployment_id: str, method: str = "eagle", gamma: int = 4, **extra) -> dict:
    return {"deployment_id": deployment_id, "model": "m", "method": method,
            "num_speculative_tokens": 0 if method == "none" else gamma, **extra}


def round_row(deployment_id: str, request_id: str, round_idx: int, drafted: int, accepted: int,
              committed: int | None = None, **extra) -> dict:
    return {"deployment_id": deployment_id, "request_id": request_id, "round_idx": round_idx,
            "num_draft_tokens": drafted, "num_accepted_tokens": accepted,
            "num_committed_tokens": accepted + 1 if committed is None else committed, **extra}


def write_columns(root: Path, table: str, columns: dict[str, list], partition: str | None = None) -> None:
    """Write a table from column lists (faster than row dicts for large synthetic tables)."""
    schema = load_schemas()[table]
    declared = {c.name: ARROW[c.type] for c in schema.columns}
    arrays = {name: pa.array(values, type=declared.get(name)) for name, values in columns.items()}
    root = Path(root)
    if partition:
        folder = root / table / partition
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(arrays), folder / "part-0.parquet")
    else:
        root.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(arrays), root / f"{table}.parquet")


def request(deployment_id: str, request_id: str, arrival=0.0, first=10.0, finish=100.0,
            output_tokens=5, finish_reason="stop", **extra) -> dict:
    """A valid request; times are ms after the fixed instant of ``at`` (None stays null)."""
    return {"deployment_id": deployment_id, "request_id": request_id,
            "arrival_time": None if arrival is None else at(arrival),
            "first_token_time": None if first is None else at(first),
            "finish_time": None if finish is None else at(finish),
            "prompt_tokens": 10, "output_tokens": output_tokens, "finish_reason": finish_reason, **extra}


def step(deployment_id: str, step_id: int, duration_ms: float = 10.0, batch_size: int = 1,
         start_ms: float | None = None, **extra) -> dict:
    """A valid step (10 ms, one request, starting at ``step_id`` seconds unless ``start_ms`` is
    given: a second apart, steps of different lengths still end in step_id order, as the rule
    round_out_of_order expects of a request's rounds)."""
    return {"deployment_id": deployment_id, "step_id": step_id,
            "start_time": at(1000.0 * step_id if start_ms is None else start_ms),
            "duration_ms": duration_ms, "batch_size": batch_size, **extra}


# A tiny hand-built trace has a baseline of a few steps and requests: below the [evidence]
# floors a usable t0 needs (20 steps, 10 requests; tests/test_evidence.py tests them). A
# test of another definition (prefill steps, slices, context matching) lifts the floors.
NO_FLOORS_TOML = "[evidence]\nmin_baseline_steps = 1\nmin_baseline_requests = 1\n"


def no_floors_config(folder: Path) -> Path:
    """A gates TOML lifting the [evidence] floors, for ``--config``."""
    path = Path(folder) / "no_floors.toml"
    path.write_text(NO_FLOORS_TOML, encoding="utf-8")
    return path


def lift_floors(con) -> None:
    """The [evidence] floors lifted on a workspace's connection, as ``--config`` would."""
    import tomllib

    from analyzer.analysis.config import parse_config
    from analyzer.analysis.views import set_config_thresholds

    set_config_thresholds(con, parse_config(tomllib.loads(NO_FLOORS_TOML)))


# Irregular offsets in ms that add up to 0: step durations that vary from step to step
# without changing their sum, so a hand-worked speedup stays what it was while the
# speedup's interval (a jackknife over blocks of time, analysis/uncertainty.py) has blocks
# that differ. Offsets with a short period would cancel inside its coarse blocks, and
# blocks that all give the same speedup give no interval.
OFFSETS_10 = (-0.5, 0.25, 0.5, -0.25, 0.0, 0.75, -0.75, 0.25, -0.5, 0.25)
OFFSETS_20 = (-1.0, 0.5, 0.25, -0.5, 1.0, -0.25, 0.75, -0.75, 0.0, 0.5,
              -1.0, 0.25, 0.5, -0.5, 1.0, -0.25, 0.0, -0.75, 0.75, -0.5)


def trend_ms(mean_ms: float, n: int, step: float = 0.01) -> list[float]:
    """``n`` step times rising by ``step`` ms, centred on ``mean_ms``: mean_ms + step · (i − (n − 1)/2).
    Their sum is exactly n · mean_ms (Σ (i − (n − 1)/2) = 0), so a t0 worked out from mean_ms
    holds, while every block of time differs from the next: a side whose steps all take the
    same time gives the speedup's block jackknife nothing to resample, so no interval
    (analyzer/analysis/uncertainty.py counts only blocks whose deletion moves the speedup)."""
    return [mean_ms + step * (i - (n - 1) / 2) for i in range(n)]


def interleave(*sequences: list) -> list:
    """The items of several sequences merged in time, each spread evenly over the whole: item i
    of a sequence of n sits at (i + ½) / n. A deployment whose batch sizes take turns, as a
    served load does, rather than one regime after another; a batch bucket confined to one
    stretch of time falls in one or two of the jackknife's blocks and gets no useful interval."""
    keyed = [((i + 0.5) / len(seq), j, i, item) for j, seq in enumerate(sequences) for i, item in enumerate(seq)]
    return [item for *_, item in sorted(keyed, key=lambda k: k[:3])]
