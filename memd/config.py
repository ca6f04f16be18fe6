"""memd's configuration: one frozen dataclass tree, loaded once at the entry point.

Precedence, lowest to highest:

1. the defaults written in the dataclasses below (the numbers from SPEC.md);
2. the YAML file (``--config``, else ``$MEMD_CONFIG``, else ``~/.config/memd/config.yaml``;
   a missing default file is fine, a missing named file is an error);
3. environment overrides for paths (``MEMD_PROJECTS_ROOT``, ``MEMD_STATE_DIR``,
   ``MEMD_RUNTIME_DIR``, ``MEMD_CODEX_HOME``, ``MEMD_GEMINI_DIR``, ``MEMD_QWEN_DIR``;
   ``CLAUDE_CONFIG_DIR`` moves the Claude tree as Claude Code does, ``CODEX_HOME`` Codex's,
   ``QWEN_RUNTIME_DIR`` and ``QWEN_HOME`` Qwen Code's);
4. command-line overrides (``--set section.key=value``).

Validation collects every problem before failing, so one :class:`ConfigError` names each bad
key and what it expects.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from memd.config_agents import AgentsConfig
from memd.config_check import MAX_NUMBER as MAX_NUMBER
from memd.config_check import build
from memd.config_llm import BudgetConfig, LLMConfig
from memd.errors import ConfigError
from memd.regular_file import open_regular_target


@dataclass(frozen=True)
class PathsConfig:
    """Where memd reads and writes. Empty strings mean "derive from the environment"."""

    claude_dir: str = ""  # default: $CLAUDE_CONFIG_DIR or ~/.claude
    projects_root: str = ""  # default: <claude_dir>/projects
    state_dir: str = ""  # default: $XDG_STATE_HOME/memd or ~/.local/state/memd
    codex_home: str = ""  # default: $CODEX_HOME or ~/.codex (its sessions/ are followed)
    gemini_dir: str = ""  # default: ~/.gemini (its tmp/<project>/chats/ are followed)
    qwen_dir: str = ""  # default: $QWEN_RUNTIME_DIR, $QWEN_HOME or ~/.qwen (projects/*/chats/)
    # The socket's directory is not a file key: clients must find it without reading this
    # file, so it comes from $MEMD_RUNTIME_DIR or $XDG_RUNTIME_DIR only.


@dataclass(frozen=True)
class TranscriptsConfig:
    active_window_hours: float = 24.0  # R-T6: sessions modified this recently are parsed at start
    watch_step_ms: int = 50  # past 8 reads of inotify events in this long, gather the rest
    watch_debounce_ms: int = 50  # watchfiles' debounce, where it is used (not Linux)
    max_line_bytes: int = 16 * 1024 * 1024  # a longer line is counted as bad and skipped
    poll_interval_ms: int = 1_000  # when inotify is unavailable (out of watches): poll this often
    evict_idle_minutes: float = 5.0  # drop idle conversations (not those near compaction)


@dataclass(frozen=True)
class SourcesConfig:
    """Which agents' sessions memd follows besides Claude Code's (paths: ``paths.*``)."""

    codex: bool = True
    gemini: bool = True
    qwen: bool = True


@dataclass(frozen=True)
class SessionNotesConfig:
    enabled: bool = True
    init_tokens: int = 10_000  # R-S3
    update_tokens: int = 5_000
    tool_calls_between_updates: int = 3
    section_tokens: int = 2_000  # R-S5
    total_tokens: int = 12_000
    wait_timeout_s: float = 15.0  # R-S8
    stale_after_s: float = 60.0
    max_concurrent: int = 2  # R-S6 global limit across sessions
    strategy: Literal["delta", "full"] = "delta"
    overlap_messages: int = 4
    chunk_tokens: int = 60_000
    max_turns: int = 6


@dataclass(frozen=True)
class CompactionConfig:
    # The window of a session whose model its agent gives none for (a gateway's own name,
    # other agents); a Claude Code session of a known model has its own (memd.window).
    default_context_window: int = 200_000
    default_max_output_tokens: int = 32_000
    max_output_reserve: int = 20_000  # R-C1: window - min(max_output, this)
    buffer_tokens: int = 13_000
    max_consecutive_failures: int = 3
    keep_min_tokens: int = 10_000  # R-C2
    keep_min_text_messages: int = 5
    keep_max_tokens: int = 40_000
    section_max_chars: int = 8_000
    ptl_max_retries: int = 3  # R-C4
    ptl_drop_fraction: float = 0.2
    restore_max_files: int = 5  # R-C5
    restore_max_tokens: int = 50_000
    microcompact_keep_recent: int = 5  # R-C6
    summary_max_tokens: int = 20_000  # R-C3: the summary's own output budget


@dataclass(frozen=True)
class SemanticConfig:
    """Issue 27: the optional semantic recall stage (the ``memd[semantic]`` extra)."""

    enabled: bool = False
    # A model2vec model: a folder, or a model id that `memdctl fetch-model` saved under
    # <state_dir>/models/ (the daemon never downloads).
    model: str = "minishlab/potion-base-8M"
    min_similarity: float = 0.35  # a memory less alike than this (cosine) is not a semantic hit


@dataclass(frozen=True)
class MemoryConfig:
    auto_memory: bool = True
    team: bool = False
    index_max_lines: int = 200  # R-M2
    index_max_bytes: int = 25_000
    scan_max_files: int = 200  # R-M4
    frontmatter_lines: int = 30
    recall_max: int = 5  # R-M6
    recall_timeout_s: float = 3.0
    extraction_quiet_s: float = 30.0  # R-M3: quiet period after an answer with no tool calls
    extraction_max_turns: int = 4
    # Issue 10: the model's share of a recall on the prompt path (then the lexical answer).
    recall_model_budget_s: float = 0.6
    # Issue 10/36: extract for sessions whose Claude Code writes its own memories too, the
    # turns its memory did not write after (judged on the memory dir, after at most
    # beside_wait_s, at once when the session ended; 0: no wait); false: leave them to it.
    extract_beside_claude_code: bool = True
    beside_wait_s: float = 60.0
    # Extract for sessions of an agent that keeps memories of its own elsewhere (Codex's
    # [features] memories); off: memd leaves them to it.
    extract_beside_agent_memory: bool = False
    # Issue 26: check what memories cite against the code at recall and injection; a memory
    # whose citations have all failed this many days is offered to dream to fix or retire.
    verify_citations: bool = True
    citation_retire_days: float = 28.0
    # Issue 36: a memory no agent used and no check verified for this many days (and neither
    # pinned nor the team's) is moved to the archive beside the memory dir; 0: never.
    archive_unused_days: float = 28.0
    semantic: SemanticConfig = field(default_factory=SemanticConfig)


@dataclass(frozen=True)
class TeamConfig:
    """Issue 37: a project's team/ memories over its repository's remote, and one person's
    memories over a private remote of theirs (``memdctl team``, ``memdctl sync``)."""

    remote: str = "origin"  # the repository's remote a team sync goes to
    mode: Literal["ref", "folder"] = "ref"  # a ref of memd's own, or a reviewed folder
    ref: str = "refs/memd/team"  # ref mode: where the team's memories are kept
    folder: str = ".memd/team"  # folder mode: the folder of the branch
    branch: str = ""  # folder mode: the branch read ("": the remote's default, else main)
    check_interval_s: float = 60.0  # automatic sync: how often team/ is looked at
    interval_minutes: float = 30.0  # automatic sync: how often the remote is asked anyway
    min_interval_s: float = 60.0  # automatic sync: at most once a project this often
    timeout_s: float = 120.0  # one fetch or push
    push_retries: int = 5  # pushes that lost a race, each after a fetch and a merge
    max_files: int = 20_000
    max_file_bytes: int = 65_536
    max_total_bytes: int = 67_108_864


@dataclass(frozen=True)
class DreamConfig:
    auto_dream: bool = True
    min_hours: float = 24.0  # R-D1
    scan_throttle_minutes: float = 10.0
    min_sessions: int = 5
    lock_stale_minutes: float = 60.0  # R-D2
    snapshots_kept: int = 5  # R-B3
    max_turns: int = 30  # R-D3: the consolidation agent's turn limit
    timeout_s: float = 900.0  # one whole consolidation run


@dataclass(frozen=True)
class PrivacyConfig:
    ignore_projects: tuple[str, ...] = ()  # globs on project paths or slugs (R-B4)
    redact_secrets: bool = True


@dataclass(frozen=True)
class HookConfig:
    injection_max_bytes: int = 8_192  # R-B5
    timeout_ms: int = 1_500


@dataclass(frozen=True)
class IPCConfig:
    max_frame_bytes: int = 16 * 1024 * 1024
    request_timeout_s: float = 30.0
    max_buffered_bytes: int = 64 * 1024 * 1024  # incoming frames, across all connections
    frame_timeout_s: float = 5.0  # to finish a frame once its first byte arrived
    max_connections: int = 256  # past it the longest-idle one is closed to make room
    idle_timeout_s: float = 60.0  # a connection with no request in flight is then closed


@dataclass(frozen=True)
class McpConfig:
    """The ``memd-mcp`` face for other agents (R-I8)."""

    remember_max_bytes: int = 4_096  # content of one memory written through ``remember``


@dataclass(frozen=True)
class DaemonConfig:
    shutdown_grace_s: float = 5.0  # requests and queued reading finish; capped at 5 (stop ≤ 10 s)
    state_flush_s: float = 2.0
    stall_after_minutes: float = 30.0  # R-B8


@dataclass(frozen=True)
class Config:
    paths: PathsConfig = field(default_factory=PathsConfig)
    transcripts: TranscriptsConfig = field(default_factory=TranscriptsConfig)
    sources: SourcesConfig = field(default_factory=SourcesConfig)
    session_notes: SessionNotesConfig = field(default_factory=SessionNotesConfig)
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    dream: DreamConfig = field(default_factory=DreamConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    hook: HookConfig = field(default_factory=HookConfig)
    ipc: IPCConfig = field(default_factory=IPCConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    mcp: McpConfig = field(default_factory=McpConfig)
    team: TeamConfig = field(default_factory=TeamConfig)
    agents: AgentsConfig = field(default_factory=AgentsConfig)


@dataclass(frozen=True)
class ResolvedPaths:
    """Concrete directories, derived once from :class:`PathsConfig` and the environment."""

    claude_dir: Path
    projects_root: Path
    state_dir: Path
    runtime_dir: Path
    config_file: Path | None
    codex_home: Path = Path("~/.codex")
    gemini_dir: Path = Path("~/.gemini")
    qwen_dir: Path = Path("~/.qwen")

    @property
    def socket_path(self) -> Path:
        return self.runtime_dir / "memd.sock"

    @property
    def lock_path(self) -> Path:
        return self.runtime_dir / "memd.lock"


@dataclass(frozen=True)
class LoadedConfig:
    config: Config
    paths: ResolvedPaths


# ---------------------------------------------------------------------------------------------
# Loading


def default_config_file(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".config")
    return Path(base) / "memd" / "config.yaml"


def load_config(
    *,
    config_file: str | None = None,
    overrides: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> LoadedConfig:
    """Load and validate the configuration; raise :class:`ConfigError` listing every problem."""
    env = os.environ if env is None else env
    named = config_file or env.get("MEMD_CONFIG") or None
    path = Path(named).expanduser() if named else default_config_file(env)
    raw: dict[str, Any] = {}
    present = _config_present(path)
    if present:
        raw = _read_yaml(path)
    elif named:
        raise ConfigError(
            f"config file {path} does not exist (named by "
            f"{'--config' if config_file else 'MEMD_CONFIG'}); create it or drop the option"
        )
    problems: list[str] = []
    for dotted, value in (overrides or {}).items():
        _apply_override(raw, dotted, value, problems)
    config = build(Config, raw, "", problems)
    if problems:
        where = f" in {path}" if present else ""
        raise ConfigError("invalid configuration" + where + ":\n  " + "\n  ".join(problems))
    assert isinstance(config, Config)
    return LoadedConfig(config, resolve_paths(config.paths, env, path if present else None))


def parse_config_text(text: str) -> Config:
    """Validate YAML text into a Config (used by tests and ``memdctl config --check``)."""
    data = _load_yaml(text, "the config")
    if not isinstance(data, dict):
        raise ConfigError("the config file must be a YAML mapping of sections")
    problems: list[str] = []
    config = build(Config, data, "", problems)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    assert isinstance(config, Config)
    return config


CONFIG_MAX_BYTES = 1024 * 1024


def _config_present(path: Path) -> bool:
    """Whether the config file exists; a path that cannot even be looked at is an error
    (``Path.exists`` raises PermissionError there before Python 3.12)."""
    try:
        path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise ConfigError(
            f"cannot read config file {path}: {exc.strerror}; "
            "check the permissions of the file and its folders"
        ) from exc
    return True


def _read_yaml(path: Path) -> dict[str, Any]:
    # Opened non-blocking as a regular file only: a FIFO or device at the config path must
    # not hang the start, and a runaway file is refused rather than read whole.
    try:
        with open_regular_target(path) as file:
            raw = file.read(CONFIG_MAX_BYTES + 1) or b""
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise ConfigError(f"cannot read config file {path}: {why}") from exc
    if len(raw) > CONFIG_MAX_BYTES:
        raise ConfigError(
            f"config file {path} is over {CONFIG_MAX_BYTES} bytes; is it the right file?"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text: {exc}") from exc
    data = _load_yaml(text, str(path))
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must be a YAML mapping of sections (e.g. 'session_notes:')")
    return data


def _load_yaml(text: str, where: str) -> Any:
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} is not valid YAML: {exc}") from exc
    except RecursionError as exc:
        raise ConfigError(f"{where} is nested too deeply to be a config file") from exc
    except ValueError as exc:  # an integer of thousands of digits: Python will not read it
        raise ConfigError(f"{where} holds a number too long to read: {exc}") from exc


def _apply_override(raw: dict[str, Any], dotted: str, value: str, problems: list[str]) -> None:
    parts = dotted.split(".")
    node = raw
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            problems.append(f"{dotted}: cannot set a key below a non-section value")
            return
        node = child
    try:
        node[parts[-1]] = yaml.safe_load(value) if value else value
    except (yaml.YAMLError, ValueError) as exc:
        problems.append(f"{dotted}: cannot read the value ({str(exc).splitlines()[0]})")


def resolve_paths(
    paths: PathsConfig, env: Mapping[str, str], config_file: Path | None
) -> ResolvedPaths:
    """Derive concrete directories. Env overrides beat the file, as documented above."""
    home = Path(env.get("HOME") or Path.home())

    def expand(p: str) -> Path:
        return Path(p.replace("~", str(home), 1) if p.startswith("~") else p)

    claude = expand(
        env.get("MEMD_CLAUDE_DIR")
        or paths.claude_dir
        or env.get("CLAUDE_CONFIG_DIR")
        or "~/.claude"
    )
    projects = expand(
        env.get("MEMD_PROJECTS_ROOT") or paths.projects_root or str(claude / "projects")
    )
    state_base = env.get("XDG_STATE_HOME") or str(home / ".local" / "state")
    state = expand(env.get("MEMD_STATE_DIR") or paths.state_dir or str(Path(state_base) / "memd"))
    from memd_client.paths import default_runtime_dir

    runtime = default_runtime_dir(env)
    codex = expand(
        env.get("MEMD_CODEX_HOME") or paths.codex_home or env.get("CODEX_HOME") or "~/.codex"
    )
    gemini = expand(env.get("MEMD_GEMINI_DIR") or paths.gemini_dir or "~/.gemini")
    qwen = expand(
        env.get("MEMD_QWEN_DIR")
        or paths.qwen_dir
        or env.get("QWEN_RUNTIME_DIR")
        or env.get("QWEN_HOME")
        or "~/.qwen"
    )
    return ResolvedPaths(claude, projects, state, runtime, config_file, codex, gemini, qwen)


def config_as_dict(config: Config) -> dict[str, Any]:
    """Plain data for ``memdctl config`` (tuples become lists)."""

    def plain(value: Any) -> Any:
        if isinstance(value, tuple):
            return list(value)
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    result = plain(dataclasses.asdict(config))
    assert isinstance(result, dict)
    return result
