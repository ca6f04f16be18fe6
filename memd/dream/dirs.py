"""What the dream service knows of each memory dir it has seen, and of the run going on
in one (:class:`memd.dream.service.DreamService` keeps them; :mod:`memd.dream.status` shows
them)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from memd.agent.runner import AgentProgress
from memd.changes import Counted
from memd.dream import lock
from memd.dream.gates import Verdict
from memd.dream.runs import RunRecord
from memd.sources.base import DreamScope

HISTORY = 10  # the runs of a memory dir kept in memory for ``status``


@dataclass
class Running(Counted):
    record: RunRecord
    abort: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    progress: AgentProgress | None = None


@dataclass
class DreamDir(Counted):
    """What the service knows about one memory dir."""

    key: str  # the memory dir as located (the exclusion's key)
    memory_dir: Path
    scopes: set[DreamScope]  # where its sessions are (memd.sources.base.DreamScope)
    last_scan_at: float | None = None
    verdict: Verdict | None = None
    verdict_at: float | None = None
    lock_mtime: float | None = None
    busy: lock.Busy | None = None
    trigger: str = ""
    exclude: str = ""  # the trigger session as its scope names it (not counted)
    cwd: str = ""  # a session's, the newest seen: the repository its memories cite
    running: Running | None = None
    history: deque[RunRecord] = field(default_factory=lambda: deque(maxlen=HISTORY))
