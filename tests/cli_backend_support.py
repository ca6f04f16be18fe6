"""The agents' real CLIs as memd's model, for tests (issue 34): each CLI's login in a throwaway
home (no API key of memd's: the login is the CLI's own file), its model at a loopback server
of :mod:`memd.testing.loopback` (Messages for Claude Code, Responses for Codex,
``generateContent`` for Gemini), canaries that prove the user's own hooks and MCP servers do
not run on memd's call, and the ``llm`` config that turns the CLI on.

Logins, as each CLI keeps them after its own login command:

- Claude Code: ``~/.claude/.credentials.json`` with a subscription's OAuth token (``claude``'s
  /login), onboarding done in ``~/.claude.json``;
- Codex: ``~/.codex/auth.json`` of a ChatGPT login (``codex login``): tokens, no API key;
- Gemini: ``~/.gemini/.env`` with the key Gemini CLI reads, ``gemini-api-key`` chosen in its
  settings (a Google login speaks another wire, Code Assist's).
"""

from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from memd.testing.loopback import LoopbackAPI
from memd_client.hooks_codex import trust_entries
from tests.claude_cli import NEWEST_VERSION, installed_claude, prepare_home
from tests.other_cli import NO_EGRESS, installed_codex, installed_gemini

AGENTS = ("claude", "codex", "gemini")
OAUTH_TOKEN = "sk-ant-oat01-loopback-login"
MEMD_SECRET = "sk-memd-own-secret-0123456789"  # memd's keys: no CLI may see them
SECRETS = {
    "ANTHROPIC_API_KEY": MEMD_SECRET,
    "OPENAI_API_KEY": MEMD_SECRET,
    "GEMINI_API_KEY": MEMD_SECRET,
    "GOOGLE_API_KEY": MEMD_SECRET,
}


@dataclass(frozen=True)
class CLIHome:
    """One agent's CLI, logged in inside ``home``, canaries in place."""

    agent: str
    command: Path
    home: Path

    @property
    def backend(self) -> str:
        return f"{self.agent}_cli"

    @property
    def canaries(self) -> list[Path]:
        """Files the user's own hooks, MCP servers and ``notify`` would make if they ran."""
        return [self.home / f"canary-{what}" for what in ("hook", "start", "mcp", "notify")]

    @property
    def transcripts(self) -> Path:
        """Where the CLI keeps its sessions (what memd's watcher follows)."""
        return {
            "claude": self.home / ".claude" / "projects",
            "codex": self.home / ".codex" / "sessions",
            "gemini": self.home / ".gemini" / "tmp",
        }[self.agent]

    def base_url(self, api: LoopbackAPI) -> str:
        return f"{api.url}/v1" if self.agent == "codex" else api.url

    def config(self, api: LoopbackAPI, **extra: str) -> str:
        """The ``llm`` section that turns this CLI on for every job it serves."""
        lines = [
            "llm:",
            f"  provider: {self.backend}",
            "  find_local: false",
            f"  {self.backend}:",
            f"    command: {self.command}",
            f"    base_url: {self.base_url(api)}",
        ]
        lines += [f"    {key}: {value}" for key, value in extra.items()]
        return "\n".join(lines) + "\n"

    def logout(self) -> None:
        for login in (
            self.home / ".claude" / ".credentials.json",
            self.home / ".codex" / "auth.json",
            self.home / ".gemini" / ".env",
        ):
            login.unlink(missing_ok=True)


def installed(agent: str, version: str = NEWEST_VERSION) -> Path | None:
    """The pinned CLI (Claude Code: the newest pin unless ``version`` names another)."""
    if agent == "claude":
        return installed_claude(version=version)
    return installed_codex() if agent == "codex" else installed_gemini()


def daemon_env() -> dict[str, str]:
    """What memd's own environment holds beside HOME: its keys (which no CLI may see) and a
    proxy that does not exist (loopback exempt), so nothing leaves the machine."""
    return {**SECRETS, **NO_EGRESS}


def logged_in(agent: str, command: Path, home: Path, version: str = NEWEST_VERSION) -> CLIHome:
    """``agent``'s CLI logged in in ``home``, its user config holding hooks, an MCP server
    and (Codex) a ``notify`` program that each touch a canary file."""
    made = CLIHome(agent, command, home)
    hook, start, mcp, notify = (str(p) for p in made.canaries)
    if agent == "claude":
        _claude(home, hook, start, mcp, version)
    elif agent == "codex":
        _codex(home, hook, start, mcp, notify)
    else:
        _gemini(home, hook, start, mcp)
    return made


def _claude(home: Path, hook: str, start: str, mcp: str, version: str) -> None:
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    prepare_home(home, version)
    state = json.loads((home / ".claude.json").read_text())
    state["mcpServers"] = {"canary": {"type": "stdio", "command": "touch", "args": [mcp]}}
    (home / ".claude.json").write_text(json.dumps(state))
    expires = int(time.time() * 1000) + 10**10
    oauth = {
        "accessToken": OAUTH_TOKEN,
        "refreshToken": "sk-ant-ort01-loopback",
        "expiresAt": expires,
        "scopes": ["user:inference", "user:profile"],
        "subscriptionType": "max",
    }
    _private(home / ".claude" / ".credentials.json", json.dumps({"claudeAiOauth": oauth}))
    hooks = {
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": f"touch {hook}"}]}],
        "SessionStart": [{"hooks": [{"type": "command", "command": f"touch {start}"}]}],
    }
    (home / ".claude" / "settings.json").write_text(json.dumps({"hooks": hooks}))


def chatgpt_jwt() -> str:
    """An id token of the shape Codex reads a ChatGPT login from (unsigned: it is not
    checked offline)."""

    def part(value: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    claims = {
        "email": "user@example.com",
        "exp": int(time.time()) + 10**8,
        "https://api.openai.com/auth": {
            "chatgpt_plan_type": "plus",
            "chatgpt_account_id": "acc-loopback",
            "chatgpt_user_id": "user-loopback",
        },
    }
    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}.c2ln"


def _codex(home: Path, hook: str, start: str, mcp: str, notify: str) -> None:
    folder = home / ".codex"
    folder.mkdir(parents=True, exist_ok=True)
    token = chatgpt_jwt()
    auth = {
        "auth_mode": "chatgpt",
        "OPENAI_API_KEY": None,
        "tokens": {
            "id_token": token,
            "access_token": token,
            "refresh_token": "rt-loopback",
            "account_id": "acc-loopback",
        },
        "last_refresh": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _private(folder / "auth.json", json.dumps(auth))
    # Hooks as memd installs its own: hooks.json, each trusted in config.toml (else Codex
    # skips it without a word).
    hooks_file = folder / "hooks.json"
    hooks = {
        "hooks": {
            "UserPromptSubmit": [{"hooks": [{"type": "command", "command": f"touch {hook}"}]}],
            "SessionStart": [{"hooks": [{"type": "command", "command": f"touch {start}"}]}],
        }
    }
    hooks_file.write_text(json.dumps(hooks))
    trusted = trust_entries(hooks_file, hooks, lambda command: True)
    state = "".join(
        f'\n[hooks.state."{key}"]\ntrusted_hash = "{value}"\n' for key, value in trusted.items()
    )
    (folder / "config.toml").write_text(
        f'notify = ["touch", "{notify}"]\n\n[mcp_servers.canary]\ncommand = "touch"\n'
        f'args = ["{mcp}"]\n{state}'
    )


def _gemini(home: Path, hook: str, start: str, mcp: str) -> None:
    folder = home / ".gemini"
    folder.mkdir(parents=True, exist_ok=True)
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "hooks": {
            "BeforeAgent": [{"hooks": [{"type": "command", "command": f"touch {hook}"}]}],
            "SessionStart": [{"hooks": [{"type": "command", "command": f"touch {start}"}]}],
        },
        "mcpServers": {"canary": {"command": "touch", "args": [mcp]}},
    }
    (folder / "settings.json").write_text(json.dumps(settings))
    _private(folder / ".env", "GEMINI_API_KEY=gemini-cli-own-login-key\n")


def _private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def login_credential(agent: str) -> str:
    """What the CLI's requests carry from its login (never a key of memd's)."""
    if agent == "claude":
        return f"Bearer {OAUTH_TOKEN}"
    if agent == "codex":
        return f"Bearer {chatgpt_jwt().split('.')[0]}"  # the token's head is stable
    return "gemini-cli-own-login-key"
