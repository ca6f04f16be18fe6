"""Judging a session's use of its memories at a turn end (issue 36, item 2): the I/O around
:func:`memd.memory.usage_evidence.evidence`.

At each turn end of a session (any agent's: the memory service's turn-end signal),
:func:`judge_session` (blocking: a worker thread) looks at the session's conversation:

1. the messages after the record's cursor are looked through for memd's MCP answers
   (``recall``, ``read_memory``): each memory they served entered the context there, and is
   recorded as injected, anchored after that message;
2. each injection still waiting for a verdict is judged on the messages after its anchor, by
   the agent's rules (its room's :class:`~memd.memory.usage_evidence.Rules`): a sign of use
   closes it as used; a reply without one counts a turn end off its window
   (:data:`memd.memory.usage.USE_TURNS`), after which it is ignored;
3. the cursor moves to the conversation's end.

What a memory's use would look like is read from its file now (through
:class:`memd.confined.Area`, at most :data:`MAX_MEMORY_BYTES`): its name, its text, the files
it cites (its ``citations``, else the paths its text names). A memory whose file is gone
leaves the record. At most :data:`MAX_WINDOW_MESSAGES` messages are looked at.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memd.confined import Area
from memd.memory.citations import from_frontmatter, infer
from memd.memory.frontmatter import parse_document
from memd.memory.paths import project_root
from memd.memory.scan import opened_area
from memd.memory.usage import UsageRecord, Verdict
from memd.memory.usage_evidence import Places, Step, Watched, evidence, steps_of
from memd.session.inputs import start_after
from memd.sources.usage import Rules
from memd.transcript.messages import ApiMessage

log = logging.getLogger(__name__)

MAX_WINDOW_MESSAGES = 400
MAX_MEMORY_BYTES = 16_000


@dataclass(frozen=True)
class Judged:
    """What one look found (for the log and the tests)."""

    served: int  # memories memd's MCP answers brought in since the last look
    used: tuple[str, ...]
    waiting: int


@dataclass(frozen=True)
class SessionAt:
    """The session judged: its id, its agent, its working dir and its project's memory dir."""

    session: str
    agent: str
    cwd: str
    memory_dir: Path


def judge_session(
    record: UsageRecord, at: SessionAt, messages: Sequence[ApiMessage], rules: Rules
) -> Judged:
    """One look at the session's conversation ``messages`` (see the module docstring)."""
    if not messages:
        return Judged(0, (), len(record.pending(at.session)))
    first = max(0, len(messages) - MAX_WINDOW_MESSAGES)
    cursor = record.cursor(at.session)
    new = max(first, start_after(messages, cursor or None))
    served = _served(record, at, messages, new, rules)
    pending = record.pending(at.session)
    if not pending:
        record.judged(at.session, (), agent=at.agent, cursor=messages[-1].last_uuid)
        return Judged(served, (), 0)
    starts = {
        path: max(first, start_after(messages, p.anchor or None)) for path, p in pending.items()
    }
    begin = min(starts.values())
    steps = steps_of(((m.role, m.content) for m in messages[begin:]), rules)
    places = Places(at.cwd, _root(at.cwd))
    verdicts, replied, gone = _verdicts(at.memory_dir, starts, begin, steps, rules, places)
    record.forget(gone)
    record.judged(
        at.session, verdicts, agent=at.agent, turn_ended=replied, cursor=messages[-1].last_uuid
    )
    used = tuple(v.path for v in verdicts if v.signal is not None)
    return Judged(served, used, len(record.pending(at.session)))


def _served(
    record: UsageRecord, at: SessionAt, messages: Sequence[ApiMessage], new: int, rules: Rules
) -> int:
    """Record what memd's MCP answers in ``messages[new:]`` brought into the context, each
    anchored before the reply that called for it (so its window holds the call: a
    ``read_memory`` of it is a use)."""
    count = 0
    for index in range(new, len(messages)):
        message = messages[index]
        if message.role == "assistant":
            continue
        (step,) = steps_of([(message.role, message.content)], rules)
        paths = [p for p in (_inside(at.memory_dir, f) for f in step.served) if p]
        if paths:
            anchor = _before_call(messages, index)
            record.injected(at.session, paths, anchor=anchor, agent=at.agent)
            count += len(paths)
    return count


def _before_call(messages: Sequence[ApiMessage], answer: int) -> str:
    """The last line before the reply that made the call ``messages[answer]`` answers
    (``""``: the session's start)."""
    call = next((i for i in range(answer - 1, -1, -1) if messages[i].role == "assistant"), 0)
    return messages[call - 1].last_uuid if call >= 1 else ""


def _verdicts(
    memory_dir: Path,
    starts: dict[str, int],
    begin: int,
    steps: Sequence[Step],
    rules: Rules,
    places: Places,
) -> tuple[list[Verdict], list[str], list[str]]:
    """The verdicts reached, the injections whose window holds a reply without a sign of
    use, and the memories whose file is gone."""
    verdicts: list[Verdict] = []
    replied: list[str] = []
    gone: list[str] = []
    with opened_area(memory_dir) as area:
        for path, start in starts.items():
            memory = _watched(area, memory_dir, path)
            if memory is None:
                gone.append(path)
                continue
            window = steps[start - begin :]
            signal = evidence(memory, window, rules, places)
            if signal is not None:
                verdicts.append(Verdict(path, signal))
            elif any(s.role == "assistant" for s in window):
                replied.append(path)
    return verdicts, replied, gone


def _watched(area: Area | None, memory_dir: Path, path: str) -> Watched | None:
    relative = _relative(memory_dir, path)
    if area is None or relative is None:
        return None
    try:
        raw, _ = area.read(relative, max_bytes=MAX_MEMORY_BYTES)
    except (OSError, ValueError):
        return None
    document = parse_document(raw.decode("utf-8", errors="replace"))
    meta = document.meta
    recorded = from_frontmatter(meta.extra)
    cited = recorded if recorded is not None else infer(document.body)
    text = f"{meta.description or ''}\n{document.body}"
    return Watched(path, relative, meta.name or "", text, tuple(c.path for c in cited))


def _relative(memory_dir: Path, path: str) -> str | None:
    prefix = f"{memory_dir}/"
    if not path.startswith(prefix):
        return None
    return path.removeprefix(prefix) or None


def _inside(memory_dir: Path, name: str) -> str | None:
    """The absolute path of ``name`` (a memory file as memd's answer named it, relative to
    the memory dir), or None when it is not a plain path beneath it."""
    if not name or name.startswith("/") or "\0" in name:
        return None
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    return f"{memory_dir}/{name}"


def _root(cwd: str) -> str:
    if not cwd.startswith("/"):
        return ""
    try:
        return str(project_root(Path(cwd)))
    except OSError:
        return os.path.normpath(cwd)
