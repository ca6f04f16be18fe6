"""Gemini CLI's hooks, parsed into memd's events.

Gemini's prompt event is ``BeforeAgent`` (its ``prompt`` starts with the SessionStart context
Gemini prepended in a ``<hook_context>`` element, left out of what memd reads as the prompt),
its turn end ``AfterAgent`` (``prompt_response``: the answer its chat file will hold), and
``SessionStart`` (``source``); memd installs those three. Its sessions are known from this
daemon's own record, by Gemini's ``session_id`` (its chat's ``sessionId``, which memd keys the
chat by, and its usage record the memories injected there). The answer is the hooks JSON
under Gemini's own event name (SessionStart's goes before the first prompt).
"""

from __future__ import annotations

import re
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
)

_HOOK_CONTEXT: Final = re.compile(r"\A\s*<hook_context>.*?</hook_context>\s*", re.DOTALL)


class GeminiHooks:
    """Gemini CLI's hook dialect (:class:`memd.sources.hooks.HookDialect`)."""

    def read(self, raw: bytes) -> tuple[str, Mapping[str, Any]] | None:
        return read_json(raw)

    def parse(self, name: str, data: Mapping[str, Any], env: Env | None) -> HookEvent:
        session_id, cwd = text_field(data, "session_id"), cwd_field(data)
        if not session_id:
            return Unhandled(name, "no session_id")
        match name:
            case "SessionStart":
                return SessionStart(name, session_id, cwd, source=text_field(data, "source"))
            case "BeforeAgent":
                prompt = _HOOK_CONTEXT.sub("", text_field(data, "prompt"), count=1)
                return PromptSubmit(name, session_id, cwd, prompt=prompt)
            case "AfterAgent":
                # the answer its chat file will hold: waited for as a Stop waits for its own
                answer = text_field(data, "prompt_response")
                return TurnEnd(name, session_id, cwd, answer=answer)
        return Unhandled(name, "not an event memd uses")

    def limit(self, text: str) -> str:
        return text

    def output(self, event: HookEvent, text: str) -> str | None:
        return context_json(event, text)
