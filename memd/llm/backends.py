"""The backends memd can think with: one row each (its key, its default models, the line that
turns it on, its room's opener). A new backend is a room behind
:class:`memd.llm.client.Backend` plus one row here; :mod:`memd.llm.models` loops over them.

Each room's module (and its SDK) is imported only when a job is routed to it.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from memd.config_llm import BackendConfig, LLMConfig
from memd.llm.client import Backend, Disabled
from memd.llm.ledger import JobKind

Protocol = Literal["tools", "whole"]


@dataclass(frozen=True)
class BackendSpec:
    """What memd knows of one backend before opening it."""

    name: str
    key_env: str  # its API key's variable ("" for none)
    opener: str  # "module:function" of its room, imported when a job needs it
    models: Mapping[JobKind, str]  # the default model per job ("" = the server's first)
    turn_on: str  # the one line that turns it on, for status and doctor
    auto: bool = True  # picked by ``provider: auto`` when found
    # The jobs it serves as the default backend; the others only when llm.models names it
    # for them (an agent's CLI takes seconds to start: a prompt's recall cannot wait for it).
    serves: frozenset[JobKind] | None = None
    program: str = ""  # an agent CLI's executable (its login is the user's): "claude", …


def _same(model: str, recall: str) -> dict[JobKind, str]:
    return {
        "session_notes": model,
        "memory_extract": model,
        "recall": recall,
        "compact": model,
        "dream": model,
    }


CLAUDE = _same("claude-sonnet-4-6", "claude-haiku-4-5")
NOT_RECALL: frozenset[JobKind] = frozenset({"session_notes", "memory_extract", "compact", "dream"})
CLI_DEFAULT = "default"  # an agent CLI's model: the one its login uses when none is named


def _cli(name: str, program: str, plan: str, models: dict[JobKind, str]) -> BackendSpec:
    """An agent's CLI on the user's own login: never picked by ``auto`` (it spends the
    user's plan), and not for recall unless named."""
    return BackendSpec(
        name,
        "",
        f"memd.llm.cli_{name.removesuffix('_cli')}:open_{name}",
        models,
        f"llm.provider: {name} (runs `{program}` on your login: it spends your {plan}), "
        "then: memdctl reload",
        auto=False,
        serves=NOT_RECALL,
        program=program.split()[0],
    )


BACKENDS: dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (
        BackendSpec(
            "anthropic",
            "ANTHROPIC_API_KEY",
            "memd.llm.anthropic_api:open_anthropic",
            CLAUDE,
            "set ANTHROPIC_API_KEY in ~/.config/memd/env, then: memdctl reload",
        ),
        BackendSpec(
            "openai",
            "OPENAI_API_KEY",
            "memd.llm.openai_api:open_openai",
            _same("gpt-5-mini", "gpt-5-nano"),
            "set OPENAI_API_KEY in ~/.config/memd/env (or llm.provider: openai and "
            "llm.base_url: <server>/v1 for any OpenAI-compatible server), then: memdctl reload",
        ),
        BackendSpec(
            "gemini",
            "GEMINI_API_KEY",
            "memd.llm.gemini_api:open_gemini",
            _same("gemini-2.5-flash", "gemini-2.5-flash-lite"),
            "set GEMINI_API_KEY in ~/.config/memd/env, then: memdctl reload",
        ),
        BackendSpec(
            "local",
            "",
            "memd.llm.openai_api:open_local",
            _same("", ""),
            "start a local model server (ollama serve, llama-server, LM Studio, vllm serve) "
            "or set llm.local.base_url, then: memdctl reload",
        ),
        BackendSpec(
            "bedrock",
            "",
            "memd.llm.anthropic_api:open_bedrock",
            CLAUDE,
            "llm.provider: bedrock (with AWS credentials and AWS_REGION)",
            auto=False,
        ),
        BackendSpec(
            "vertex",
            "",
            "memd.llm.anthropic_api:open_vertex",
            CLAUDE,
            "llm.provider: vertex (with CLOUD_ML_REGION and Google credentials)",
            auto=False,
        ),
        _cli("claude_cli", "claude -p", "Claude plan", _same("sonnet", "haiku")),
        _cli("codex_cli", "codex exec", "ChatGPT plan", _same(CLI_DEFAULT, CLI_DEFAULT)),
        _cli("gemini_cli", "gemini -p", "Gemini quota", _same("flash", "flash-lite")),
    )
}
CLI_BACKENDS = tuple(name for name, spec in BACKENDS.items() if spec.program)
# What ``provider: auto`` tries, in order (README, "Which model memd thinks with").
AUTO_ORDER = ("anthropic", "openai", "gemini", "local")


def settings_for(name: str, config: LLMConfig) -> BackendConfig:
    """The backend's own settings: its section (``llm.openai`` …), under the top-level
    ``base_url``/``api_key_env`` when ``llm.provider`` names it (``auto``: Anthropic's)."""
    own = getattr(config, name, None)
    section = own if isinstance(own, BackendConfig) else BackendConfig()
    named = config.provider if config.provider != "auto" else "anthropic"
    if named == name:
        section = dataclasses.replace(
            section,
            base_url=config.base_url or section.base_url,
            api_key_env=config.api_key_env or section.api_key_env,
        )
    spec = BACKENDS[name]
    if not section.api_key_env and spec.key_env:
        section = dataclasses.replace(section, api_key_env=spec.key_env)
    return section


def is_loopback(url: str) -> bool:
    """Whether ``url`` names this machine (a local server: free, and usually a small model)."""
    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return False
    return host in ("localhost", "::1") or host.startswith("127.")


def open_backend(name: str, config: LLMConfig, env: Mapping[str, str]) -> Backend | Disabled:
    """Open backend ``name`` from ``config`` (its room imported now); :class:`Disabled` says
    what is missing. Blocking: the daemon calls it in a worker thread."""
    spec = BACKENDS[name]
    module, function = spec.opener.split(":")
    try:
        opener = getattr(importlib.import_module(module), function)
    except ImportError as exc:
        return Disabled(f"the {name} backend cannot load ({exc}): pip install -U memd")
    settings = settings_for(name, config)
    effective = dataclasses.replace(
        config, base_url=settings.base_url, api_key_env=settings.api_key_env
    )
    opened: Backend | Disabled = opener(effective, env)
    return opened


def open_llm(config: LLMConfig, env: Mapping[str, str]) -> Backend | Disabled:
    """The backend ``config.provider`` names (``auto``: Anthropic's), or :class:`Disabled`
    saying what is missing. For one backend alone (tests, tools); the daemon opens every job's
    backend through :func:`memd.llm.models.open_models`.

    ``env`` is the process environment as read at the entry point; nothing else is
    consulted. Never raises for a missing key or package: the daemon runs without models.
    """
    return open_backend("anthropic" if config.provider == "auto" else config.provider, config, env)
