"""Gemini CLI as a backend (``llm.provider: gemini_cli``): ``gemini -p`` on the user's own login
(a Google account, or the API key in Gemini CLI's own ``~/.gemini/.env``), opt-in.

What memd runs (checked against the real CLI, 0.61.0, in ``tests/test_cli_backends.py``)::

    gemini -m <model> -p "" --output-format json --extensions none
           --allowed-mcp-server-names memd_none --policy <deny every tool>

in a folder of memd's own whose workspace settings (``.gemini/settings.json``, trusted by
``GEMINI_CLI_TRUST_WORKSPACE``, so they apply over the user's) turn hooks off
(``hooksConfig.enabled``), allow no built-in tool (``tools.core``) and no MCP server, send no
usage statistics or telemetry and make one attempt per call (``general.maxAttempts``: the
cost guard backs off). The policy file denies every tool as well, so the request offers
none. A system settings file would be stronger, but Gemini CLI reads one only when root owns
it. The system prompt replaces Gemini's own (``GEMINI_SYSTEM_MD``).

Gemini CLI records every chat (``~/.gemini/tmp/<project>/chats/``) and has no switch for it:
memd's watcher never follows a chat whose project is memd's own folder, and memd removes the
chat of its call once it is over.

Its JSON (on stdout, or after the stack trace on stderr when it fails) carries the answer
(``response``), the usage (``stats.models.*.tokens``) and ``error`` with the API's status:
401/403 and a missing key are :class:`AuthenticationFailed`, 429 :class:`RateLimited` (with
the delay it suggests), the input token count past the limit :class:`PromptTooLong`, 5xx
:class:`Unavailable`; a stream that ended without a finish reason (Gemini counts it in
``errorsByType``) is :class:`Unavailable` too, never a half answer.

``llm.gemini_cli.base_url`` becomes ``GOOGLE_GEMINI_BASE_URL``; memd's own
``GEMINI_API_KEY`` is never passed on.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memd import foreign_reads
from memd.config_llm import CLIConfig, LLMConfig
from memd.errors import AuthenticationFailed, LLMError, MalformedAnswer, RateLimited, Unavailable
from memd.llm.cli_input import file_present, printable
from memd.llm.cli_run import (
    WORK,
    Call,
    CLIBackend,
    Ran,
    exited_badly,
    model_calls_root,
    open_room,
    private_dir,
)
from memd.llm.client import Disabled, LLMReply, Usage
from memd.llm.errors_map import classify_status

NAME = "gemini_cli"
PROGRAM = "gemini"
NO_SERVER = "memd_none"  # an MCP server name and tool name that no one has
WORKSPACE_SETTINGS = {
    "hooksConfig": {"enabled": False},
    "tools": {"core": [NO_SERVER]},
    "mcp": {"allowed": [NO_SERVER]},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {
        "enableAutoUpdate": False,
        "enableAutoUpdateNotification": False,
        "maxAttempts": 1,
        "retryFetchErrors": False,
    },
}
DENY_ALL = '[[rule]]\ntoolName = "*"\ndecision = "deny"\npriority = 999\n'
_RETRY = re.compile(r"retry after (\d+(?:\.\d+)?)\s*s", re.IGNORECASE)
_SMALL = 1024 * 1024


class GeminiRoom:
    """:class:`~memd.llm.cli_run.Room` of Gemini CLI."""

    name = NAME
    program = PROGRAM
    own_env: tuple[str, ...] = ("GEMINI_CLI_HOME", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION")

    def __init__(self, settings: CLIConfig, env: Mapping[str, str], workdir: Path) -> None:
        self.base_url = settings.base_url.rstrip("/")
        home = env.get("GEMINI_CLI_HOME") or env.get("HOME") or os.path.expanduser("~")
        self.gemini_dir = Path(home) / ".gemini"
        self.workdir = workdir
        self.cwd = workdir / WORK
        self.policy = workdir / "deny-all-tools.toml"

    def prepare(self, workdir: Path) -> None:
        """memd's workspace settings and policy file, written before the first call."""
        folder = self.cwd / ".gemini"
        private_dir(folder)
        _write(folder / "settings.json", json.dumps(WORKSPACE_SETTINGS, indent=2))
        _write(self.policy, DENY_ALL)

    def argv(self, command: str, call: Call) -> list[str]:
        return [
            command,
            "--model",
            call.model,
            "--prompt",
            "",
            "--output-format",
            "json",
            "--extensions",
            "none",
            "--allowed-mcp-server-names",
            NO_SERVER,
            "--policy",
            str(self.policy),
        ]

    def env(self, base: dict[str, str], call: Call) -> dict[str, str]:
        base.update(
            GEMINI_SYSTEM_MD=str(call.system_file),
            GEMINI_CLI_TRUST_WORKSPACE="true",
            GEMINI_CLI_NO_RELAUNCH="true",
            NO_COLOR="1",
        )
        if self.base_url:
            base["GOOGLE_GEMINI_BASE_URL"] = self.base_url
        return base

    def answer(self, ran: Ran, call: Call) -> LLMReply:
        data = result_of(ran)
        if data is None:
            if ran.returncode != 0:
                raise exited_badly(ran, PROGRAM)
            raise MalformedAnswer("gemini printed no JSON result; nothing changed")
        error = data.get("error")
        if isinstance(error, Mapping):
            raise failure(error)
        if ran.returncode != 0:
            raise exited_badly(ran, PROGRAM)
        text = data.get("response")
        if not isinstance(text, str):
            raise MalformedAnswer("gemini's result holds no answer text; nothing changed")
        usage, model, errors = stats_of(data.get("stats"))
        if errors:
            raise Unavailable(f"gemini's answer did not end well ({errors}); nothing changed")
        return LLMReply(
            id=printable(str(data.get("session_id") or "gemini-cli"), 100),
            model=model or call.model,
            content=[{"type": "text", "text": text}] if text else [],
            stop_reason="end_turn",
            usage=usage,
            backend=NAME,
            seconds=ran.seconds,
            priced=True,
        )

    def login(self) -> str | None:
        for name in ("oauth_creds.json", ".env", "gemini-credentials.json"):
            if file_present(self.gemini_dir / name):
                return str(self.gemini_dir / name)
        settings = foreign_reads.read_json_object(
            self.gemini_dir / "settings.json", _SMALL, links="follow"
        )
        security = settings.get("security") if settings else None
        auth = security.get("auth") if isinstance(security, Mapping) else None
        chosen = auth.get("selectedType") if isinstance(auth, Mapping) else None
        if chosen in ("vertex-ai", "compute-default-credentials", "gateway"):
            return f"{self.gemini_dir / 'settings.json'} ({chosen})"
        return None

    def after(self, ran: Ran | None, call: Call) -> None:
        data = result_of(ran) if ran is not None else None
        session = data.get("session_id") if data else None
        if isinstance(session, str) and session:
            remove_chat(self.gemini_dir, str(self.cwd), session)


def result_of(ran: Ran) -> dict[str, Any] | None:
    """The JSON object Gemini printed: stdout's, or the last one on stderr (after a failure's
    stack trace), or None."""
    for stream in (ran.stdout, ran.stderr):
        text = stream.decode("utf-8", "replace")
        start = text.rfind("\n{") + 1 if stream is ran.stderr else text.find("{")
        if start < 0 or (stream is ran.stderr and not text[start:].startswith("{")):
            continue
        try:
            value = json.loads(text[start:])
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return None


def failure(error: Mapping[str, Any]) -> LLMError:
    """Gemini's ``error`` in the seam's classes (its message may be the API's own JSON)."""
    message = str(error.get("message") or "")
    code = error.get("code")
    try:
        inner = json.loads(message).get("error", {})
    except (ValueError, AttributeError, RecursionError):
        inner = {}
    if isinstance(inner, Mapping) and inner.get("message"):
        message = str(inner["message"])
        code = inner.get("code", code)
    said = printable(message)
    if "GEMINI_API_KEY" in message or "login" in message.lower() or code == 41:
        return AuthenticationFailed(f"gemini is not logged in ({said}): run `gemini` and log in")
    if code == 429:
        found = _RETRY.search(message)
        return RateLimited(f"gemini: {said}", retry_after=float(found[1]) if found else None)
    if isinstance(code, int) and 400 <= code < 600:
        return classify_status(
            code, error_type=None, error_code=None, message=f"gemini: {said}", retry_after=None
        )
    return Unavailable(f"gemini: {said}")


def stats_of(raw: Any) -> tuple[Usage, str, str]:
    """The usage summed over the models Gemini called, the main model's name, and the API
    errors it counted (``NO_FINISH_REASON: 1``), if any."""
    usage, model, errors = Usage(), "", []
    models = raw.get("models") if isinstance(raw, Mapping) else None
    for name, entry in (models or {}).items() if isinstance(models, Mapping) else ():
        if not isinstance(entry, Mapping):
            continue
        tokens = _mapping(entry.get("tokens"))
        api = _mapping(entry.get("api"))
        cached, prompt = _count(tokens, "cached"), _count(tokens, "prompt")
        out = _count(tokens, "candidates") + _count(tokens, "thoughts")
        usage = usage + Usage(max(0, prompt - cached), out, 0, cached)
        model = model or printable(str(name), 100)
        by_type = api.get("errorsByType")
        if isinstance(by_type, Mapping):
            errors += [f"{printable(str(k), 60)}: {v}" for k, v in by_type.items()]
    return usage, model, ", ".join(errors)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _count(raw: Mapping[str, Any], key: str) -> int:
    value = raw.get(key)
    return value if isinstance(value, int) and 0 <= value < 2**53 else 0


def remove_chat(gemini_dir: Path, cwd: str, session: str) -> None:
    """Remove the chat Gemini recorded of memd's call ``session`` in ``cwd``: the folder
    ``projects.json`` maps ``cwd`` to, its ``chats/session-*-<id8>.jsonl``; links are not
    followed and nothing else is touched. Best effort (the watcher ignores it anyway)."""
    table = foreign_reads.read_json_object(gemini_dir / "projects.json", _SMALL, links="refuse")
    projects = table.get("projects", table) if table else None
    folder = projects.get(cwd) if isinstance(projects, Mapping) else None
    if not isinstance(folder, str) or not folder or "/" in folder or folder in (".", ".."):
        return
    suffix = f"-{session[:8]}.jsonl"
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fds: list[int] = []
    try:
        fd = os.open(gemini_dir / "tmp", flags)
        fds.append(fd)
        for part in (folder, "chats"):
            fd = os.open(part, flags, dir_fd=fd)
            fds.append(fd)
        for name in os.listdir(fd):
            if name.startswith("session-") and name.endswith(suffix):
                os.unlink(name, dir_fd=fd)  # a name, never followed: a link is removed itself
    except OSError:
        return
    finally:
        for opened in fds:
            os.close(opened)


def _write(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(temporary, path)


def room(config: LLMConfig, env: Mapping[str, str]) -> GeminiRoom:
    """The room of ``config``'s settings (no I/O): what status asks about the login."""
    return GeminiRoom(config.gemini_cli, env, model_calls_root(env) / NAME)


def open_gemini_cli(config: LLMConfig, env: Mapping[str, str]) -> CLIBackend | Disabled:
    """The ``gemini_cli`` backend, or why it cannot run (not installed, no private folder)."""
    install = "Gemini CLI is not installed: npm install -g @google/gemini-cli"
    return open_room(room(config, env), config.gemini_cli, env, install)
