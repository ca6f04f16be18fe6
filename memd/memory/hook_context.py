"""What the Claude Code hook injects into the agent's context (R-I4, R-B5).

The daemon's ``hook`` method passes the event name and the hook's stdin JSON here:

* ``SessionStart`` — the project's memory index; on ``source`` ``resume`` or ``compact``
  also the session's working notes, when ``notes_for(session_id)`` has them;
* ``UserPromptSubmit`` — the memories recalled for the prompt, each with its age and, when
  older than a day, its freshness warning; the ones injected are marked surfaced so the
  session never gets the same memory twice this way;
* ``Stop`` — the turn ended: queue the memory extraction; nothing is injected;
* anything else — nothing.

Claude Code wraps ``additionalContext`` in a system reminder itself, so the text here is
plain (the freshness warnings are the bare variant, not a nested reminder).

Everything stays under ``budget_bytes`` (``hook.injection_max_bytes``, UTF-8) and degrades
gracefully: :func:`fit` keeps sections in priority order — the index first, then the best
memories — and cuts the first one that does not fit on a line boundary, with a note saying
what was left out. Bad or missing input fields mean nothing is injected, never an error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memd.config import Config
from memd.memory.service import MemoryService
from memd.privacy import scrub_text

NotesFor = Callable[[str], Awaitable[str | None]]

HOOK_MARGIN_S = 0.3  # the daemon answers this much before the hook's own deadline
MIN_RECALL_S = 0.2

INDEX_HEAD = (
    "Memory index of this project, kept by memd ({memory_dir}). Each entry points to a "
    "memory file in that directory; read the file when its topic matters for the task."
)
NOTES_HEAD = (
    "Working notes of this session, kept by memd from the conversation so far "
    "(they survive compaction and resume):"
)
RECALL_HEAD = "Memories from earlier sessions that may help with this prompt (recalled by memd). "
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
    content = str(memory.get("content") or memory.get("description") or "").strip()
    if content:
        lines.append(content)
    if memory.get("content_truncated"):
        lines.append("[… the rest is in the file]")
    return "\n".join(lines)


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
) -> dict[str, str | None]:
    """``{"additionalContext": text or None}`` for one hook call (see the module doc)."""
    text: str | None = None
    match event:
        case "SessionStart":
            text = await _session_start(hook_input, service, notes_for, budget_bytes)
        case "UserPromptSubmit":
            text = await _prompt_submit(hook_input, service, budget_bytes)
        case "Stop":
            await _stop(hook_input, service)
        case _:
            pass
    return {"additionalContext": text or None}


def _field(hook_input: Mapping[str, Any], key: str) -> str:
    value = hook_input.get(key)
    return value if isinstance(value, str) else ""


def _cwd(hook_input: Mapping[str, Any]) -> str:
    cwd = _field(hook_input, "cwd")
    return cwd if cwd.startswith("/") else ""


async def _session_start(
    hook_input: Mapping[str, Any],
    service: MemoryService,
    notes_for: NotesFor | None,
    budget_bytes: int,
) -> str | None:
    sections: list[str] = []
    cwd = _cwd(hook_input)
    if cwd:
        index = await service.index(cwd)
        body = str(index.get("text") or "").strip()
        if body:
            sections.append(INDEX_HEAD.format(memory_dir=index["memory_dir"]) + "\n\n" + body)
    session_id = _field(hook_input, "session_id")
    if _field(hook_input, "source") in ("resume", "compact") and notes_for and session_id:
        notes = await notes_for(session_id)
        if notes and notes.strip():
            secrets = service.config.privacy.redact_secrets
            sections.append(NOTES_HEAD + "\n\n" + scrub_text(notes.strip(), secrets=secrets))
    return fit(sections, budget_bytes).text or None


async def _prompt_submit(
    hook_input: Mapping[str, Any], service: MemoryService, budget_bytes: int
) -> str | None:
    prompt = _field(hook_input, "prompt")
    cwd = _cwd(hook_input)
    if not prompt.strip() or not cwd:
        return None
    session_id = _field(hook_input, "session_id")
    tools = await service.recent_tools(session_id) if session_id else []
    result = await service.recall(
        prompt, cwd, session_id, tools, timeout_s=hook_recall_timeout(service.config)
    )
    memories: list[Mapping[str, Any]] = list(result.get("memories") or [])
    if not memories:
        return None
    head = RECALL_HEAD + str(result.get("caveat") or "")
    fitted = fit([head, *(render_memory(m) for m in memories)], budget_bytes)
    shown = [str(memories[i - 1]["path"]) for i in fitted.included if i > 0]
    if not shown:
        return None
    service.mark_surfaced(session_id, shown)
    return fitted.text


async def _stop(hook_input: Mapping[str, Any], service: MemoryService) -> None:
    session_id = _field(hook_input, "session_id")
    if session_id:
        await service.on_stop(session_id, _field(hook_input, "transcript_path"), _cwd(hook_input))
