"""The real Codex CLI and Gemini CLI for end-to-end tests (issue 24), pinned, installed with npm
into the test cache (:mod:`tests.agent_cli`), each pointed at a loopback model server of
:mod:`memd.testing.loopback_agents` in a throwaway home:

- Codex 0.171.0: a ``[model_providers.loopback]`` (``wire_api = "responses"``) whose
  ``base_url`` is the server, analytics, feedback, OpenTelemetry and update checks off;
- Gemini 0.61.0: ``GOOGLE_GEMINI_BASE_URL`` and an API key, ``-m`` always given (else it asks
  a routing model first), usage statistics, telemetry and update checks off, the project
  folder trusted by ``GEMINI_CLI_TRUST_WORKSPACE``.

Both also get an HTTP(S) proxy that does not exist, with loopback exempt, so nothing they try
leaves the machine. The ``codex_cli`` and ``gemini_cli`` fixtures (``conftest.py``) wrap this.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from memd.testing.loopback_agents import Wire
from tests.agent_cli import npm_installed

CODEX_VERSION = "0.171.0"
GEMINI_VERSION = "0.61.0"
CODEX_PACKAGE = f"@openai/codex@{CODEX_VERSION}"
GEMINI_PACKAGE = f"@google/gemini-cli@{GEMINI_VERSION}"
GEMINI_MODEL = "gemini-2.5-flash"
RUN_TIMEOUT_S = 50.0
NO_EGRESS = {
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}


def installed_codex() -> Path | None:
    return npm_installed("@openai/codex", CODEX_VERSION, "codex", "codex")


def installed_gemini() -> Path | None:
    return npm_installed("@google/gemini-cli", GEMINI_VERSION, "gemini-cli", "gemini")


def codex_config(api_url: str) -> str:
    """A ``config.toml`` with the model at ``api_url`` (the Responses API) and nothing sent
    anywhere else."""
    return (
        'model = "gpt-5-codex"\nmodel_provider = "loopback"\napproval_policy = "never"\n'
        'sandbox_mode = "read-only"\ncheck_for_update_on_startup = false\n\n'
        '[model_providers.loopback]\nname = "loopback"\n'
        f'base_url = "{api_url}/v1"\nwire_api = "responses"\nenv_key = "LOOPBACK_API_KEY"\n\n'
        "[analytics]\nenabled = false\n\n[feedback]\nenabled = false\n\n"
        '[otel]\nexporter = "none"\n'
    )


def gemini_settings() -> dict[str, object]:
    return {
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    }


@dataclass(frozen=True)
class AgentCLI:
    """An installed CLI; :meth:`env` prepares its home, :meth:`run` runs it to completion."""

    agent: str  # "codex" or "gemini"
    command: Path

    @property
    def wire(self) -> Wire:
        """The API its loopback server speaks."""
        return "responses" if self.agent == "codex" else "gemini"

    def env(self, base: Mapping[str, str], api_url: str) -> dict[str, str]:
        """``base`` (HOME and the rest) plus the model at ``api_url``; writes the CLI's
        config into HOME (Codex: ``~/.codex/config.toml``, kept when there is one)."""
        home = Path(base["HOME"])
        if self.agent == "codex":
            config = home / ".codex" / "config.toml"
            config.parent.mkdir(parents=True, exist_ok=True)
            if not config.exists():
                config.write_text(codex_config(api_url))
            return {**base, **NO_EGRESS, "LOOPBACK_API_KEY": "loopback"}
        settings = home / ".gemini" / "settings.json"
        settings.parent.mkdir(parents=True, exist_ok=True)
        current = json.loads(settings.read_text()) if settings.exists() else {}
        settings.write_text(json.dumps({**gemini_settings(), **current}, indent=2))
        return {
            **base,
            **NO_EGRESS,
            "GEMINI_API_KEY": "loopback",
            "GOOGLE_GEMINI_BASE_URL": api_url,
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            "GEMINI_CLI_NO_RELAUNCH": "true",
        }

    def prompt_args(self, prompt: str) -> list[str]:
        """The arguments of one non-interactive prompt."""
        if self.agent == "codex":
            return ["exec", "--skip-git-repo-check", prompt]
        return ["-m", GEMINI_MODEL, "-p", prompt, "--output-format", "json"]

    def run(
        self,
        args: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout: float = RUN_TIMEOUT_S,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.command), *args],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
