"""What memd's hook injects into an agent's context (R-I4, R-B5), for any agent.

The daemon's ``hook`` method has the agent's room parse the hook's input into one of memd's
events (:mod:`memd.sources.hooks`: the room's dialect reads each agent's names and fields)
and hands it here; the room's dialect then puts the answer in the agent's shape and within
its limits. Nothing already in the conversation is injected again (the session's
:class:`~memd.memory.session_context.SessionContext`, caught up with the transcript, says what
is there):

* :class:`~memd.sources.hooks.SessionStart` — the project's memory index, only when Claude
  Code's own auto memory is off for the session (it loads ``MEMORY.md`` itself otherwise) and
  the conversation does not hold memd's copy already (``startup``, ``clear`` and ``compact``
  start a new context; a ``resume`` replays the old one); on ``compact`` also the session's
  working notes. On ``resume`` the notes are owed to the next prompt instead: Claude Code
  2.1.197 drops SessionStart context on ``-p --resume`` (FORMAT.md §13), and must not get them
  twice;
* :class:`~memd.sources.hooks.PromptSubmit` — the index as for ``SessionStart`` when the
  conversation does not hold it yet (``memdctl install-hooks`` runs no SessionStart hook at a
  startup: one hook process fewer before ``claude -p`` answers), the notes owed after a
  resume, then the memories recalled for the prompt, each with its age and, when older than a
  day, its freshness warning, leaving out every memory already surfaced in the session (by
  memd or by Claude Code);
* :class:`~memd.sources.hooks.TurnEnd` — a turn end for memory extraction (an agent's
  ``Stop`` names the answer to wait for, so a ``codex exec`` is extracted when it ends rather
  than after the quiet period); nothing is injected;
* anything else — nothing.

The index is left out only where the agent loads ``MEMORY.md`` itself: an agent whose native
memory is decided per session from its settings (its room's ``memory_per_session``: Claude
Code's auto memory). What a session holds is read from its transcript where the event names
one (Claude Code records what hooks injected), else known from this daemon's own record.

Claude Code 2.1 sends ``additionalContext`` to the model as a ``role: "system"`` message of
its own ("SessionStart hook additional context: …"), so the text here is plain (the
freshness warnings are the bare variant, not a nested reminder).

Everything stays under ``budget_bytes`` (``hook.injection_max_bytes``, UTF-8) and degrades
gracefully: :func:`fit` keeps sections in priority order and cuts the first one that does not
fit on a line boundary, with a note saying what was left out. Bad or missing input fields
mean nothing is injected, never an error.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import assert_never

from memd.config import Config
from memd.memory.claude_code import FORWARDED_ENV
from memd.memory.freshness import RECALL_CAVEAT
from memd.memory.location import Location
from memd.memory.recall import RecalledMemory
from memd.memory.service import MemoryService
from memd.memory.session_context import INDEX_MARK, NOTES_MARK, RECALL_MARK, SessionContext
from memd.memory.shared import note_heading
from memd.privacy import scrub_text
from memd.sources.hooks import (
    HookEvent,
    PreCompact,
    PromptSubmit,
    SessionStart,
    TurnEnd,
    Unhandled,
    head_lines,
    utf8_len,
)

log = logging.getLogger(__name__)

NotesFor = Callable[[str], Awaitable[str | None]]

HOOK_MARGIN_S = 0.3  # the daemon answers this much before the hook's own deadline
MIN_RECALL_S = 0.2

INDEX_HEAD = (
    INDEX_MARK + " ({memory_dir}). Each entry points to a "
    "memory file in that directory; read the file when its topic matters for the task."
)
NOTES_HEAD = NOTES_MARK + " from the conversation so far (they survive compaction and resume):"
RECALL_HEAD = RECALL_MARK + ". "
NEW_CONTEXT = ("startup", "clear", "compact")
CUT_NOTE = "[memd: cut to fit the {budget}-byte injection budget{more}]"


# ---------------------------------------------------------------------------------------------
# Budgeting (pure)


@dataclass(frozen=True)
class Fitted:
    """The joined text and which sections made it (by position, whole or cut)."""

    text: str
    included: tuple[int, ...]
    cut: bool


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


def render_memory(memory: RecalledMemory) -> str:
    """One recalled (pinned, linked) memory as injected text."""
    kind = f"{memory.type} memory" if memory.type else "memory"
    lines = [f"## {memory.name} ({kind}, updated {memory.age}) — {memory.path}"]
    shared = note_heading(memory.team)
    if shared is not None:
        lines.append(shared)
    if memory.warning:
        lines.append(f"Note: {memory.warning}")
    lines += checked_lines(memory.checks)
    content = (memory.content or memory.description).strip()
    if content:
        lines.append(content)
    if memory.content_truncated:
        lines.append("[… the rest is in the file]")
    return "\n".join(lines)


def checked_lines(checks: Sequence[str]) -> list[str]:
    """What the check of a memory's citations found (issue 26), one line each."""
    return [f"Checked against the code now: {w}" for w in checks]


def hook_recall_timeout(config: Config) -> float:
    """Time a recall may take inside a hook call: the recall budget, within the hook's."""
    hook_s = config.hook.timeout_ms / 1000.0 - HOOK_MARGIN_S
    return max(MIN_RECALL_S, min(config.memory.recall_timeout_s, hook_s))


# ---------------------------------------------------------------------------------------------
# Events


async def hook_context(
    event: HookEvent,
    service: MemoryService,
    *,
    notes_for: NotesFor | None = None,
    budget_bytes: int,
    own_index: bool = False,
) -> str | None:
    """What goes into the context for ``event`` (see the module doc), or None: nothing.
    ``own_index``: the agent may load ``MEMORY.md`` itself, as its settings decide (its
    room's ``memory_per_session``)."""
    match event:
        case SessionStart():
            record = await service.beside.session_context(
                event.session_id, event.transcript, _env(event), event.cwd
            )
            return await _session_start(event, record, service, notes_for, budget_bytes, own_index)
        case PromptSubmit():
            record = await service.beside.session_context(
                event.session_id, event.transcript, _env(event), event.cwd
            )
            record.usage_session = event.followed
            return await _prompt_submit(
                event.prompt, event.cwd, record, service, notes_for, budget_bytes, own_index
            )
        case TurnEnd():
            if event.env is not None:
                service.contexts.get(event.session_id).env = _forwarded(event.env)
            service.on_stop(
                event.session_id, event.transcript, event.cwd, event.answer, event.ended
            )
            return None
        case PreCompact() | Unhandled():
            return None
        case _:
            assert_never(event)


def _env(event: SessionStart | PromptSubmit) -> dict[str, str] | None:
    return dict(event.env) if event.env is not None else None


def _forwarded(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v[:4096] for k, v in env.items() if k in FORWARDED_ENV and isinstance(v, str)}


async def _session_start(
    event: SessionStart,
    record: SessionContext,
    service: MemoryService,
    notes_for: NotesFor | None,
    budget_bytes: int,
    own_index: bool,
) -> str | None:
    sections: list[str] = []
    cwd, source = event.cwd, event.source
    if source in NEW_CONTEXT:
        record.index_injected = record.notes_delivered = False
    if source == "resume":
        # delivered with the next prompt, once, unless the resumed conversation holds them
        record.notes_owed = not record.notes_delivered
    index_section = -1
    index = await _index(record, cwd, service, own_index=own_index)
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
    own_index: bool,
    where: Location | None = None,
) -> str:
    """The project's memory index as a section, when the conversation does not hold it yet
    and its agent does not load it itself; "" otherwise (``where``: ``cwd``'s location)."""
    if not cwd or record.index_injected:
        return ""
    # Claude Code loads MEMORY.md itself when its auto memory is on (its settings say).
    if own_index and (await service.beside.claude_code(record, cwd)).auto_memory:
        return ""
    index = await service.index(cwd, where)
    body = index.text.strip()
    return INDEX_HEAD.format(memory_dir=index.memory_dir) + "\n\n" + body if body else ""


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
    own_index: bool,
) -> str | None:
    sections: list[str] = []
    if record.notes_owed:
        record.notes_owed = False
        # A fork memd wrote opens with them (known from its transcript, whatever the agent),
        # looked at with the prompt: the agent has written the history it resumed by then
        # (Gemini CLI writes it after its SessionStart hook).
        if await service.holds_notes(record.session_id):
            record.notes_delivered = True
        else:
            notes = await _notes(record.session_id, service, notes_for)
            if notes:
                sections.append(notes)
                record.notes_delivered = True
    # Pinned memories (at most 4, once a session) go ahead of what recall picks. The memory
    # dir is located once for all three (each look reads Claude Code's settings files).
    memories: list[RecalledMemory] = []
    where = await service.locate(cwd) if cwd else None
    if where is not None:
        memories += await service.pinned(cwd, record.session_id, where)
    caveat = RECALL_CAVEAT
    if prompt.strip() and where is not None:
        tools = await service.recent_tools(record.session_id)
        timeout_s = hook_recall_timeout(service.config)
        answer = await service.recall(
            prompt, cwd, record.session_id, tools, timeout_s=timeout_s, where=where
        )
        pinned = {m.path for m in memories}
        if not answer.memories:  # e.g. nothing relevant enough (issue 36): said, at debug level
            why = answer.result.reason or "no memories"
            log.debug("recall for session %s injects nothing: %s", record.session_id, why)
        memories += [m for m in answer.memories if m.path not in pinned]
        caveat = answer.result.caveat
    first = len(sections)
    if memories:
        sections.append(RECALL_HEAD + caveat)
        sections.extend(render_memory(m) for m in memories)
    # The index goes in with the first prompt when no SessionStart brought it (memdctl
    # install-hooks runs no SessionStart hook at a startup, so ``claude -p`` waits for one
    # hook process, not two: issue 25), after what was recalled for the prompt.
    index = (
        await _index(record, cwd, service, own_index=own_index, where=where)
        if prompt.strip()
        else ""
    )
    last = len(sections)
    shown_of = [m.path for m in memories]
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
