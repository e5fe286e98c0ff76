"""The ``--config FILE`` of ``specan report`` and ``specan nightly`` (docs/commands.md, "Gates").

    >>> from analyzer.config import load_config
    >>> config = load_config("gates.toml")     # or load_config(None) for the defaults
    >>> config.gates.latency.ttft_p99_ms
    2000.0

A file may set any subset of the keys; the rest keep their defaults. An unknown
section or key, a value of the wrong type and a file that is not TOML raise
``ConfigError``, whose one-line message names the file and the key. The CLI
prints it and exits 2.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputProblem

# The defaults block of docs/commands.md, verbatim. A test checks that it parses to
# the dataclass defaults below, so the two cannot drift apart.
DEFAULT_CONFIG_TOML = """\
[gates.correctness]          # matches_reference = true / requests where it is not null
min_match_rate = 1.0
[gates.quality]              # baseline's mean quality_score − this one's (absolute)
max_quality_drop = 0.01
[gates.latency]              # ms, per deployment
ttft_p99_ms = 2000
tpot_p95_ms = 60
max_stall_p99_ms = 250
[gates.capacity]
min_speedup = 1.0
max_preemptions_per_request = 0.05
[regression]                 # nightly only: today against the median of the previous days
window_days = 7
min_history_dates = 3        # earlier dates in the window before anything is flagged
max_accept_length_drop = 0.05
max_speedup_drop = 0.05
max_tpot_p99_rise = 0.10
[anomalies]                  # report: requests to look at (docs/metrics.md)
looping_min_output_tokens = 64
looping_min_self_repeat_ratio = 0.8
no_acceptance_min_spec_rounds = 16
no_acceptance_min_deployment_acceptance = 0.2
stall_min_ms = 1000
stall_min_median_multiple = 4
"""


class ConfigError(InputProblem):
    """A config file that cannot be used. The message is one line naming the file and the key."""

    def __init__(self, path: str | Path | None, key: str | None, problem: str):
        self.path, self.key, self.problem = path, key, problem
        where = str(path) if path is not None else "config"
        super().__init__(f"{where}: {key}: {problem}" if key else f"{where}: {problem}")


@dataclass(frozen=True)
class CorrectnessGate:
    min_match_rate: float = 1.0


@dataclass(frozen=True)
class QualityGate:
    max_quality_drop: float = 0.01


@dataclass(frozen=True)
class LatencyGate:
    ttft_p99_ms: float = 2000.0
    tpot_p95_ms: float = 60.0
    max_stall_p99_ms: float = 250.0


@dataclass(frozen=True)
class CapacityGate:
    min_speedup: float = 1.0
    max_preemptions_per_request: float = 0.05


@dataclass(frozen=True)
class Gates:
    correctness: CorrectnessGate = field(default_factory=CorrectnessGate)
    quality: QualityGate = field(default_factory=QualityGate)
    latency: LatencyGate = field(default_factory=LatencyGate)
    capacity: CapacityGate = field(default_factory=CapacityGate)


@dataclass(frozen=True)
class Regression:
    """The nightly regression rule (analyzer/analysis/history.py, docs/commands.md "Regressions")."""

    window_days: int = 7
    # Below this many earlier dates a median and a spread say nothing: the run says
    # "not checked" instead of flagging noise or claiming that nothing moved.
    min_history_dates: int = 3
    max_accept_length_drop: float = 0.05
    max_speedup_drop: float = 0.05
    max_tpot_p99_rise: float = 0.10


@dataclass(frozen=True)
class Anomalies:
    """The rules of the request_anomalies view; the view reads them as SQL macros of the
    same names (analyzer/analysis/views.py, anomaly_macros_sql)."""

    looping_min_output_tokens: int = 64
    looping_min_self_repeat_ratio: float = 0.8
    no_acceptance_min_spec_rounds: int = 16
    no_acceptance_min_deployment_acceptance: float = 0.2
    stall_min_ms: float = 1000.0
    stall_min_median_multiple: float = 4.0


@dataclass(frozen=True)
class Config:
    gates: Gates = field(default_factory=Gates)
    regression: Regression = field(default_factory=Regression)
    anomalies: Anomalies = field(default_factory=Anomalies)
    source: str | None = field(default=None, compare=False)   # the file it came from, if any

    def as_dict(self) -> dict[str, Any]:
        """The settings as nested dicts (for a report's JSON); ``source`` is left out."""
        return {"gates": dataclasses.asdict(self.gates), "regression": dataclasses.asdict(self.regression),
                "anomalies": dataclasses.asdict(self.anomalies)}


# Sections: dotted name -> dataclass. ``gates`` itself only holds sections.
_SECTIONS: dict[str, type] = {
    "gates.correctness": CorrectnessGate,
    "gates.quality": QualityGate,
    "gates.latency": LatencyGate,
    "gates.capacity": CapacityGate,
    "regression": Regression,
    "anomalies": Anomalies,
}
_GROUPS = {"gates": ("correctness", "quality", "latency", "capacity")}

# Extra range checks: a value outside makes a gate meaningless rather than strict.
_RANGES: dict[str, tuple[float, float]] = {
    "gates.correctness.min_match_rate": (0.0, 1.0),
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
                                           "gates.quality, gates.latency, gates.capacity, regression and anomalies")
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
        regression=built["regression"],
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


def _coerce(source, dotted: str, value: Any, declared: Any) -> Any:
    # Annotations are strings under ``from __future__ import annotations``.
    if declared in (int, "int"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(source, dotted, f"expected an integer, found {_describe(value)}")
        if value < 1:
            raise ConfigError(source, dotted, f"expected an integer of at least 1, found {value}")
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


def _describe(value: Any) -> str:
    kinds = {bool: "a boolean", str: "a string", dict: "a table", list: "an array",
             int: "an integer", float: "a float"}
    kind = next((name for typ, name in kinds.items() if isinstance(value, typ)), type(value).__name__)
    shown = repr(value)
    return f"{kind} {shown if len(shown) <= 40 else shown[:37] + '...'}"


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
