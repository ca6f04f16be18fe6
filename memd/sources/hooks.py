"""What a hook call of any agent is to memd: one closed union of typed events, and the
protocol of each room's hook dialect that parses an agent's input into it and answers in the
agent's shape.

An agent runs memd's hook command with its own input on stdin (the JSON Claude Code, Codex
CLI and Gemini CLI all write, ``hook_event_name`` naming the event). The room's
:class:`HookDialect` reads those bytes (:meth:`~HookDialect.read`) and parses them once into a
:data:`HookEvent` (:meth:`~HookDialect.parse`): a :class:`SessionStart`, a
:class:`PromptSubmit`, a :class:`TurnEnd`, a :class:`PreCompact`, or :class:`Unhandled` with
the reason. Nothing past the parse reads the agent's input again
(:mod:`memd.memory.hook_context` consumes the union with ``match``), and what the hook prints
comes back through the dialect (:meth:`~HookDialect.output`, within the agent's limits:
:meth:`~HookDialect.limit`). Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from memd.tokens import estimate_text

MAX_HOOK_INPUT_BYTES = 4 * 1024 * 1024
Env = Mapping[str, str]


@dataclass(frozen=True)
class Event:
    """What every event memd acts on says: the agent's own event ``name`` (its output names
    it), the session, its working dir (absolute, or ``""``), the transcript memd reads for
    what hooks already injected (``""``: none, memd's own record says it) and the
    environment the agent's own memory is decided from (None: its settings are not read)."""

    name: str
    session_id: str
    cwd: str = ""
    transcript: str = ""
    env: Env | None = None


@dataclass(frozen=True)
class SessionStart(Event):
    """A session (re)starts: ``source`` is ``startup``, ``resume``, ``clear`` or ``compact``."""

    source: str = ""


@dataclass(frozen=True)
class PromptSubmit(Event):
    """The user's prompt, before the agent's model sees it (the agent's own additions left
    out). ``followed``: the session's name where memd follows its transcript, when it is
    not ``session_id`` (what the memories injected now are recorded under: issue 36)."""

    prompt: str = ""
    followed: str = ""


@dataclass(frozen=True)
class TurnEnd(Event):
    """A turn (or the whole session: ``answer`` ``""``) ended; ``answer`` is the last thing
    the agent said, which its transcript holds once it caught up."""

    answer: str = ""
    ended: bool = False  # the session ended (nothing more comes from its agent)


@dataclass(frozen=True)
class PreCompact(Event):
    """The agent is about to compact; ``data`` is its whole input (the takeover reads it)."""

    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Unhandled:
    """An event memd does nothing for, and why (an event it does not use, a sub-agent's, an
    input without a session)."""

    name: str
    reason: str


HookEvent = SessionStart | PromptSubmit | TurnEnd | PreCompact | Unhandled
INJECTING = (SessionStart, PromptSubmit)  # the events whose answer goes into the context


class HookDialect(Protocol):
    """One agent's hooks: its input read and parsed into a :data:`HookEvent`, and what the
    hook prints for the context memd adds."""

    def read(self, raw: bytes) -> tuple[str, Mapping[str, Any]] | None:
        """The event name and input of the hook's stdin bytes, or None when they are not
        this agent's hook input."""
        ...

    def parse(self, name: str, data: Mapping[str, Any], env: Env | None) -> HookEvent:
        """The event ``name`` with input ``data`` means (``env``: the environment the hook
        forwarded, str pairs)."""
        ...

    def limit(self, text: str) -> str:
        """``text`` within what the agent takes from a hook (its own limits)."""
        ...

    def output(self, event: HookEvent, text: str) -> str | None:
        """What the hook prints to hand ``text`` to the agent (for a :class:`PreCompact`:
        what stops the compaction, ``text`` saying why), or None: nothing."""
        ...


# ---------------------------------------------------------------------------------------------
# What the dialects share (all three agents write and read the same hooks JSON)


def read_json(raw: bytes) -> tuple[str, Mapping[str, Any]] | None:
    """The event and input of a hooks-JSON stdin (``hook_event_name`` names the event), or
    None when it is not one (too big, not JSON, not an object, no event name)."""
    if len(raw) > MAX_HOOK_INPUT_BYTES:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("hook_event_name"), str):
        return None
    return data["hook_event_name"], data


def text_field(data: Mapping[str, Any], key: str) -> str:
    """A string field of the input, ``""`` when it is missing or not a string."""
    value = data.get(key)
    return value if isinstance(value, str) else ""


def cwd_field(data: Mapping[str, Any]) -> str:
    """The input's ``cwd`` when it is absolute, else ``""``."""
    cwd = text_field(data, "cwd")
    return cwd if cwd.startswith("/") else ""


def context_json(event: HookEvent, text: str) -> str | None:
    """The hooks JSON that hands ``text`` to the agent for an injecting event (under the
    agent's own event name), or None."""
    if not text or not isinstance(event, INJECTING):
        return None
    output = {"hookSpecificOutput": {"hookEventName": event.name, "additionalContext": text}}
    return json.dumps(output, ensure_ascii=False)


def block_json(event: HookEvent, text: str) -> str | None:
    """The hooks JSON that stops a compaction with ``text`` for the user (Claude Code's
    PreCompact: ``decision`` ``block``), or None for any other event."""
    if not text or not isinstance(event, PreCompact):
        return None
    return json.dumps({"decision": "block", "reason": text}, ensure_ascii=False)


def stop_json(event: HookEvent, text: str) -> str | None:
    """The hooks JSON that stops a compaction with ``text`` for the user by the fields
    every hook has (Codex's PreCompact takes no ``decision``: ``continue`` false and a
    ``stopReason``), or None for any other event."""
    if not text or not isinstance(event, PreCompact):
        return None
    return json.dumps({"continue": False, "stopReason": text}, ensure_ascii=False)


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def head_lines(text: str, max_bytes: int) -> str:
    """The longest run of whole lines at the start of ``text`` within ``max_bytes``."""
    if utf8_len(text) <= max_bytes:
        return text
    kept: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        size += utf8_len(line)
        if size > max_bytes:
            break
        kept.append(line)
    return "".join(kept).rstrip("\n")


def within_tokens(text: str, max_tokens: int) -> str:
    """``text`` cut after whole lines so that its estimated tokens are at most ``max_tokens``
    (with a note saying so when anything was cut)."""
    tokens = estimate_text(text)
    if tokens <= max_tokens:
        return text
    note = f"(cut to about {max_tokens} tokens for this agent's hook limit)"
    budget = utf8_len(text)
    cut = text
    while tokens > max_tokens and budget > 0:
        budget = budget * max_tokens * 9 // (tokens * 10)  # a little under, then check again
        cut = head_lines(text, budget)
        tokens = estimate_text(cut) + estimate_text(note)
    return f"{cut}\n{note}" if cut.strip() else ""
