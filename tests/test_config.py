"""analyzer.config: the --config TOML file (docs/commands.md, "Gates")."""

from __future__ import annotations

import dataclasses
import re
import tomllib

import pytest

from analyzer.analysis.config import DEFAULT_CONFIG_TOML, Config, ConfigError, load_config, parse_config


def write(tmp_path, text: str, name: str = "gates.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_are_the_documented_values():
    config = load_config(None)
    assert config == Config()
    g = config.gates
    assert g.correctness.min_match_rate == 1.0
    assert g.quality.max_quality_drop == 0.01
    assert (g.latency.ttft_p99_ms, g.latency.tpot_p95_ms, g.latency.max_stall_p99_ms) == (2000, 60, 250)
    assert (g.capacity.min_speedup, g.capacity.max_preemptions_per_request) == (1.0, 0.05)
    r = config.regression
    assert (r.window_days, r.max_accept_length_drop, r.max_speedup_drop, r.max_tpot_p99_rise) == (7, 0.05, 0.05, 0.10)
    assert r.min_history_dates == 3 and isinstance(r.min_history_dates, int)
    assert isinstance(r.window_days, int)


def test_default_toml_parses_to_the_defaults(tmp_path):
    assert parse_config(tomllib.loads(DEFAULT_CONFIG_TOML)) == Config()
    assert load_config(write(tmp_path, DEFAULT_CONFIG_TOML)) == Config()
    # every key of every section is in the text: nothing is left to the dataclass defaults
    data = tomllib.loads(DEFAULT_CONFIG_TOML)
    assert Config().as_dict() == data


def test_an_empty_file_gives_the_defaults(tmp_path):
    config = load_config(write(tmp_path, ""))
    assert config == Config()
    assert config.source == str(tmp_path / "gates.toml")


def test_overrides_keep_the_other_defaults(tmp_path):
    config = load_config(write(tmp_path, """
        [gates.latency]
        ttft_p99_ms = 1500        # an integer becomes a float
        [gates.capacity]
        min_speedup = 1.2
        [regression]
        window_days = 14
    """))
    assert config.gates.latency.ttft_p99_ms == 1500.0 and isinstance(config.gates.latency.ttft_p99_ms, float)
    assert config.gates.latency.tpot_p95_ms == 60.0
    assert config.gates.latency.max_stall_p99_ms == 250.0
    assert config.gates.capacity.min_speedup == 1.2
    assert config.gates.capacity.max_preemptions_per_request == 0.05
    assert config.gates.correctness == Config().gates.correctness
    assert config.gates.quality == Config().gates.quality
    assert config.regression.window_days == 14
    assert config.regression.max_tpot_p99_rise == 0.10


def test_dotted_keys_and_inline_tables_work_too(tmp_path):
    config = load_config(write(tmp_path, 'gates.quality.max_quality_drop = 0.02\n'
                                         'regression = { max_speedup_drop = 0.1 }\n'))
    assert config.gates.quality.max_quality_drop == 0.02
    assert config.regression.max_speedup_drop == 0.1


def test_config_is_frozen():
    config = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.gates.latency.ttft_p99_ms = 1.0  # type: ignore[misc]


def one_line_error(path) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message


@pytest.mark.parametrize("text, key", [
    ("[gates.latency]\nttft_p99 = 100\n", "gates.latency.ttft_p99"),          # misspelt key
    ("[gates.speed]\nmin = 1\n", "gates.speed"),                               # unknown gate
    ("[gate.latency]\nttft_p99_ms = 100\n", "gate"),                           # unknown section
    ("[regression]\nwindow = 3\n", "regression.window"),
    ("min_speedup = 1.0\n", "min_speedup"),                                    # a key outside its section
])
def test_unknown_sections_and_keys_name_file_and_key(tmp_path, text, key):
    path = write(tmp_path, text)
    message = one_line_error(path)
    assert f": {key}: unknown" in message, message
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.key == key and err.value.path == str(path)


@pytest.mark.parametrize("text, key, found", [
    ('[gates.latency]\nttft_p99_ms = "2000"\n', "gates.latency.ttft_p99_ms", "a string '2000'"),
    ("[gates.capacity]\nmin_speedup = true\n", "gates.capacity.min_speedup", "a boolean"),
    ("[gates.quality]\nmax_quality_drop = [0.01]\n", "gates.quality.max_quality_drop", "an array"),
    ("[regression]\nwindow_days = 7.5\n", "regression.window_days", "a float 7.5"),
    ("[regression]\nwindow_days = 0\n", "regression.window_days", "at least 1"),
    ("[gates.correctness]\nmin_match_rate = 1.5\n", "gates.correctness.min_match_rate", "between 0 and 1"),
    ("[gates.latency]\ntpot_p95_ms = nan\n", "gates.latency.tpot_p95_ms", "nan"),
    ("gates = 3\n", "gates", "expected a table"),
    ("[gates]\nlatency = 5\n", "gates.latency", "expected a table"),
])
def test_wrong_types_name_file_and_key(tmp_path, text, key, found):
    message = one_line_error(write(tmp_path, text))
    assert f": {key}: " in message, message
    assert found in message, message


def test_invalid_toml_and_missing_file(tmp_path):
    message = one_line_error(write(tmp_path, "[gates.latency\nttft_p99_ms = 1\n"))
    assert "not valid TOML" in message
    missing = tmp_path / "nope.toml"
    assert "cannot read config file" in one_line_error(missing)


def test_the_documented_defaults_are_the_defaults():
    # docs/commands.md, section Gates, shows the defaults block verbatim
    from pathlib import Path

    docs = (Path(__file__).parent.parent / "docs" / "commands.md").read_text(encoding="utf-8")
    assert "```toml\n" + DEFAULT_CONFIG_TOML + "```" in docs


# --- the template: specan config --template -----------------------------------------------

def code_defaults(cls=Config, prefix: str = "") -> dict[str, object]:
    """Every key the code knows, dotted, with its default, read off the dataclasses."""
    keys = {}
    for f in dataclasses.fields(cls):
        if f.name == "source" and cls is Config:
            continue
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            keys.update(code_defaults(type(default), f"{prefix}{f.name}."))
        else:
            keys[f"{prefix}{f.name}"] = default
    return keys


def template_sections(text: str) -> dict[str, list[str]]:
    """The template's lines per [section]."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("["):
            current = line.strip("[]")
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return sections


def test_the_template_holds_every_key_at_its_default(tmp_path):
    from analyzer.analysis.config import config_toml

    text = config_toml()
    data = tomllib.loads(text)
    defaults = code_defaults()
    assert len(defaults) >= 40 and "gates.latency.ttft_p99_ms" in defaults
    sections = template_sections(text)
    for dotted, default in defaults.items():
        section, key = dotted.rsplit(".", 1)
        assert section in sections, f"no [{section}] in the template"
        if default is None:
            # TOML has no null: an unset key is there, commented out
            assert any(line.startswith(f"# {key} = ") for line in sections[section]), dotted
            value = data
            for part in section.split("."):
                value = value[part]
            assert key not in value, dotted
        else:
            value = data
            for part in dotted.split("."):
                value = value[part]
            assert value == default and type(value) is type(default), (dotted, value, default)
    # nothing the code does not know
    assert set(Config().as_dict()) == set(data)
    assert load_config(write(tmp_path, text)) == Config()


def test_every_key_of_the_template_has_a_comment_with_its_unit():
    from analyzer.analysis.config import config_toml

    lines = config_toml().splitlines()
    keys = [i for i, line in enumerate(lines) if re.match(r"(# )?\w+ = ", line)]
    assert len(keys) == len(code_defaults())
    for i in keys:
        j, comment = i - 1, []
        while j >= 0 and lines[j].startswith("# ") and not re.match(r"# \w+ = ", lines[j]):
            comment.insert(0, lines[j][2:])
            j -= 1
        assert comment, f"no comment above {lines[i]!r}"
        assert re.search(r"\([^)]+\)", " ".join(comment)), f"no unit in the comment of {lines[i]!r}"
    assert max(len(line) for line in lines) <= 88


def test_the_template_renders_a_loaded_file_and_loads_back(tmp_path):
    from analyzer.analysis.config import config_toml

    path = write(tmp_path, '[gates.latency]\nttft_p99_ms = 1500\nmax_stall_p99_ms_max_worsening = 0.5\n'
                           '[nightly]\naccept_since = { spec = 2026-11-25, "eagle.v2" = 2026-12-01 }\n')
    config = load_config(path)
    text = config_toml(config)
    assert "ttft_p99_ms = 1500.0" in text and "max_stall_p99_ms_max_worsening = 0.5" in text
    assert 'accept_since = { spec = 2026-11-25, "eagle.v2" = 2026-12-01 }' in text
    assert load_config(write(tmp_path, text, "again.toml")) == config


def test_specan_config_template_prints_it():
    from click.testing import CliRunner

    from analyzer.analysis.config import config_toml
    from analyzer.cli import main

    result = CliRunner().invoke(main, ["config", "--template"])
    assert result.exit_code == 0, result.output
    assert result.stdout == config_toml() == DEFAULT_CONFIG_TOML


def test_specan_config_file_checks_it_and_prints_its_settings(tmp_path):
    from click.testing import CliRunner

    from analyzer.cli import main

    runner = CliRunner()
    good = runner.invoke(main, ["config", str(write(tmp_path, "[evidence]\nmin_requests = 30\n"))])
    assert good.exit_code == 0, good.output
    assert "\nmin_requests = 30\n" in good.stdout and "\nmin_baseline_steps = 20\n" in good.stdout
    bad = runner.invoke(main, ["config", str(write(tmp_path, "[evidence]\nmin_request = 30\n", "bad.toml"))])
    assert bad.exit_code == 2 and bad.stdout == ""
    assert bad.stderr.splitlines() == [f"Error: {tmp_path / 'bad.toml'}: evidence.min_request: unknown key; "
                                       "expected one of " + ", ".join(code_defaults(Config().evidence.__class__))]
    for args in ([], ["--template", str(tmp_path / "bad.toml")]):
        usage = runner.invoke(main, ["config", *args])
        assert usage.exit_code == 2 and "give --template, or a FILE to check" in usage.stderr
