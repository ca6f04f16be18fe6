"""Codex CLI's hooks: Claude Code's input under Claude Code's names, parsed into memd's events.

Codex sends ``SessionStart`` (``source``), ``UserPromptSubmit`` (``prompt``) and ``Stop``
(``last_assistant_message``: the answer its rollout will hold) with the rollout's thread id as
``session_id``; memd installs those three. Its sessions are known from this daemon's own
record (no transcript is read for what hooks injected, no settings of Claude Code's apply).
The answer is the hooks JSON, a developer message to Codex's model; Codex writes an output
over ~2,500 tokens (its ``additionalContextLimit``) to a file under the system's temp dir,
which other users can list, and shows the model a preview, so memd's stays under
:data:`MAX_TOKENS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from memd.sources.hooks import (
    Env,
    HookEvent,
    PromptSubmit,
    SessionStart,
    TurnEnd,
    Unhandled,
    context_json,
    cwd_field,
    read_json,
    text_field,
    within_tokens,
)

MAX_TOKENS: Final = 2_000  # under Codex's own limit, with a margin for its count


class CodexHooks:
    """Codex CLI's hook dialect (:class:`memd.sources.hooks.HookDialect`)."""

    def read(self, raw: bytes) -> tuple[str, Mapping[str, Any]] | None:
        return read_json(raw)

    def parse(self, name: str, data: Mapping[str, Any], env: Env | None) -> HookEvent:
        session_id, cwd = text_field(data, "session_id"), cwd_field(data)
        if not session_id:
            return Unhandled(name, "no session_id")
        match name:
            case "SessionStart":
                return SessionStart(name, session_id, cwd, source=text_field(data, "source"))
            case "UserPromptSubmit":
                return PromptSubmit(name, session_id, cwd, prompt=text_field(data, "prompt"))
            case "Stop":
                answer = text_field(data, "last_assistant_message")
                return TurnEnd(name, session_id, cwd, answer=answer)
        return Unhandled(name, "not an event memd uses")

    def limit(self, text: str) -> str:
        return within_tokens(text, MAX_TOKENS)

    def output(self, event: HookEvent, text: str) -> str | None:
        return context_json(event, text)
