"""The ``llm`` and ``budget`` sections of the config: which backends and models memd thinks
with (issue 34), and what background work may spend (R-B1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class ModelsConfig:
    """Backend and model per job kind (R-B7, issue 34). Each is ``""`` (the default backend's
    model for the job), ``"<model>"`` (that model on the default backend) or
    ``"<backend>:<model>"`` / ``"<backend>:"`` (that backend: ``anthropic``, ``bedrock``,
    ``vertex``, ``openai``, ``gemini``, ``local``, or an agent's CLI on the user's own login:
    ``claude_cli``, ``codex_cli``, ``gemini_cli``; a model name may hold colons itself, as
    Ollama's ``qwen2.5-coder:7b`` does: only a known backend name before the first colon is
    read as one)."""

    session_notes: str = ""
    memory_extract: str = ""
    recall: str = ""
    compact: str = ""
    dream: str = ""


@dataclass(frozen=True)
class BackendConfig:
    """One backend's own settings (``llm.openai``, ``llm.gemini``, ``llm.local``).

    ``protocol`` says how jobs ask its models: ``tools`` (the multi-turn tool loop),
    ``whole`` (one answer per job, checked and applied by memd: for small models), ``auto``
    (``whole`` for a local server, ``tools`` for the rest)."""

    base_url: str = ""  # "" = the backend's own (the local server found by the probe)
    api_key_env: str = ""  # "" = the backend's own variable (OPENAI_API_KEY, GEMINI_API_KEY)
    model: str = ""  # "" = the backend's default per job (a local server: its first model)
    protocol: Literal["auto", "tools", "whole"] = "auto"
    # Per model, over ``protocol``: models of this backend that drive the tool loop well (a
    # large local one), or that must be asked for whole answers (a small one on an API).
    tools_models: tuple[str, ...] = ()
    whole_models: tuple[str, ...] = ()
    stream: bool = True  # ask for the answer as it comes (server-sent events)


@dataclass(frozen=True)
class CLIConfig(BackendConfig):
    """An agent's own CLI run headless as a backend, on the user's login (``llm.claude_cli``,
    ``llm.codex_cli``, ``llm.gemini_cli``; issue 34). Opt-in: it spends the user's plan, so
    only a job that ``llm.provider`` or ``llm.models`` names runs on it. ``base_url`` is
    where the CLI's model is (empty: the CLI's own default); ``protocol`` does not apply (a
    CLI run without tools answers whole)."""

    command: str = ""  # the CLI's executable ("" = ``claude``/``codex``/``gemini`` on PATH)
    timeout_s: float = 300.0  # one call, the CLI's start included


DEFAULT_LOCAL_PORTS: tuple[str, ...] = (
    "127.0.0.1:11434",  # Ollama
    "127.0.0.1:8080",  # llama.cpp's llama-server
    "127.0.0.1:1234",  # LM Studio
    "127.0.0.1:8000",  # vLLM
)


@dataclass(frozen=True)
class LLMConfig:
    """Which backends memd thinks with (issue 34). ``provider`` is the default backend;
    ``auto`` picks what the user has, in this order: an Anthropic key, an OpenAI key, a
    Gemini key, a local server answering on one of ``local_ports``. ``base_url`` and
    ``api_key_env`` are the named provider's (``auto``: Anthropic's, as before)."""

    provider: Literal[
        "auto",
        "anthropic",
        "bedrock",
        "vertex",
        "openai",
        "gemini",
        "local",
        "claude_cli",
        "codex_cli",
        "gemini_cli",
    ] = "auto"
    base_url: str = ""  # empty: the SDK's default or $ANTHROPIC_BASE_URL
    api_key_env: str = ""  # empty: the provider's own (ANTHROPIC_API_KEY, OPENAI_API_KEY, …)
    timeout_s: float = 120.0
    max_concurrent: int = 2
    max_output_tokens: int = 8_192
    models: ModelsConfig = field(default_factory=ModelsConfig)
    openai: BackendConfig = field(default_factory=BackendConfig)
    gemini: BackendConfig = field(default_factory=BackendConfig)
    local: BackendConfig = field(default_factory=BackendConfig)
    claude_cli: CLIConfig = field(default_factory=CLIConfig)
    codex_cli: CLIConfig = field(default_factory=CLIConfig)
    gemini_cli: CLIConfig = field(default_factory=CLIConfig)
    find_local: bool = True  # probe local_ports for a model server when nothing else is set
    local_ports: tuple[str, ...] = DEFAULT_LOCAL_PORTS
    probe_timeout_s: float = 0.3  # per port, in the background after READY


@dataclass(frozen=True)
class BudgetConfig:
    """Cost guard for background work (R-B1). 0 means unlimited."""

    tokens_per_hour: int = 2_000_000
    tokens_per_day: int = 20_000_000
    backoff_initial_s: float = 30.0
    backoff_max_s: float = 3_600.0
    max_runs_per_hour: int = 60  # per background job (kind + subject), whatever the cause
