"""`specan import prometheus`: a Prometheus range-query body over vLLM's spec-decode counters → intervals.

Input: the JSON body of ``/api/v1/query_range`` (``resultType: matrix``) over

    vllm:spec_decode_num_drafts_total
    vllm:spec_decode_num_draft_tokens_total
    vllm:spec_decode_num_accepted_tokens_total
    vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0".."k-1"}

(the ``_total`` suffix is optional). Series are grouped by their labels other
than ``__name__`` and ``position`` (``model_name``, ``engine``, ``instance``, …);
``--deployment`` maps each group to a deployment id, either one id for every
group or ``label=value:ID`` pairs. Each pair of consecutive samples of a group
makes one interval holding the counter deltas.

A counter that decreases was reset by a restart: its new value is the delta.
A restart resets every counter of the process, including one that has already
climbed back above its old value by the next sample, so when any counter of a
group decreases over an interval, all of that group's counters take their new
value as the delta for that interval.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .common import (ImportConflict, ImportInputError, ImportSummary, MalformedInput, Overrides, TraceWriter,
                     deployment_row, epoch_us, finish)
from .vllm_log import INTERVAL_COLUMNS

SOURCE = "prometheus"
INTERVAL_SOURCE = "prometheus"

OTHER_SERIES = "series of another metric"

_METRIC = re.compile(r"^vllm:spec_decode_(num_drafts|num_draft_tokens|num_accepted_tokens|"
                     r"num_accepted_tokens_per_pos)(?:_total)?$")
_PAIR = re.compile(r"^(?P<label>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*):(?P<id>[^:]+)$")

GroupKey = tuple[tuple[str, str], ...]


@dataclass
class DeploymentMap:
    """``--deployment``: one id for every label group, or ``label=value:ID`` pairs."""

    single: str | None = None
    pairs: list[tuple[str, str, str]] = field(default_factory=list)

    @classmethod
    def parse(cls, values: Sequence[str] | str) -> DeploymentMap:
        values = [values] if isinstance(values, str) else list(values)
        pairs: list[tuple[str, str, str]] = []
        singles: list[str] = []
        for value in values:
            pieces = value.split(",")
            if all(_PAIR.match(p.strip()) for p in pieces):
                pairs += [(m["label"], m["value"], m["id"]) for m in (_PAIR.match(p.strip()) for p in pieces)]
            elif "=" in value:
                raise ImportInputError(f"--deployment {value!r}: expected one id, or label=value:ID pairs")
            else:
                singles.append(value)
        if singles and (pairs or len(singles) > 1):
            raise ImportInputError("--deployment: give one id, or only label=value:ID pairs")
        if not singles and not pairs:
            raise ImportInputError("--deployment: no deployment id given")
        return cls(single=singles[0] if singles else None, pairs=pairs)

    def lookup(self, labels: dict[str, str]) -> str | None:
        if self.single is not None:
            return self.single
        hits = {dep for label, value, dep in self.pairs if labels.get(label) == value}
        if len(hits) > 1:
            raise ImportConflict(f"--deployment: the label group {_describe(labels)} matches pairs of "
                                 f"several deployments ({', '.join(sorted(hits))})")
        return hits.pop() if hits else None

    @property
    def ids(self) -> list[str]:
        return [self.single] if self.single is not None else list(dict.fromkeys(d for _, _, d in self.pairs))


def _describe(labels: dict[str, str] | GroupKey) -> str:
    items = labels.items() if isinstance(labels, dict) else labels
    return "{" + ", ".join(f'{k}="{v}"' for k, v in items) + "}"


def _line_of(text: str, needle: str, nth: int = 0) -> int:
    """1-based line of the nth occurrence of needle (1 when not found)."""
    at = -1
    for _ in range(nth + 1):
        at = text.find(needle, at + 1)
        if at < 0:
            return 1
    return text.count("\n", 0, at) + 1


def _read_body(path: Path) -> list[dict]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ImportInputError(f"{path}: can't read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise MalformedInput(path, 1, "not UTF-8 text; expected a Prometheus query_range JSON body") from None
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedInput(path, exc.lineno, f"not JSON ({exc.msg}); expected a Prometheus query_range body") \
            from None
    if not isinstance(body, dict):
        raise MalformedInput(path, 1, "expected a Prometheus query_range body (a JSON object with data.result)")
    if body.get("status") == "error":
        raise MalformedInput(path, _line_of(text, '"error"'),
                             f"the query failed: {body.get('errorType', '')} {body.get('error', '')}".strip())
    data = body.get("data")
    if not isinstance(data, dict):
        raise MalformedInput(path, 1, "expected a Prometheus query_range body: no data object")
    kind = data.get("resultType")
    if kind != "matrix":
        raise MalformedInput(path, _line_of(text, '"resultType"'),
                             f"expected resultType \"matrix\" (a range query), found {json.dumps(kind)}")
    result = data.get("result")
    if not isinstance(result, list):
        raise MalformedInput(path, _line_of(text, '"result"'), "data.result: expected a list of series")
    for i, series in enumerate(result):
        line = _line_of(text, '"metric"', i)
        if not isinstance(series, dict) or not isinstance(series.get("metric"), dict) \
                or not isinstance(series.get("values"), list):
            raise MalformedInput(path, line, f"series {i}: expected {{\"metric\": {{...}}, \"values\": [...]}}")
        for sample in series["values"]:
            if not (isinstance(sample, list) and len(sample) == 2 and isinstance(sample[0], (int, float))
                    and not isinstance(sample[0], bool) and isinstance(sample[1], str)):
                raise MalformedInput(path, line, f"series {i}: a sample is not [unix time, \"value\"]: "
                                                 f"{json.dumps(sample)[:60]}")
        series["_line"] = line
    return result


@dataclass
class Group:
    labels: GroupKey
    # counter → {time µs: value}; counter is "num_drafts", ... or ("pos", i)
    samples: dict = field(default_factory=lambda: defaultdict(dict))


def import_prometheus(files: Sequence[str | Path], out: str | Path, deployment: Sequence[str] | str,
                      overrides: Overrides | None = None) -> ImportSummary:
    """Import Prometheus range-query bodies into TRACES ``out`` as intervals."""
    overrides = overrides or Overrides()
    mapping = DeploymentMap.parse(deployment)
    writer = TraceWriter(Path(out), SOURCE)
    writer.check_layout(("intervals", "import_notes"))
    summary = ImportSummary(SOURCE, Path(out))
    groups: dict[GroupKey, Group] = {}

    for path in files:
        for series in _read_body(Path(path)):
            labels = {str(k): str(v) for k, v in series["metric"].items()}
            m = _METRIC.match(labels.get("__name__", ""))
            if m is None:
                summary.skip(OTHER_SERIES)
                continue
            counter: object = m[1]
            if counter == "num_accepted_tokens_per_pos":
                try:
                    counter = ("pos", int(labels.get("position", "")))
                except ValueError:
                    raise MalformedInput(path, series["_line"],
                                         "a per-position series without an integer position label") from None
            key = tuple(sorted((k, v) for k, v in labels.items() if k not in ("__name__", "position")))
            group = groups.setdefault(key, Group(key))
            for t, value in series["values"]:
                try:
                    v = float(value)
                except ValueError:
                    raise MalformedInput(path, series["_line"], f"sample value {value!r} is not a number") from None
                if not math.isfinite(v):
                    summary.skip("non-finite sample")
                    continue
                group.samples[counter][epoch_us(t)] = v  # several files: a repeated time is one sample

    # group → deployment
    by_deployment: dict[str, list[Group]] = defaultdict(list)
    for key, group in groups.items():
        dep = mapping.lookup(dict(key))
        if dep is None:
            summary.skip("label group not mapped by --deployment")
            summary.note(f"label group {_describe(key)} matches no --deployment pair: not imported")
            continue
        by_deployment[dep].append(group)

    cols: dict[str, list] = {c: [] for c in INTERVAL_COLUMNS}
    for dep in mapping.ids:
        rows, resets, positions = {}, 0, 0
        misaligned = 0
        for group in by_deployment.get(dep, []):
            g_rows, g_resets, g_positions = _intervals(group, summary)
            resets += g_resets
            positions = max(positions, g_positions)
            for end, row in g_rows.items():
                if end not in rows:
                    rows[end] = row
                    continue
                misaligned += _add_row(rows[end], row)
        n_groups = len(by_deployment.get(dep, []))
        for end in sorted(rows):
            row = rows[end]
            cols["deployment_id"].append(dep)
            cols["series"].append(None)          # label groups are summed into one series per deployment
            cols["start_time"].append(row["start"])
            cols["end_time"].append(end)
            cols["num_drafts"].append(row["num_drafts"])
            cols["num_draft_tokens"].append(row["num_draft_tokens"])
            cols["num_accepted_tokens"].append(row["num_accepted_tokens"])
            cols["accepted_per_position"].append(row["per_pos"])
            cols["source"].append(INTERVAL_SOURCE)
        if resets:
            summary.note(f"{resets} counter reset{'s' if resets != 1 else ''} (a counter decreased: a restart); "
                         f"the new values were taken as the deltas", dep)
        if n_groups > 1:
            summary.note(f"{n_groups} label groups summed into this deployment", dep)
        if misaligned:
            summary.note(f"{misaligned} intervals summed from groups sampled at different start times: "
                         f"start_time is the earliest", dep)
        models = {dict(g.labels).get("model_name") for g in by_deployment.get(dep, [])} - {None}
        if len(models) > 1 and overrides.model is None:
            summary.note("the label groups name several model_name values (" + ", ".join(sorted(models))
                         + "): model left unknown", dep)
        row = deployment_row(dep, overrides, model=models.pop() if len(models) == 1 else None,
                             speculated=bool(by_deployment.get(dep)),
                             num_spec_tokens=positions or None)
        if not by_deployment.get(dep):
            summary.note("no spec_decode series for this deployment", dep)
        writer.merge_deployment(row, summary)
    writer.add("intervals", cols, times=cols["end_time"], drop_empty_optional=("series",))
    default = mapping.ids[0] if len(mapping.ids) == 1 else None
    return finish(writer, summary, default)


def _add_row(into: dict, row: dict) -> int:
    """Sum another group's interval into one with the same end time; 1 when the start times differ."""
    differ = into["start"] != row["start"]
    into["start"] = min(into["start"], row["start"])
    for k in ("num_draft_tokens", "num_accepted_tokens"):
        into[k] += row[k]
    into["num_drafts"] = (None if into["num_drafts"] is None or row["num_drafts"] is None
                          else into["num_drafts"] + row["num_drafts"])
    a, b = into["per_pos"], row["per_pos"]
    into["per_pos"] = [x + y for x, y in zip(a, b)] if a is not None and b is not None and len(a) == len(b) else None
    return int(differ)


def _intervals(group: Group, summary: ImportSummary) -> tuple[dict[int, dict], int, int]:
    """end µs → interval row of one label group, the number of reset intervals, and positions."""
    s = group.samples
    main = s.get("num_draft_tokens")
    if not main or "num_accepted_tokens" not in s:
        summary.skip("label group without num_draft_tokens and num_accepted_tokens series")
        summary.note(f"label group {_describe(group.labels)} lacks the draft or accepted token counters: "
                     f"not imported")
        return {}, 0, 0
    positions = sorted(k[1] for k in s if isinstance(k, tuple))
    contiguous = positions == list(range(len(positions)))
    counters = ["num_drafts", "num_draft_tokens", "num_accepted_tokens"] + [("pos", i) for i in positions]
    times = sorted(main)
    rows: dict[int, dict] = {}
    resets = 0
    for start, end in zip(times, times[1:]):
        before = {c: s[c].get(start) for c in counters if c in s}
        after = {c: s[c].get(end) for c in counters if c in s}
        if before.get("num_accepted_tokens") is None or after.get("num_accepted_tokens") is None:
            summary.skip("interval without an accepted tokens sample at both ends")
            continue
        reset = any(before[c] is not None and after[c] is not None and after[c] < before[c] for c in before)
        resets += reset

        def delta(c):
            if before.get(c) is None or after.get(c) is None:
                return None
            return int(round(after[c] if reset else after[c] - before[c]))

        per_pos = [delta(("pos", i)) for i in positions] if positions and contiguous else None
        if per_pos is not None and any(v is None for v in per_pos):
            per_pos = None
        rows[end] = {"start": start, "num_drafts": delta("num_drafts"),
                     "num_draft_tokens": delta("num_draft_tokens"),
                     "num_accepted_tokens": delta("num_accepted_tokens"), "per_pos": per_pos}
    return rows, resets, len(positions)

