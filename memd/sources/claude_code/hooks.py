"""Claude Code's hooks: its input (FORMAT.md §10) parsed into memd's events.

Its events are memd's own names: ``SessionStart``, ``UserPromptSubmit``, ``Stop`` and
``SessionEnd`` (both turn ends: a ``Stop``'s ``last_assistant_message`` is the answer to
wait for), and ``PreCompact`` (the takeover's). Claude Code alone forwards the environment
its own memory is decided from (``env``), and its transcript records what hooks injected
(``transcript``). An event fired inside a sub-agent names it (``agent_id``, 2.1.69): it is
not the main session's, and memd does nothing for it. The answer is the hooks JSON
(``hookSpecificOutput.additionalContext``), sent to the model as a system message of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memd.sources.hooks import (
    Env,
    HookEvent,
    PreCompact,
    PromptSubmit,
    SessionStart,
    TurnEnd,
    Unhandled,
    block_json,
    context_json,
    cwd_field,
    read_json,
    text_field,
)


def from_subagent(data: Mapping[str, Any]) -> bool:
    """Whether Claude Code fired the event inside a sub-agent: its input then names the
    sub-agent (``agent_id``, with ``agent_type``; 2.1.69). A main session started with
    ``--agent`` has ``agent_type`` alone."""
    agent_id = data.get("agent_id")
    return isinstance(agent_id, str) and agent_id != ""


class ClaudeHooks:
    """Claude Code's hook dialect (:class:`memd.sources.hooks.HookDialect`)."""

    def read(self, raw: bytes) -> tuple[str, Mapping[str, Any]] | None:
        return read_json(raw)

    def parse(self, name: str, data: Mapping[str, Any], env: Env | None) -> HookEvent:
        if from_subagent(data):
            return Unhandled(name, "fired inside a sub-agent: not the main session's")
        sid, cwd = text_field(data, "session_id"), cwd_field(data)
        transcript = text_field(data, "transcript_path")
        if name == "PreCompact":
            return PreCompact(name, sid, cwd, transcript, env, data=data)
        if not sid:
            return Unhandled(name, "no session_id")
        match name:
            case "SessionStart":
                source = text_field(data, "source")
                return SessionStart(name, sid, cwd, transcript, env, source=source)
            case "UserPromptSubmit":
                prompt = text_field(data, "prompt")
                return PromptSubmit(name, sid, cwd, transcript, env, prompt=prompt)
            case "Stop":
                answer = text_field(data, "last_assistant_message")
                return TurnEnd(name, sid, cwd, transcript, env, answer=answer)
            case "SessionEnd":
                return TurnEnd(name, sid, cwd, transcript, env, ended=True)
        return Unhandled(name, "not an event memd uses")

    def limit(self, text: str) -> str:
        return text

    def output(self, event: HookEvent, text: str) -> str | None:
        return block_json(event, text) or context_json(event, text)
