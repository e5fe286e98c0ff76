"""The recorder inside vLLM (analyzer/record/), run against the real package.

e2e/vllm/build.sh builds once a Python environment with the pinned vLLM (e2e/vllm/versions;
cached under ~/.cache/specan-e2e/, about 10 GB and 5 to 10 minutes the first time). The checkout
under test is installed into a folder of this run (``pip install --target``) and put on that
environment's path, so vLLM finds the recorder through its own entry points. e2e/vllm/drive.py
then builds a real ``VllmConfig`` for a speculative configuration (vLLM's CPU platform: its engine
needs a GPU, its config and stats classes do not), finds the recorder with vLLM's
``load_stat_logger_plugin_factories``, makes the loggers with vLLM's ``StatLoggerManager`` and
feeds them vLLM's own ``SchedulerStats``, ``SpecDecodingStats``, ``SchedulerIterationDetails``,
``IterationStats`` and ``FinishedRequestStats`` for a sequence of iterations whose totals it
prints. Every count the traces hold, and the speedup the report finds, is checked against that
sequence and its closed forms (the same as tests/test_iteration_steps.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from analyzer.cli import main
from conftest import ROOT, USER_CACHE_HOME

pytestmark = pytest.mark.xdist_group("vllm_e2e")

BUILD_SH = ROOT / "e2e" / "vllm" / "build.sh"
DRIVE = ROOT / "e2e" / "vllm" / "drive.py"

# drive.py's closed forms: a plain decode step at batch b takes A + S·b ms, a speculative one
# A + S·b·(γ+1) + D·γ, and commits γ tokens per request (γ drafted, γ − 1 accepted, + 1).
A, S, D, GAMMA, N = 8.0, 0.5, 1.0, 3, 40
SPEEDUP = {1: GAMMA * (A + S) / (A + S * 1 * (GAMMA + 1) + D * GAMMA),        # 25.5 / 13
           4: GAMMA * (A + S * 4) / (A + S * 4 * (GAMMA + 1) + D * GAMMA)}    # 30 / 19
assert SPEEDUP[1] == pytest.approx(25.5 / 13) and SPEEDUP[4] == pytest.approx(30 / 19)
OVERALL = 145.5 / 89       # N·(3·8.5 + 12·10) / N·(1·13 + 4·19): tokens × t0 over time
SPEC_ID, PLAIN_ID = "tinymodel-ngram-k3", "tinymodel-none"

# a model folder with a config only: vLLM's config reads it, nothing loads weights
MODEL_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
                "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
                "num_hidden_layers": 2, "vocab_size": 256, "max_position_embeddings": 512,
                "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}


@pytest.fixture(scope="module")
def vllm(tmp_path_factory) -> dict:
    """The vLLM environment's python, the model folder, and the environment a drive runs in."""
    env = {**os.environ, "XDG_CACHE_HOME": USER_CACHE_HOME, "PYTHON": sys.executable}
    built = subprocess.run(["bash", str(BUILD_SH)], capture_output=True, text=True, timeout=3600, env=env)
    assert built.returncode == 0, built.stderr[-4000:]
    venv = Path(built.stdout.strip().splitlines()[-1])
    python = venv / "bin" / "python"
    # the checkout under test, with its entry points, in a folder of this run
    site = tmp_path_factory.mktemp("specan-site")
    installed = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                                "--target", str(site), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr[-4000:]
    model = tmp_path_factory.mktemp("model") / "tinymodel"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(MODEL_CONFIG))
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECAN_RECORD", "VLLM_", "PYTHON"))}
    run_env.update(PYTHONPATH=str(site), VLLM_TARGET_DEVICE="cpu", HF_HUB_OFFLINE="1")
    return {"python": str(python), "model": str(model), "env": run_env}


def drive_env(vllm: dict, folder: Path | None, **settings) -> dict:
    """drive.py's environment, recording to ``folder`` (None: no setting) with ``settings``."""
    env = dict(vllm["env"])
    if folder is not None:
        env["SPECAN_RECORD_DIR"] = str(folder)
    env.update({f"SPECAN_RECORD_{k.upper()}": str(v) for k, v in settings.items()})
    return env


def drive(vllm: dict, folder: Path | None, *args, check: bool = True, **settings) -> subprocess.CompletedProcess:
    """Run drive.py in the vLLM environment, recording to ``folder`` (None: no setting)."""
    done = subprocess.run([vllm["python"], str(DRIVE), vllm["model"], *map(str, args)], capture_output=True,
                          text=True, timeout=900, env=drive_env(vllm, folder, **settings))
    if check:
        assert done.returncode == 0, done.stderr[-4000:]
    return done


def totals(done: subprocess.CompletedProcess) -> dict:
    """What drive.py fed, from its JSON line (vLLM's log shares standard output)."""
    return json.loads(next(line for line in reversed(done.stdout.splitlines()) if line.startswith('{"steps"')))


def recorder_lines(done: subprocess.CompletedProcess) -> list[str]:
    """The recorder's lines in vLLM's log (vLLM logs to standard output)."""
    return [line for line in (done.stdout + done.stderr).splitlines() if "specan recorder" in line]


def report(folder: Path) -> dict:
    result = CliRunner().invoke(main, ["report", str(folder), "--no-cache", "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def scan(folder: Path, sql: str) -> tuple:
    """One row of ``sql`` over the recorded Parquet; {steps}, {requests}, {intervals} name the tables."""
    tables = {t: f"read_parquet('{folder}/{t}/**/*.parquet', hive_partitioning = true)"
              for t in ("steps", "requests", "intervals", "deployments", "import_notes")}
    return duckdb.sql(sql.format(**tables)).fetchall()[0]


@pytest.fixture(scope="module")
def recorded(vllm, tmp_path_factory) -> dict:
    """A speculative deployment on two data-parallel engines, restarted once (a second process,
    30 s later), and its plain-decoding baseline, recorded into one folder."""
    folder = tmp_path_factory.mktemp("recorded")
    first = drive(vllm, folder, "--method", "ngram", "--gamma", GAMMA, "--engines", 2, "--start", 1.8e9)
    restart = drive(vllm, folder, "--method", "ngram", "--gamma", GAMMA, "--engines", 2, "--start", 1.8e9 + 30)
    plain = drive(vllm, folder, "--method", "none", "--start", 1.8e9 + 60)
    return {"folder": folder, "spec": [totals(first), totals(restart)], "plain": totals(plain),
            "logs": [first, restart, plain], "doc": report(folder)}


def test_the_plugin_is_found_by_vllm_and_says_where_it_writes(recorded):
    for done, dep in zip(recorded["logs"], (SPEC_ID, SPEC_ID, PLAIN_ID)):
        lines = recorder_lines(done)
        engines = 2 if dep == SPEC_ID else 1
        assert [f"engine {e} writes traces of {dep} to {recorded['folder']}" in line
                for line, e in zip(lines, range(engines))] == [True] * engines, lines
        assert len(lines) == engines, lines
    pinned = re.search(r"^VLLM_VERSION=(\S+)", (ROOT / "e2e/vllm/versions").read_text(), re.M).group(1)
    assert {t["vllm"] for t in recorded["spec"] + [recorded["plain"]]} == {pinned}


def test_every_count_equals_the_sequence_fed(recorded):
    folder, fed = recorded["folder"], recorded["spec"]
    for dep, runs in ((SPEC_ID, fed), (PLAIN_ID, [recorded["plain"]])):
        steps = scan(folder, f"""select count(*), count(*) filter (where num_prefill_tokens = 0),
                                    sum(num_draft_tokens), sum(num_accepted_tokens), sum(num_committed_tokens),
                                    sum(duration_ms), count(distinct step_id), count(distinct counts_from)
                                 from {{steps}} where deployment_id = '{dep}'""")
        assert steps[:5] == (sum(t["steps"] for t in runs), sum(t["decode_steps"] for t in runs),
                             sum(t["drafted"] for t in runs), sum(t["accepted"] for t in runs),
                             sum(t["committed"] for t in runs))
        # decode steps' durations as fed, and 20 ms per prefill-only iteration
        fed_ms = sum(b["ms"] for t in runs for b in t["by_batch"].values()) + 20.0 * sum(t["prefill_steps"] for t in runs)
        assert steps[5] == pytest.approx(fed_ms, rel=1e-12)
        assert steps[6] == steps[0], "step ids repeat across engines or restarts"
        requests = scan(folder, f"""select count(*), sum(prompt_tokens), sum(output_tokens),
                                       count(distinct request_id), min(finish_reason), max(finish_reason)
                                    from {{requests}} where deployment_id = '{dep}'""")
        assert requests == (sum(t["requests"] for t in runs), sum(t["prompt_tokens"] for t in runs),
                            sum(t["output_tokens"] for t in runs), sum(t["requests"] for t in runs), "stop", "stop")
    intervals = scan(folder, f"""select sum(num_drafts), sum(num_draft_tokens), sum(num_accepted_tokens),
                                    list(accepted_per_position), count(distinct series), min(source)
                                 from {{intervals}} where deployment_id = '{SPEC_ID}'""")
    assert intervals[:3] == (sum(t["drafts"] for t in fed), sum(t["drafted"] for t in fed),
                             sum(t["accepted"] for t in fed))
    per_position = [sum(p) for p in zip(*intervals[3])]
    assert per_position == [sum(p) for p in zip(*(t["accepted_per_position"] for t in fed))] == [2 * 200, 2 * 200, 0]
    assert intervals[4:] == (2, "vllm_recorder")        # one series per engine index


def test_the_deployment_rows_describe_the_config(recorded):
    rows = duckdb.sql(f"""select distinct deployment_id, model, method, num_speculative_tokens, target_quant,
                                 engine, engine_version, tensor_parallel_size, spec_config
                          from read_parquet('{recorded['folder']}/deployments/**/*.parquet')
                          order by deployment_id""").fetchall()
    version = recorded["spec"][0]["vllm"]
    assert [r[:8] for r in rows] == [
        (SPEC_ID, rows[0][1], "ngram", GAMMA, "bf16", "vllm", version, 1),
        (PLAIN_ID, rows[0][1], "none", 0, "bf16", "vllm", version, 1)]
    assert rows[0][1].endswith("tinymodel")
    assert json.loads(rows[0][8])["num_speculative_tokens"] == GAMMA and rows[1][8] is None


def test_the_report_reads_every_row_and_decides_on_the_steps(recorded):
    doc = recorded["doc"]
    fed = recorded["spec"] + [recorded["plain"]]
    assert doc["input"]["rejected_rows"] == 0
    assert (doc["input"]["steps"], doc["input"]["requests"]) == (sum(t["steps"] for t in fed),
                                                                 sum(t["requests"] for t in fed))
    spec = next(d for d in doc["deployments"] if d["deployment_id"] == SPEC_ID)
    assert spec["baseline_id"] == PLAIN_ID
    assert spec["iteration_steps"] == {"decode_steps": 2 * 2 * N, "counts_from": ["iteration"]}
    matched = spec["matched"]["steps"]
    assert (matched["units"], matched["matched_units"], matched["coverage"]) == (4 * N, 4 * N, 1.0)
    assert matched["speedup"] == pytest.approx(OVERALL, rel=1e-9)
    by_batch = {r["batch_bucket"]: r for r in matched["by_batch"]}
    assert by_batch["1"]["speedup"] == pytest.approx(SPEEDUP[1], rel=1e-9)
    assert by_batch["3-4"]["speedup"] == pytest.approx(SPEEDUP[4], rel=1e-9)
    assert (by_batch["1"]["tokens"], by_batch["3-4"]["tokens"]) == (2 * 3 * N, 2 * 12 * N)
    low, high = matched["interval"]
    assert 1.0 < low < OVERALL < high
    verdict = next(v for v in doc["verdict"] if v["deployment_id"] == SPEC_ID)
    assert (verdict["action"], verdict["basis"]) == ("ship", "steps")
    assert verdict["speedup"] == pytest.approx(OVERALL, rel=1e-9)


def test_the_markdown_names_what_the_recorder_cannot_fill(recorded):
    md = CliRunner().invoke(main, ["report", str(recorded["folder"]), "--no-cache"]).stdout
    assert "These traces have steps with their own token counts and no rounds" in md
    for missing in ("Per-request acceptance", "stop truncation", "drafts invalidated by structured output",
                    "the round ledger (draft and verify times)"):
        assert missing in md
    assert "## 2. Load curve by batch bucket" in md and "## 3. Latency (ms)" in md
    assert "mean accept length – (no rounds; per hour from the engine's counters: Aggregate counters)" in md
    # the counters' accept length: 1 + 2·400 accepted / 2·200 drafts
    assert f"| {SPEC_ID} | 2027-01-15 08:00:00 |" in md and "| 3.000 |" in md
    # busy throughput from the steps' own counts: 2·(3·40 + 12·40) tokens over the steps' time
    spec_ms = sum(b["ms"] for t in recorded["spec"] for b in t["by_batch"].values()) + 20.0 * 20
    row = next(line for line in md.splitlines() if line.startswith(f"| {SPEC_ID} | 20 | 0 |"))
    assert row.split(" | ")[7] == f"{2 * 600 / (spec_ms / 1000):,.0f}"


def test_without_the_setting_nothing_is_recorded_and_it_says_so_once(vllm, tmp_path):
    done = drive(vllm, None, "--method", "ngram", "--engines", 2)
    assert totals(done)["steps"] == 2 * N + 10 and totals(done)["deployment_ids"] == []
    lines = recorder_lines(done)
    assert len(lines) == 1 and "specan recorder installed but not recording: set SPECAN_RECORD_DIR" in lines[0]


def test_an_unwritable_folder_is_said_once_and_the_engine_goes_on(vllm, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    done = drive(vllm, blocker / "traces", "--method", "ngram")
    assert totals(done)["steps"] == 2 * N + 10        # every iteration went through
    lines = recorder_lines(done)
    assert len(lines) == 1 and "specan recorder not started: cannot write to" in lines[0], lines
    assert "the engine runs without it" in lines[0]


def test_a_full_buffer_drops_rows_counts_them_and_bounds_memory(vllm, tmp_path):
    # the writer drains only at exit (flush every hour): 25 rows per table fit, the rest are dropped
    done = drive(vllm, tmp_path, "--method", "ngram", max_rows=25, flush_seconds=3600)
    fed = totals(done)
    steps = scan(tmp_path, "select count(*) from {steps}")[0]
    assert steps == 25
    notes = [n for (n,) in duckdb.sql(f"select note from read_parquet('{tmp_path}/import_notes/**/*.parquet')")
             .fetchall()]
    dropped = fed["steps"] - 25
    assert any(f"the recorder dropped {dropped} steps rows" in n for n in notes), notes
    said = [line for line in recorder_lines(done) if "was full" in line]
    assert len(said) == 1 and f"{dropped:,} rows were dropped" in said[0]
    doc = report(tmp_path)
    assert doc["input"]["steps"] == 25
    assert any(f"the recorder dropped {dropped} steps rows" in n for n in doc["notes"])


def test_a_killed_engine_leaves_its_closed_files_readable(vllm, tmp_path):
    # files renamed into place every 0.3 s; SIGKILL before the 60th decode iteration
    done = drive(vllm, tmp_path, "--method", "ngram", "--pace", 0.02, "--kill-after", 60, check=False,
                 rotate_seconds=0.3, flush_seconds=0.1)
    assert done.returncode == -9, done.stderr[-2000:]
    visible = sorted(p for p in tmp_path.rglob("*.parquet") if ".recording" not in p.parts)
    assert visible, "no file was closed before the kill"
    for path in visible:
        pq.read_table(path)     # every file a reader sees is whole
    staged = list((tmp_path / ".recording").rglob("*.partial"))
    assert staged, "the open files stay hidden in the staging folder"
    doc = report(tmp_path)
    # 60 decode iterations and the 8 prefill-only ones before them were fed, a prefix of them written
    assert 0 < doc["input"]["steps"] <= 60 + 8 and doc["input"]["rejected_rows"] == 0
    # the next engine start removes the dead run's staging folder
    drive(vllm, tmp_path, "--method", "ngram", "--steps", 4)
    assert not (tmp_path / ".recording").exists()


def test_several_api_servers_record_no_committed_tokens_and_say_why(vllm, tmp_path):
    """Under --api-server-count 2 a frontend sees its own requests' tokens only: the steps keep
    their durations and drafts, not a committed count that would be a part of the iteration's."""
    fed = totals(drive(vllm, tmp_path, "--method", "ngram", "--api-servers", 2))
    steps = scan(tmp_path, "select count(*), count(num_committed_tokens), count(counts_from), sum(num_draft_tokens), "
                           "min(series) from {steps}, (select min(series) as series from {intervals})")
    assert steps == (fed["steps"], 0, 0, fed["drafted"], "engine 000 api 0")
    doc = report(tmp_path)
    assert any("vLLM ran 2 API servers" in n and "--api-server-count 1" in n for n in doc["notes"]), doc["notes"]
    assert doc["deployments"][0]["iteration_steps"] is None or not doc["deployments"][0]["iteration_steps"].get(
        "decode_steps")


def test_the_files_are_read_while_the_engine_still_runs(vllm, tmp_path):
    """A report in the middle of a run reads the files closed so far, whole, and nothing else;
    the run's end brings the rest."""
    process = subprocess.Popen([vllm["python"], str(DRIVE), vllm["model"], "--method", "ngram", "--pace", "0.05",
                                "--progress"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=drive_env(vllm, tmp_path, rotate_seconds=0.3, flush_seconds=0.1))
    try:
        for line in process.stderr:         # drive.py's progress: one line per decode iteration
            if line.strip() == '{"fed": 40}':
                break
        middle = report(tmp_path)
        assert process.poll() is None, "the run ended before the report read its files"
        out, _ = process.communicate(timeout=600)
    finally:
        process.kill()
    assert process.returncode == 0
    fed = json.loads(next(line for line in reversed(out.splitlines()) if line.startswith('{"steps"')))
    # 40 decode and 5 prefill-only iterations were fed; what was rotated into place by then is read
    assert 0 < middle["input"]["steps"] <= 45 and middle["input"]["rejected_rows"] == 0
    assert report(tmp_path)["input"]["steps"] == fed["steps"] == 2 * N + 10
