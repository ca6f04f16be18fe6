"""Claude Code's CLI as a backend (``llm.provider: claude_cli``): ``claude -p`` on the user's
own login (a Claude subscription or the Console login that ``claude`` keeps), opt-in.

What memd runs (checked against the real CLI, 2.1.197 and 2.1.332, in
``tests/test_cli_backends.py``)::

    claude -p --output-format json --model <model> --system-prompt-file <private file>
           --tools "" --strict-mcp-config --setting-sources "" --settings <no hooks>
           --no-session-persistence --disable-slash-commands --permission-mode dontAsk

- no tool at all (``--tools ""``: the request offers none), no MCP server (only those of
  ``--mcp-config``, and there are none), no settings file of the user's or a project's (so no
  hook, plugin or permission of theirs; ``--settings`` adds ``disableAllHooks``), no slash
  command; CLAUDE.md files and auto memory off (``CLAUDE_CODE_DISABLE_CLAUDE_MDS``,
  ``CLAUDE_CODE_DISABLE_AUTO_MEMORY``);
- no transcript: ``--no-session-persistence`` writes nothing under ``~/.claude/projects``;
- the CLI retries nothing (``CLAUDE_CODE_MAX_RETRIES=0``: the cost guard backs off), asks for
  at most the job's output limit (``CLAUDE_CODE_MAX_OUTPUT_TOKENS``), sends no telemetry and
  does not update itself;
- its JSON result carries the answer (``result``), the usage (tokens, cache reads and
  writes) and ``is_error`` with the API's status when a call failed: 401/403 and "Not logged
  in" are :class:`AuthenticationFailed`, 429 :class:`RateLimited`, a plan's usage limit too
  (with the time it resets, when said), "Prompt is too long" :class:`PromptTooLong` with its
  figures, "credit balance is too low" :class:`QuotaExceeded`, a connection failure
  :class:`Unreachable`, 5xx and the rest through :func:`~memd.llm.errors_map.classify_status`.

The login is ``~/.claude/.credentials.json`` (``$CLAUDE_CONFIG_DIR`` moves it), or
``~/.claude.json``'s ``oauthAccount`` (a login kept in the desktop's keychain).
``llm.claude_cli.base_url`` becomes ``ANTHROPIC_BASE_URL`` (a gateway, or a test's loopback
server); memd's own ``ANTHROPIC_API_KEY`` is never passed on.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memd import foreign_reads
from memd.config_llm import CLIConfig, LLMConfig
from memd.errors import (
    AuthenticationFailed,
    LLMError,
    MalformedAnswer,
    PromptTooLong,
    QuotaExceeded,
    RateLimited,
    Unreachable,
)
from memd.llm.cli_input import file_present, printable
from memd.llm.cli_run import Call, CLIBackend, Ran, open_room, parse_json
from memd.llm.client import Disabled, LLMReply, Usage
from memd.llm.errors_map import classify_status

NAME = "claude_cli"
PROGRAM = "claude"
SETTINGS = json.dumps({"disableAllHooks": True, "includeCoAuthoredBy": False})
_TOO_LONG = re.compile(r"~?([\d,]+) tokens \(limit ([\d,]+)\)")
_RESETS = re.compile(r"\|(\d{9,11})\b")  # "Claude AI usage limit reached|1767225600"
_SMALL = 1024 * 1024


class ClaudeRoom:
    """:class:`~memd.llm.cli_run.Room` of Claude Code."""

    name = NAME
    program = PROGRAM
    own_env: tuple[str, ...] = ("CLAUDE_CONFIG_DIR",)

    def __init__(self, settings: CLIConfig, env: Mapping[str, str]) -> None:
        self.base_url = settings.base_url
        self.home = Path(env.get("HOME") or os.path.expanduser("~"))
        given = env.get("CLAUDE_CONFIG_DIR")
        self.config_dir = Path(given) if given else self.home / ".claude"

    def argv(self, command: str, call: Call) -> list[str]:
        return [
            command,
            "-p",
            "--output-format",
            "json",
            "--model",
            call.model,
            "--system-prompt-file",
            str(call.system_file),
            "--tools",
            "",
            "--strict-mcp-config",
            "--setting-sources",
            "",
            "--settings",
            SETTINGS,
            "--no-session-persistence",
            "--disable-slash-commands",
            "--permission-mode",
            "dontAsk",
        ]

    def env(self, base: dict[str, str], call: Call) -> dict[str, str]:
        base.update(
            CLAUDE_CODE_MAX_RETRIES="0",
            CLAUDE_CODE_MAX_OUTPUT_TOKENS=str(call.max_tokens),
            CLAUDE_CODE_DISABLE_AUTO_MEMORY="1",
            CLAUDE_CODE_DISABLE_CLAUDE_MDS="1",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            DISABLE_TELEMETRY="1",
            DISABLE_AUTOUPDATER="1",
            DISABLE_ERROR_REPORTING="1",
        )
        if self.base_url:
            base["ANTHROPIC_BASE_URL"] = self.base_url
        return base

    def answer(self, ran: Ran, call: Call) -> LLMReply:
        data = parse_json(ran, PROGRAM)
        if not isinstance(data, dict) or data.get("type") != "result":
            raise MalformedAnswer("claude printed JSON that is not its result; nothing changed")
        text = data.get("result")
        if data.get("is_error") or ran.returncode != 0:
            raise failure(data, ran)
        if not isinstance(text, str):
            raise MalformedAnswer("claude's result holds no answer text; nothing changed")
        return LLMReply(
            id=str(data.get("session_id") or "claude-cli"),
            model=_model_of(data, call.model),
            content=[{"type": "text", "text": text}] if text else [],
            stop_reason=_stop_reason(data),
            usage=usage_of(data.get("usage")),
            backend=NAME,
            seconds=ran.seconds,
            priced=True,
        )

    def login(self) -> str | None:
        credentials = self.config_dir / ".credentials.json"
        if file_present(credentials):
            return str(credentials)
        state = self.config_dir / ".claude.json"
        if not state.exists():
            state = self.home / ".claude.json"
        config = foreign_reads.read_json_object(state, 64 * _SMALL, links="follow")
        if config is not None and (config.get("oauthAccount") or config.get("primaryApiKey")):
            return f"{state} (the login is in the keychain)"
        return None

    def after(self, ran: Ran | None, call: Call) -> None:
        return None  # --no-session-persistence: nothing of the call is left

    def prepare(self, workdir: Path) -> None:
        return None  # everything is on its command line


def failure(data: Mapping[str, Any], ran: Ran) -> LLMError:
    """The failure a result with ``is_error`` reports, in the seam's classes."""
    said = printable(str(data.get("result") or ran.stderr_tail() or "no reason given"))
    lowered = said.lower()
    status = data.get("api_error_status")
    if "not logged in" in lowered or "/login" in lowered:
        return AuthenticationFailed(f"claude is not logged in ({said}): run `claude` and /login")
    if "prompt is too long" in lowered:
        figures = _TOO_LONG.search(said)
        actual, limit = (int(g.replace(",", "")) for g in figures.groups()) if figures else (0, 0)
        return PromptTooLong(f"claude: {said}", actual=actual or None, limit=limit or None)
    if "usage limit" in lowered or "hit your limit" in lowered:
        return RateLimited(f"claude: {said}", retry_after=_resets_in(said))
    if "credit balance" in lowered:
        return QuotaExceeded(f"claude: {said}")
    if "unable to connect" in lowered or "connection error" in lowered:
        return Unreachable(f"claude could not reach its API: {said}")
    if isinstance(status, int) and 400 <= status < 600:
        return classify_status(
            status, error_type=None, error_code=None, message=f"claude: {said}", retry_after=None
        )
    return classify_status(
        500, error_type=None, error_code=None, message=f"claude: {said}", retry_after=None
    )


def usage_of(raw: Any) -> Usage:
    """The result's usage (what every request of the call was billed, summed)."""
    if not isinstance(raw, Mapping):
        return Usage()

    def count(key: str) -> int:
        value = raw.get(key)
        return value if isinstance(value, int) and 0 <= value < 2**53 else 0

    return Usage(
        count("input_tokens"),
        count("output_tokens"),
        count("cache_creation_input_tokens"),
        count("cache_read_input_tokens"),
    )


def _model_of(data: Mapping[str, Any], asked: str) -> str:
    models = data.get("modelUsage")
    if isinstance(models, Mapping) and len(models) == 1:
        return printable(str(next(iter(models))), 100)
    return asked


def _stop_reason(data: Mapping[str, Any]) -> str:
    reason = data.get("stop_reason")
    return reason if reason in ("end_turn", "max_tokens", "stop_sequence") else "end_turn"


def _resets_in(said: str) -> float | None:
    found = _RESETS.search(said)
    if found is None:
        return None
    return max(0.0, float(found.group(1)) - time.time())


def room(config: LLMConfig, env: Mapping[str, str]) -> ClaudeRoom:
    """The room of ``config``'s settings (no I/O): what status asks about the login."""
    return ClaudeRoom(config.claude_cli, env)


def open_claude_cli(config: LLMConfig, env: Mapping[str, str]) -> CLIBackend | Disabled:
    """The ``claude_cli`` backend, or why it cannot run (not installed)."""
    install = "Claude Code's CLI is not installed: npm install -g @anthropic-ai/claude-code"
    return open_room(room(config, env), config.claude_cli, env, install)
