"""The ``--config FILE`` of ``specan report`` and ``specan nightly`` (docs/commands.md, "Gates").

    >>> from analyzer.analysis.config import config_toml, load_config, parse_config
    >>> load_config(None).gates.latency.ttft_p99_ms     # None: the defaults; else a TOML file's path
    2000.0
    >>> parse_config({"gates": {"latency": {"ttft_p99_ms": 1500}}}).gates.latency.ttft_p99_ms
    1500.0
    >>> print(config_toml().split("[gates.latency]")[1].split("tpot")[0].strip())
    # the latency gate: targets per deployment, checked against the baseline at the same
    # load past them
    <BLANKLINE>
    # target for the p99 of time to first token (ms)
    ttft_p99_ms = 2000.0
    <BLANKLINE>
    # target for the p95 of time per output token (ms)

A file may set any subset of the keys; the rest keep their defaults. An unknown
section or key, a value of the wrong type and a file that is not TOML raise
``ConfigError``, whose one-line message names the file and the key. The CLI
prints it and exits 2.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import re
import textwrap
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputProblem

class ConfigError(InputProblem):
    """A config file that cannot be used. The message is one line naming the file and the key."""

    def __init__(self, path: str | Path | None, key: str | None, problem: str):
        self.path, self.key, self.problem = path, key, problem
        where = str(path) if path is not None else "config"
        super().__init__(f"{where}: {key}: {problem}" if key else f"{where}: {problem}")


@dataclass(frozen=True)
class CorrectnessGate:
    min_match_rate: float = 1.0
    # failed requests (finish_reason error or abort): their share may exceed the
    # matched baseline's by this much (absolute: 0.01 is one percentage point)
    max_failed_share_rise: float = 0.01


@dataclass(frozen=True)
class QualityGate:
    max_quality_drop: float = 0.01


@dataclass(frozen=True)
class LatencyGate:
    ttft_p99_ms: float = 2000.0
    tpot_p95_ms: float = 60.0
    max_stall_p99_ms: float = 250.0
    # A check worse than the matched baseline's value by more than this fraction is
    # speculation's own doing and blocks; per check, <check>_max_worsening overrides it.
    max_worsening: float = 0.25
    ttft_p99_ms_max_worsening: float | None = None
    tpot_p95_ms_max_worsening: float | None = None
    max_stall_p99_ms_max_worsening: float | None = None

    def worsening_limit(self, check: str) -> float:
        """The tolerance of one latency check: its own override, else max_worsening."""
        own = getattr(self, f"{check}_max_worsening", None)
        return self.max_worsening if own is None else own


@dataclass(frozen=True)
class CapacityGate:
    min_speedup: float = 1.0
    # the speedup decides only when it covers this share of the deployment's committed tokens
    min_speedup_coverage: float = 0.5
    max_preemptions_per_request: float = 0.05


@dataclass(frozen=True)
class Gates:
    correctness: CorrectnessGate = field(default_factory=CorrectnessGate)
    quality: QualityGate = field(default_factory=QualityGate)
    latency: LatencyGate = field(default_factory=LatencyGate)
    capacity: CapacityGate = field(default_factory=CapacityGate)


@dataclass(frozen=True)
class Regression:
    """The nightly regression rule (analyzer/decide/regression.py, docs/commands.md "Regressions")."""

    window_days: int = 7
    # Below this many earlier dates a median and a spread say nothing: the run says
    # "not checked" instead of flagging noise or claiming that nothing moved.
    min_history_dates: int = 3
    max_accept_length_drop: float = 0.05
    max_speedup_drop: float = 0.05
    max_tpot_p99_rise: float = 0.10


@dataclass(frozen=True)
class Evidence:
    """Sample-size floors: below them a number is reported but does not decide. The views
    and the recommendation read them as SQL macros of the same names
    (analyzer/analysis/views.py, config_macros_sql)."""

    # the deployment's own requests behind the speedup it is judged by: with fewer, a
    # bootstrap over them says nothing about its traffic
    min_requests: int = 10
    # a baseline load cell's t0 (its time per token there) needs this many of its decode-only
    # steps and distinct requests in it; else no load is matched by the cell
    min_baseline_steps: int = 20
    min_baseline_requests: int = 10
    # the baseline's time per token is interpolated between two of its measured loads only
    # when the higher is at most this fraction (plus one request) above the lower; beyond,
    # the loads between them are not matched
    max_load_gap: float = 0.25
    # a step is matched on context when its context per request lies within the baseline's
    # range at its load, widened by this fraction on either side
    context_margin: float = 0.25
    # a batch bucket's own speedup decides its speculation length only when the bucket holds
    # this share of the deployment's committed tokens (decide/configs.py)
    min_bucket_share: float = 0.02
    # a (context, batch) cell of recommend --by-context may differ from the overall k
    # only with this many decode rounds
    min_context_cell_rounds: int = 200
    # a round-cost fit predicts the γ that never ran only with at least this R²
    min_fit_r2: float = 0.5
    # the logs speedup (sql/marts/log_speedup.sql) counts a batch bucket only where the deployment
    # and its baseline each logged this many usable intervals there: one log line is one average
    # over a logging tick (10 s in vLLM), so a bucket resting on one or two lines must not decide
    min_log_intervals: int = 10


@dataclass(frozen=True)
class Intervals:
    """The Poisson bootstrap of the 95 % intervals (docs/metrics.md); the view
    headline_intervals reads them as the macros intervals_replicates() and intervals_seed()."""

    replicates: int = 16000
    seed: int = 0
    # bootstrap replicates of the latency gate's percentiles (analysis/latency_intervals.py)
    latency_replicates: int = 2000
    # each deployment's steps, requests and log intervals fall in this many blocks of time
    # (equal counts, in time order): the units the speedup's jackknife and the latency
    # bootstrap resample, so that conditions that drift in time widen the interval
    blocks: int = 256
    # the speedup's jackknife deletes at most this many coarse blocks per side: each a tenth
    # of the side's time at least, so that conditions drifting over shorter stretches fall
    # in whole blocks (bench/coverage_study.py)
    max_blocks: int = 10


@dataclass(frozen=True)
class Nightly:
    """``accept_since``: a date (every deployment) or deployment_id → date. From that date
    on a lasting change is the new normal: earlier dates leave the regression window."""

    accept_since: Any = None

    def accepted_from(self, deployment_id: str):
        """The re-baselining date of a deployment, or None."""
        if isinstance(self.accept_since, dict):
            return self.accept_since.get(deployment_id)
        return self.accept_since


@dataclass(frozen=True)
class Anomalies:
    """The rules of the request_anomalies view; the view reads them as SQL macros of the
    same names (analyzer/analysis/views.py, config_macros_sql)."""

    looping_min_output_tokens: int = 64
    looping_min_self_repeat_ratio: float = 0.8
    no_acceptance_min_spec_rounds: int = 16
    no_acceptance_min_deployment_acceptance: float = 0.2
    stall_min_ms: float = 1000.0
    stall_min_median_multiple: float = 4.0
    # the report lists the largest this many per deployment and kind (view anomaly_listing);
    # anomaly_checks counts every flagged request
    listed_per_kind: int = 20


@dataclass(frozen=True)
class Config:
    gates: Gates = field(default_factory=Gates)
    evidence: Evidence = field(default_factory=Evidence)
    intervals: Intervals = field(default_factory=Intervals)
    regression: Regression = field(default_factory=Regression)
    nightly: Nightly = field(default_factory=Nightly)
    anomalies: Anomalies = field(default_factory=Anomalies)
    source: str | None = field(default=None, compare=False)   # the file it came from, if any

    def as_dict(self) -> dict[str, Any]:
        """The settings as nested dicts (for a report's JSON); ``source`` is left out, and so
        are optional keys that are not set (TOML has no null)."""
        def unset_dropped(value):
            if isinstance(value, dict):
                return {k: unset_dropped(v) for k, v in value.items() if v is not None}
            return value

        return {"gates": unset_dropped(dataclasses.asdict(self.gates)),
                "evidence": dataclasses.asdict(self.evidence), "intervals": dataclasses.asdict(self.intervals),
                "regression": dataclasses.asdict(self.regression),
                "nightly": unset_dropped(dataclasses.asdict(self.nightly)),
                "anomalies": dataclasses.asdict(self.anomalies)}


# Sections: dotted name -> dataclass. ``gates`` itself only holds sections.
_SECTIONS: dict[str, type] = {
    "gates.correctness": CorrectnessGate,
    "gates.quality": QualityGate,
    "gates.latency": LatencyGate,
    "gates.capacity": CapacityGate,
    "evidence": Evidence,
    "intervals": Intervals,
    "regression": Regression,
    "nightly": Nightly,
    "anomalies": Anomalies,
}
_GROUPS = {"gates": ("correctness", "quality", "latency", "capacity")}

# Extra range checks: a value outside makes a gate meaningless rather than strict.
_RANGES: dict[str, tuple[float, float]] = {
    "gates.correctness.min_match_rate": (0.0, 1.0),
    "gates.correctness.max_failed_share_rise": (0.0, 1.0),
    "gates.latency.max_worsening": (0.0, math.inf),
    "gates.latency.ttft_p99_ms_max_worsening": (0.0, math.inf),
    "gates.latency.tpot_p95_ms_max_worsening": (0.0, math.inf),
    "gates.latency.max_stall_p99_ms_max_worsening": (0.0, math.inf),
    "gates.capacity.min_speedup_coverage": (0.0, 1.0),
    "evidence.min_fit_r2": (0.0, 1.0),
    "evidence.max_load_gap": (0.0, math.inf),
    "evidence.context_margin": (0.0, math.inf),
    "evidence.min_bucket_share": (0.0, 1.0),
    "anomalies.looping_min_self_repeat_ratio": (0.0, 1.0),
    "anomalies.no_acceptance_min_deployment_acceptance": (0.0, 1.0),
    "anomalies.stall_min_ms": (0.0, math.inf),
    "anomalies.stall_min_median_multiple": (0.0, math.inf),
}


def load_config(path: str | Path | None) -> Config:
    """The defaults overridden by the TOML file at ``path``; ``None`` gives the defaults."""
    if path is None:
        return Config()
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(path, None, f"cannot read config file ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, None, f"not valid TOML ({_one_line(exc)})") from None
    return parse_config(data, source=str(path))


def parse_config(data: dict[str, Any], source: str | None = None) -> Config:
    """Build a Config from already parsed TOML (a dict); errors name ``source``."""
    values: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS}
    for top, content in data.items():
        if top in _GROUPS:
            _expect_table(source, top, content)
            for sub, section in content.items():
                dotted = f"{top}.{sub}"
                if sub not in _GROUPS[top]:
                    raise ConfigError(source, dotted, f"unknown section; expected one of "
                                                      f"{', '.join(f'{top}.{s}' for s in _GROUPS[top])}")
                values[dotted] = _section(source, dotted, section)
        elif top in _SECTIONS:
            values[top] = _section(source, top, content)
        else:
            kind = "section" if isinstance(content, dict) else "key outside any section"
            raise ConfigError(source, top, f"unknown {kind}; expected the sections gates.correctness, "
                                           "gates.quality, gates.latency, gates.capacity, evidence, intervals, "
                                           "regression, nightly and anomalies")
    built = {name: cls(**values[name]) for name, cls in _SECTIONS.items()}
    regression = built["regression"]
    # The window never holds more than window_days earlier dates, so a larger minimum
    # would silently turn the regression check off for good.
    # Name the key the file set: a file that only narrows window_days is told to set the minimum too.
    if regression.min_history_dates > regression.window_days:
        if "min_history_dates" in values["regression"]:
            raise ConfigError(source, "regression.min_history_dates",
                              f"expected at most window_days ({regression.window_days}), "
                              f"found {regression.min_history_dates}")
        raise ConfigError(source, "regression.window_days",
                          f"{regression.window_days} is below min_history_dates ({regression.min_history_dates}, "
                          "the default), so nothing could ever be checked; set min_history_dates too")
    return Config(
        gates=Gates(correctness=built["gates.correctness"], quality=built["gates.quality"],
                    latency=built["gates.latency"], capacity=built["gates.capacity"]),
        evidence=built["evidence"],
        intervals=built["intervals"],
        regression=built["regression"],
        nightly=built["nightly"],
        anomalies=built["anomalies"],
        source=source,
    )


def _expect_table(source, key: str, content: Any) -> None:
    if not isinstance(content, dict):
        raise ConfigError(source, key, f"expected a table ([{key}]), found {_describe(content)}")


def _section(source, name: str, content: Any) -> dict[str, Any]:
    _expect_table(source, name, content)
    fields = {f.name: f for f in dataclasses.fields(_SECTIONS[name])}
    out: dict[str, Any] = {}
    for key, value in content.items():
        dotted = f"{name}.{key}"
        if key not in fields:
            raise ConfigError(source, dotted, f"unknown key; expected one of {', '.join(fields)}")
        out[key] = _coerce(source, dotted, value, fields[key].type)
    return out


# integers that may be 0 (a seed); every other integer key counts something and is at least 1
_ZERO_ALLOWED = {"intervals.seed"}


def _coerce(source, dotted: str, value: Any, declared: Any) -> Any:
    # Annotations are strings under ``from __future__ import annotations``.
    if dotted == "nightly.accept_since":
        return _accept_since(source, dotted, value)
    if declared in (int, "int"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(source, dotted, f"expected an integer, found {_describe(value)}")
        least = 0 if dotted in _ZERO_ALLOWED else 1
        if value < least:
            raise ConfigError(source, dotted, f"expected an integer of at least {least}, found {value}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(source, dotted, f"expected a number, found {_describe(value)}")
    number = float(value)
    if math.isnan(number):
        raise ConfigError(source, dotted, "expected a number, found nan")
    low, high = _RANGES.get(dotted, (-math.inf, math.inf))
    if not low <= number <= high:
        bounds = f"of at least {low:g}" if high == math.inf else f"between {low:g} and {high:g}"
        raise ConfigError(source, dotted, f"expected a number {bounds}, found {number:g}")
    return number


def _accept_since(source, dotted: str, value: Any):
    """A TOML date (``2026-11-28``, every deployment), or a table of deployment_id = date."""
    def one(key: str, v: Any) -> dt.date:
        if isinstance(v, dt.date) and not isinstance(v, dt.datetime):
            return v
        if isinstance(v, str):
            try:
                return dt.date.fromisoformat(v)
            except ValueError:
                pass
        raise ConfigError(source, key, f"expected a date (YYYY-MM-DD), found {_describe(v)}")

    if isinstance(value, dict):
        return {str(dep): one(f"{dotted}.{dep}", v) for dep, v in value.items()}
    return one(dotted, value)


def _describe(value: Any) -> str:
    kinds = {bool: "a boolean", str: "a string", dict: "a table", list: "an array",
             int: "an integer", float: "a float", dt.datetime: "a date-time", dt.date: "a date"}
    kind = next((name for typ, name in kinds.items() if isinstance(value, typ)), type(value).__name__)
    shown = repr(value)
    return f"{kind} {shown if len(shown) <= 40 else shown[:37] + '...'}"


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


# --- the file as text: ``specan config --template`` ---------------------------------------
#
# What each section and key is, and its unit, in the words of the template. Every section
# of _SECTIONS and every field of its dataclass has one (config_toml raises KeyError
# otherwise); a key whose default is unset (None) gives the value it shows commented out.

_SECTION_NOTES = {
    "gates.correctness": "the correctness gate: outputs equal to the plain-decoding reference, and no more "
                         "failed requests than the baseline",
    "gates.quality": "the quality gate: quality_score against the matched baseline's",
    "gates.latency": "the latency gate: targets per deployment, checked against the baseline at the same "
                     "load past them",
    "gates.capacity": "the capacity gate: the speedup the verdict rests on, and preemptions",
    "evidence": "sample-size floors: below them a number is shown but does not decide (report, recommend, "
                "replay-ngram)",
    "intervals": "the 95% intervals (docs/metrics.md): the bootstraps and the blocks of time they resample",
    "regression": "nightly only: each date against the median of a window of earlier dates, and against "
                  "a fixed reference",
    "nightly": "nightly only: re-baselining",
    "anomalies": "report: the rules of the requests to look at (docs/metrics.md); not a gate",
}

_KEY_NOTES = {
    "gates.correctness.min_match_rate":
        "the least share of requests with matches_reference = true, of those where it is not null "
        "(a fraction, 0 to 1)",
    "gates.correctness.max_failed_share_rise":
        "failed requests (finish_reason error or abort): the most their share may rise over the baseline's, "
        "shown at 95% (a fraction of all requests, absolute: 0.01 is one percentage point)",
    "gates.quality.max_quality_drop":
        "the most the baseline's mean quality_score may exceed this deployment's (absolute, in "
        "quality_score's own unit)",
    "gates.latency.ttft_p99_ms": "target for the p99 of time to first token (ms)",
    "gates.latency.tpot_p95_ms": "target for the p95 of time per output token (ms)",
    "gates.latency.max_stall_p99_ms":
        "target for the p99 of max_stall, a request's longest gap between streamed tokens (ms)",
    "gates.latency.max_worsening":
        "past its target, a check worse than the baseline at the same load by more than this blocks "
        "(a fraction: 0.25 is 25% worse)",
    "gates.latency.ttft_p99_ms_max_worsening":
        "max_worsening for the TTFT check alone (a fraction); unset: max_worsening",
    "gates.latency.tpot_p95_ms_max_worsening":
        "max_worsening for the TPOT check alone (a fraction); unset: max_worsening",
    "gates.latency.max_stall_p99_ms_max_worsening":
        "max_worsening for the max stall check alone (a fraction); unset: max_worsening",
    "gates.capacity.min_speedup":
        "the speedup interval's lower bound must clear it to ship (a ratio to plain decoding's throughput)",
    "gates.capacity.min_speedup_coverage":
        "the least share of the deployment's committed tokens the speedup must cover to decide "
        "(a fraction, 0 to 1)",
    "gates.capacity.max_preemptions_per_request": "the most preemptions per request (a mean over requests)",
    "evidence.min_requests":
        "a speedup, percentile or share decides only with this many requests (requests)",
    "evidence.min_baseline_steps":
        "a baseline load cell's time per token needs this many decode-only steps in it (steps)",
    "evidence.min_baseline_requests": "... and this many distinct baseline requests (requests)",
    "evidence.max_load_gap":
        "interpolate the baseline's time per token between two measured loads only when the higher is at "
        "most this much above the lower, plus one request (a fraction)",
    "evidence.context_margin":
        "a step is matched on context within the baseline's range at its load, widened by this much on "
        "either side (a fraction of the range)",
    "evidence.min_bucket_share":
        "a batch bucket's own speedup decides its speculation length only with this share of the "
        "deployment's committed tokens (a fraction, 0 to 1)",
    "evidence.min_context_cell_rounds":
        "a cell of recommend --by-context may differ from the overall speculation length only with this "
        "many decode rounds (rounds)",
    "evidence.min_fit_r2":
        "a round-cost fit predicts a speculation length that never ran only with at least this R² (0 to 1)",
    "evidence.min_log_intervals":
        "logs speedup: a batch bucket counts only where the deployment and its baseline each logged this "
        "many usable log intervals in it (log lines)",
    "intervals.replicates": "bootstrap replicates of the mean accept length's interval (replicates)",
    "intervals.seed": "the bootstraps' seed: the same seed gives the same intervals (an integer, 0 or more)",
    "intervals.latency_replicates":
        "bootstrap replicates of the latency gate's percentiles (replicates)",
    "intervals.blocks":
        "each deployment's steps, requests and log intervals fall in this many blocks of time, the units "
        "the intervals resample (blocks)",
    "intervals.max_blocks":
        "the speedup's jackknife deletes at most this many coarse blocks per side (blocks)",
    "regression.window_days":
        "the window holds up to this many latest earlier unflagged dates; the reference is the first this "
        "many dates (dates)",
    "regression.min_history_dates":
        "earlier dates needed before anything is flagged; at most window_days (dates)",
    "regression.max_accept_length_drop":
        "flag a mean accept length this far below the window's median or the reference, and past the "
        "spread (a fraction of it)",
    "regression.max_speedup_drop":
        "flag a speedup this far below the window's median or the reference, and past the spread "
        "(a fraction of it)",
    "regression.max_tpot_p99_rise":
        "flag a TPOT p99 this far above the window's median or the reference, and past the spread "
        "(a fraction of it)",
    "nightly.accept_since":
        "from this date on a lasting change is the new normal: earlier dates leave the window and the "
        "reference (a date, YYYY-MM-DD, or { deployment_id = date, ... } per deployment); unset: never",
    "anomalies.looping_min_output_tokens": "looping: at least this many output tokens (tokens)",
    "anomalies.looping_min_self_repeat_ratio":
        "looping: and at least this share of the output's tokens repeat a 4-gram that already occurred "
        "in the output (a fraction, 0 to 1)",
    "anomalies.no_acceptance_min_spec_rounds":
        "no_acceptance: at least this many speculative rounds with no draft accepted (rounds)",
    "anomalies.no_acceptance_min_deployment_acceptance":
        "no_acceptance: on a deployment whose acceptance rate is at least this (a fraction, 0 to 1)",
    "anomalies.stall_min_ms": "stall: a request's max_stall of at least this (ms)",
    "anomalies.stall_min_median_multiple":
        "stall: and at least this many times the median max_stall of the deployment's requests (a multiple)",
    "anomalies.listed_per_kind":
        "the report lists the largest this many per deployment and kind; anomaly_checks counts every "
        "flagged request (requests)",
}

# The value a key whose default is unset shows, commented out.
_UNSET_EXAMPLES = {"gates.latency.ttft_p99_ms_max_worsening": "0.5",
                   "gates.latency.tpot_p95_ms_max_worsening": "0.5",
                   "gates.latency.max_stall_p99_ms_max_worsening": "0.5",
                   "nightly.accept_since": "2026-11-28"}

_TEMPLATE_HEAD = """\
# specan's gates and thresholds: the --config FILE of report, nightly, recommend and
# replay-ngram (docs/commands.md, "Gates"). Every key is here with its value; a file may
# set any subset of them, and the rest keep their defaults. A key shown commented out is
# unset by default.
"""


def _comment(text_: str) -> str:
    return "\n".join(textwrap.wrap(text_, width=88, initial_indent="# ", subsequent_indent="# "))


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float):
        return repr(value)
    return str(value)


def config_toml(config: Config | None = None) -> str:
    """Every section and key of the config file with ``config``'s values (default: the
    defaults), each under a comment saying what it is and its unit: what
    ``specan config --template`` prints. It loads back to ``config``."""
    config = config if config is not None else Config()
    values = config.as_dict()
    parts = [_TEMPLATE_HEAD]
    for name, cls in _SECTIONS.items():
        section = values
        for part in name.split("."):
            section = section.get(part, {})
        lines = [f"[{name}]", _comment(_SECTION_NOTES[name])]
        for f in dataclasses.fields(cls):
            dotted = f"{name}.{f.name}"
            note = _comment(_KEY_NOTES[dotted])
            if f.name in section:
                lines.append(f"\n{note}\n{f.name} = {_toml_value(section[f.name])}")
            else:
                lines.append(f"\n{note}\n# {f.name} = {_UNSET_EXAMPLES[dotted]}")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


# The defaults block of docs/commands.md, verbatim (a test checks it), and what
# ``specan config --template`` prints.
DEFAULT_CONFIG_TOML = config_toml(Config())
