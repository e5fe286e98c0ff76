"""analyzer.config: the --config TOML file (docs/commands.md, "Gates")."""

from __future__ import annotations

import dataclasses
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
