"""specan import sglang-log (docs/importers.md): every value against the fixture lines, worked out by hand.

The inputs are real SGLang log lines copied from public threads into
tests/fixtures/sglang_logs/ (SOURCES.md: where each comes from, the SGLang
version, the layout). Most tests call import_sglang_log directly; the ones marked
"CLI" go through `specan import` and run_import, which need sglang-log wired into
analyzer/cli.py and analyzer/ingest/importers/__init__.py.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from analyzer.ingest.importers import common
from analyzer.ingest.importers import sglang_log as sl
from analyzer.ingest.importers.common import ImportInputError, Overrides
from analyzer.ingest.importers.sglang_log import (NEW_RATE, OLD_DRAFT_TOKENS, OLD_STEPS, draft_tokens_per_step,
                                                  import_sglang_log, parse_decode, parse_version, rate_meaning)
from imported import rows, run, t

LOGS = Path(__file__).parent / "fixtures" / "sglang_logs"
UTC = dt.timezone.utc
LENGTH = ("tokens committed per request per verify step (accepted drafts and the bonus token), over the log "
          "interval, as SGLang prints its accept len (2 decimals)")
NO_COUNTS = {"num_drafts": None, "num_draft_tokens": None, "num_accepted_tokens": None,
             "accepted_per_position": None, "source": "sglang_log"}


def intervals(root: Path) -> list[dict]:
    return sorted(rows(root, "intervals"), key=lambda r: (r["series"] or "", r["end_time"]))


def notes(root: Path) -> str:
    return "\n".join(r["note"] for r in rows(root, "import_notes"))


def interval(series, start, end, running, waiting, throughput, kv, length, **rate):
    return {"deployment_id": "sg", "series": series, "start_time": start and t(start), "end_time": t(end),
            **NO_COUNTS, "running_requests": running, "waiting_requests": waiting,
            "generation_tokens_per_s": throughput, "kv_cache_usage": kv, "reported_accept_length": length,
            "reported_accept_length_definition": LENGTH, **rate}


@pytest.fixture
def rate_columns(monkeypatch):
    """The intervals schema with the two columns docs/importers.md proposes for the accept rate."""
    declared = common._schema_columns

    def with_rate(table: str) -> dict[str, str]:
        found = declared(table)
        if table == "intervals":
            found = {**found, "reported_accept_rate": "DOUBLE", "reported_accept_rate_definition": "VARCHAR"}
        return found

    monkeypatch.setattr(common, "_schema_columns", with_rate)
    monkeypatch.setattr(sl, "_schema_columns", with_rate)


@pytest.fixture
def no_rate_columns(monkeypatch):
    """The intervals schema without them (as schemas/intervals.json was when sglang-log was written)."""
    declared = common._schema_columns

    def without(table: str) -> dict[str, str]:
        return {c: v for c, v in declared(table).items()
                if table != "intervals" or not c.startswith("reported_accept_rate")}

    monkeypatch.setattr(common, "_schema_columns", without)
    monkeypatch.setattr(sl, "_schema_columns", without)


def assert_one_line_exit_2(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


# =========================================================================== one series, whole seconds


def test_eagle3_lines_same_second_and_cut(tmp_path):
    # sglang#11948: 6 decode lines, 2 at 10:27:57 (lines 2–3), 3 at :58 (lines 4–6), 1 at :59 (line 7): all
    # six are batches of their own and kept, the i-th of n in a second at + i/n s (1/3 s = 333333 µs)
    out = tmp_path / "t"
    summary = import_sglang_log([LOGS / "eagle3_tp0.log"], out, "sg")
    assert intervals(out) == [
        # line 2, 10:27:57, the series' first decode line: no start. kv = token usage 0.00
        interval("TP0", None, "2025-10-22T10:27:57", 1, 0, 0.39, 0.0, 2.17),
        # line 3, the 2nd of 2 at :57: + 1/2 s, from line 2
        interval("TP0", "2025-10-22T10:27:57", "2025-10-22T10:27:57.500000", 1, 0, 178.86, 0.0, 1.95),
        # lines 4, 5, 6: the three of :58 at + 0, 1/3, 2/3 s, each from the line before
        interval("TP0", "2025-10-22T10:27:57.500000", "2025-10-22T10:27:58", 1, 0, 165.41, 0.0, 1.80),
        interval("TP0", "2025-10-22T10:27:58", "2025-10-22T10:27:58.333333", 1, 0, 188.68, 0.0, 2.05),
        interval("TP0", "2025-10-22T10:27:58.333333", "2025-10-22T10:27:58.666666", 1, 0, 165.59, 0.0, 1.80),
        # line 7, alone at :59, ends in "cuda graph: Tru": no throughput, no #queue-req; from line 6
        interval("TP0", "2025-10-22T10:27:58.666666", "2025-10-22T10:27:59", 1, None, None, 0.0, 1.57),
    ]
    assert summary.skipped == {sl.OTHER_LINE: 1}     # the Prefill batch line is line 1
    text = notes(out)
    assert "5 decode lines share their printed time with other lines of their series" in text
    assert "layouts read: `Decode batch.` with accept rate (6)" in text
    assert "1 decode line cut short (no #queue-req)" in text
    # no --sglang-version: the accept rate is dropped, and said so
    assert "accept rate dropped from 6 lines: its meaning changed in SGLang 0.5.11" in text
    assert "pass --sglang-version to keep it" in text
    assert "reported_accept_rate" not in rows(out, "intervals")[0]
    # nothing gives the draft size: fallbacks
    assert rows(out, "deployments") == [{"deployment_id": "sg", "model": "unknown", "method": "unknown",
                                         "num_speculative_tokens": 0}]


def test_old_accept_rate_kept_with_version(tmp_path, rate_columns):
    out = tmp_path / "t"
    import_sglang_log([LOGS / "eagle3_tp0.log"], out, "sg", sglang_version="0.5.4")
    got = intervals(out)
    assert [(r["reported_accept_rate"], r["reported_accept_rate_definition"]) for r in got] == [
        (0.54, OLD_STEPS), (0.49, OLD_STEPS), (0.45, OLD_STEPS), (0.51, OLD_STEPS), (0.45, OLD_STEPS),
        (0.39, OLD_STEPS)]                                              # lines 2 to 7
    # old meaning, rate = len / (k + 1): 2.17/0.54 → k + 1 in [2.165/0.545, 2.175/0.535] = [3.97, 4.07],
    # 1.95/0.49 → [1.945/0.495, 1.955/0.485] = [3.93, 4.03], 1.80/0.45 → [1.795/0.455, 1.805/0.445] = [3.95, 4.06],
    # 2.05/0.51 → [2.045/0.515, 2.055/0.505] = [3.97, 4.07], 1.57/0.39 → [3.96, 4.09]: k + 1 = 4
    assert rows(out, "deployments")[0]["num_speculative_tokens"] == 3
    text = notes(out)
    assert f"accept rate kept on 6 lines as SGLang 0.5.4 means it: {OLD_STEPS}" in text
    assert "num_speculative_tokens = 3: the only whole number of draft tokens per verify step" in text


def test_rate_not_stored_without_the_schema_columns(tmp_path, no_rate_columns):
    out = tmp_path / "t"
    import_sglang_log([LOGS / "eagle3_tp0.log"], out, "sg", sglang_version="0.5.4")
    assert "reported_accept_rate" not in intervals(out)[0]
    assert "accept rate not stored (6 lines): the intervals schema has no reported_accept_rate column" \
        in notes(out)
    # the draft size still comes from the rate
    assert rows(out, "deployments")[0]["num_speculative_tokens"] == 3


def test_version_without_an_accept_rate(tmp_path, rate_columns):
    # SGLang 0.5.3 releases print no accept rate: these lines come from a build between 0.5.3 and 0.5.4
    out = tmp_path / "t"
    import_sglang_log([LOGS / "eagle3_tp0.log"], out, "sg", sglang_version="0.5.3")
    assert "reported_accept_rate" not in intervals(out)[0]
    assert "accept rate dropped from 6 lines: SGLang 0.5.3 releases print none" in notes(out)
    assert rows(out, "deployments")[0]["num_speculative_tokens"] == 0


# =========================================================================== accept rate, new meaning


def test_pd_decode_new_accept_rate(tmp_path, rate_columns):
    out = tmp_path / "t"
    summary = import_sglang_log([LOGS / "pd_decode.log"], out, "sg", sglang_version="0.5.12")
    new = {"reported_accept_rate_definition": NEW_RATE}
    assert intervals(out) == [
        # token usage 0.43 → kv; pre-allocated usage and the #…-req queues of a PD decode server are not read
        interval("TP0", None, "2026-08-14T14:02:47", 3, 0, 183.10, 0.43, 1.67, reported_accept_rate=0.13, **new),
        interval("TP0", "2026-08-14T14:02:47", "2026-08-14T14:02:48", 3, 0, 179.61, 0.47, 1.68,
                 reported_accept_rate=0.14, **new),
        interval("TP0", "2026-08-14T14:02:48", "2026-08-14T14:02:49", 3, 0, 185.97, 0.54, 1.73,
                 reported_accept_rate=0.14, **new),
        # line 4 is an access-log line; line 5 starts at line 3
        interval("TP0", "2026-08-14T14:02:49", "2026-08-14T14:02:50", 3, 0, 183.75, 0.54, 1.72,
                 reported_accept_rate=0.14, **new),
        # line 6 ends in "accept rate: 0": a value printed with 2 decimals, cut; rate unknown, not 0
        interval("TP0", "2026-08-14T14:02:50", "2026-08-14T14:02:51", 2, None, None, 0.42, 1.44,
                 reported_accept_rate=None, reported_accept_rate_definition=None),
    ]
    assert summary.skipped == {sl.OTHER_LINE: 1}
    # new meaning, rate = (len − 1) / k: 1.67/0.13 → k in [0.665/0.135, 0.675/0.125] = [4.93, 5.40],
    # 1.68/0.14 → [4.66, 5.07], 1.73/0.14 → [5.00, 5.44], 1.72/0.14 → [4.93, 5.37]: k = 5
    assert rows(out, "deployments")[0]["num_speculative_tokens"] == 5
    assert "accept rate kept on 4 lines as SGLang 0.5.12 means it" in notes(out)


def test_wrong_version_is_noticed(tmp_path, rate_columns):
    # Read as 0.5.6 (rate = len / (k + 1)): 1.67/0.13 → k in [11.33, 12.40], 1.68/0.14 → [10.55, 11.48]:
    # no whole number fits both
    out = tmp_path / "t"
    import_sglang_log([LOGS / "pd_decode.log"], out, "sg", sglang_version="0.5.6")
    assert [r["reported_accept_rate_definition"] for r in intervals(out)][:1] == [OLD_DRAFT_TOKENS]
    assert "no whole number of draft tokens per verify step fits every line's accept len and accept rate as " \
           "SGLang 0.5.6 means the rate: another version wrote the log, or the draft size changed" in notes(out)
    assert rows(out, "deployments")[0]["num_speculative_tokens"] == 0


def test_npu_rank_prefix_chains(tmp_path, rate_columns):
    out = tmp_path / "t"
    import_sglang_log([LOGS / "npu_tp0_ep0.log"], out, "sg", sglang_version="0.5.11")
    new = {"reported_accept_rate_definition": NEW_RATE}
    assert intervals(out) == [
        # "npu graph" instead of "cuda graph"; the series is the rank prefix "TP0 EP0"
        interval("TP0 EP0", None, "2026-07-21T15:00:13", 24, 2, 239.06, 0.66, 3.05, reported_accept_rate=0.68,
                 **new),
        interval("TP0 EP0", "2026-07-21T15:00:13", "2026-07-21T15:00:17", 23, 3, 631.96, 0.64, 2.63,
                 reported_accept_rate=0.54, **new),
        interval("TP0 EP0", "2026-07-21T15:00:17", "2026-07-21T15:00:21", 22, 4, 648.87, 0.63, 2.83,
                 reported_accept_rate=0.61, **new),
    ]
    # 3.05/0.68 → k in [2.045/0.685, 2.055/0.675] = [2.99, 3.04]; 2.63/0.54 → [2.98, 3.06];
    # 2.83/0.61 → [2.97, 3.03]: k = 3
    assert rows(out, "deployments")[0]["num_speculative_tokens"] == 3


def test_hybrid_model_pool_usages(tmp_path):
    out = tmp_path / "t"
    import_sglang_log([LOGS / "hybrid_mamba.log"], out, "sg", sglang_version="0.5.11")
    assert intervals(out) == [
        # no "token usage": full token usage 0.74, mamba usage 0.80 → the larger, 0.80; accept rate 0.71
        # as 0.5.11 means it (schemas/intervals.json has the rate columns now)
        interval("TP0", None, "2026-07-04T05:01:33", 40, 0, 155.34, 0.80, 3.13,
                 reported_accept_rate=0.71, reported_accept_rate_definition=NEW_RATE),
        # cut after "accept len: 3.56,": full 0.76, mamba 0.80 → 0.80; no rate printed
        interval("TP0", "2026-07-04T05:01:33", "2026-07-04T05:01:36", 40, None, None, 0.80, 3.56,
                 reported_accept_rate=None, reported_accept_rate_definition=None),
    ]
    text = notes(out)
    assert "kv_cache_usage on 2 intervals is the largest pool usage printed (full, swa, mamba)" in text
    assert "layouts read: `Decode batch,` (1), `Decode batch,` with accept rate (1)" in text


# =========================================================================== data-parallel ranks


def test_dp_attention_series(tmp_path):
    out = tmp_path / "t"
    summary = import_sglang_log([LOGS / "mtp_dp_attention.log"], out, "sg")
    # one series per DP rank, each with its first line only: no start times; the same second in two
    # series is two keys
    assert intervals(out) == [
        interval("DP0 TP0", None, "2025-05-31T18:31:21", 8, 0, 171.01, 0.13, 2.90),
        interval("DP2 TP2", None, "2025-05-31T18:31:25", 8, 0, 152.08, 0.13, 2.58),
        interval("DP5 TP5", None, "2025-05-31T18:31:21", 8, 0, 173.06, 0.13, 2.94),
        interval("DP6 TP6", None, "2025-05-31T18:31:21", 8, 0, 168.28, 0.12, 2.86),
        interval("DP7 TP7", None, "2025-05-31T18:31:23", 8, 0, 155.80, 0.13, 2.65),
    ]
    # line 6, "[… DP4 TP4] Decod", is cut before the marker: not a decode line
    assert summary.skipped == {sl.OTHER_LINE: 1}
    assert "5 series (ranks or processes): DP0 TP0, DP2 TP2, DP5 TP5, DP6 TP6, DP7 TP7" in notes(out)


def test_several_files(tmp_path):
    out = tmp_path / "t"
    import_sglang_log([LOGS / "eagle3_tp0.log", LOGS / "npu_tp0_ep0.log"], out, "sg")
    assert [(r["series"], r["end_time"]) for r in intervals(out)] == [
        ("TP0", t("2025-10-22T10:27:57")), ("TP0", t("2025-10-22T10:27:57.5")), ("TP0", t("2025-10-22T10:27:58")),
        ("TP0", t("2025-10-22T10:27:58.333333")), ("TP0", t("2025-10-22T10:27:58.666666")),
        ("TP0", t("2025-10-22T10:27:59")),
        ("TP0 EP0", t("2026-07-21T15:00:13")), ("TP0 EP0", t("2026-07-21T15:00:17")),
        ("TP0 EP0", t("2026-07-21T15:00:21"))]
    # 6 + 3 lines with an accept rate, both dropped without a version
    assert "accept rate dropped from 9 lines" in notes(out)


def test_prefix_variants(tmp_path):
    # Built from SGLang's format strings (not a real log): a docker compose prefix, SGLANG_LOG_MS=1
    # milliseconds, SGLANG_LOG_FORWARD_ITERS=1 "Decode batch [N],", DP/TP/EP ranks. Two lines in one
    # second are two intervals once the times have milliseconds.
    log = tmp_path / "ms.log"
    line = ("sglang-decode-1  | [2026-05-01 10:00:00.{ms} DP3 TP3 EP3] Decode batch [{it}], #running-req: 4, "
            "#token: 900, token usage: 0.05, accept len: {al}, accept rate: 0.60, cuda graph: True, "
            "gen throughput (token/s): 310.52, #queue-req: 1")
    log.write_text(line.format(ms="250", it=1234, al="2.80") + "\n" + line.format(ms="750", it=1274, al="2.75")
                   + "\n")
    out = tmp_path / "t"
    summary = import_sglang_log([log], out, "sg")
    got = intervals(out)
    series = "sglang-decode-1 DP3 TP3 EP3"
    assert [(r["series"], r["start_time"], r["end_time"], r["reported_accept_length"]) for r in got] == [
        (series, None, t("2026-05-01T10:00:00.250"), 2.80),
        (series, t("2026-05-01T10:00:00.250"), t("2026-05-01T10:00:00.750"), 2.75)]
    assert not summary.skipped
    assert "layouts read: `Decode batch [N],` with accept rate (2)" in notes(out)


# =========================================================================== nothing to import


def assert_nothing_written(out: Path) -> None:
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*"))


def plain(series, start, end, running, waiting, throughput, kv):
    """An interval of a decode line without accept len: no counts and no accept length (columns left out)."""
    return {"deployment_id": "sg", "series": series, "start_time": start and t(start), "end_time": t(end),
            "num_drafts": None, "num_draft_tokens": None, "num_accepted_tokens": None,
            "accepted_per_position": None, "source": "sglang_log", "running_requests": running,
            "waiting_requests": waiting, "generation_tokens_per_s": throughput, "kv_cache_usage": kv}


def test_a_log_without_speculation_is_a_baseline(tmp_path):
    # no_spec_pd_decode.log: three `Decode batch,` lines of a PD decode server without accept len, each
    # the first decode line of its DP rank (no start); lines 1, 2 and 4 are access log lines
    out = tmp_path / "t"
    summary = import_sglang_log([LOGS / "no_spec_pd_decode.log"], out, "sg")
    assert intervals(out) == [
        plain("DP0 TP0 EP0", None, "2026-05-07T13:40:41", 21, 0, 1774.38, 0.02),
        plain("DP2 TP2 EP2", None, "2026-05-07T13:40:41", 20, 0, 1392.52, 0.02),
        plain("DP3 TP3 EP3", None, "2026-05-07T13:40:41", 21, 0, 1612.16, 0.02)]
    assert rows(out, "deployments") == [{"deployment_id": "sg", "model": "unknown", "method": "none",
                                         "num_speculative_tokens": 0}]
    assert summary.skipped == {sl.OTHER_LINE: 3}
    assert "no decode line prints accept len or accept rate: a deployment that does not speculate" in notes(out)
    assert "layouts read: `Decode batch,` (3)" in notes(out)


def test_baseline_decode_lines_chain_and_order_within_a_second(tmp_path):
    # no_spec_qwq32b.log (sglang#6949, "without eagle"): 21:25:14, :14, :15, :15 and a line cut at "#toke"
    # at :15. Every line is kept: the 2 of :14 at + 0 and 1/2 s, the 3 of :15 at + 0, 1/3, 2/3 s, each
    # from the line before; the cut line keeps only its running count.
    out = tmp_path / "t"
    summary = import_sglang_log([LOGS / "no_spec_qwq32b.log"], out, "sg", Overrides(method="none"))
    assert intervals(out) == [
        plain("TP0", None, "2025-06-07T21:25:14", 1, 0, 97.52, 0.0),
        plain("TP0", "2025-06-07T21:25:14", "2025-06-07T21:25:14.500000", 1, 0, 97.58, 0.0),
        plain("TP0", "2025-06-07T21:25:14.500000", "2025-06-07T21:25:15", 1, 0, 97.63, 0.0),
        plain("TP0", "2025-06-07T21:25:15", "2025-06-07T21:25:15.333333", 1, 0, 97.50, 0.0),
        plain("TP0", "2025-06-07T21:25:15.333333", "2025-06-07T21:25:15.666666", 1, None, None, None)]
    assert summary.skipped == {}


def test_baseline_layouts_without_spec_fields(tmp_path):
    # no_spec_largest_len.log (sglang#4407): `Decode batch.` with `largest-len: 0`, `#queue-req: 0, ` with
    # its trailing comma; the last line is cut at `#qu` (no waiting count). no_spec_hisparse.log
    # (sglang#22331): `Decode batch,` with `cuda graph`, 9 lines, the last cut after `#token: 20800`.
    out = tmp_path / "t"
    import_sglang_log([LOGS / "no_spec_largest_len.log", LOGS / "no_spec_hisparse.log"], out, "sg")
    got = intervals(out)
    assert [(r["start_time"], r["end_time"], r["running_requests"], r["waiting_requests"],
             r["generation_tokens_per_s"], r["kv_cache_usage"]) for r in got[:8]] == [
        (None, t("2025-03-14T02:16:14"), 509, 0, 7897.87, 0.43),
        (t("2025-03-14T02:16:14"), t("2025-03-14T02:16:16"), 454, 0, 8831.39, 0.42),
        (t("2025-03-14T02:16:16"), t("2025-03-14T02:16:18"), 397, 0, 7980.04, 0.41),
        (t("2025-03-14T02:16:18"), t("2025-03-14T02:16:20"), 346, 0, 7305.59, 0.38),
        (t("2025-03-14T02:16:20"), t("2025-03-14T02:16:22"), 301, 0, 6695.80, 0.37),
        (t("2025-03-14T02:16:22"), t("2025-03-14T02:16:24"), 235, 0, 5805.50, 0.32),
        (t("2025-03-14T02:16:24"), t("2025-03-14T02:16:26"), 182, 0, 5287.55, 0.27),
        (t("2025-03-14T02:16:26"), t("2025-03-14T02:16:27"), 151, None, 4726.37, 0.24)]
    hisparse = got[8:]
    ends = ["21", "22", "24", "25", "27", "28", "29", "30", "32"]
    assert [(r["start_time"], r["end_time"]) for r in hisparse] == [
        (t(f"2026-04-08T14:05:{a}") if a else None, t(f"2026-04-08T14:05:{b}"))
        for a, b in zip([None] + ends[:-1], ends)]
    assert [r["generation_tokens_per_s"] for r in hisparse] == [144.95, 140.27, 136.39, 139.89, 144.10, 157.64,
                                                               153.78, 157.11, None]
    assert {r["running_requests"] for r in hisparse} == {5}
    assert hisparse[-1]["kv_cache_usage"] is None and hisparse[-1]["waiting_requests"] is None
    assert "2 decode lines cut short (no #queue-req)" in notes(out)
    assert "layouts read: `Decode batch,` (9), `Decode batch.` (8)" in notes(out)


def test_decode_lines_without_accept_len_in_a_speculative_log_stay_skipped(tmp_path):
    # both files in one import: the speculative one decides, and the plain lines are skipped as before
    out = tmp_path / "t"
    summary = import_sglang_log([LOGS / "pd_decode.log", LOGS / "no_spec_pd_decode.log"], out, "sg")
    assert {r["series"] for r in intervals(out)} == {"TP0"}
    assert summary.skipped[sl.NO_SPEC] == 3
    assert rows(out, "deployments")[0]["method"] == "unknown"


def test_garbled_line_exits_naming_it(tmp_path):
    # line 1 carries "accept rate" but its accept len was lost ("token usaccept rate: 0.32")
    out = tmp_path / "t"
    with pytest.raises(ImportInputError) as err:
        import_sglang_log([LOGS / "garbled.log"], out, "sg")
    assert str(err.value).endswith(f"the first decode line that did not import is {LOGS / 'garbled.log'}:1 "
                                   "(layouts: `specan import sglang-log --list-layouts`)")
    assert_nothing_written(out)


def test_no_decode_line_at_all(tmp_path):
    log = tmp_path / "access.log"
    log.write_text((LOGS / "npu_tp0_ep0.log").read_text().splitlines()[2] + "\n")   # an access-log line
    out = tmp_path / "t"
    with pytest.raises(ImportInputError, match="no line looks like SGLang's `Decode batch` line"):
        import_sglang_log([log], out, "sg")
    assert_nothing_written(out)


def test_bad_version(tmp_path):
    with pytest.raises(ImportInputError, match=r"--sglang-version: 'latest' is not a version like 0\.5\.11"):
        import_sglang_log([LOGS / "eagle3_tp0.log"], tmp_path / "t", "sg", sglang_version="latest")
    assert_nothing_written(tmp_path / "t")


# =========================================================================== the pieces


@pytest.mark.parametrize("text, meaning", [
    ("0.5.3", None), ("0.5.4", OLD_STEPS), ("0.5.5.post3", OLD_STEPS), ("0.5.6", OLD_DRAFT_TOKENS),
    ("0.5.10.post1", OLD_DRAFT_TOKENS), ("0.5.11", NEW_RATE), ("v0.5.12", NEW_RATE), ("0.6", NEW_RATE)])
def test_rate_meaning_by_release(text, meaning):
    found = rate_meaning(parse_version(text))
    assert (found[1] if found else None) == meaning


def test_draft_tokens_per_step():
    pd = [(1.67, 0.13), (1.68, 0.14), (1.73, 0.14), (1.72, 0.14)]
    assert draft_tokens_per_step(pd, "new") == (5, True)
    assert draft_tokens_per_step(pd, "old") == (None, False)
    # nothing accepted says nothing of k; a single low rate allows several k
    assert draft_tokens_per_step([(1.00, 0.00)], "new") == (None, True)
    assert draft_tokens_per_step([(1.05, 0.01)], "new") == (None, True)     # k in [3.0, 11.0]


def test_parse_decode_reads_labels_not_positions():
    # the 0.4.6 layout: accept len before gen throughput, no cuda graph, no comma after #queue-req
    message = ("Decode batch. #running-req: 8, #token: 37217, token usage: 0.13, accept len: 2.90, "
               "gen throughput (token/s): 171.01, #queue-req: 0")
    assert parse_decode(message) == {"running_requests": 8, "waiting_requests": 0, "generation_tokens_per_s": 171.01,
                                     "kv_cache_usage": 0.13, "accept_len": 2.90}
    # HiSparse's "gpu token usage" is not the KV usage; a value with fewer than 2 decimals is a cut one
    assert "kv_cache_usage" not in parse_decode("Decode batch, #gpu token: 5, gpu token usage: 0.50, accept len: 2.1")
    assert "accept_len" not in parse_decode("Decode batch, accept len: 2.1")


# =========================================================================== CLI (needs the wiring)


def test_cli_import(tmp_path):
    out = tmp_path / "t"
    result = run("import", "sglang-log", LOGS / "pd_decode.log", "--deployment", "sg", "--sglang-version", "0.5.12",
                 "--out", out)
    assert result.exit_code == 0, result.output
    assert "intervals            5 rows" in result.stdout
    assert "num_speculative_tokens = 5" in result.stdout
    assert rows(out, "deployments")[0]["num_speculative_tokens"] == 5


def test_cli_nothing_to_import_is_one_line_exit_2(tmp_path):
    result = run("import", "sglang-log", LOGS / "garbled.log", "--deployment", "sg", "--out", tmp_path / "t")
    assert_one_line_exit_2(result, f"{LOGS / 'garbled.log'}:1", "--list-layouts")
    assert_nothing_written(tmp_path / "t")


def test_cli_sglang_version_is_for_sglang_log_only(tmp_path):
    result = run("import", "vllm-log", LOGS / "eagle3_tp0.log", "--deployment", "sg", "--sglang-version", "0.5.12",
                 "--out", tmp_path / "t")
    assert_one_line_exit_2(result, "--sglang-version applies to sglang-log only")


def test_cli_bad_sglang_version(tmp_path):
    result = run("import", "sglang-log", LOGS / "eagle3_tp0.log", "--deployment", "sg", "--sglang-version",
                 "latest", "--out", tmp_path / "t")
    assert_one_line_exit_2(result, "--sglang-version: 'latest' is not a version like 0.5.11")


def test_run_import_dispatches(tmp_path):
    from analyzer.ingest.importers import SOURCES, run_import

    assert "sglang-log" in SOURCES
    summary = run_import("sglang-log", [LOGS / "npu_tp0_ep0.log"], tmp_path / "t", "sg", sglang_version="0.5.11")
    assert summary.rows["intervals"] == 3
    assert "sglang-log" in run("import", "--help").stdout
