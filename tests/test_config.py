"""Config: SPEC defaults, one error naming every bad key, precedence of file, env and CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.config import Config, config_as_dict, load_config, parse_config_text
from memd.errors import ConfigError


def test_defaults_are_the_spec_numbers() -> None:
    c = Config()
    assert (c.session_notes.init_tokens, c.session_notes.update_tokens) == (10_000, 5_000)
    assert c.session_notes.tool_calls_between_updates == 3
    assert (c.session_notes.section_tokens, c.session_notes.total_tokens) == (2_000, 12_000)
    assert (c.session_notes.wait_timeout_s, c.session_notes.stale_after_s) == (15.0, 60.0)
    assert (c.compaction.max_output_reserve, c.compaction.buffer_tokens) == (20_000, 13_000)
    assert c.compaction.max_consecutive_failures == 3
    assert (c.compaction.keep_min_tokens, c.compaction.keep_max_tokens) == (10_000, 40_000)
    assert c.compaction.keep_min_text_messages == 5
    assert (c.compaction.restore_max_files, c.compaction.restore_max_tokens) == (5, 50_000)
    assert (c.memory.index_max_lines, c.memory.index_max_bytes) == (200, 25_000)
    assert (c.memory.scan_max_files, c.memory.frontmatter_lines, c.memory.recall_max) == (
        200,
        30,
        5,
    )
    assert (c.dream.min_hours, c.dream.scan_throttle_minutes, c.dream.min_sessions) == (24, 10, 5)
    assert c.dream.lock_stale_minutes == 60
    assert c.hook.injection_max_bytes == 8_192


def test_every_bad_key_is_named_in_one_error() -> None:
    text = """
session_notes:
  init_tokens: "lots"
  bogus: 1
compaction:
  ptl_drop_fraction: 1.5
llm:
  provider: openrouter
  models:
    recall: 7
nonsense: {}
"""
    with pytest.raises(ConfigError) as info:
        parse_config_text(text)
    msg = str(info.value)
    for needle in (
        "session_notes.init_tokens: expected a whole number",
        "session_notes.bogus: unknown key",
        "compaction.ptl_drop_fraction: must be between 0 and 1",
        "llm.provider: expected one of 'auto', 'anthropic', 'bedrock', 'vertex', 'openai'",
        "llm.models.recall: expected a string",
        "nonsense: unknown key",
    ):
        assert needle in msg, msg


def test_bool_is_not_accepted_as_a_number() -> None:
    with pytest.raises(ConfigError, match=r"session_notes\.init_tokens"):
        parse_config_text("session_notes:\n  init_tokens: true\n")


def test_valid_file_and_cli_override(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "session_notes:\n  init_tokens: 20000\nprivacy:\n  ignore_projects: ['*secret*']\n"
    )
    loaded = load_config(
        config_file=str(cfg),
        overrides={"session_notes.update_tokens": "7000"},
        env={"HOME": str(tmp_path)},
    )
    assert loaded.config.session_notes.init_tokens == 20_000
    assert loaded.config.session_notes.update_tokens == 7_000
    assert loaded.config.privacy.ignore_projects == ("*secret*",)
    assert loaded.paths.config_file == cfg


def test_missing_named_file_is_an_error_but_missing_default_is_fine(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(config_file=str(tmp_path / "nope.yaml"), env={"HOME": str(tmp_path)})
    loaded = load_config(env={"HOME": str(tmp_path)})
    assert loaded.config == Config()
    assert loaded.paths.config_file is None


def test_env_overrides_paths(tmp_path: Path) -> None:
    env = {
        "HOME": str(tmp_path),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "cc"),
        "XDG_STATE_HOME": str(tmp_path / "st"),
        "XDG_RUNTIME_DIR": str(tmp_path / "run"),
    }
    p = load_config(env=env).paths
    assert p.projects_root == tmp_path / "cc" / "projects"
    assert p.state_dir == tmp_path / "st" / "memd"
    assert p.socket_path == tmp_path / "run" / "memd" / "memd.sock"
    env["MEMD_PROJECTS_ROOT"] = str(tmp_path / "elsewhere")
    assert load_config(env=env).paths.projects_root == tmp_path / "elsewhere"


def test_config_file_named_by_env(tmp_path: Path) -> None:
    cfg = tmp_path / "m.yaml"
    cfg.write_text("dream:\n  min_sessions: 9\n")
    loaded = load_config(env={"HOME": str(tmp_path), "MEMD_CONFIG": str(cfg)})
    assert loaded.config.dream.min_sessions == 9


def test_not_a_mapping_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mapping"):
        parse_config_text("- a\n- b\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("session_notes: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(config_file=str(bad), env={"HOME": str(tmp_path)})


def test_config_as_dict_round_trips_through_yaml() -> None:
    import yaml

    text = yaml.safe_dump(config_as_dict(Config()))
    assert parse_config_text(text) == Config()


@given(st.integers(min_value=-(10**6), max_value=-1))
def test_negative_numbers_are_rejected(n: int) -> None:
    with pytest.raises(ConfigError, match="must not be negative"):
        parse_config_text(f"compaction:\n  buffer_tokens: {n}\n")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("0", "must be more than 0"),
        ("-1", "must not be negative"),
        (".nan", "must be a number, got nan"),
        ("soon", "expected a number"),
    ],
)
def test_the_idle_deadline_must_be_a_positive_number(value: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=rf"ipc\.idle_timeout_s: {problem}"):
        parse_config_text(f"ipc:\n  idle_timeout_s: {value}\n")
    assert parse_config_text("ipc:\n  idle_timeout_s: 0.5\n").ipc.idle_timeout_s == 0.5
    assert parse_config_text("").ipc.idle_timeout_s == 60.0


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("transcripts.max_line_bytes", str(10**12 + 1), "got 1000000000001"),
        ("transcripts.max_line_bytes", str(2**64), "got 18446744073709551616"),
        ("transcripts.max_line_bytes", str(2**70), "got 1180591620717411303424"),
        ("transcripts.max_line_bytes", str(10**40), "got a number of 133 bits"),
        ("transcripts.active_window_hours", "1.0e+400", "got inf"),
        ("transcripts.active_window_hours", ".inf", "got inf"),
        ("transcripts.active_window_hours", "1.0e+13", "got 10000000000000.0"),
    ],
)
def test_numbers_past_the_bound_are_rejected_naming_the_key(
    key: str, value: str, shown: str
) -> None:
    """A number no reply could carry (or no timeout wait) is a config error, not a figure."""
    section, name = key.split(".")
    with pytest.raises(ConfigError) as info:
        parse_config_text(f"{section}:\n  {name}: {value}\n")
    assert f"{key}: must be at most 1,000,000,000,000, {shown}" in str(info.value)
    assert parse_config_text(f"{section}:\n  {name}: {10**12}\n")


def test_a_number_too_long_to_read_is_a_config_error(tmp_path: Path) -> None:
    digits = "1" + "0" * 5_000  # Python refuses to read an int of over 4,300 digits
    for text in (
        f"transcripts:\n  max_line_bytes: {digits}\n",
        f"session_notes:\n  enabled: {digits}\n",
    ):
        with pytest.raises(ConfigError, match="number"):
            parse_config_text(text)
        cfg = tmp_path / "c.yaml"
        cfg.write_text(text)
        with pytest.raises(ConfigError, match=r"c\.yaml"):
            load_config(config_file=str(cfg), env={"HOME": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"transcripts\.max_line_bytes"):
        load_config(env={"HOME": str(tmp_path)}, overrides={"transcripts.max_line_bytes": digits})
