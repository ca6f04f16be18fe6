"""Propose, don't write (issue 35, item 5): a session's new memories as a proposal in its
agent's own review inbox (its room's ``inbox``: :class:`memd.sources.native.Proposals`), when
the user asked for it (Gemini CLI: ``agents.gemini.propose_memories``).

The extraction runs as it always does; then (:func:`take_back`, blocking) what its files say
now is read, the memory dir is rolled back to the snapshot taken before the run (the files
it made go, the ones it changed get their bytes back, the index too), and the files are
handed to the inbox. Nothing reaches memd's memory until the user takes the proposal in the
agent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from memd.config import LoadedConfig
from memd.confined import Refused
from memd.memory.extract import Snapshot, in_memory_dir, roll_back
from memd.memory.paths import INDEX_FILENAME
from memd.memory.scan import opened_area
from memd.sources.room import Room
from memd.state import SessionState

log = logging.getLogger(__name__)

MAX_MEMORY_BYTES = 64 * 1024  # of one proposed memory
Propose = Callable[[str, Sequence[tuple[str, str]]], str]  # (cwd, memories) -> what happened


class AgentFiles:
    """The agents' own files memd writes in, through their rooms: their review inbox
    (:meth:`propose_for`) and their own memory file (:meth:`take_out`)."""

    def __init__(
        self,
        rooms: Sequence[Room],
        room_of: Callable[[SessionState], Room | None],
        loaded: Callable[[], LoadedConfig],
    ) -> None:
        self._rooms = rooms
        self._room_of = room_of
        self._loaded = loaded

    def propose_for(self, state: SessionState) -> Propose | None:
        """How a session's new memories are proposed, None when they are written (its
        agent has no inbox, or the user did not ask for proposals)."""
        room = self._room_of(state)
        config = self._loaded()
        if room is None or room.inbox is None or not room.inbox.enabled(config):
            return None
        return partial(room.inbox.propose, config)

    def take_out(self) -> int:
        """memd's blocks taken out of the agents' own memory files where serving is off
        (blocking; at the daemon's start); how many files changed."""
        config = self._loaded()
        changed = sum(r.native.take_out(config) for r in self._rooms if r.native is not None)
        if changed:
            log.info("memd's memories taken out of %d agents' own memory files", changed)
        return changed


def take_back(
    memory_dir: Path, before: Snapshot, touched: Sequence[str], propose: Propose, cwd: str
) -> str:
    """Read the memories the run wrote, undo the run, propose them; what happened."""
    found: list[tuple[str, str]] = []
    relatives = [r for r in (in_memory_dir(memory_dir, p) for p in touched) if r]
    with opened_area(memory_dir) as area:
        for relative in relatives:
            if relative == INDEX_FILENAME or not relative.endswith(".md") or area is None:
                continue
            try:
                data, _ = area.read(relative, max_bytes=MAX_MEMORY_BYTES)
            except (OSError, ValueError, Refused):
                continue
            found.append((relative, data.decode("utf-8", "replace")))
    roll_back(memory_dir, before, touched)
    if not found:
        return "nothing to propose"
    try:
        return propose(cwd, found)
    except (OSError, ValueError) as exc:
        log.warning("memd could not propose %d memories for %s: %s", len(found), cwd, exc)
        return f"{len(found)} memories not proposed: {exc}"
