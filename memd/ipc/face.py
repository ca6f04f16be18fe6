"""What the IPC methods call on the daemon: one protocol per method family.

The method modules (``memd/ipc/*_methods.py``, :mod:`memd.ipc.handlers`,
:mod:`memd.ipc.params`) take these, never :class:`memd.daemon.service.Daemon`: the daemon,
the composition root, imports them and hands itself in (mypy checks that it fits each
protocol where it does), and nothing under ``memd/ipc/`` imports it back
(``tests/test_layering.py`` checks). A method that needs more of the daemon adds it here.

The types are imported for the checker only: this module loads before READY with the
method table, and the features' modules must not (see ``docs/ARCHITECTURE.md``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import anyio

    from memd.clock import Clock
    from memd.compaction.service import CompactionService
    from memd.config import LoadedConfig
    from memd.daemon.optout import OptOuts
    from memd.daemon.reloads import ReloadOutcome
    from memd.daemon.sessions import SessionRegistry
    from memd.daemon.watch import WatchedRoot, WatcherStatus
    from memd.dream.exclusion import DirExclusion
    from memd.dream.service import DreamService
    from memd.envfile import EnvFile
    from memd.health import Health
    from memd.ipc.server import Server
    from memd.llm.guard import CostGuard
    from memd.llm.ledger import Ledger
    from memd.llm.models import Models
    from memd.memory.service import MemoryService
    from memd.queues import CoalescingQueue
    from memd.session.scheduler import NotesScheduler
    from memd.team.service import TeamService


class HasSessions(Protocol):
    """The session registry (:func:`memd.ipc.params.find_session`)."""

    @property
    def registry(self) -> SessionRegistry: ...


class HasConfig(Protocol):
    @property
    def loaded(self) -> LoadedConfig: ...


class CompactionFace(HasSessions, Protocol):
    """``should_compact``, ``compact``, ``microcompact``."""

    @property
    def compaction(self) -> CompactionService: ...


class TakeoverFace(CompactionFace, HasConfig, Protocol):
    """The PreCompact hook's takeover (:func:`memd.ipc.compaction_methods.precompact`)."""

    @property
    def notes(self) -> NotesScheduler: ...


class NotesFace(HasSessions, Protocol):
    """``notes``, ``extract``, ``wait_extraction``."""

    @property
    def notes(self) -> NotesScheduler: ...
    @property
    def optouts(self) -> OptOuts: ...


class MemoryFace(TakeoverFace, Protocol):
    """``memory_index``, ``memories``, ``recall``, ``hook`` (whose PreCompact is the
    takeover's)."""

    @property
    def memory(self) -> MemoryService: ...
    async def notes_text(self, session_id: str) -> str | None: ...


class DreamFace(Protocol):
    """``dream``."""

    @property
    def dream(self) -> DreamService: ...


class TeamFace(Protocol):
    """``team``."""

    @property
    def team(self) -> TeamService: ...


class DoctorFace(HasConfig, Protocol):
    """``probe_api``, ``doctor_facts``."""

    @property
    def llm(self) -> Models | None: ...
    @property
    def env_file(self) -> EnvFile: ...


class McpFace(HasSessions, HasConfig, DreamFace, Protocol):
    """``remember``, ``read_memory``, ``project_status``, ``project_notes``."""

    @property
    def clock(self) -> Clock: ...
    @property
    def memory(self) -> MemoryService: ...
    @property
    def notes(self) -> NotesScheduler: ...
    @property
    def exclusion(self) -> DirExclusion: ...
    @property
    def history_read(self) -> anyio.Event: ...


class DaemonFace(MemoryFace, NotesFace, McpFace, DoctorFace, TeamFace, Protocol):
    """Everything: the core methods (``status``, ``session``, ``reload``…) and the table
    that hands the feature families their part (:mod:`memd.ipc.handlers`)."""

    @property
    def facts(self) -> dict[str, Any]: ...
    @property
    def health(self) -> Health: ...
    @property
    def ingest_queue(self) -> CoalescingQueue[Path]: ...
    @property
    def watched(self) -> list[WatchedRoot]: ...
    @property
    def watcher_status(self) -> WatcherStatus: ...
    @property
    def own_memory(self) -> dict[str, str | None]: ...
    @property
    def server(self) -> Server | None: ...
    @property
    def started_at(self) -> float: ...
    @property
    def reloads(self) -> int: ...
    @property
    def last_reload(self) -> ReloadOutcome | None: ...
    @property
    def ledger(self) -> Ledger: ...
    @property
    def guard(self) -> CostGuard: ...
    async def wait_features(self) -> None: ...
    async def reload(self) -> str: ...
