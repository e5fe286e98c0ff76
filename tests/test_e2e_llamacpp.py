"""End to end: a real llama.cpp speculating on the CPU (e2e/llamacpp/run.sh), read by specan's importers.

run.sh builds llama-server once (cached under ~/.cache/specan-e2e/<version>/; the first build takes
minutes), writes two tiny random-weight models and runs the server twice: `same` (draft = target: greedy
decoding accepts almost every drafted token) and `other` (a draft of other random weights: almost none),
at two speculation lengths. What llama.cpp printed is parsed here with plain regular expressions,
independently of the importers, and every channel's import must give exactly those totals.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from analyzer.cli import main

RUN_SH = Path(__file__).parents[1] / "e2e" / "llamacpp" / "run.sh"
DRAFT_N_MAX = (4, 2)
REQUEST_LINE = re.compile(r"draft acceptance = [0-9.]+ \(\s*(\d+) accepted /\s*(\d+) generated\)")
ROUND_LINE = re.compile(r"accepted (\d+)/(\d+) draft tokens, new n_tokens = \d+")

pytestmark = pytest.mark.xdist_group("llamacpp_e2e")


@pytest.fixture(scope="module", params=DRAFT_N_MAX, ids=lambda n: f"n_max={n}")
def e2e_out(request, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp(f"llamacpp_e2e_{request.param}")
    done = subprocess.run(["bash", str(RUN_SH), str(out), str(request.param)], capture_output=True, text=True,
                          timeout=3600)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def log_request_totals(log: Path) -> tuple[int, int]:
    pairs = [(int(a), int(g)) for a, g in REQUEST_LINE.findall(log.read_text())]
    assert pairs, f"no 'draft acceptance' line in {log}"
    return sum(a for a, _ in pairs), sum(g for _, g in pairs)


def log_round_totals(log: Path) -> tuple[int, int]:
    pairs = [(int(a), int(d)) for a, d in ROUND_LINE.findall(log.read_text())]
    assert pairs, f"no per-round 'accepted A/D draft tokens' line in {log}"
    return sum(a for a, _ in pairs), sum(d for _, d in pairs)


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


@pytest.mark.parametrize("run", ["same", "other"])
def test_channels_import_with_the_printed_totals(e2e_out, run, tmp_path):
    run_dir = e2e_out / run
    printed = log_request_totals(run_dir / "server.log")
    assert log_round_totals(run_dir / "server.log") == printed
    assert response_totals(run_dir) == printed
    assert scrape_totals(run_dir) == printed

    log_root = tmp_path / "log"
    specan("import", "llamacpp-log", run_dir / "server.log", "--deployment", run, "--out", log_root)
    assert imported_totals(log_root, "intervals", "num_accepted_tokens", "num_draft_tokens") == printed
    assert imported_totals(log_root, "rounds", "num_accepted_tokens", "num_draft_tokens") == printed

    resp_root = tmp_path / "responses"
    specan("import", "llamacpp-log", run_dir / "responses.jsonl", run_dir / "stream.sse", "--deployment", run,
           "--out", resp_root)
    assert imported_totals(resp_root, "intervals", "num_accepted_tokens", "num_draft_tokens") == printed

    prom_root = tmp_path / "prometheus"
    for n in (0, 1):
        specan("import", "prometheus", run_dir / f"metrics-{n}.prom", "--deployment", run,
               "--time", (run_dir / f"metrics-{n}.time").read_text().strip(), "--out", prom_root)
    assert imported_totals(prom_root, "intervals", "num_accepted_tokens", "num_draft_tokens") == printed


def test_same_draft_accepts_far_more_than_other(e2e_out):
    same_a, same_g = log_request_totals(e2e_out / "same" / "server.log")
    other_a, other_g = log_request_totals(e2e_out / "other" / "server.log")
    assert same_a / same_g >= 0.9
    assert other_a / other_g <= 0.5 * same_a / same_g


def test_report_on_all_channels_of_one_run_has_a_verdict(e2e_out, tmp_path):
    run_dir, root = e2e_out / "same", tmp_path / "traces"
    specan("import", "llamacpp-log", run_dir / "server.log", run_dir / "responses.jsonl", run_dir / "stream.sse",
           "--deployment", "same", "--out", root)
    for n in (0, 1):
        specan("import", "prometheus", run_dir / f"metrics-{n}.prom", "--deployment", "same",
               "--time", (run_dir / f"metrics-{n}.time").read_text().strip(), "--out", root)
    report = specan("report", root)
    assert re.search(r"(?im)^.*\bwhat to do\b", report.output), report.output[-2000:]
