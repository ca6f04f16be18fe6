"""What memd finds of the agents' CLIs without spending a call (issue 34): for ``status`` and
``doctor``, each CLI's executable (or that it is not installed), where its login is (its
auth files: nothing is read of them, they are only seen), and the line that turns it on.

A CLI backend is opt-in: found, it is never used until ``llm.provider`` or ``llm.models``
names it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass

from memd.config_llm import CLIConfig, LLMConfig
from memd.llm.backends import BACKENDS, CLI_BACKENDS
from memd.llm.cli_input import find_command


@dataclass(frozen=True)
class CLIFound:
    """One agent CLI as memd sees it."""

    name: str  # "claude_cli"
    command: str | None  # its executable, None when not installed
    login: str | None  # where its login is, None when it has none
    turn_on: str


def find_clis(config: LLMConfig, env: Mapping[str, str]) -> dict[str, CLIFound]:
    """Every agent CLI backend, installed or not (blocking: a PATH lookup and stats)."""
    found: dict[str, CLIFound] = {}
    for name in CLI_BACKENDS:
        spec = BACKENDS[name]
        settings = getattr(config, name)
        assert isinstance(settings, CLIConfig)
        command = find_command(settings.command, env, spec.program)
        login = None
        if command is not None:
            module = importlib.import_module(spec.opener.split(":")[0])
            login = module.room(config, env).login()
        found[name] = CLIFound(name, str(command) if command else None, login, spec.turn_on)
    return found
