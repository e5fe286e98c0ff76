"""The ``specan`` command line: parse options, call the library, print the result.

Errors are turned into exit statuses in one place, ``SpecanGroup.invoke``
(docs/commands.md): 0 done; 1 a gate, regression or ``--strict`` finding; 2 bad
usage or bad input; 3 an environment or internal error; 128 + N stopped by signal
N (SIGINT, SIGTERM, SIGHUP), after removing the run's scratch folder. Each error
is one line on stderr; ``specan --debug`` adds the traceback.
"""

from __future__ import annotations

import contextlib
import inspect
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import click
import duckdb

from . import api
from .nightly import run_nightly as nightly_run
from .errors import InputProblem, SpecanError


class Failure(click.ClickException):
    """An error with its exit status, printed as one line."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def _one_line(text_: str) -> str:
    lines = [line.strip() for line in str(text_).strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def classify(exc: BaseException) -> Failure:
    """The exit status and one-line message of an error no command handled."""
    if isinstance(exc, SpecanError):
        return Failure(_one_line(exc) or type(exc).__name__, exc.exit_code)
    if isinstance(exc, duckdb.OutOfMemoryException):
        return Failure("out of memory: the work did not fit in --memory-limit and its spill folder "
                       f"({_one_line(exc)}); raise --memory-limit or give --temp-dir more room", 3)
    if isinstance(exc, duckdb.IOException):
        return Failure(f"input/output error: {_one_line(exc)}", 3)
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else ""
        return Failure(f"cannot access{where}: {exc.strerror or _one_line(exc)}", 3)
    if isinstance(exc, MemoryError):
        return Failure("out of memory", 3)
    return Failure(f"internal error ({type(exc).__name__}: {_one_line(exc)}); "
                   "run `specan --debug ...` for the traceback and report it", 3)


# A scheduler's timeout (SIGTERM), a closed terminal (SIGHUP) and Ctrl-C (SIGINT) all stop
# a run the same way, with the shell's status for a death by that signal (128 + N).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """A stop signal arrived. Raised where Python code runs (DuckDB turns it into its own
    "Query interrupted" and stops the query), it unwinds like KeyboardInterrupt, so every
    ``finally`` on the way removes what it made: the scratch folder first."""


@contextlib.contextmanager
def _stop_signals_unwind() -> Iterator[list[int]]:
    """While the command runs: the stop signals raise Stopped, once (a second signal must
    not cut the clean-up short); yields the signals received."""
    received: list[int] = []

    def stop(signum: int, _frame) -> None:
        received.append(signum)
        if len(received) == 1:
            raise Stopped(signum)

    if threading.current_thread() is not threading.main_thread():
        yield received          # signals reach the main thread only: nothing to install
        return
    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        yield received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def stopped(signum: int) -> Failure:
    return Failure(f"stopped by {signal.Signals(signum).name}", 128 + signum)


class SpecanGroup(click.Group):
    def invoke(self, ctx: click.Context):
        with _stop_signals_unwind() as received:
            try:
                return super().invoke(ctx)
            except BaseException as exc:
                # whatever the signal interrupted (DuckDB reports a RuntimeError), it stopped the run
                if received:
                    raise stopped(received[0]) from None
                if isinstance(exc, (click.exceptions.ClickException, click.exceptions.Exit,
                                    click.exceptions.Abort)) or not isinstance(exc, Exception):
                    raise
                if ctx.meta.get("specan.debug"):
                    traceback.print_exc(file=sys.stderr)
                raise classify(exc) from None


class Progress:
    """Phase lines on stderr (never stdout), with elapsed seconds.

    Each message starts a phase that lasts until the next one. With ``profile``,
    the seconds of every phase are printed as a table when the command ends.
    """

    def __init__(self, enabled: bool, profile: bool = False):
        self.enabled = enabled
        self.profile = profile
        self.start = time.monotonic()
        self.phases: list[tuple[str, float]] = []
        self.fetched: dict[str, int] = {}    # the Spark engine: Arrow bytes brought back, per table

    def __call__(self, message: str) -> None:
        now = time.monotonic()
        self.phases.append((message, now))
        if self.enabled:
            click.echo(f"[{now - self.start:6.1f}s] {message}", err=True)

    def table(self) -> list[tuple[str, float]]:
        """(phase, seconds) in order, the last ending now; the time before the first phase is 'starting'."""
        end = time.monotonic()
        marks = [("starting", self.start)] + self.phases
        return [(name, (marks[i + 1][1] if i + 1 < len(marks) else end) - at) for i, (name, at) in enumerate(marks)]

    def print_profile(self) -> None:
        if not self.profile:
            return
        rows = self.table()
        click.echo("profile: seconds per phase", err=True)
        for name, seconds in rows:
            click.echo(f"{seconds:9.2f}  {name}", err=True)
        click.echo(f"{sum(s for _, s in rows):9.2f}  total", err=True)
        if self.fetched:
            click.echo("profile: bytes brought back from Spark, per table", err=True)
            for name, size in sorted(self.fetched.items(), key=lambda item: (-item[1], item[0])):
                click.echo(f"{size:12,}  {name}", err=True)
            click.echo(f"{sum(self.fetched.values()):12,}  total", err=True)


def _progress_option(f):
    """--progress and --profile. The innermost option of a command: ``f`` is still its
    function, so whether the command has --engine is read off its parameters, and the help
    mentions the Spark engine only where there is one (tests/test_cli_help.py)."""
    spark = (" (with --engine spark, also the bytes brought back per table)"
             if "engine" in inspect.signature(f).parameters else "")
    f = click.option("--profile", is_flag=True, expose_value=False, callback=_remember("profile"),
                     help=f"When done, print the seconds of every phase on stderr{spark}.")(f)
    return click.option("--progress/--no-progress", default=None,
                        help="Show progress on stderr (default: when stderr is a terminal).")(f)


def _remember(name: str):
    """A click callback that keeps an option's value in ``ctx.meta["specan.<name>"]``."""
    def callback(ctx: click.Context, _param, value):
        ctx.meta[f"specan.{name}"] = value
    return callback


def _memory_option(f):
    f = click.option("--temp-dir", "temp_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                     help="Where this run's private scratch folder goes (default: TMPDIR); removed at exit.")(f)
    return click.option("--memory-limit", default=api.DEFAULT_MEMORY_LIMIT, show_default=True,
                        callback=_check_memory_limit,
                        help="DuckDB memory limit, e.g. 4GB or 80%; larger work spills to the scratch folder.")(f)


def _check_memory_limit(_ctx, _param, value: str) -> str:
    try:
        return api.check_memory_limit(value)
    except InputProblem as exc:
        raise click.BadParameter(str(exc).removeprefix("--memory-limit "), param_hint="--memory-limit") from None


def _cache_option(f):
    f = click.option("--cache-max", default=api.DEFAULT_CACHE_MAX, show_default=True, expose_value=False,
                     callback=_remember("cache_max"),
                     help="The most the cache folder holds; the least recently used trace units go first.")(f)
    f = click.option("--no-cache", is_flag=True, expose_value=False, callback=_remember("no_cache"),
                     help="Read every file; neither read nor write the cache.")(f)
    return click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                        expose_value=False, callback=_remember("cache_dir"),
                        help="Keep the passes over each date's rounds here and reuse them while its files are "
                             "unchanged [default: ${XDG_CACHE_HOME:-~/.cache}/specan].")(f)


def _cache() -> api.Cache | None:
    """The cache the --cache-* options ask for (None with --no-cache)."""
    meta = click.get_current_context().meta
    if meta.get("specan.no_cache"):
        return None
    try:
        max_bytes = api.parse_size(meta.get("specan.cache_max", api.DEFAULT_CACHE_MAX))
    except InputProblem as exc:
        raise click.BadParameter(str(exc).removeprefix("--cache-max "), param_hint="--cache-max") from None
    folder = meta.get("specan.cache_dir") or api.default_cache_dir()
    return api.Cache(folder, max_bytes) if folder is not None else None


def _say_cache(ws, show: Progress) -> None:
    """What the cache did, as a progress line; a folder it could not use, on stderr always."""
    if ws.cache is None:
        return
    if ws.cache.units or ws.cache.unused_because:   # no rounds, nothing cached: no line
        show(ws.cache.line())
    for problem in ([ws.cache.unused_because] if ws.cache.unused_because and not ws.cache.units else []) + \
            ws.cache.problems:
        click.echo(f"specan: cache: {problem}", err=True)


def _say_fetched(ws, show: Progress) -> None:
    """The Spark engine: what came back goes to the profile; rejected rows left on the
    cluster are said on stderr, always (the local rejected_rows holds examples only)."""
    fetched = ws.fetched
    if fetched is None:
        return
    show.fetched = dict(fetched.bytes)
    if fetched.rejected_out is not None:
        show(f"wrote {fetched.rejected_total:,} rejected rows to {fetched.rejected_out}")
    elif fetched.rejected_total:
        click.echo(f"specan: {fetched.rejected_total:,} rejected rows stayed on the cluster; rejected_rows here "
                   f"holds up to {api.EXAMPLES_PER_REASON} per table and reason "
                   "(--rejected-out URI writes them all)", err=True)


def _rejected_out_option(f):
    return click.option("--rejected-out", "rejected_out", default=None, metavar="URI",
                        help="With --engine spark: the executors write every rejected row there as Parquet "
                             "(a path or any URI Spark writes); only their counts and a few examples come "
                             "back.")(f)


def _engine_option(f):
    f = click.option("--spark-checkpoint-dir", "spark_checkpoint_dir", default=None, metavar="DIR",
                     help="With --engine spark: keep the tables computed once as reliable checkpoints "
                          "in DIR (hdfs://, s3a://, or a path every executor sees), so they survive a "
                          "lost executor. Default on a cluster: cached blocks Spark recomputes.")(f)
    f = click.option("--spark-master", "spark_master", default=None, metavar="URL",
                     help="With --engine spark: the Spark master (local[4], yarn, k8s://HOST:PORT, "
                          "spark://HOST:PORT). Default: the session already running (spark-submit), "
                          "else local[*].")(f)
    return click.option("--engine", type=click.Choice(api.ENGINES), default="duckdb", show_default=True,
                        help="Where the heavy pass over the rounds runs: duckdb on this machine, or "
                             "spark (pip install 'specan[spark]'); the small finish is local either way.")(f)


def _repeat_n_option(f):
    return click.option("--repeat-n", default=3, show_default=True, type=click.IntRange(1, 32),
                        help="n of the repetition statistics: a token is a repeat when the n tokens "
                             "before it and itself occurred earlier.")(f)


def _by_option(f):
    return click.option("--by", "by", multiple=True, metavar="COLUMN",
                        help="Slice by this requests column (repeatable): a label such as category, a partition "
                             "such as date, or an extra one kept from the input; not a request's ids, times, "
                             "token ids or counts. A null value is a slice of its own. DuckDB engine only.")(f)


def _progress(flag: bool | None) -> Progress:
    ctx = click.get_current_context()
    show = Progress(sys.stderr.isatty() if flag is None else flag, profile=ctx.meta.get("specan.profile", False))
    ctx.call_on_close(show.print_profile)
    return show


@click.group(cls=SpecanGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="specan")
@click.option("--debug", is_flag=True, expose_value=False, is_eager=True,
              callback=lambda ctx, _p, v: ctx.meta.__setitem__("specan.debug", v),
              help="On an error, print the traceback as well as the one-line message.")
def main() -> None:
    """specan: does speculative decoding pay off on your traffic?

    Reads per-round Parquet traces (see docs/trace-format.md) into
    DuckDB and computes accept length, the round-cost ledger, speedup against a
    matched baseline, latency and more.

    \b
    Example:
        specan validate sample_traces/
    """


# A path, or with --engine spark a URI (s3a://, gs://, hdfs://, file://): kept as text,
# since pathlib would fold the URI's //.
_TRACES = click.argument("traces", type=str)


@main.command()
@_TRACES
@click.option("--strict", is_flag=True, help="Exit 1 when any row was rejected.")
@_engine_option
@_rejected_out_option
@_memory_option
@_progress_option
def validate(traces: str, strict: bool, engine: str, spark_master: str | None,
             spark_checkpoint_dir: str | None, rejected_out: str | None,
             memory_limit: str, temp_dir: Path | None, progress: bool | None) -> None:
    """Check the structure of TRACES, apply the row rules, and print counts.

    Exit status: 0 valid (rejected rows are reported but allowed), 1 rejected
    rows under --strict, 2 a structural error.

    \b
    Example:
        specan validate sample_traces/ --strict
    """
    show = _progress(progress)
    ws = api.open_traces(traces, memory_limit=memory_limit, progress=show, views=False,
                         temp_dir=temp_dir, engine=engine, spark_master=spark_master,
                         spark_checkpoint_dir=spark_checkpoint_dir, rejected_out=rejected_out)
    _say_fetched(ws, show)
    try:
        click.echo(api.validation_text(ws), nl=False)
    finally:
        ws.close()
    if strict and ws.summary.rejected_total:
        sys.exit(1)


@main.command()
@_TRACES
@click.option("--format", "fmt", type=click.Choice(["md", "json", "html"]), default=None,
              help="md, json or html. Default: what the -o file's extension names (.html, .json, .md), else md.")
@click.option("-o", "--output", type=click.Path(path_type=Path),
              help="Write to FILE instead of stdout (checked before the analysis runs; written aside and renamed).")
@click.option("--config", "config_path", type=click.Path(path_type=Path),
              help="TOML file of gate thresholds (defaults: docs/commands.md, section Gates).")
@click.option("--check", is_flag=True,
              help="Exit 1 unless every speculative deployment's verdict is ship or cap; each other one is a line "
                   "on stderr (deployment, action, reason).")
@_by_option
@_engine_option
@_rejected_out_option
@_repeat_n_option
@_memory_option
@_cache_option
@_progress_option
def report(traces: str, fmt: str, output: Path | None, config_path: Path | None, check: bool, by: tuple[str, ...],
           engine: str, spark_master: str | None, spark_checkpoint_dir: str | None, rejected_out: str | None,
           repeat_n: int, memory_limit: str,
           temp_dir: Path | None, progress: bool | None) -> None:
    """The full analysis of TRACES: does speculation pay, for which traffic, at what load.

    Markdown goes to stdout unless -o is given; progress goes to stderr. Gate
    results are shown; with --check the exit status is 1 unless every speculative
    deployment's verdict is ship or cap (one line on stderr for each other one).

    \b
    Examples:
        specan report sample_traces/
        specan report sample_traces/ -o report.html        # the format follows the extension
        specan report sample_traces/ --format json -o report.json
        specan report traces/ --by tenant --by region
        specan report traces/ --config gates.toml --check
        specan report s3a://bucket/traces --engine spark --spark-master yarn
        specan report traces/ --cache-dir /var/cache/specan    # re-runs read only new dates
    """
    show = _progress(progress)
    config = api.load_config(config_path)
    fmt = api.report_format(fmt, output)
    if output is not None:
        api.check_output(output)
    ws = api.open_traces(traces, memory_limit=memory_limit, progress=show, repeat_n=repeat_n, temp_dir=temp_dir,
                         engine=engine, spark_master=spark_master, spark_checkpoint_dir=spark_checkpoint_dir, by=by,
                         cache=_cache(), rejected_out=rejected_out, config=config)
    _say_fetched(ws, show)
    try:
        doc = api.report_document(ws, config=config, progress=show)
    finally:
        ws.close()      # a first run's units are written meanwhile: said once they are
        _say_cache(ws, show)
    show(f"rendering {fmt}")
    _emit(api.render_report(doc, fmt), output)
    if check:
        failures = api.check_failures(doc)
        for failure in failures:
            click.echo(api.check_line(failure), err=True)
        if failures:
            sys.exit(1)


@main.command()
@_TRACES
@click.option("--date", "date", required=True, help="The day to analyse, YYYY-MM-DD: only its date= partitions.")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help="Output directory: OUT/DATE/report.{md,json,html} and OUT/history.parquet.")
@click.option("--config", "config_path", type=click.Path(path_type=Path),
              help="TOML gates, regression thresholds and [nightly] accept_since.")
@_memory_option
@_cache_option
@_progress_option
def nightly(traces: Path, date: str, out: Path, config_path: Path | None, memory_limit: str,
            temp_dir: Path | None, progress: bool | None) -> None:
    """The scheduled report for one date, with history and regression flags.

    Exit status 1 when a regression is flagged or a speculative deployment's verdict
    is not ship or cap (the rule of specan report --check), so a pipeline can gate a
    deployment on it.

    \b
    Example (cron, every night at 02:00 for yesterday):
        0 2 * * * specan nightly /data/traces --date $(date -d yesterday +\\%F) --out /srv/specan
    """
    config = api.load_config(config_path)
    result = nightly_run(traces, date, out, config=config, memory_limit=memory_limit, temp_dir=temp_dir,
                         progress=_progress(progress), cache=_cache())
    click.echo(f"wrote {result.out_dir}/report.md, report.json, report.html and {out / 'history.parquet'}")
    for line in result.regression_lines:
        click.echo(line)
    for line in result.flag_lines:
        click.echo(f"regression: {line}")
    for failure in result.check_failures:
        click.echo(api.check_line(failure), err=True)
    sys.exit(result.exit_status)


@main.command("config")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--template", is_flag=True,
              help="Print every section and key at its default, each under a comment saying what it is "
                   "and its unit.")
def config_command(file: Path | None, template: bool) -> None:
    """Print the gates file (TOML): every key with its value, what it is and its unit.

    The file is the one specan report --config reads, as nightly, recommend and
    replay-ngram do (docs/commands.md, Gates). With --template, every section and
    key at its default value, each under a comment saying what it is and its unit:
    a file to copy and edit. With FILE, FILE is checked as those commands check it
    (exit 2, naming the key at fault) and the settings it gives are printed in the
    same form: its values, the defaults for the rest.

    \b
    Examples:
        specan config --template > gates.toml
        specan config gates.toml
    """
    if template == (file is not None):
        raise click.UsageError("give --template, or a FILE to check (not both)")
    click.echo(api.config_toml(None if template else api.load_config(file)), nl=False)


def _emit(text_out: str, output: Path | None) -> None:
    if output is None:
        click.echo(text_out, nl=False)
        return
    api.write_output(output, text_out)


@main.command()
@_TRACES
@click.option("--db", "db", type=click.Path(path_type=Path),
              help="DuckDB database file to write (replaced if it exists).")
@click.option("--out", "out", type=str, default=None, metavar="DIR",
              help="With --engine spark: write the reduced aggregates as Parquet to DIR (any path "
                   "Spark writes, s3a:// too); `specan report DIR` renders them later.")
@_by_option
@_engine_option
@_repeat_n_option
@_memory_option
@_progress_option
def load(traces: str, db: Path | None, out: str | None, by: tuple[str, ...], engine: str, spark_master: str | None,
         spark_checkpoint_dir: str | None, repeat_n: int, memory_limit: str, temp_dir: Path | None, progress: bool | None) -> None:
    """Write the clean tables and every view of TRACES to a DuckDB database, or with
    --engine spark, the reduced aggregates of TRACES to a directory.

    The database needs no specan afterwards: any DuckDB client (Python's duckdb,
    the duckdb CLI) can query its views; `specan sql --db FILE` does too.

    \b
    Examples:
        specan load sample_traces/ --db traces.duckdb
        specan sql --db traces.duckdb "select * from accept_length"
        specan load traces/ --db traces.duckdb --by tenant   # slice_metrics keyed by tenant
        specan load s3a://bucket/traces --engine spark --out s3a://bucket/reduced/2026-12-01
        specan report reduced/2026-12-01/
    """
    if engine == "spark":
        if db is not None or out is None:
            raise click.UsageError("--engine spark writes a directory: give --out DIR, not --db")
        if by:
            raise click.UsageError("--by runs on the DuckDB engine only: load --db FILE --by COLUMN")
        summary, rows = api.write_reduced(traces, out, spark_master=spark_master, repeat_n=repeat_n,
                                          spark_checkpoint_dir=spark_checkpoint_dir, progress=_progress(progress))
        click.echo(api.validation_text(summary), nl=False)
        click.echo(f"wrote {out}: {len(rows)} tables, {sum(rows.values()):,} rows")
        return
    if out is not None or db is None:
        raise click.UsageError("give --db FILE (--out DIR is for --engine spark)")
    if spark_checkpoint_dir is not None:
        raise click.UsageError("--spark-checkpoint-dir is for --engine spark")
    summary = api.write_database(traces, db, memory_limit=memory_limit, progress=_progress(progress),
                                 repeat_n=repeat_n, temp_dir=temp_dir, by=by)
    click.echo(api.validation_text(summary), nl=False)
    click.echo(f"wrote {db}")


@main.command()
@click.argument("args", nargs=-1, required=True)
@click.option("--db", "db", type=click.Path(path_type=Path), help="Query a database written by `specan load`.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@_by_option
@_engine_option
@_rejected_out_option
@_memory_option
@_progress_option
def sql(args: tuple[str, ...], db: Path | None, fmt: str, by: tuple[str, ...], engine: str, spark_master: str | None,
        spark_checkpoint_dir: str | None, rejected_out: str | None, memory_limit: str, temp_dir: Path | None, progress: bool | None) -> None:
    """Run one SQL query against the clean tables and views.

    ARGS is `TRACES QUERY`, or just `QUERY` with --db. With --engine spark the query
    runs on what the heavy pass brings back: every view but those of single rounds
    and steps (round_facts, step_rounds, cost_steps, stream_emissions, itl_gaps).

    \b
    Examples:
        specan sql sample_traces/ "select deployment_id, mean_accept_length from accept_length"
        specan sql --db traces.duckdb "select * from rejected_rows" --format csv
        specan sql traces/ --by tenant "select * from slice_metrics"
    """
    expected = 1 if db else 2
    if len(args) != expected:
        raise click.UsageError("expected QUERY with --db, else TRACES QUERY")
    if not args[-1].strip():
        raise click.UsageError("QUERY is empty: give one SQL statement, e.g. \"select * from accept_length\"")
    if db and by:
        raise click.UsageError("--by applies to TRACES; a database keeps the --by columns it was loaded with "
                               "(specan load --by)")
    show = _progress(progress)
    ws = (api.open_database(db, memory_limit=memory_limit, temp_dir=temp_dir) if db else
          api.open_traces(args[0], memory_limit=memory_limit, progress=show, temp_dir=temp_dir,
                          engine=engine, spark_master=spark_master, spark_checkpoint_dir=spark_checkpoint_dir, by=by,
                          rejected_out=rejected_out))
    _say_fetched(ws, show)
    try:
        columns, rows = api.query(ws.con, args[-1])
    except duckdb.Error as exc:
        if not isinstance(exc, (duckdb.ParserException, duckdb.BinderException, duckdb.CatalogException,
                                duckdb.ConversionException, duckdb.OutOfMemoryException)):
            ws.name_unreadable_input()    # a data page the query read cannot be decoded: exit 2, naming the file
        if not isinstance(exc, (duckdb.ParserException, duckdb.BinderException, duckdb.CatalogException,
                                duckdb.ConversionException, duckdb.InvalidInputException)):
            raise
        hint = ""
        if isinstance(exc, duckdb.CatalogException) and ws.unavailable:
            hint = (" (reduced traces: " + ", ".join(ws.unavailable) + " stay on the cluster; "
                    "the other views are here)")
        raise InputProblem(f"query failed: {_one_line(exc)}{hint}") from None   # the query is the user's input
    finally:
        ws.close()
    click.echo(api.render_rows(columns, rows, fmt), nl=False)


@main.command()
@click.argument("outdir", type=click.Path(path_type=Path))
@click.option("--seed", default=0, show_default=True, help="Random seed; the output is identical for a seed.")
@click.option("--requests", "requests", default=None, type=click.IntRange(min=1),
              help="Requests per deployment per day.")
@click.option("--days", default=None, type=click.IntRange(min=1), help="Number of date= partitions.")
@click.option("--rounds", default=None, type=click.IntRange(min=200),
              help="Fast vectorised path for benchmarks: about N rounds, no token ids (needs --no-tokens).")
@click.option("--no-tokens", is_flag=True, help="Write no token ids (the fast path).")
@_progress_option
def simulate(outdir: Path, seed: int, requests: int | None, days: int | None, rounds: int | None,
             no_tokens: bool, progress: bool | None) -> None:
    """Write synthetic traces to OUTDIR from a documented generative model.

    `sample_traces/` is this command's default output. --rounds N --no-tokens
    writes large traces fast, with closed-form totals (analyzer/simulate/fast.py).

    \b
    Examples:
        specan simulate /tmp/traces --seed 1 --days 2
        specan simulate /tmp/big --rounds 10000000 --no-tokens
    """
    if (rounds is None) != (not no_tokens):
        raise click.UsageError("the fast path needs both --rounds N and --no-tokens")
    options = {k: v for k, v in {"requests": requests, "days": days}.items() if v is not None}
    counts = (api.simulate(outdir, rounds=rounds, progress=_progress(progress)) if rounds is not None else
              api.simulate(outdir, seed=seed, progress=_progress(progress), **options))
    for table, n in counts.items():
        click.echo(f"{table:<12} {n:>9} rows")
    click.echo(f"wrote {outdir}")


@main.command()
def schema() -> None:
    """Print the trace format (tables, columns, types, defaults, row rules) as Markdown.

    It is generated from schemas/*.json, the same declarations the loader checks.

    \b
    Example:
        specan schema > TRACE_FORMAT.md
    """
    click.echo(api.trace_format_markdown(), nl=False)


@main.command("replay-ngram")
@_TRACES
@click.option("--min-n", "min_n", default=2, show_default=True, type=int,
              help="Shortest match that may draft (prompt_lookup_min).")
@click.option("--max-n", "max_n", default=5, show_default=True, type=int,
              help="Longest n-gram prompt lookup looks for (prompt_lookup_max).")
@click.option("--k", "k", default=4, show_default=True, type=int,
              help="Drafts per round (num_speculative_tokens); the most, for suffix.")
@click.option("--category", default=None, help="Replay only this category (null is 'unlabeled').")
@click.option("--variant", type=click.Choice(["prompt-lookup", "suffix", "both"]), default="both",
              show_default=True, help="prompt-lookup: vLLM's ngram; suffix: γ = min(k, match length).")
@click.option("--verify-cost-ms-per-token", "verify_cost", type=float, default=None,
              help="For a baseline: ms each drafted token adds to a decode step "
                   "(default: a matched ngram deployment's round-cost fit, else 0).")
@click.option("--config", "config_path", type=click.Path(path_type=Path),
              help="TOML file: its [evidence] floors and [intervals] settings apply.")
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md", show_default=True)
@_memory_option
@_progress_option
def replay_ngram(traces: Path, min_n: int, max_n: int, k: int, category: str | None, variant: str,
                 verify_cost: float | None, config_path: Path | None, fmt: str, memory_limit: str,
                 temp_dir: Path | None, progress: bool | None) -> None:
    """Predict what n-gram drafting would give on TRACES by replaying it over the logged tokens.

    Needs requests with prompt_token_ids and output_token_ids. Greedy: a draft
    counts as accepted while it equals the logged output, exact at temperature 0.
    The predicted speedup keeps each speculative deployment's own round cost; for
    a baseline it is what turning the drafter on would give, with the round-cost
    assumption stated beside it.

    \b
    Examples:
        specan replay-ngram sample_traces/
        specan replay-ngram sample_traces/ --variant suffix --k 8 --format json
        specan replay-ngram traces/ --verify-cost-ms-per-token 0.05
    """
    show = _progress(progress)
    config = api.load_config(config_path)
    variants = ["prompt_lookup", "suffix"] if variant == "both" else [variant.replace("-", "_")]
    ws = api.open_traces(traces, memory_limit=memory_limit, progress=show, temp_dir=temp_dir)
    try:
        results = api.replay_ngram(ws, variants, min_n=min_n, max_n=max_n, k=k, category=category,
                                   verify_cost_ms_per_token=verify_cost, evidence=config.evidence,
                                   intervals=config.intervals, progress=show)
    finally:
        ws.close()
    click.echo(api.render_replay(results, fmt), nl=False)


@main.command()
@_TRACES
@click.option("--deployment", "deployment_id", required=True, help="The deployment to tune (its deployment_id).")
@click.option("--by-context", "by_context", is_flag=True,
              help="Also recommend within each context-length bucket (JSON key by_context).")
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md", show_default=True)
@click.option("--config", "config_path", type=click.Path(path_type=Path),
              help="TOML file whose [evidence] floors the recommendation applies (the gates file of report).")
@_memory_option
@_cache_option
@_progress_option
def recommend(traces: Path, deployment_id: str, by_context: bool, fmt: str, config_path: Path | None,
              memory_limit: str, temp_dir: Path | None, progress: bool | None) -> None:
    """Recommend a speculation length per batch-size range for one deployment of TRACES.

    Predicts t0 · E[L](γ) / T_round(γ) for every γ up to num_speculative_tokens in
    each batch bucket, from the measured acceptance, a round-cost model fitted to
    the deployment's decode-only steps and the matched baseline's t0, and prints
    vLLM's num_speculative_tokens_per_batch_size ranges.

    \b
    Examples:
        specan recommend sample_traces/ --deployment eagle-dyn-bf16
        specan recommend sample_traces/ --deployment eagle-bf16 --format json
        specan recommend sample_traces/ --deployment eagle-bf16 --by-context
        specan recommend traces/ --deployment eagle-bf16 --config gates.toml
    """
    show = _progress(progress)
    config = api.load_config(config_path)
    ws = api.open_traces(traces, memory_limit=memory_limit, progress=show, temp_dir=temp_dir, cache=_cache())
    try:
        if show.enabled:
            show(f"fitting round costs of {deployment_id}")
        result = api.recommend(ws, deployment_id, by_context=by_context, config=config)
    finally:
        ws.close()
        _say_cache(ws, show)
    click.echo(api.render_recommend(result, fmt), nl=False)


class _NamedChoice(click.Choice):
    """A choice shown by its argument's name in the usage line (``[SOURCE]``): click would
    list the choices there and wrap the line at their hyphens, splitting a source's name
    (``sglang-`` / ``responses``). The help's text lists them, one a line; a wrong value's
    error lists them too."""

    def get_metavar(self, param, ctx=None):
        return None


@main.command("import")
@click.argument("source", required=False,
                type=_NamedChoice(["vllm-responses", "vllm-log", "prometheus", "sglang-responses", "sglang-log",
                                   "aiperf-records", "trtllm-responses", "trtllm-iter", "llamacpp-log",
                                   "vllm-bench", "sglang-bench", "auto"]))
@click.argument("file", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--list", "list_of", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="List the imports recorded in this trace directory (id, source, rows, inputs).")
@click.option("--remove", "remove", default=None, metavar="ID",
              help="Take back the import ID (or a unique prefix of it) from --out: its files are deleted.")
@click.option("--deployment", "deployment", multiple=True,
              help="The deployment_id to import under. prometheus: one id for every label group, or "
                   "label=value:ID pairs (repeat the option, or separate pairs with commas).")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path),
              help="Trace directory: new files are added under OUT/<table>/. Importing the same input again "
                   "replaces that import; other imports' files are never rewritten.")
@click.option("--model", default=None, help="deployments.model (default: from the source, else 'unknown').")
@click.option("--method", default=None,
              help="deployments.method, e.g. eagle3 (default: 'none' when nothing speculated, else 'unknown').")
@click.option("--num-speculative-tokens", "num_speculative_tokens", default=None, type=click.IntRange(min=0),
              help="deployments.num_speculative_tokens (default: from the source, else 0).")
@click.option("--year", default=None, type=click.IntRange(1970, 9999),
              help="vllm-log only: the year of the log's MM-DD dates (default: the current year, or the previous one "
                   "where the current would put a series' first date after the import).")
@click.option("--time", "time", default=None, metavar="T",
              help="prometheus: the time of a /metrics scrape that has no sample timestamps and no "
                   "ISO-8601 time in its file name; vllm-bench, sglang-bench: the end of a run whose summary has "
                   "no time (ISO-8601, UTC without a zone, or epoch seconds).")
@click.option("--start", "start", default=None, metavar="TIME",
              help="llamacpp-log and vllm-log only: the absolute time (ISO-8601, UTC without a zone) that "
                   "relative log times count from, and lines without a time are anchored at (default for "
                   "llamacpp-log: the file's modification time minus its last relative time, noted as estimated).")
@click.option("--sglang-version", "sglang_version", default=None, metavar="X.Y.Z",
              help="sglang-log only: the SGLang release that wrote the log, e.g. 0.5.11. Keeps its 'accept rate', "
                   "whose meaning changed in 0.5.11 (dropped without it).")
@click.option("--partition", type=click.Choice(["date", "none"]), default=None,
              help="date: write date=YYYY-MM-DD partitions (each row by its own time, UTC), one per day as nightly "
                   "reads them; none: flat files (refused in a date-partitioned directory). Default: as OUT already is "
                   "(its files, or empty date= folders), else flat.")
@click.option("--list-layouts", "list_layouts", is_flag=True,
              help="Print the layouts SOURCE reads (every source's for auto), one a line; no FILE needed.")
@click.option("--progress/--no-progress", default=None,
              help="Show a progress bar of the bytes read on stderr (default: when stderr is a terminal).")
def import_traces(source: str | None, file: tuple[Path, ...], list_of: Path | None, remove: str | None,
                  deployment: tuple[str, ...], out: Path | None, model: str | None, method: str | None,
                  num_speculative_tokens: int | None, year: int | None, time: str | None,
                  sglang_version: str | None, start: str | None, partition: str | None, list_layouts: bool,
                  progress: bool | None) -> None:
    """Convert engine output (FILE...) from SOURCE into trace tables under OUT.

    \b
    SOURCE is one of:
      vllm-responses    vLLM responses (JSON) with metrics.speculative_decoding  → requests, rounds
      vllm-log          vLLM log: spec-decoding metrics lines or a plain server's load lines, and
                        per-iteration lines (vllm serve --enable-logging-iteration-details) → intervals, steps
      prometheus        /metrics scrapes or query_range JSON, spec_decode_* counters → intervals
      sglang-responses  SGLang responses (JSON), meta_info or sglext spec counts → requests, rounds
      sglang-log        SGLang log with 'Decode batch' lines (with accept len, or a plain server's) → intervals
      aiperf-records    AIPerf profile_export.jsonl with spec_decode_acceptance  → requests, rounds
      trtllm-responses  TensorRT-LLM responses (JSON), per-choice spec stats     → requests, rounds
      trtllm-iter       TensorRT-LLM print_iter_log lines or iteration stats JSON (/metrics,
                        get_stats) → steps
      llamacpp-log      llama.cpp as printed: print_timing, statistics and per-round lines, CLI
                        summaries, responses or timings objects → intervals, rounds, requests
      vllm-bench        `vllm bench serve` summaries (text or --save-result JSON) → intervals (benchmark)
      sglang-bench      SGLang bench_serving summaries (text or --output-file JSONL) → intervals (benchmark)
      auto              each FILE's source picked by its content (named on stderr); --year, --start,
                        --time and --sglang-version go to the files whose source takes them (noted)

    A file whose content is another source's is refused (exit 2), naming the
    source it is.

    Prints rows written per table, records skipped per reason, and notes on
    what had to be assumed (also written to OUT/import_notes/). Input that is
    not what SOURCE promises exits 2, naming the file and line. Several files
    import all or nothing: when one is refused, OUT is left as it was.

    \b
    Examples:
        specan import vllm-responses responses.jsonl --deployment eagle3-a --method eagle3 --out traces/
        specan import vllm-log vllm.log --deployment eagle3-a --year 2026 --out traces/
        specan import vllm-log plain.log --deployment base-a --year 2026 --partition date --out traces/
        specan import auto vllm.log server.log --deployment eagle3-a --year 2026 --out traces/
        specan import llamacpp-log --list-layouts
        specan import prometheus range.json --deployment model_name=llama:eagle-a --out traces/
        specan import --list traces/
        specan import --remove 3f9a1c --out traces/
    """
    files = file
    if list_layouts:
        if source is None:
            raise click.UsageError("--list-layouts needs SOURCE (or auto)")
        click.echo("\n".join(api.import_layouts(source)))
        return
    if list_of is not None:
        click.echo(api.render_imports(api.list_imports(list_of)), nl=False)
        return
    if remove is not None:
        if out is None:
            raise click.UsageError("--remove ID needs --out TRACES")
        gone = api.remove_import(out, remove)
        click.echo(f"removed import {gone['id']} ({gone['source']}): {len(gone['files'])} files")
        return
    missing = [name for name, value in (("SOURCE", source), ("FILE", files), ("--deployment", deployment),
                                        ("--out", out)) if not value]
    if missing:
        raise click.UsageError(f"missing {', '.join(missing)} (or use --list TRACES / --remove ID --out TRACES)")
    groups = api.pick_import_sources(files) if source == "auto" else {source: list(files)}
    options = dict(year=year, sglang_version=sglang_version, time=time, start=start)
    if source == "auto":
        for picked, group in groups.items():
            for path in group:
                click.echo(f"{path}: {picked}", err=True)
        for note in api.import_option_notes(groups, options):
            click.echo(f"note: {note}", err=True)
    show = sys.stderr.isatty() if progress is None else progress
    total = sum(p.stat().st_size for p in files)
    with contextlib.ExitStack() as stack:
        read_bytes = None
        if show:
            bar = stack.enter_context(click.progressbar(length=total, label="reading", file=sys.stderr,
                                                        show_pos=True))
            read_bytes = lambda n: bar.update(min(n, max(total - bar.pos, 0)))  # noqa: E731
        summaries = api.import_all(groups, out, list(deployment), auto=source == "auto", partition=partition,
                                   read_bytes=read_bytes, model=model, method=method,
                                   num_speculative_tokens=num_speculative_tokens, **options)
    for summary in summaries:
        click.echo("\n".join(summary.lines()))
