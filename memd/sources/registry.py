"""Every agent memd knows, one room each: the one list the house loops over.

A new agent is a new room (a package beside these, :mod:`memd.sources.room`) and one line in
:data:`ROOMS`.
"""

from __future__ import annotations

from memd.config import LoadedConfig
from memd.sources import claude_code, codex, gemini, qwen
from memd.sources.base import Source
from memd.sources.room import Room

ROOMS: tuple[Room, ...] = (claude_code.ROOM, codex.ROOM, gemini.ROOM, qwen.ROOM)
# The agent of a hook call that names none: hook commands written before agents were named
# (and Claude Code's still) name none.
UNNAMED = ROOMS[0]


def room_named(name: str) -> Room | None:
    """The room of the agent called ``name`` (its name or an older one), or None."""
    return next((room for room in ROOMS if room.called(name)), None)


def sources_for(loaded: LoadedConfig) -> list[Source]:
    """Each room's source of sessions that the config leaves on, in :data:`ROOMS` order."""
    return [source for room in ROOMS if (source := room.open(loaded)) is not None]
