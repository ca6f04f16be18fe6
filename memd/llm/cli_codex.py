"""Codex CLI as a backend (``llm.provider: codex_cli``): ``codex exec`` on the user's own login
(ChatGPT, or the API key ``codex login`` keeps), opt-in.

What memd runs (checked against the real CLI, 0.171.0, in ``tests/test_cli_backends.py``)::

    codex exec --json --ephemeral --ignore-user-config --skip-git-repo-check
               --sandbox read-only -c approval_policy="never"
               -c model_instructions_file=<private file> --disable <every tool feature> -
    (with -m <model> when one is named; -c model_providers.memd=… when llm.codex_cli.base_url)

- ``--ignore-user-config``: nothing of ``$CODEX_HOME/config.toml`` (so no MCP server, hook,
  ``notify`` program, profile or trust of the user's), while the login in
  ``$CODEX_HOME/auth.json`` is still used; the hooks feature off too;
- no tool that can run or write: the shell, unified exec, code mode, sub-agents, apps,
  plugins, the browser, images and web search are turned off, and the sandbox is read-only
  with no approvals, so what a model still asks for (``apply_patch`` on some models) is
  refused by Codex itself;
- ``--ephemeral``: no rollout under ``$CODEX_HOME/sessions``, nothing for memd to follow;
- the system prompt replaces Codex's own (``model_instructions_file``);
- its JSON events carry the answer (the last ``agent_message``), the usage
  (``turn.completed``) and the failures (``error``, ``turn.failed``), mapped here: a refused
  login is :class:`AuthenticationFailed`, 429 :class:`RateLimited` (a plan's usage limit
  too), a spent quota :class:`QuotaExceeded`, the context window :class:`PromptTooLong`, a
  connection that could not be made :class:`Unreachable`, an answer stopped at its output
  limit a reply cut short (which the whole-answer checks refuse), the rest
  :class:`Unavailable`.

``llm.codex_cli.base_url`` makes memd name a provider of its own at that URL (Responses API,
the login's credentials, no WebSocket, no retries of Codex's own); without it Codex talks to
the login's own service. memd's ``OPENAI_API_KEY`` is never passed on.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from memd.config_llm import CLIConfig, LLMConfig
from memd.errors import (
    AuthenticationFailed,
    LLMError,
    MalformedAnswer,
    PromptTooLong,
    QuotaExceeded,
    RateLimited,
    Unavailable,
    Unreachable,
)
from memd.llm.backends import CLI_DEFAULT
from memd.llm.cli_input import file_present, printable
from memd.llm.cli_run import Call, CLIBackend, Ran, exited_badly, open_room
from memd.llm.client import Disabled, LLMReply, Usage

NAME = "codex_cli"
PROGRAM = "codex"
# Every feature of Codex 0.171 that offers the model a tool able to run or write something,
# or that runs something of the user's.
FEATURES_OFF = (
    "shell_tool",
    "unified_exec",
    "code_mode",
    "code_mode_host",
    "multi_agent",
    "multi_agent_v2",
    "apps",
    "plugins",
    "hooks",
    "browser_use",
    "in_app_browser",
    "computer_use",
    "image_generation",
    "view_image",
    "tool_suggest",
    "skill_search",
    "sleep_tool",
    "goals",
    "memories",
    "shell_snapshot",
)
SETTINGS = (
    'approval_policy="never"',
    'web_search="disabled"',
    "analytics.enabled=false",
    "feedback.enabled=false",
    "check_for_update_on_startup=false",
    "include_environment_context=false",
)


class CodexRoom:
    """:class:`~memd.llm.cli_run.Room` of Codex CLI."""

    name = NAME
    program = PROGRAM
    own_env: tuple[str, ...] = ("CODEX_HOME",)

    def __init__(self, settings: CLIConfig, env: Mapping[str, str]) -> None:
        self.base_url = settings.base_url.rstrip("/")
        given = env.get("CODEX_HOME")
        home = Path(env.get("HOME") or os.path.expanduser("~"))
        self.codex_home = Path(given) if given else home / ".codex"

    def argv(self, command: str, call: Call) -> list[str]:
        argv = [command, "exec", "--json", "--ephemeral", "--ignore-user-config"]
        argv += ["--skip-git-repo-check", "--sandbox", "read-only", "--color", "never"]
        for feature in FEATURES_OFF:
            argv += ["--disable", feature]
        for setting in (*SETTINGS, f"model_instructions_file={json.dumps(str(call.system_file))}"):
            argv += ["-c", setting]
        if self.base_url:
            provider = (
                f'{{name="memd", base_url={json.dumps(self.base_url)}, wire_api="responses", '
                "requires_openai_auth=true, supports_websockets=false, "
                "request_max_retries=0, stream_max_retries=0}"
            )
            argv += ["-c", 'model_provider="memd"', "-c", f"model_providers.memd={provider}"]
        if call.model and call.model != CLI_DEFAULT:
            argv += ["--model", call.model]
        return [*argv, "-"]

    def env(self, base: dict[str, str], call: Call) -> dict[str, str]:
        base["NO_COLOR"] = "1"
        return base

    def answer(self, ran: Ran, call: Call) -> LLMReply:
        events = parse_events(ran.stdout)
        if not events:
            if ran.returncode != 0:
                raise exited_badly(ran, PROGRAM)
            raise MalformedAnswer("codex printed no JSON events; nothing changed")
        text, usage, failed = read_events(events)
        if failed is not None:
            if "max_output_tokens" in failed and text is not None:
                return _reply(text, "max_tokens", usage, ran, call)
            raise failure(failed)
        if ran.returncode != 0:
            raise exited_badly(ran, PROGRAM)
        if usage is None or text is None:
            raise MalformedAnswer("codex's turn did not end with an answer; nothing changed")
        return _reply(text, "end_turn", usage, ran, call)

    def login(self) -> str | None:
        auth = self.codex_home / "auth.json"
        return str(auth) if file_present(auth) else None

    def after(self, ran: Ran | None, call: Call) -> None:
        return None  # --ephemeral: no rollout of the call is kept

    def prepare(self, workdir: Path) -> None:
        return None  # everything is on its command line


def parse_events(stdout: bytes) -> list[dict[str, Any]]:
    """The JSON objects of ``codex exec --json``'s lines (other lines are skipped)."""
    events: list[dict[str, Any]] = []
    for line in stdout.splitlines():
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            events.append(value)
    return events


def read_events(
    events: Sequence[Mapping[str, Any]],
) -> tuple[str | None, Usage | None, str | None]:
    """The last answer, the turn's usage (None: the turn never completed) and why the turn
    failed (None: it did not)."""
    text: str | None = None
    usage: Usage | None = None
    failed: str | None = None
    for event in events:
        kind = event.get("type")
        item = event.get("item")
        if kind == "item.completed" and isinstance(item, Mapping):
            if item.get("type") == "agent_message" and isinstance(item.get("text"), str):
                text = item["text"]
        elif kind == "turn.completed":
            usage = usage_of(event.get("usage"))
        elif kind == "turn.failed":
            error = event.get("error")
            said = error.get("message") if isinstance(error, Mapping) else None
            failed = printable(str(said or "the turn failed"))
        elif kind == "error" and failed is None and not _reconnecting(event):
            failed = printable(str(event.get("message") or "an error"))
    return text, usage, failed


def _reconnecting(event: Mapping[str, Any]) -> bool:
    return str(event.get("message") or "").startswith("Reconnecting")


def usage_of(raw: Any) -> Usage:
    """``turn.completed``'s usage: input counts cached and written tokens too."""
    if not isinstance(raw, Mapping):
        return Usage()

    def count(key: str) -> int:
        value = raw.get(key)
        return value if isinstance(value, int) and 0 <= value < 2**53 else 0

    cached, written = count("cached_input_tokens"), count("cache_write_input_tokens")
    fresh = max(0, count("input_tokens") - cached - written)
    return Usage(fresh, count("output_tokens"), written, cached)


def failure(said: str) -> LLMError:
    """A failed turn's message in the seam's classes."""
    lowered = said.lower()
    if any(w in lowered for w in ("401", "unauthorized", "oauth/token", "log in", "login")):
        return AuthenticationFailed(f"codex's login was refused ({said}): run `codex login`")
    if "quota" in lowered or "billing" in lowered:
        return QuotaExceeded(f"codex: {said}")
    if "429" in lowered or "too many requests" in lowered or "usage limit" in lowered:
        return RateLimited(f"codex: {said}")
    if "context window" in lowered or "context length" in lowered:
        return PromptTooLong(f"codex: {said}")
    if "error sending request" in lowered and "disconnected" not in lowered:
        return Unreachable(f"codex could not reach its model: {said}")
    return Unavailable(f"codex: {said}")


def _reply(text: str, stop: str, usage: Usage | None, ran: Ran, call: Call) -> LLMReply:
    return LLMReply(
        id="codex-cli",
        model=call.model,
        content=[{"type": "text", "text": text}] if text else [],
        stop_reason=stop,
        usage=usage or Usage(),
        backend=NAME,
        seconds=ran.seconds,
        priced=True,
    )


def room(config: LLMConfig, env: Mapping[str, str]) -> CodexRoom:
    """The room of ``config``'s settings (no I/O): what status asks about the login."""
    return CodexRoom(config.codex_cli, env)


def open_codex_cli(config: LLMConfig, env: Mapping[str, str]) -> CLIBackend | Disabled:
    """The ``codex_cli`` backend, or why it cannot run (not installed)."""
    install = "Codex CLI is not installed: npm install -g @openai/codex"
    return open_room(room(config, env), config.codex_cli, env, install)
