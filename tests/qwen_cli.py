"""The real Qwen Code CLI for end-to-end tests (issue 35, the fourth agent), pinned, installed
with npm into the test cache (:mod:`tests.agent_cli`) and pointed at a loopback model of
:mod:`memd.testing.loopback` (Chat Completions, the real-client profile) in a throwaway home:
``OPENAI_BASE_URL``/``OPENAI_API_KEY``/``OPENAI_MODEL`` with ``security.auth.selectedType``
``openai``; usage statistics, telemetry and update checks off, and its own auto memory and
dream off (each costs a model request per turn, and memd's memory is what is tested). An
HTTP(S) proxy that does not exist, loopback exempt, keeps anything else it tries on the
machine."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.agent_cli import npm_installed
from tests.other_cli import NO_EGRESS

QWEN_VERSION = "0.24.4"
QWEN_PACKAGE = f"@qwen-code/qwen-code@{QWEN_VERSION}"
QWEN_MODEL = "qwen3-coder-plus"
RUN_TIMEOUT_S = 60.0


def installed_qwen() -> Path | None:
    return npm_installed("@qwen-code/qwen-code", QWEN_VERSION, "qwen-code", "qwen")


def qwen_settings() -> dict[str, Any]:
    return {
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "security": {"auth": {"selectedType": "openai"}},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
    }


@dataclass(frozen=True)
class QwenCLI:
    command: Path

    def env(self, base: Mapping[str, str], api_url: str) -> dict[str, str]:
        """``base`` (HOME and the rest) plus the model at ``api_url``; merges the settings
        into ``~/.qwen/settings.json`` (memd's hooks there are kept)."""
        settings = Path(base["HOME"]) / ".qwen" / "settings.json"
        settings.parent.mkdir(parents=True, exist_ok=True)
        current = json.loads(settings.read_text()) if settings.exists() else {}
        settings.write_text(json.dumps({**qwen_settings(), **current}, indent=2))
        env = {k: v for k, v in base.items() if not k.startswith("QWEN_")}
        return {
            **env,
            **NO_EGRESS,
            "OPENAI_API_KEY": "loopback",
            "OPENAI_BASE_URL": f"{api_url}/v1",
            "OPENAI_MODEL": QWEN_MODEL,
        }

    def run(
        self,
        args: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout: float = RUN_TIMEOUT_S,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.command), *args, "--output-format", "json"],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def session_id(stdout: str) -> str:
    """The session id ``--output-format json`` printed (its ``init`` event's)."""
    events = json.loads(stdout)
    return str(next(e["session_id"] for e in events if e.get("type") == "system"))
