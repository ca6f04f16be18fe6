"""Qwen Code's hooks, parsed into memd's events.

Qwen's hooks are Claude Code's in name and shape (``hook_event_name``, ``session_id``,
``cwd``, ``transcript_path``; the answer is ``hookSpecificOutput.additionalContext``, which
Qwen adds to the prompt as a part of its own, tagged ``<qwen:user-prompt-submit-context>``).
memd installs ``SessionStart`` (``source``), ``UserPromptSubmit`` and ``Stop``
(``last_assistant_message``: the answer its session file will hold). Qwen runs
``UserPromptSubmit`` before a tool result goes back to the model too, with an empty
``prompt``; only an input with ``submitted_prompt`` (what the user submitted: a headless
prompt, a prompt typed in its TUI) is a prompt memd recalls for. Its sessions are known from
this daemon's own record (the transcript's tags are Qwen's, not Claude Code's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
)


class QwenHooks:
    """Qwen Code's hook dialect (:class:`memd.sources.hooks.HookDialect`)."""

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
                prompt = text_field(data, "submitted_prompt")
                if not prompt.strip():
                    return Unhandled(name, "no submitted_prompt: a continuation, not a prompt")
                return PromptSubmit(name, session_id, cwd, prompt=prompt)
            case "Stop":
                answer = text_field(data, "last_assistant_message")
                return TurnEnd(name, session_id, cwd, answer=answer)
            case "SessionEnd":
                return TurnEnd(name, session_id, cwd)
        return Unhandled(name, "not an event memd uses")

    def limit(self, text: str) -> str:
        return text

    def output(self, event: HookEvent, text: str) -> str | None:
        return context_json(event, text)
