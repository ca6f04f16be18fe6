"""Codex CLI's hooks: Claude Code's input under Claude Code's names, parsed into memd's events.

Codex sends ``SessionStart`` (``source``), ``UserPromptSubmit`` (``prompt``) and ``Stop``
(``last_assistant_message``: the answer its rollout will hold) with the rollout's thread id as
``session_id``; memd installs those three, and ``PreCompact`` (``trigger``) with
``--compact-takeover``: Codex 0.171.0 stops a compaction when a PreCompact hook answers
``{"continue": false, "stopReason": …}`` (it takes no ``decision`` there), with no model
call, and memd forks the session first (:mod:`memd.compaction.takeover`). Its sessions are
known from this daemon's own record (no transcript is read for what hooks injected, no
settings of Claude Code's apply). The answer is the hooks JSON, a developer message to
Codex's model; Codex writes an output over ~2,500 tokens (its ``additionalContextLimit``) to
a file under the system's temp dir, which other users can list, and shows the model a
preview, so memd's stays under :data:`MAX_TOKENS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from memd.sources.hooks import (
    Env,
    HookEvent,
    PreCompact,
    PromptSubmit,
    SessionStart,
    TurnEnd,
    Unhandled,
    context_json,
    cwd_field,
    read_json,
    stop_json,
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
            case "PreCompact":  # installed with --compact-takeover only
                transcript = text_field(data, "transcript_path")
                return PreCompact(name, session_id, cwd, transcript, data=data)
        return Unhandled(name, "not an event memd uses")

    def limit(self, text: str) -> str:
        return within_tokens(text, MAX_TOKENS)

    def output(self, event: HookEvent, text: str) -> str | None:
        return stop_json(event, text) or context_json(event, text)
