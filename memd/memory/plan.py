"""Planning a background memory extraction (R-M3), pure.

After a completed turn the service plans a run with :func:`plan_extraction` (pure):

* the *new part* is what follows the session's cursor, the last message an earlier run (or
  skip) covered; a cursor compacted out of the conversation means all of it is new;
* nothing new, or no answer yet, is a :class:`Skip` that leaves the cursor alone;
* when the main agent itself wrote into the memory dir during that part (a Write, Edit,
  MultiEdit or NotebookEdit call whose path is inside it), the run is skipped and the cursor
  moves past it: the agent already did the remembering.

A :class:`Job` goes to :func:`memd.memory.extract.extract_memories`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memd.session.inputs import start_after
from memd.transcript.messages import ApiMessage

WRITE_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})


@dataclass(frozen=True)
class Job:
    """A run to do: the new messages, oldest first, and the last line they cover."""

    new: tuple[ApiMessage, ...]
    covered_uuid: str


@dataclass(frozen=True)
class Skip:
    """No run. ``covered_uuid`` is where the cursor moves (``None``: it stays)."""

    reason: str
    covered_uuid: str | None = None


Plan = Job | Skip


def plan_extraction(
    messages: Sequence[ApiMessage], cursor: str | None, memory_dirs: Sequence[str]
) -> Plan:
    """What to do for a session whose conversation is ``messages`` (see the module doc)."""
    new = tuple(messages[start_after(messages, cursor) :])
    if not new:
        return Skip("nothing new since the last extraction")
    if not any(m.role == "assistant" for m in new):
        return Skip("the turn has no answer yet")
    covered = new[-1].last_uuid
    written = memory_write(new, memory_dirs)
    if written is not None:
        return Skip(f"the main agent wrote {written} itself", covered)
    return Job(new, covered)


def memory_write(messages: Iterable[ApiMessage], memory_dirs: Sequence[str]) -> str | None:
    """The first path inside one of ``memory_dirs`` that a write tool call names, else None."""
    roots = [os.path.normpath(d) for d in memory_dirs if d]
    for message in messages:
        if message.role != "assistant":
            continue
        for block in message.content:
            if block.get("type") != "tool_use" or block.get("name") not in WRITE_TOOLS:
                continue
            args = block.get("input")
            if not isinstance(args, dict):
                continue
            path = args.get("file_path") or args.get("notebook_path")
            if isinstance(path, str) and path and any(_inside(path, root) for root in roots):
                return path
    return None


def _inside(path: str, root: str) -> bool:
    normal = os.path.normpath(path)
    return normal == root or normal.startswith(root.rstrip("/") + "/")
