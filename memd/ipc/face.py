"""What the IPC methods call on the daemon: one protocol per method family.

The method modules (``memd/ipc/*_methods.py``, :mod:`memd.ipc.handlers`,
:mod:`memd.ipc.params`) take these, never :class:`memd.daemon.service.Daemon`: the daemon,
the composition root, imports them and hands itself in (mypy checks that it fits each
protocol where it does), and nothing under ``memd/ipc/`` imports it back
(``tests/test_layering.py`` checks). A method that needs more of the daemon adds it here.
Nor do they name a type of ``memd/daemon/``: what they use of its parts (the session
registry, the opt-outs, the watcher, the last reload) is a protocol of
:mod:`memd.ipc.parts`, which those parts fit.

The types are imported for the checker only: this module loads before READY with the
method table, and the features' modules must not (see ``docs/ARCHITECTURE.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import anyio

    from memd.clock import Clock
    from memd.compaction.service import CompactionService
    from memd.config import LoadedConfig
    from memd.dream.exclusion import DirExclusion
    from memd.dream.service import DreamService
    from memd.envfile import EnvFile
    from memd.health import Health
    from memd.ipc.parts import OptOutCheck, Reloaded, Sessions, Watched, WatchShown
    from memd.ipc.serving import Serving
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
    def registry(self) -> Sessions: ...


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
    def optouts(self) -> OptOutCheck: ...


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


class SessionRowFace(HasSessions, HasConfig, Protocol):
    """A session's row (``sessions``, ``session``, ``status``'s rows): the registry, and the
    config for the session's window."""


class ReloadFace(HasConfig, Protocol):
    """``config`` and ``reload``."""

    @property
    def env_file(self) -> EnvFile: ...
    @property
    def last_reload(self) -> Reloaded | None: ...
    async def reload(self) -> str: ...


class FeaturesFace(MemoryFace, NotesFace, McpFace, DoctorFace, TeamFace, Protocol):
    """The feature families together (:func:`memd.ipc.handlers.feature_methods`), and the
    wait for them to load (their stand-ins wait before READY's features exist)."""

    async def wait_features(self) -> None: ...


class DaemonFace(FeaturesFace, ReloadFace, SessionRowFace, Protocol):
    """Everything: ``status`` (:mod:`memd.ipc.status`), which shows every part, and the
    method table (:func:`memd.ipc.handlers.method_table`), which hands each family its
    part. A method that needs less takes one of the faces above."""

    @property
    def facts(self) -> dict[str, Any]: ...
    @property
    def health(self) -> Health: ...
    @property
    def ingest_queue(self) -> CoalescingQueue[Path]: ...
    @property
    def watched(self) -> Sequence[Watched]: ...
    @property
    def watcher_status(self) -> WatchShown: ...
    @property
    def own_memory(self) -> dict[str, str | None]: ...
    @property
    def serving(self) -> Serving: ...
    @property
    def started_at(self) -> float: ...
    @property
    def reloads(self) -> int: ...
    @property
    def ledger(self) -> Ledger: ...
    @property
    def guard(self) -> CostGuard: ...
