"""Every ``--help`` agrees with its command: each option it mentions exists on that
command (or on the command the text names, ``specan report --check``), the usage
lines split no name, and click's shell completion answers for ``specan``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from analyzer.cli import main

# Options of the engines' own tools, which a source's description names beside the
# tool: the source reads what the tool writes with that option.
OTHER_TOOLS = {"--save-result": "vllm bench serve", "--output-file": "bench_serving",
               "--enable-logging-iteration-details": "vllm serve"}

WIDE = 100_000      # a paragraph on one line: a sentence is never split between lines
OPTION = re.compile(r"(?<![\w/-])(--?[A-Za-z][\w-]*)")
COMMAND_SUBSTITUTION = re.compile(r"\$\([^()]*\)")      # $(date -d yesterday ...): another program


def commands(command: click.Command = main, path: tuple[str, ...] = ()):
    """(path, command) of the group and of every command under it, recursively."""
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from commands(sub, path + (name,))


def context(path: tuple[str, ...], width: int = WIDE) -> click.Context:
    """The context ``specan PATH --help`` renders in, ``width`` columns wide."""
    ctx = click.Context(main, info_name="specan", terminal_width=width, max_content_width=width,
                        **main.context_settings)
    for name in path:
        ctx = click.Context(ctx.command.commands[name], info_name=name, parent=ctx,
                            terminal_width=width, max_content_width=width)
    return ctx


def options_of(ctx: click.Context) -> set[str]:
    return {opt for param in ctx.command.get_params(ctx) for opt in (*param.opts, *param.secondary_opts)
            if opt.startswith("-")}


def named_command(before: str) -> tuple[str, ...] | None:
    """The command a text names just before an option: ``specan report traces/ `` names
    ("report",), ``specan `` the group itself; None when the option is not in a
    ``specan ...`` command line (a sentence break, or no ``specan`` before it)."""
    at = before.rfind("specan")
    if at < 0 or (at > 0 and (before[at - 1].isalnum() or before[at - 1] in "_-/.")):
        return None
    words = before[at + len("specan"):]
    if words and not re.fullmatch(r"(\s+[^\s;,()]+)*\s+", words):
        return None
    path: tuple[str, ...] = ()
    group = main
    for word in words.split():
        if not isinstance(group, click.Group) or word not in group.commands:
            break
        path, group = path + (word,), group.commands[word]
    return path


def mismatches(path: tuple[str, ...], text: str) -> list[str]:
    """Each option the help ``text`` of ``specan PATH`` mentions that its command lacks."""
    command = context(path).command
    found = []
    for line in text.splitlines():
        line = COMMAND_SUBSTITUTION.sub("", line)
        # a group's list of commands: each line is that command's short help
        listed = re.match(r"\s+(\S+)\s{2,}", line)
        line_path = (path + (listed.group(1),) if isinstance(command, click.Group) and listed
                     and listed.group(1) in command.commands else path)
        own = options_of(context(line_path))
        for match in OPTION.finditer(line):
            option = match.group(1)
            if option in OTHER_TOOLS:
                if OTHER_TOOLS[option] not in line:
                    found.append(f"{option} (an option of {OTHER_TOOLS[option]}, not named beside it): {line.strip()}")
                continue
            named = named_command(line[:match.start()])
            where = line_path if named is None else named
            if option not in (own if named is None else options_of(context(where))):
                found.append(f"{option} is not an option of specan {' '.join(where)}: {line.strip()}")
    return found


def help_text(path: tuple[str, ...], width: int = WIDE) -> str:
    ctx = context(path, width)
    return ctx.command.get_help(ctx)


@pytest.mark.parametrize("path", [path for path, _ in commands()], ids=lambda p: " ".join(p) or "specan")
def test_every_option_a_help_mentions_exists_there(path):
    text = help_text(path)
    assert OPTION.search(text), "no option found: the scan itself is broken"
    assert mismatches(path, text) == []


def test_the_walk_reaches_every_command():
    reached = {path for path, _ in commands()}
    assert {("report",), ("import",), ("config",), ("replay-ngram",)} <= reached
    assert len(reached) == 1 + len(main.commands)


def test_the_check_catches_an_option_a_command_lacks():
    # simulate has no --engine: a help that offered it there would mislead
    assert mismatches(("simulate",), "Faster with --engine spark.") == [
        "--engine is not an option of specan simulate: Faster with --engine spark."]
    # one the text gives to another command is looked up there
    assert mismatches(("nightly",), "the rule of specan report --check") == []
    assert mismatches(("nightly",), "the rule of specan report --strict") == [
        "--strict is not an option of specan report: the rule of specan report --strict"]
    # a sentence break ends the other command's line: the option is the help's own again
    assert mismatches(("nightly",), "as specan report does; --check") == [
        "--check is not an option of specan nightly: as specan report does; --check"]
    assert mismatches(("import",), "summaries (text or --save-result JSON)") == [
        "--save-result (an option of vllm bench serve, not named beside it): summaries (text or --save-result JSON)"]


@pytest.mark.parametrize("path", [("simulate",), ("replay-ngram",), ("recommend",), ("nightly",)])
def test_profile_mentions_the_spark_engine_only_where_there_is_one(path):
    assert "--engine" not in options_of(context(path))
    assert "spark" not in help_text(path).lower()
    assert "--engine spark" in help_text(("report",))


# --- usage lines -------------------------------------------------------------------------

def usage_block(text: str) -> list[str]:
    lines = text.splitlines()
    end = lines.index("") if "" in lines else len(lines)
    return lines[:end]


@pytest.mark.parametrize("width", [50, 60, 80, 100, 120])
def test_usage_lines_split_no_name(width):
    """click wraps a usage line at hyphens too; a choice listed there (import's sources)
    was split, `sglang-` on one line and `responses` on the next."""
    runner = CliRunner()
    for path, command in commands():
        result = runner.invoke(main, [*path, "--help"], prog_name="specan", terminal_width=width)
        assert result.exit_code == 0, result.output
        usage = usage_block(result.output)
        assert usage[0].startswith(f"Usage: {' '.join(('specan', *path))} "), usage
        for line in usage:
            assert not re.search(r"\w-$", line), f"specan {' '.join(path)} at {width} columns: {usage}"


def test_import_usage_names_its_arguments():
    result = CliRunner().invoke(main, ["import", "--help"], prog_name="specan", terminal_width=80)
    assert usage_block(result.output) == ["Usage: specan import [OPTIONS] [SOURCE] [FILE]..."]
    # the sources are listed in the text, each whole on its line
    import_ = main.commands["import"]
    sources = next(p for p in import_.params if p.name == "source").type.choices
    listed = [line.split()[0] for line in result.output.splitlines() if line.startswith("    ") and line.split()]
    assert [s for s in sources if s in listed] == list(sources)


def test_a_wrong_source_names_the_argument_and_lists_the_sources(tmp_path):
    file = tmp_path / "x.log"
    file.write_text("hello\n")
    result = CliRunner().invoke(main, ["import", "sglang-respnses", str(file)])
    assert result.exit_code == 2
    assert "Invalid value for '[SOURCE]'" in result.output
    assert "'sglang-responses'" in result.output


# --- shell completion (click's own) ------------------------------------------------------

@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_script_for_each_shell(shell):
    result = CliRunner().invoke(main, [], prog_name="specan", env={"_SPECAN_COMPLETE": f"{shell}_source"})
    assert result.exit_code == 0, result.output
    assert "_SPECAN_COMPLETE" in result.output and "specan" in result.output
    assert f"{shell}_complete" in result.output


def test_the_installed_command_prints_its_bash_completion():
    specan = Path(sys.executable).parent / "specan"
    specan = str(specan) if specan.is_file() else shutil.which("specan")
    assert specan, "specan is not installed beside this Python"
    run = subprocess.run([specan], env={**os.environ, "_SPECAN_COMPLETE": "bash_source"},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "complete -o nosort -F _specan_completion specan" in run.stdout


def test_completion_offers_the_commands_and_the_import_sources():
    def complete(words: str, incomplete: str) -> list[str]:
        env = {"_SPECAN_COMPLETE": "bash_complete", "COMP_WORDS": f"specan {words} {incomplete}".strip(),
               "COMP_CWORD": str(len(words.split()) + 1)}
        result = CliRunner().invoke(main, [], prog_name="specan", env=env)
        return [line.split(",", 1)[1] for line in result.output.splitlines()]

    assert {"report", "import", "config"} <= set(complete("", "re") + complete("", "im") + complete("", "co"))
    assert complete("import", "sglang-") == ["sglang-responses", "sglang-log", "sglang-bench"]
