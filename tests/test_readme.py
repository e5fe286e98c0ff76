"""The README and docs/ stay true: generated parts current, commands the ones CI runs,
quoted report output equal to the golden report, claims about it checked, links alive.

The golden files are read when the tests run, never copied here: when
tests/golden/sample_report.md or .json is regenerated, a README excerpt or claim
that no longer matches fails.
"""

import json
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from analyzer.analysis.buckets import labels
from analyzer.ingest.schema import format_table_markdown

ROOT = Path(__file__).resolve().parents[1]
README_PATH = ROOT / "README.md"
DOCS = ROOT / "docs"
GOLDEN = ROOT / "tests" / "golden"
README = README_PATH.read_text(encoding="utf-8")
# Every page a reader can land on: the README first, then docs/*.md.
PAGES = [README_PATH, *sorted(DOCS.glob("*.md"))]

FENCE = re.compile(r"^```[^\n`]*\n(.*?)^```[ \t]*$", re.M | re.S)
EXCERPT = re.compile(r"<!-- excerpt:([\w-]+):start -->\n(.*?)<!-- excerpt:\1:end -->", re.S)
FIRST_LOSS = re.compile(r"<!-- claim:first-loss:([\w.-]+):start -->(.*?)<!-- claim:first-loss:\1:end -->", re.S)
LINK = re.compile(r"(?<!\\)\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)\)")    # not \[escaped\](...)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def between(text_: str, marker: str, where: str = "README") -> str:
    match = re.search(rf"<!-- {marker}:start -->\n(.*?)<!-- {marker}:end -->", text_, re.S)
    assert match, f"{where} lacks the {marker} markers"
    return match.group(1)


def golden_lines() -> list[str]:
    return text(GOLDEN / "sample_report.md").splitlines()


def excerpt_lines(body: str) -> list[str]:
    """The quoted lines of an excerpt: blank edges and a surrounding ``` fence removed."""
    lines = body.splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) >= 2 and lines[0].startswith("```") and lines[-1].strip() == "```":
        lines = lines[1:-1]
    return lines


def find_run(haystack: list[str], needle: list[str]) -> int:
    """Where ``needle`` occurs as consecutive lines of ``haystack``, or -1."""
    n = len(needle)
    for i in range(len(haystack) - n + 1):
        if haystack[i:i + n] == needle:
            return i
    return -1


def first_difference(haystack: list[str], needle: list[str]) -> str:
    """For a failure message: where the excerpt parts from the golden lines it starts like."""
    starts = [i for i, line in enumerate(haystack) if line == needle[0]]
    if not starts:
        return f"its first line is nowhere in the golden report: {needle[0]!r}"
    best, at = -1, starts[0]
    for i in starts:
        k = 0
        while k < len(needle) and i + k < len(haystack) and haystack[i + k] == needle[k]:
            k += 1
        if k > best:
            best, at = k, i
    got = haystack[at + best] if at + best < len(haystack) else "<end of report>"
    return f"excerpt line {best + 1} is {needle[best]!r}, the golden report has {got!r}"


def section(lines: list[str], heading: str) -> list[str]:
    """The lines of a report section, from its heading to the next ``## `` heading."""
    assert heading in lines, f"the golden report has no {heading!r}"
    start = lines.index(heading)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


# --- generated parts and commands -------------------------------------------------------

def test_trace_format_table_is_generated_from_schemas():
    # To refresh: specan schema, and paste between the trace-format markers of docs/trace-format.md.
    page = DOCS / "trace-format.md"
    assert between(text(page), "trace-format", rel(page)) == format_table_markdown()
    assert "<!-- trace-format:start -->" not in README, "the generated table lives in docs/trace-format.md"


def test_ci_runs_exactly_the_readme_test_command():
    ci_lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line and not line.startswith("#") and not line.startswith(("set ", "cd ", "command -v "))]
    assert len(ci_lines) == 1
    test_command = ci_lines[0]
    blocks = FENCE.findall(README)    # every fenced block, whatever its language
    assert blocks[1].strip() == test_command, "the README's second command must be the CI test command"
    assert "sample_traces/" in blocks[0] and "pip install ." in blocks[0]


def test_readme_says_commands_need_the_venv():
    after_second_block = README[[m.end() for m in FENCE.finditer(README)][1]:]
    next_paragraph = after_second_block.strip().split("\n\n")[0]
    assert ". .venv/bin/activate" in next_paragraph


# --- report output quoted in the README and docs ----------------------------------------

def all_excerpts() -> list[tuple[str, str, list[str]]]:
    return [(rel(page), m.group(1), excerpt_lines(m.group(2)))
            for page in PAGES for m in EXCERPT.finditer(text(page))]


def test_report_excerpts_are_verbatim_in_the_golden_report():
    golden = golden_lines()
    excerpts = all_excerpts()
    readme_names = {name for where, name, _ in excerpts if where == "README.md"}
    assert {"findings", "summary"} <= readme_names, "the README quotes the findings and the summary"
    for where, name, lines in excerpts:
        assert lines, f"{where}: excerpt {name} is empty"
        assert find_run(golden, lines) >= 0, (
            f"{where}: excerpt {name} is not, line for line, in tests/golden/sample_report.md; "
            + first_difference(golden, lines))


def test_summary_excerpt_holds_the_whole_summary_table():
    # The summary as the report prints it now: every column (e.g. TPOT speedup) and every row.
    table = [line for line in section(golden_lines(), "## 1. Summary") if line.startswith("|")]
    assert table, "the golden summary has no table"
    summary = [lines for where, name, lines in all_excerpts() if where == "README.md" and name == "summary"]
    assert len(summary) == 1
    assert find_run(summary[0], table) >= 0, "the README's summary excerpt lacks part of the summary table"


# --- claims about the report --------------------------------------------------------------

def losing_buckets(report: dict, deployment: str) -> tuple[list[str], list[str]]:
    """The deployment's observed batch buckets in bucket order, and those where its speedup < 1."""
    speedups = {row["batch_bucket"]: row["speedup"] for row in report["load_curve"]
                if row["deployment_id"] == deployment}
    assert speedups, f"the golden report has no load curve for {deployment}"
    observed = [b for b in labels("batch") if speedups.get(b) is not None]
    return observed, [b for b in observed if speedups[b] < 1]


def test_first_losing_batch_bucket_claims_match_the_golden_report():
    """A marked sentence "D loses from batch X on" or "D loses only at batch X" matches load_curve."""
    report = json.loads(text(GOLDEN / "sample_report.json"))
    claims = [(rel(page), m.group(1), m.group(2)) for page in PAGES for m in FIRST_LOSS.finditer(text(page))]
    assert ("README.md", "eagle-fp8") in {(where, dep) for where, dep, _ in claims}, \
        "the README states where eagle-fp8 starts to lose, in a marked sentence"
    for where, deployment, sentence in claims:
        sentence = " ".join(sentence.split())
        assert deployment in sentence, f"{where}: the first-loss:{deployment} sentence does not name {deployment}"
        observed, losing = losing_buckets(report, deployment)
        assert losing, f"{where}: {deployment} loses at no batch bucket in the golden report"
        if m := re.search(r"loses from (?:batch )?(\S+) on\b", sentence):
            stated = m.group(1)
            assert stated == losing[0], (f"{where}: says {deployment} loses from {stated} on; the golden report's "
                                         f"first batch bucket with speedup < 1 is {losing[0]}")
            assert losing == observed[observed.index(stated):], \
                f"{where}: '{deployment} loses from {stated} on', but it loses only at {', '.join(losing)}"
        elif m := re.search(r"loses only at (?:batch )?(\S+?)[,.;]?$", sentence):
            assert [m.group(1)] == losing, (f"{where}: says {deployment} loses only at {m.group(1)}; "
                                            f"the golden report: {', '.join(losing)}")
        else:
            pytest.fail(f"{where}: no 'loses from batch X on' or 'loses only at batch X' in {sentence!r}")


# --- links ----------------------------------------------------------------------------------

def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    heading = re.sub(r"<[^>]+>", "", heading).strip().lower()
    kept = "".join(c for c in heading if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found, seen = set(), {}
    for line in FENCE.sub("", text(page)).splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_relative_links_resolve():
    broken = []
    for page in PAGES:
        for target in LINK.findall(CODE_SPAN.sub("", FENCE.sub("", text(page)))):
            if re.match(r"[a-z]+:", target):
                continue
            path_part, _, anchor = target.partition("#")
            dest = (page.parent / path_part).resolve() if path_part else page
            if not dest.exists():
                broken.append(f"{rel(page)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{rel(page)}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


@pytest.mark.parametrize("name", ["metrics.md", "trace-format.md", "commands.md", "importers.md"])
def test_readme_points_at_the_docs_pages(name):
    outside_docs = [m.start() for m in re.finditer(re.escape(name), README)
                    if not README[:m.start()].endswith("docs/")]
    assert not outside_docs, f"the README mentions {name} without docs/"
    assert f"](docs/{name}" in README, f"the README links docs/{name}"


def test_the_notebook_example_runs_and_leaves_nothing_open(monkeypatch, capsys):
    """The README's notebook example, run as written from the checkout."""
    body = between(README, "example:notebook")
    (code,) = FENCE.findall(body)
    monkeypatch.chdir(ROOT)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    printed = capsys.readouterr().out
    assert scope["by_batch"].columns == ["deployment_id", "batch_bucket", "speedup"]
    assert len(scope["by_batch"].filter(scope["by_batch"]["deployment_id"] == "eagle-bf16")) == 8
    first = json.loads((GOLDEN / "sample_report.json").read_text(encoding="utf-8"))["verdict"][0]["text"]
    assert printed.rstrip("\n").endswith(first)
    ws = scope["ws"]
    with pytest.raises(Exception, match="closed"):
        ws.con.execute("select 1")
    assert ws.workdir is None or not ws.workdir.exists()


# --- the README's commands run after the README's own install -----------------------------
#
# Every command of a fenced block (```sh, or an untagged block whose lines start with a
# program) is run here, in order, or matches one of NOT_RUNNABLE, whose reason is checked.
# Run, each may use only what the README's first command installs (`pip install .`):
# specan, Python and the console scripts of specan's own dependencies, not the test extra's
# (the duckdb CLI comes with duckdb-cli, a test dependency only).

SHELL_LANGS = {"sh", "bash", "shell", "console"}
COMMAND_START = re.compile(r"^(?:\d+ \d+ (?:\S+ ){3})?(?:[A-Z_]+=\S+ +)*(?:\S*/)?"
                           r"(?:specan|python3?|duckdb|bash|pip|spark-submit|vllm|eval)\b")
INLINE_EXAMPLE = re.compile(r"`((?:specan|python3?) [^`\n]*&&[^`\n]*)`")     # a whole example in the text
SPARK_EXTRA = "pyspark"


def readme_commands() -> list[tuple[int, str]]:
    """(block number, command) of every command the README shows: its fenced blocks' lines
    (backslash continuations joined, comments dropped), then its inline `a && b` examples."""
    found = []
    for number, match in enumerate(re.finditer(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", README, re.M | re.S)):
        lang, body = match.group(1).strip(), match.group(2)
        for line in body.replace("\\\n", " ").splitlines():
            line = " ".join(line.split())
            if not line or line.startswith("#"):
                continue
            if lang in SHELL_LANGS or (not lang and COMMAND_START.match(line)):
                found.append((number, line))
    prose = re.sub(r"^```.*?^```[ \t]*$", "", README, flags=re.M | re.S)
    found += [(-1, m.group(1)) for m in INLINE_EXAMPLE.finditer(prose)]
    return found


def base_install_programs() -> set[str]:
    """What `pip install .` puts on PATH: specan's console scripts and its dependencies'
    (not an extra's), recursively, and the venv's Python."""
    from importlib import metadata

    from packaging.requirements import Requirement

    programs, seen, todo = {"python", "python3"}, set(), ["specan"]
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        dist = metadata.distribution(name)
        programs |= {ep.name for ep in dist.entry_points if ep.group == "console_scripts"}
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return programs


def base_install_packages() -> set[str]:
    from importlib import metadata

    from packaging.requirements import Requirement

    dist = metadata.distribution("specan")
    return {Requirement(t).name.lower() for t in dist.requires or []
            if Requirement(t).marker is None or Requirement(t).marker.evaluate({"extra": ""})}


def programs_of(command: str) -> list[str]:
    """The programs a command line runs: the first word of each part of a pipeline or a
    list, and of each $( ) in it; shell builtins and VAR=value assignments are skipped."""
    parts = re.split(r"&&|\|\||[|;]|\$\(", re.sub(r"'[^']*'", "''", command))
    names = []
    for part in parts:
        words = [w for w in part.replace(")", " ").split() if not re.match(r"[A-Za-z_]+=", w)]
        if words and words[0] not in ("eval", "source", ".", "cd", "export", '"', "''"):
            names.append(words[0].strip('"'))
    return names


# (name, what the command matches, why it is not run here, a check of that reason)
NOT_RUNNABLE = [
    ("install", lambda block, cmd: block in (0, 1),
     "the README's install and test commands: .ci/run runs the second in a clean clone",
     lambda cmds: (ROOT / ".ci" / "run").read_text().count("pip install") == 1),
    ("engine", lambda block, cmd: bool(re.match(r"(?:[A-Z_]+=\S+ +)*vllm ", cmd)),
     "starts vLLM, the engine whose output is imported: not specan's to install",
     lambda cmds: "vllm" not in base_install_programs()),
    ("spark", lambda block, cmd: bool(re.search(r"--engine spark|spark-submit|spark://|s3a://", cmd)),
     "needs the spark extra (pip install 'specan[spark]') and Java, or a cluster",
     lambda cmds: SPARK_EXTRA not in base_install_packages() and "pip install 'specan[spark]'" in README),
    ("llama.cpp", lambda block, cmd: "e2e/llamacpp/run.sh" in cmd or "/tmp/llamacpp-e2e/" in cmd,
     "builds llama.cpp (minutes) and imports what it wrote: tests/test_e2e_llamacpp.py runs both",
     lambda cmds: "run.sh" in (ROOT / "tests" / "test_e2e_llamacpp.py").read_text(encoding="utf-8")),
    ("your files", lambda block, cmd: bool(re.search(
        r"(?<![\w/.:-])(traces/|reduced/|spec\.jsonl|plain\.jsonl|spec\.log|plain\.log)|/var/lib/specan/", cmd)),
     "reads the reader's own traces or engine output, named as placeholders",
     lambda cmds: not any((ROOT / p).exists() for p in ("traces", "reduced", "spec.jsonl", "plain.jsonl",
                                                          "spec.log", "plain.log"))
     and not Path("/var/lib/specan").exists()),
    ("crontab", lambda block, cmd: bool(re.match(r"\d+ \d+ (\S+ ){3}/", cmd)),
     "a crontab line: cron runs it",
     lambda cmds: all(programs_of(c.split(" ", 5)[5])[0].endswith("/specan") for c in cmds)),
    ("other shells", lambda block, cmd: bool(re.search(r"_SPECAN_COMPLETE=(zsh|fish)_source", cmd)),
     "zsh's and fish's completion lines, in their shells' syntax: tests/test_cli_help.py checks both scripts",
     lambda cmds: "zsh" in (ROOT / "tests" / "test_cli_help.py").read_text(encoding="utf-8")),
]


def not_runnable(block: int, command: str) -> str | None:
    return next((name for name, matches, _why, _check in NOT_RUNNABLE if matches(block, command)), None)


def test_each_reason_a_command_is_not_run_holds():
    commands = readme_commands()
    for name, matches, why, check in NOT_RUNNABLE:
        mine = [cmd for block, cmd in commands if not_runnable(block, cmd) == name]
        assert mine, f"no README command is left out as {name!r}: drop the rule"
        assert check(mine), f"{name}: {why}"


def test_the_readme_commands_need_only_the_readme_install():
    allowed = base_install_programs()
    assert "specan" in allowed and "duckdb" not in allowed     # duckdb-cli is in the test extra only
    for block, command in readme_commands():
        if not_runnable(block, command) is None:
            for program in programs_of(command):
                assert program in allowed, (f"README: `{command}` runs {program}, which `pip install .` "
                                            f"does not install (it installs {', '.join(sorted(allowed))})")


def test_the_readme_commands_run(tmp_path):
    """The commands no rule leaves out, in order, each in one bash with a PATH that holds the
    README install's programs (and the system's /usr/bin, /bin), in a folder that shows
    the checkout's sample_traces/ and tests/fixtures/. A /tmp/ path is moved under the test's
    own folder."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    here = Path(sys.executable).parent
    for program in base_install_programs():
        target = Path(sys.executable) if program in ("python", "python3") else here / program
        if target.exists():
            wrapper = bin_dir / program
            wrapper.write_text(f'#!/bin/sh\nexec "{target}" "$@"\n')
            wrapper.chmod(0o755)
    work = tmp_path / "work"
    (work / "tests").mkdir(parents=True)
    (work / "sample_traces").symlink_to(ROOT / "sample_traces")
    (work / "tests" / "fixtures").symlink_to(ROOT / "tests" / "fixtures")
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    env.pop("VIRTUAL_ENV", None)
    runnable = [cmd for block, cmd in readme_commands() if not_runnable(block, cmd) is None]
    assert any(cmd.startswith("specan load") for cmd in runnable) and any("python -c" in cmd for cmd in runnable)
    for command in runnable:
        run = subprocess.run(["bash", "-c", "set -o pipefail; " + command.replace("/tmp/", f"{tmp_path}/tmp-")],
                             cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, f"README: `{command}` exited {run.returncode}: {run.stderr.strip()[-500:]}"
        if "eval " not in command:
            assert run.stdout.strip(), f"README: `{command}` printed nothing"
