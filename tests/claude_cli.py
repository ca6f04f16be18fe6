"""The real Claude Code CLI for end-to-end tests (issue 10): installed once with npm, pinned.

:func:`installed_claude` installs ``@anthropic-ai/claude-code@<version>`` (2.1.197 unless
asked; :data:`CLAUDE_CODE_VERSIONS` are those the tests pin, :data:`EACH_VERSION` those a
test run per version runs on) into a cache dir
(:func:`tests.agent_cli.npm_installed`, one folder per version; the native binary arrives as
an npm optional dependency) and returns the ``claude`` command, or ``None`` when npm is
absent.
:func:`claude_env` and :func:`prepare_home` make a throwaway user for it: onboarding accepted
in ``~/.claude.json``, the model at a loopback Messages-API server (``ANTHROPIC_BASE_URL``),
no telemetry or update checks. The ``claude_cli`` fixture in ``conftest.py`` wraps this, so any
test can run ``claude -p …`` or ``claude mcp list`` (``claude_cli_each`` runs a test once per
pinned version)::

    def test_x(claude_cli: ClaudeCLI, tmp_path: Path) -> None:
        with LoopbackAPI(profile="real_client") as api:
            done = claude_cli.run(["-p", "hello"], cwd=..., env=claude_cli.env(tmp_path, api.url))
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.agent_cli import cache_root, npm_installed

CLAUDE_CODE_VERSION = "2.1.197"
# 2.1.331: issue 25's measurements; 2.1.332: issue 38's (the window of its models, idle
# compaction, the 2026 MCP protocol).
CLAUDE_CODE_VERSIONS = (CLAUDE_CODE_VERSION, "2.1.331", "2.1.332")
NEWEST_VERSION = CLAUDE_CODE_VERSIONS[-1]
# A test run once per version runs on these: the oldest and the newest, where what the tests
# look at differs (2.1.331 and 2.1.332 write the same line types and hook input; the tests of
# what only 2.1.332 does use the newest alone). Each real-CLI run costs 5-30 s.
EACH_VERSION = (CLAUDE_CODE_VERSION, NEWEST_VERSION)
PACKAGE = f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}"
API_KEY = "sk-ant-loopback-0000000000000000000000"


def cache_dir(env: Mapping[str, str] | None = None, version: str = CLAUDE_CODE_VERSION) -> Path:
    return cache_root(env) / f"claude-code-{version}"


def installed_claude(
    env: Mapping[str, str] | None = None, version: str = CLAUDE_CODE_VERSION
) -> Path | None:
    """The pinned ``claude`` command, installed into the cache dir when missing; ``None``
    when npm is not available. Raises ``RuntimeError`` when npm fails."""
    return npm_installed("@anthropic-ai/claude-code", version, "claude-code", "claude", env)


def prepare_home(home: Path, version: str = CLAUDE_CODE_VERSION) -> None:
    """Onboarding accepted, so ``claude`` asks nothing."""
    state = home / ".claude.json"
    data = json.loads(state.read_text()) if state.exists() else {}
    data.update(hasCompletedOnboarding=True, lastOnboardingVersion=version)
    state.write_text(json.dumps(data))


def claude_env(base: Mapping[str, str], api_url: str) -> dict[str, str]:
    """``base`` (HOME and the rest) plus the model at ``api_url`` and no background traffic."""
    return {
        **base,
        "ANTHROPIC_BASE_URL": api_url,
        "ANTHROPIC_API_KEY": API_KEY,
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


@dataclass(frozen=True)
class ClaudeCLI:
    """The installed command; :meth:`run` runs it to completion."""

    command: Path
    version: str = CLAUDE_CODE_VERSION

    def env(self, base: Mapping[str, str], api_url: str) -> dict[str, str]:
        prepare_home(Path(base["HOME"]), self.version)
        return claude_env(base, api_url)

    def run(
        self,
        args: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout: float = 120.0,
        stdin: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """``claude args`` to its end, ``stdin`` its input (a prompt past an argument's
        limit)."""
        return subprocess.run(
            [str(self.command), *args],
            cwd=cwd,
            env=dict(env),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
