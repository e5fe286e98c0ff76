"""What llama.cpp printed, read with plain regular expressions, independently of specan's importers.

Shared by the end-to-end test (tests/test_e2e_llamacpp.py, on a run made there) and the importers' tests on
the kept output of such a run (tests/fixtures/llamacpp_e2e/).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
from click.testing import CliRunner

from analyzer.cli import main

REQUEST_LINE = re.compile(r"task (\d+) \| draft acceptance = [0-9.]+ \(\s*(\d+) accepted /\s*(\d+) generated\)")
# LLAMA_TRACE's line, printed for every round; the debug line skips the round that ends a request
TRACE_ROUND = re.compile(r"task (\d+) \| accepted +(\d+)/ *(\d+) draft tokens$", re.MULTILINE)
DEBUG_ROUND = re.compile(r"task (\d+) \| accepted (\d+)/(\d+) draft tokens, new n_tokens = \d+")


def log_requests(log: Path) -> dict[str, tuple[int, int]]:
    """Per request (`slot 0 task T`, the only slot): (accepted, drafted) of its draft acceptance line."""
    found = {f"slot 0 task {t}": (int(a), int(g)) for t, a, g in REQUEST_LINE.findall(log.read_text(errors="replace"))}
    assert found, f"no 'draft acceptance' line in {log}"
    return found


def log_request_totals(log: Path) -> tuple[int, int]:
    pairs = log_requests(log).values()
    return sum(a for a, _ in pairs), sum(g for _, g in pairs)


def log_rounds(log: Path, pattern: re.Pattern = TRACE_ROUND) -> dict[str, list[tuple[int, int]]]:
    """Per request: its per-round lines' (accepted, drafted), in order."""
    rounds: dict[str, list[tuple[int, int]]] = {}
    for t, a, d in pattern.findall(log.read_text(errors="replace")):
        rounds.setdefault(f"slot 0 task {t}", []).append((int(a), int(d)))
    assert rounds, f"no per-round 'accepted A/D draft tokens' line in {log}"
    return rounds


def sums(rounds: dict[str, list[tuple[int, int]]]) -> dict[str, tuple[int, int]]:
    return {r: (sum(a for a, _ in steps), sum(d for _, d in steps)) for r, steps in rounds.items()}


def imported_rounds(root: Path) -> dict[str, list[tuple[int, int]]]:
    rows = sorted(pq.read_table(root / "rounds").to_pylist(), key=lambda r: (r["request_id"], r["round_idx"]))
    out: dict[str, list[tuple[int, int]]] = {}
    for r in rows:
        out.setdefault(r["request_id"], []).append((r["num_accepted_tokens"], r["num_draft_tokens"]))
    return out


def response_totals(run_dir: Path) -> tuple[int, int]:
    timings = [json.loads(line)["timings"] for line in (run_dir / "responses.jsonl").read_text().splitlines()
               if line.strip()]
    for line in (run_dir / "stream.sse").read_text().splitlines():
        if line.startswith("data: ") and '"timings"' in line:
            timings.append(json.loads(line[len("data: "):])["timings"])
    return sum(t.get("draft_n_accepted", 0) for t in timings), sum(t.get("draft_n", 0) for t in timings)


def counter(scrape: Path, name: str) -> float:
    match = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+]+)$", scrape.read_text(), re.MULTILINE)
    assert match, f"{name} not in {scrape}"
    return float(match.group(1))


def scrape_totals(run_dir: Path) -> tuple[int, int]:
    delta = {k: counter(run_dir / "metrics-1.prom", f"llamacpp:spec_decode_num_{k}_total")
             - counter(run_dir / "metrics-0.prom", f"llamacpp:spec_decode_num_{k}_total")
             for k in ("accepted_tokens", "draft_tokens")}
    return int(delta["accepted_tokens"]), int(delta["draft_tokens"])


def specan(*args: str):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def imported_totals(root: Path, table: str, accepted: str, drafted: str) -> tuple[int, int]:
    rows = pq.read_table(root / table).to_pylist()
    return sum(r[accepted] or 0 for r in rows), sum(r[drafted] or 0 for r in rows)


def dated_scrapes(run_dir: Path, into: Path) -> list[Path]:
    """The two scrapes, each named with the time run.sh took it (a text scrape has no time of its own; a
    copy, such as a fixture's checkout, loses the modification time curl gave it)."""
    into.mkdir(parents=True, exist_ok=True)
    out = []
    for n in (0, 1):
        when = (run_dir / f"metrics-{n}.time").read_text().strip()
        out.append(into / f"metrics-{when}Z.prom")
        out[-1].write_bytes((run_dir / f"metrics-{n}.prom").read_bytes())
    return out


def same_per_request(got: dict, printed: dict, log: Path, what: str, against: str) -> None:
    """got == printed, request by request; else fail with the first request that differs and the lines
    llama.cpp printed for it, so that a change in its printing (or in our parsing) names the line."""
    for request in sorted(set(got) | set(printed)):
        if got.get(request) != printed.get(request):
            task = request.rsplit(" ", 1)[-1]
            lines = [line for line in log.read_text(errors="replace").splitlines() if f"| task {task} |" in line]
            raise AssertionError(f"{request}: {what} {got.get(request)} but its {against} {printed.get(request)}; "
                                 f"what llama.cpp printed for it:\n" + "\n".join(lines[:40]))


def channel_totals_agree(run_dir: Path, deployment: str, tmp_path: Path) -> tuple[int, int]:
    """Every channel of one run, as printed and as imported, has the log's accepted and drafted totals."""
    log = run_dir / "server.log"
    printed = log_request_totals(log)
    same_per_request(sums(log_rounds(log)), log_requests(log), log, "per-round lines", "draft acceptance line")
    assert response_totals(run_dir) == printed
    assert scrape_totals(run_dir) == printed

    log_root = tmp_path / "log"
    specan("import", "llamacpp-log", run_dir / "server.log", "--deployment", deployment, "--out", log_root)
    imported = {r["series"]: (r["num_accepted_tokens"], r["num_draft_tokens"])
                for r in pq.read_table(log_root / "intervals").to_pylist()}
    same_per_request(imported, log_requests(log), log, "imported intervals", "draft acceptance line")
    same_per_request(imported_rounds(log_root), log_rounds(log), log, "imported rounds", "per-round lines")

    resp_root = tmp_path / "responses"
    specan("import", "llamacpp-log", run_dir / "responses.jsonl", run_dir / "stream.sse", "--deployment",
           deployment, "--out", resp_root)
    assert imported_totals(resp_root, "intervals", "num_accepted_tokens", "num_draft_tokens") == printed

    prom_root = tmp_path / "prometheus"
    specan("import", "prometheus", *dated_scrapes(run_dir, tmp_path / "scrapes"), "--deployment", deployment,
           "--out", prom_root)
    assert imported_totals(prom_root, "intervals", "num_accepted_tokens", "num_draft_tokens") == printed
    return printed


def all_channels_report(run_dir: Path, deployment: str, tmp_path: Path, plain_dir: Path) -> tuple[dict, str]:
    """Every channel of one run imported into one deployment (the log with its responses, so that the
    rounds link to them; the log's times from the server's start), the plain server's responses as its
    baseline (method none), and the report: (JSON, markdown)."""
    root = tmp_path / "all"
    specan("import", "llamacpp-log", plain_dir / "responses.jsonl", plain_dir / "stream.sse", "--method", "none",
           "--deployment", "plain", "--out", root)
    specan("import", "llamacpp-log", run_dir / "server.log", run_dir / "responses.jsonl", run_dir / "stream.sse",
           "--start", (run_dir / "server.start").read_text().strip(), "--deployment", deployment, "--out", root)
    specan("import", "prometheus", *dated_scrapes(run_dir, tmp_path / "scrapes"), "--deployment", deployment,
           "--out", root)
    doc = json.loads(specan("report", root, "--format", "json").stdout)
    return doc, specan("report", root).stdout


# The plain server's 12 requests ran together, at concurrency 7.8-12.0 by their timings: at most 4 of
# them in any load cell, below the [evidence] floor of 10 a point of its curve needs. Lifting the floor
# to one request shows the comparison itself.
LIFTED_FLOORS = "[evidence]\nmin_baseline_requests = 1\n"


def channels_agree(run_dir: Path, deployment: str, tmp_path: Path, plain_dir: Path,
                   decides: bool) -> tuple[dict, str]:
    """The report on all channels of a run beside the plain server: no row rejected, four channels that
    agree, each with exactly the totals llama.cpp printed, and a What to do line resting on 12 requests on
    each side, not enough at any one concurrency for the [evidence] floor of 10 (unknown), and with that
    floor lifted a line that rests on them. ``decides``: the line decides (on kept runs; a live
    run's timings vary with the machine's load, so its speedup interval may straddle the threshold)."""
    doc, md = all_channels_report(run_dir, deployment, tmp_path, plain_dir)
    printed = log_request_totals(run_dir / "server.log")
    assert doc["input"]["rejected_rows"] == 0, doc["input"]
    rows = {r["channel"]: r for r in doc["reconciliation"]}
    assert set(rows) == {"rounds", "llamacpp_log", "llamacpp_response", "prometheus"}, rows
    for channel, r in rows.items():
        assert (r["accepted"], r["drafted"]) == printed, (channel, r)
        assert r["has_common_span"] and not r["disagrees"], (channel, r)
    # the log's per-position counts (rates × steps) and the rounds' agree where the draft length was reached
    assert rows["rounds"]["accepted_per_position"] == rows["llamacpp_log"]["accepted_per_position"]
    assert "## Channels agree?" in md, md[:3000]
    verdict = next(v for v in doc["verdict"] if v["deployment_id"] == deployment)
    assert (verdict["basis"], verdict["num_requests"], verdict["baseline_num_requests"]) == ("tpot", 12, 12), verdict
    # by default, not enough data: no load cell of the plain server holds 10 of its requests
    assert (verdict["action"], verdict["speedup_interval"]) == ("unknown", None), verdict
    assert "[evidence] min_baseline_requests" in verdict["text"], verdict
    assert re.search(rf"(?m)^## What to do\n\n- .*\b{deployment}\b", md), md[:3000]
    # with the floor lifted, each request of the run is matched at its own concurrency
    config = tmp_path / "lifted.toml"
    config.write_text(LIFTED_FLOORS)
    doc = json.loads(specan("report", tmp_path / "all", "--format", "json", "--config", config).stdout)
    verdict = next(v for v in doc["verdict"] if v["deployment_id"] == deployment)
    low, high, b_low, b_high = verdict_loads(doc, deployment)
    if high < b_low or low > b_high:
        # the run and the plain server never ran at comparable concurrency (the drafts finish requests
        # sooner, so fewer run at once): the verdict says so, naming both ranges, and does not decide
        assert (verdict["action"], verdict["speedup_interval"]) == ("inconclusive", None), verdict
        assert "not matched on load" in verdict["text"], verdict
    else:
        matched = next(x for x in doc["deployments"] if x["deployment_id"] == deployment)["matched"]["tpot"]
        if not decides and matched["matched_units"] == 0:
            # the ranges meet, yet on a live run every request may fall where the plain server has no point
            # near enough (between its concurrencies too far apart, or just beyond a cell's own): the verdict
            # does not decide, and counts all of the run's timed requests per reason
            assert (verdict["action"], verdict["speedup"]) == ("inconclusive", None), verdict
            assert sum(matched["unmatched"].values()) == matched["units"], matched
            assert f"which meet, but none of its {matched['units']} requests was matched: " in verdict["text"], verdict
            return doc, md
        # matched where the loads meet: a speedup; on a live run its matched share may be too small to
        # resample (no interval, inconclusive), on the kept runs it decides
        assert verdict["speedup"] is not None and verdict["action"] != "unknown", verdict
        if decides:
            assert verdict["speedup_interval"] is not None, verdict
            assert verdict["action"] not in ("unknown", "inconclusive"), verdict
    return doc, md


def verdict_loads(doc: dict, deployment: str) -> tuple[float, float, float, float]:
    """The least and most concurrency of a deployment's timed requests, then its baseline's."""
    d = next(x for x in doc["deployments"] if x["deployment_id"] == deployment)
    (low, high), (b_low, b_high) = d["matched"]["tpot"]["loads"], d["matched"]["tpot"]["baseline_loads"]
    return low, high, b_low, b_high
