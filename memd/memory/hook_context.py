"""What memd's hook injects into the agent's context (R-I4, R-B5), for Claude Code, Codex CLI
and Gemini CLI.

The daemon's ``hook`` method passes the agent, the event name, the hook's stdin JSON and the
part of Claude Code's environment the hook forwards here. Each agent's event is first read as
memd's own (:data:`AGENT_EVENTS`): Codex sends Claude Code's input (``session_id``, ``cwd``,
``source``, ``prompt``) under the same names; Gemini's ``BeforeAgent`` is the prompt, whose
``prompt`` starts with the SessionStart context Gemini prepended in a ``<hook_context>``
element (left out of the recall query). All three take the answer in the same shape,
``hookSpecificOutput.additionalContext`` under their own event name. Nothing already in the
conversation is injected again (the session's
:class:`~memd.memory.session_context.SessionContext`, caught up with the transcript, says what
is there):

* ``SessionStart`` — the project's memory index, only when Claude Code's own auto memory is
  off for the session (it loads ``MEMORY.md`` itself otherwise) and the conversation does not
  hold memd's copy already (``startup``, ``clear`` and ``compact`` start a new context; a
  ``resume`` replays the old one); on ``compact`` also the session's working notes. On
  ``resume`` the notes are owed to the next prompt instead: Claude Code 2.1.197 drops
  SessionStart context on ``-p --resume`` (FORMAT.md §13), and must not get them twice;
* ``UserPromptSubmit`` — the index as for ``SessionStart`` when the conversation does not
  hold it yet (``memdctl install-hooks`` runs no SessionStart hook at a startup: one hook
  process fewer before ``claude -p`` answers), the notes owed after a resume, then the
  memories recalled for the prompt, each with its age and, when older than a day, its
  freshness warning, leaving out every memory already surfaced in the session (by memd or
  by Claude Code);
* ``Stop`` and ``SessionEnd`` — a turn end for memory extraction; nothing is injected;
* anything else — nothing.

Claude Code's auto memory and its transcript's record of what hooks injected are Claude
Code's alone: for Codex and Gemini the index always goes in at a session start (neither loads
``MEMORY.md``) and what is in the session is known from this daemon's own record. Codex's
``Stop`` is a turn end as Claude Code's is (its ``session_id`` is the rollout's, the session
memd follows; its ``last_assistant_message`` the answer to wait for), so a ``codex exec`` is
extracted when it ends rather than after the quiet period. Gemini's ``AfterAgent`` is its turn
end too; its ``session_id`` is not the name memd keys a chat by, so its ``transcript_path`` (the
chat file) names the session.

Claude Code 2.1 sends ``additionalContext`` to the model as a ``role: "system"`` message of
its own ("SessionStart hook additional context: …"), so the text here is plain (the
freshness warnings are the bare variant, not a nested reminder).

Everything stays under ``budget_bytes`` (``hook.injection_max_bytes``, UTF-8) and degrades
gracefully: :func:`fit` keeps sections in priority order and cuts the first one that does not
fit on a line boundary, with a note saying what was left out. Bad or missing input fields
mean nothing is injected, never an error.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memd.config import Config
from memd.memory.claude_code import FORWARDED_ENV
from memd.memory.freshness import RECALL_CAVEAT
from memd.memory.location import Location
from memd.memory.service import MemoryService
from memd.memory.session_context import INDEX_MARK, NOTES_MARK, RECALL_MARK, SessionContext
from memd.privacy import scrub_text
from memd.tokens import estimate_text

log = logging.getLogger(__name__)

NotesFor = Callable[[str], Awaitable[str | None]]

HOOK_MARGIN_S = 0.3  # the daemon answers this much before the hook's own deadline
MIN_RECALL_S = 0.2
MAX_HOOK_INPUT_BYTES = 4 * 1024 * 1024

INDEX_HEAD = (
    INDEX_MARK + " ({memory_dir}). Each entry points to a "
    "memory file in that directory; read the file when its topic matters for the task."
)
NOTES_HEAD = NOTES_MARK + " from the conversation so far (they survive compaction and resume):"
RECALL_HEAD = RECALL_MARK + ". "
NEW_CONTEXT = ("startup", "clear", "compact")
CLAUDE = "claude"
# Each agent's hook events, as memd's (the events memdctl install-hooks registers for it).
AGENT_EVENTS: dict[str, dict[str, str]] = {
    CLAUDE: {e: e for e in ("SessionStart", "UserPromptSubmit", "Stop", "SessionEnd")},
    "codex": {e: e for e in ("SessionStart", "UserPromptSubmit", "Stop")},
    "gemini": {
        "SessionStart": "SessionStart",
        "BeforeAgent": "UserPromptSubmit",
        "AfterAgent": "Stop",
    },
}
INJECTING = ("SessionStart", "UserPromptSubmit")
_GEMINI_CONTEXT = re.compile(r"\A\s*<hook_context>.*?</hook_context>\s*", re.DOTALL)
CUT_NOTE = "[memd: cut to fit the {budget}-byte injection budget{more}]"


# ---------------------------------------------------------------------------------------------
# Budgeting (pure)


@dataclass(frozen=True)
class Fitted:
    """The joined text and which sections made it (by position, whole or cut)."""

    text: str
    included: tuple[int, ...]
    cut: bool


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


def fit(sections: Sequence[str], budget_bytes: int) -> Fitted:
    """Join ``sections`` (highest priority first) with blank lines within ``budget_bytes``.

    Sections are taken whole while they fit. The first one that does not is cut after its
    last whole line that leaves room for a note; the rest are left out (the note counts
    them). A note alone is never the whole answer: when not even the first section's first
    line fits, the text is empty. The result is never longer than the budget.
    """
    parts: list[str] = []
    used = 0
    included: list[int] = []
    for number, section in enumerate(sections):
        glue = "\n\n" if parts else ""
        size = utf8_len(glue + section)
        if used + size <= budget_bytes:
            parts.append(glue + section)
            used += size
            included.append(number)
            continue
        more = len(sections) - number - 1
        note = CUT_NOTE.format(budget=budget_bytes, more=f"; {more} more left out" if more else "")
        room = budget_bytes - used - utf8_len(glue) - utf8_len("\n" + note)
        head = head_lines(section, room) if room > 0 else ""
        if head.strip():
            parts.append(f"{glue}{head}\n{note}")
            included.append(number)
        elif parts and used + utf8_len(glue + note) <= budget_bytes:
            parts.append(glue + note)
        return Fitted("".join(parts), tuple(included), True)
    return Fitted("".join(parts), tuple(included), False)


def render_memory(memory: Mapping[str, Any]) -> str:
    """One recalled memory (a row of the recall result) as injected text."""
    kind = f"{memory.get('type')} memory" if memory.get("type") else "memory"
    lines = [
        f"## {memory.get('name')} ({kind}, updated {memory.get('age')}) — {memory.get('path')}"
    ]
    if memory.get("warning"):
        lines.append(f"Note: {memory['warning']}")
    lines += checked_lines(memory.get("checks"))
    content = str(memory.get("content") or memory.get("description") or "").strip()
    if content:
        lines.append(content)
    if memory.get("content_truncated"):
        lines.append("[… the rest is in the file]")
    return "\n".join(lines)


def checked_lines(checks: object) -> list[str]:
    """What the check of a memory's citations found (issue 26), one line each."""
    if not isinstance(checks, list | tuple):
        return []
    return [f"Checked against the code now: {w}" for w in checks if isinstance(w, str)]


def hook_recall_timeout(config: Config) -> float:
    """Time a recall may take inside a hook call: the recall budget, within the hook's."""
    hook_s = config.hook.timeout_ms / 1000.0 - HOOK_MARGIN_S
    return max(MIN_RECALL_S, min(config.memory.recall_timeout_s, hook_s))


# ---------------------------------------------------------------------------------------------
# Events


async def hook_context(
    event: str,
    hook_input: Mapping[str, Any],
    service: MemoryService,
    *,
    notes_for: NotesFor | None = None,
    budget_bytes: int,
    env: dict[str, str] | None = None,
    agent: str = CLAUDE,
) -> dict[str, str | None]:
    """``{"additionalContext": text or None}`` for one hook call of ``agent`` (see the module
    doc); an agent or event memd does not know gets nothing."""
    text: str | None = None
    session_id, cwd = _field(hook_input, "session_id"), _cwd(hook_input)
    claude = agent == CLAUDE
    # Only Claude Code's transcript is read for what its hooks injected (the scan knows its
    # attachments); the others' sessions are known from this daemon's record alone.
    transcript = _field(hook_input, "transcript_path") if claude else ""
    match AGENT_EVENTS.get(agent, {}).get(event):
        case "SessionStart" if session_id:
            record = await service.session_context(session_id, transcript, env, cwd)
            text = await _session_start(
                hook_input, record, service, notes_for, budget_bytes, claude=claude
            )
        case "UserPromptSubmit" if session_id:
            record = await service.session_context(session_id, transcript, env, cwd)
            prompt = _field(hook_input, "prompt")
            if agent == "gemini":
                prompt = _GEMINI_CONTEXT.sub("", prompt, count=1)
            text = await _prompt_submit(
                prompt, cwd, record, service, notes_for, budget_bytes, claude=claude
            )
        case "Stop" | "SessionEnd" if agent == "gemini":
            _gemini_turn_end(hook_input, cwd, service)
        case "Stop" | "SessionEnd" if session_id:
            if env is not None:
                service.contexts.get(session_id).env = _forwarded(env)
            answer = _field(hook_input, "last_assistant_message") if event == "Stop" else ""
            service.on_stop(session_id, transcript, cwd, answer)
        case _:
            pass
    if agent == "codex" and text:
        text = within_tokens(text, CODEX_MAX_TOKENS)
    return {"additionalContext": text or None}


def _gemini_turn_end(hook_input: Mapping[str, Any], cwd: str, service: MemoryService) -> None:
    """Gemini's ``AfterAgent``: a turn end of the chat ``transcript_path`` names. Its
    ``session_id`` is the chat's own, which one chat keeps across the files a resume starts;
    memd keys a chat by its file's name, so the file names the session, and the turn end
    waits for that file to hold ``prompt_response`` as a Stop waits for its answer."""
    transcript = _field(hook_input, "transcript_path")
    name = transcript.rsplit("/", 1)[-1]
    stem, dot, suffix = name.rpartition(".")
    if not transcript.startswith("/") or not dot or suffix not in ("json", "jsonl") or not stem:
        return
    service.on_stop(stem, "", cwd, _field(hook_input, "prompt_response"))


# Codex CLI writes a hook's output over ~2,500 tokens (its additionalContextLimit) to a file
# under the system's temp dir, which other users can list, and shows the model a preview: the
# context memd injects there stays under that, with a margin for Codex's own count.
CODEX_MAX_TOKENS = 2_000


def within_tokens(text: str, max_tokens: int) -> str:
    """``text`` cut after whole lines so that its estimated tokens are at most ``max_tokens``
    (with a note saying so when anything was cut)."""
    tokens = estimate_text(text)
    if tokens <= max_tokens:
        return text
    note = f"(cut to about {max_tokens} tokens for this agent's hook limit)"
    budget = utf8_len(text)
    while tokens > max_tokens and budget > 0:
        budget = budget * max_tokens * 9 // (tokens * 10)  # a little under, then check again
        cut = head_lines(text, budget)
        tokens = estimate_text(cut) + estimate_text(note)
    return f"{cut}\n{note}" if cut.strip() else ""


def _forwarded(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v[:4096] for k, v in env.items() if k in FORWARDED_ENV and isinstance(v, str)}


def _field(hook_input: Mapping[str, Any], key: str) -> str:
    value = hook_input.get(key)
    return value if isinstance(value, str) else ""


def _cwd(hook_input: Mapping[str, Any]) -> str:
    cwd = _field(hook_input, "cwd")
    return cwd if cwd.startswith("/") else ""


async def _session_start(
    hook_input: Mapping[str, Any],
    record: SessionContext,
    service: MemoryService,
    notes_for: NotesFor | None,
    budget_bytes: int,
    *,
    claude: bool,
) -> str | None:
    sections: list[str] = []
    cwd, source = _cwd(hook_input), _field(hook_input, "source")
    if source in NEW_CONTEXT:
        record.index_injected = record.notes_delivered = False
    if source == "resume":
        # delivered with the next prompt, once, unless the resumed conversation holds them
        record.notes_owed = not record.notes_delivered
    index_section = -1
    index = await _index(record, cwd, service, claude=claude)
    if index:
        index_section = len(sections)
        sections.append(index)
    if source == "compact":
        notes = await _notes(record.session_id, service, notes_for)
        if notes:
            sections.append(notes)
    fitted = fit(sections, budget_bytes)
    if index_section in fitted.included:
        record.index_injected = True
    if source == "compact" and len(fitted.included) > index_section + 1:
        record.notes_delivered = True
    return fitted.text or None


async def _index(
    record: SessionContext,
    cwd: str,
    service: MemoryService,
    *,
    claude: bool,
    where: Location | None = None,
) -> str:
    """The project's memory index as a section, when the conversation does not hold it yet
    and its agent does not load it itself; "" otherwise (``where``: ``cwd``'s location)."""
    if not cwd or record.index_injected:
        return ""
    # Claude Code loads MEMORY.md itself when its auto memory is on; no other agent does.
    if claude and (await service.claude_code(record, cwd)).auto_memory:
        return ""
    index = await service.index(cwd, where)
    body = str(index.get("text") or "").strip()
    return INDEX_HEAD.format(memory_dir=index["memory_dir"]) + "\n\n" + body if body else ""


async def _notes(session_id: str, service: MemoryService, notes_for: NotesFor | None) -> str:
    notes = await notes_for(session_id) if notes_for else None
    if not notes or not notes.strip():
        return ""
    secrets = service.config.privacy.redact_secrets
    return NOTES_HEAD + "\n\n" + scrub_text(notes.strip(), secrets=secrets)


async def _prompt_submit(
    prompt: str,
    cwd: str,
    record: SessionContext,
    service: MemoryService,
    notes_for: NotesFor | None,
    budget_bytes: int,
    *,
    claude: bool,
) -> str | None:
    sections: list[str] = []
    if record.notes_owed:
        record.notes_owed = False
        notes = await _notes(record.session_id, service, notes_for)
        if notes:
            sections.append(notes)
            record.notes_delivered = True
    # Pinned memories (at most 4, once a session) go ahead of what recall picks. The memory
    # dir is located once for all three (each look reads Claude Code's settings files).
    memories: list[Mapping[str, Any]] = []
    where = await service.locate(cwd) if cwd else None
    if where is not None:
        memories += await service.pinned(cwd, record.session_id, where)
    caveat = RECALL_CAVEAT
    if prompt.strip() and where is not None:
        tools = await service.recent_tools(record.session_id)
        timeout_s = hook_recall_timeout(service.config)
        result = await service.recall(
            prompt, cwd, record.session_id, tools, timeout_s=timeout_s, where=where
        )
        pinned = {m["path"] for m in memories}
        recalled = result.get("memories") or []
        if not recalled:  # e.g. nothing relevant enough (issue 36): said, at debug level
            why = result.get("reason") or "no memories"
            log.debug("recall for session %s injects nothing: %s", record.session_id, why)
        memories += [m for m in recalled if m["path"] not in pinned]
        caveat = str(result.get("caveat") or "")
    first = len(sections)
    if memories:
        sections.append(RECALL_HEAD + caveat)
        sections.extend(render_memory(m) for m in memories)
    # The index goes in with the first prompt when no SessionStart brought it (memdctl
    # install-hooks runs no SessionStart hook at a startup, so ``claude -p`` waits for one
    # hook process, not two: issue 25), after what was recalled for the prompt.
    index = await _index(record, cwd, service, claude=claude, where=where) if prompt.strip() else ""
    last = len(sections)
    shown_of = [str(m["path"]) for m in memories]
    if not index:
        return _fitted(sections, first, shown_of, record, service, budget_bytes)
    text = _fitted([*sections, index], first, shown_of, record, service, budget_bytes, last)
    return text


def _fitted(
    sections: list[str],
    first: int,
    paths: list[str],
    record: SessionContext,
    service: MemoryService,
    budget_bytes: int,
    index_at: int = -1,
) -> str | None:
    """``sections`` (the notes before ``first``, the recall head and ``paths``' memories
    from it, the index at ``index_at``) fitted; what was shown is recorded."""
    fitted = fit(sections, budget_bytes)
    shown = [paths[i - first - 1] for i in fitted.included if first < i <= first + len(paths)]
    if not shown and paths:  # the recall head alone says nothing
        rest = [s for i, s in enumerate(sections) if i < first or i == index_at]
        index_at = len(rest) - 1 if index_at >= 0 else -1
        fitted = fit(rest, budget_bytes)
    service.mark_surfaced(record.session_id, shown)
    if index_at >= 0 and index_at in fitted.included:
        record.index_injected = True
    return fitted.text or None


def hook_stdout(event: str, context: str | None, agent: str = CLAUDE) -> str | None:
    """What the hook prints for ``context`` (the hooks JSON all three agents read, under the
    agent's own event name), or None: nothing."""
    if not context or AGENT_EVENTS.get(agent, {}).get(event) not in INJECTING:
        return None
    output = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": context}}
    return json.dumps(output, ensure_ascii=False)


def from_subagent(hook_input: Mapping[str, Any]) -> bool:
    """Whether Claude Code fired the event inside a sub-agent: its input then names the
    sub-agent (``agent_id``, with ``agent_type``; 2.1.69). Such an event is not the main
    session's: memd injects nothing into a sub-agent's context (the session's memories and
    notes are the main conversation's, already there), takes no compaction over and counts
    no turn end for it. A main session started with ``--agent`` has ``agent_type`` alone."""
    agent_id = hook_input.get("agent_id")
    return isinstance(agent_id, str) and agent_id != ""


def parse_hook_stdin(raw: bytes) -> tuple[str, dict[str, Any]] | None:
    """The event and input of a hook's raw stdin, or None when it is not a hook's JSON."""
    if len(raw) > MAX_HOOK_INPUT_BYTES:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("hook_event_name"), str):
        return None
    return data["hook_event_name"], data
