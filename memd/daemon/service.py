"""The composition root: one task group owns every long-running task of the daemon.

Start order (each step waits for the previous one's ``task_status.started()``): signal
handling, the watcher, the IPC server; then READY is sent. Only then do the feature modules
(compaction, session notes, memory, dream) load, in a worker thread, and the background work
starts: the ingest workers, then the warming of sessions near compaction (live appends are
read meanwhile), the startup scan and the rest. Work arriving before that waits: the
watcher's marks stay on the coalescing ingest queue, and the methods that need a feature wait
for it. The daemon serves until a signal asks it to stop.

Shutdown is phased and bounded: stop accepting connections and watching, let queued work
finish within the grace period, cancel what is left, save state (shielded), exit.

A write the disk refuses (full, read-only, out of descriptors) never ends the daemon: memd's
own state is kept in memory and written again with back-off by the write-retry task
(:mod:`memd.writes`) until the disk takes it; ``status`` names the path, the error and since
when.
"""

from __future__ import annotations

import logging
import os
import time
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from memd import __version__
from memd.changes import CHANGES
from memd.clock import Clock, SystemClock, iso_utc
from memd.config import LoadedConfig
from memd.daemon.features import Loaded, load_features, notes_settings
from memd.daemon.logsetup import log_destination
from memd.daemon.notify import Notifier
from memd.daemon.optout import OptOuts
from memd.daemon.reloads import ReloadOutcome, restart_needed
from memd.daemon.session_ids import Renamed, carry_over
from memd.daemon.sessions import SessionRegistry
from memd.daemon.signals import Signals
from memd.daemon.watch import WatchedRoot
from memd.envfile import EnvFile, env_file_path, merged, read_env_file
from memd.errors import ConfigError, NotFound, StartupError
from memd.health import Health
from memd.ipc.serving import Serving
from memd.queues import CoalescingQueue
from memd.sources.registry import ROOMS, room_named, sources_for
from memd.state import SessionState, load_sessions, save_sessions
from memd.tokens import load_soon
from memd.transcript.conversation import Conversation
from memd.transcript.view import ConversationView

if TYPE_CHECKING:
    # The features load after READY (see Daemon.build_features): importing them costs more
    # than everything the daemon needs to serve ``hello``.
    from memd.compaction.service import CompactionService
    from memd.compaction.strategy import NotesInput
    from memd.compaction.tokencache import TokenCache
    from memd.dream.exclusion import DirExclusion
    from memd.dream.service import DreamService
    from memd.llm.guard import CostGuard
    from memd.llm.ledger import JobKind, Ledger
    from memd.llm.models import Models
    from memd.memory.location import Location
    from memd.memory.service import MemoryService
    from memd.session.scheduler import NotesScheduler
    from memd.session.store import ExtractionStore
    from memd.team.service import TeamService

log = logging.getLogger(__name__)

SESSIONS_FILE = "sessions.json"


class Daemon:
    """Everything the method table needs, built once from the loaded config.

    The features (compaction, session notes, memory, dream) are built by
    :meth:`build_features` after READY; until ``features_ready`` is set, only the registry
    and the core methods are usable, and the methods that need a feature wait for it.
    """

    compaction: CompactionService
    notes: NotesScheduler
    memory: MemoryService
    exclusion: DirExclusion
    dream: DreamService
    team: TeamService
    ledger: Ledger
    guard: CostGuard

    @classmethod
    def load(
        cls, loaded: LoadedConfig, *, env: dict[str, str], signals: Signals | None = None
    ) -> Daemon:
        """Read persisted state and build the daemon (blocking: call before the loop runs)."""
        _prepare_dirs(loaded.paths.state_dir)
        clock = SystemClock()
        return cls(
            loaded,
            env=env,
            clock=clock,
            sessions=load_sessions(loaded.paths.state_dir / SESSIONS_FILE),
            env_file=_read_env_file(env),
            signals=signals,
            serving=Serving(),
        )

    def __init__(
        self,
        loaded: LoadedConfig,
        *,
        env: dict[str, str],
        clock: Clock,
        sessions: dict[str, SessionState],
        env_file: EnvFile | None = None,
        signals: Signals | None = None,
        serving: Serving,
    ) -> None:
        self.loaded = loaded
        self.serving = serving  # the IPC server, once it listens: memd.ipc.serving
        self.signals = signals or Signals()  # installed by main(); inert in a test's process
        self.env = env  # the process environment; the env file's values are not in it
        self.env_file = env_file or EnvFile(env_file_path(env))
        self.last_reload: ReloadOutcome | None = None
        self._llm_lock = anyio.Lock()  # one (re)opening of the model client at a time
        self.clock = clock
        self.started_at = time.time()
        self.state_file = loaded.paths.state_dir / SESSIONS_FILE
        sources = sources_for(loaded)
        self.registry = SessionRegistry(
            sources,
            loaded.config.transcripts,
            sessions,
            started_at=self.started_at,
            own_calls=own_calls_folder(env),
        )
        self.ingest_queue: CoalescingQueue[Path] = CoalescingQueue()
        self.watched = [WatchedRoot(s.root, s.create_root, layout=s.layout) for s in sources]
        self.watcher_status = self.watched[0].status  # Claude Code's projects root
        # Why memd extracts nothing from an agent's sessions (its own memories are on), by
        # agent; refreshed each minute in the background: ``status`` reads it, no file.
        self.own_memory: dict[str, str | None] = {}
        self.warm_queue: CoalescingQueue[Path] = CoalescingQueue()
        self.notifier = Notifier(env)
        self.health = Health()
        self.state_changed = anyio.Event()
        self.registry.add_listener(self._on_growth)
        self.stopping = anyio.Event()
        self.stop_watching = anyio.Event()
        self.background_done = anyio.Event()  # the background work has ended (shutdown waits)
        self.reloads = 0
        # Opened in the background after start-up: importing the SDK costs ~1.5 s.
        self.llm: Models | None = None
        self.optouts = OptOuts(loaded.config.privacy.ignore_projects, env.get("HOME"))
        self.features_ready = anyio.Event()
        # Set once the sessions the startup scan found active have been read: until then a
        # session's cwd (which project it belongs to) may not be known yet.
        self.history_read = anyio.Event()
        self._early_growth: dict[str, SessionState] = {}

    async def build_features(self) -> None:
        """Import the feature modules and read their state (the usage ledger, the notes
        records: one file per session) in a worker thread while the loop keeps serving; build
        them, replay the growth seen meanwhile and set ``features_ready``."""
        paths, provisional = self.loaded.paths, self.registry.provisional()

        def load() -> tuple[list[tuple[SessionState, str]], Loaded]:
            learned = self.registry.learn_ids(provisional)
            renamed = [Renamed(s.session_id, new, s.project) for s, new in learned]
            carry_over(renamed, paths.state_dir, paths.projects_root)
            return learned, load_features(paths.state_dir, self.clock)

        learned, (ledger, notes_store, tokens) = await anyio.to_thread.run_sync(load)
        for state, session_id in learned:  # their records moved with them (carry_over)
            self.registry.rename(state, session_id)
        import msgspec.msgpack

        from memd.llm.guard import CostGuard  # loaded by the thread: the loop never imports

        if self.serving.server is not None:
            self.serving.server.use_packer(msgspec.msgpack.Encoder().encode)
        self.ledger = ledger
        self.guard = CostGuard(
            self.loaded.config.budget,
            ledger,
            self.clock,
            backend_of=self._backend_of,
            on_failure=self._job_failed,
        )
        self._build_features(notes_store, tokens)
        self.features_ready.set()
        early, self._early_growth = self._early_growth, {}
        for state in early.values():
            self._on_growth(state)

    def _build_features(self, notes_store: ExtractionStore, tokens: TokenCache) -> None:
        """Notes, memory, then compaction: each built with what it uses of the others."""
        from memd.compaction.service import CompactionService
        from memd.dream.exclusion import DirExclusion
        from memd.memory.propose import AgentFiles
        from memd.memory.service import MemoryService
        from memd.session.scheduler import NotesScheduler

        loaded, env = self.loaded, self.env
        self.notes = NotesScheduler(
            notes_settings(loaded),
            lambda: self.llm,
            store=notes_store,
            source=self.registry,
            guard=self.guard,
            ledger=self.ledger,
            clock=self.clock,
            started_at=self.started_at,
        )
        self.exclusion = DirExclusion()
        self.memory = MemoryService(
            loaded.paths.projects_root,
            loaded.paths.state_dir,
            loaded.config,
            self.clock,
            self.ledger,
            self.guard,
            lambda: self.llm,
            self._conversation_view,
            session_of=self.registry.get,
            home=env.get("HOME"),
            hold_dir=self.exclusion.hold,
            after_turn=self._after_turn,
            claude_dir=loaded.paths.claude_dir,
            own_memory_of=self.registry.own_memory_of,
            agent_files=AgentFiles(ROOMS, self.registry.room_of, lambda: self.loaded),
        )
        self.compaction = CompactionService(
            loaded.config,
            loaded.paths.state_dir,
            home=Path(env.get("HOME") or Path.home()),
            claude_dir=loaded.paths.claude_dir,
            ledger=self.ledger,
            get_llm=lambda: self.llm,
            tokens=tokens,
            notes_for=self._notes_input,
            wait_extraction=self.notes.wait_extraction,
            memory_index_for=self._memory_index_text,
            fork_notes=self.notes,
            window_of=self.registry.window_of,
        )
        self._build_dream()
        self._build_team()

    def _build_dream(self) -> None:
        """The dream service, over the memory service's dirs and citations."""
        from memd.dream.service import DreamService

        loaded = self.loaded
        self.dream = DreamService(
            loaded.paths.projects_root,
            loaded.paths.state_dir,
            loaded.config,
            self.clock,
            self.ledger,
            self.guard,
            lambda: self.llm,
            self.memory.locate,
            self.exclusion,
            retire_candidates=self.memory.citations.retire_candidates,
            cite_files=self.memory.citations.record,
            scope_of=self.registry.dream_scope,
        )

    def _build_team(self) -> None:
        """The team tier (issue 37): syncs of memories with git remotes."""
        from memd.team.service import TeamService

        self.team = TeamService(
            self.loaded.config.team,
            self.loaded.paths.state_dir,
            locate=self.memory.locate,
            agent_of=self._agent_of,
            clock=self.clock,
            env=self.env,
        )

    def _agent_of(self, session_id: str) -> str | None:
        state = self.registry.get(session_id)
        return state.agent if state is not None else None

    def _after_turn(self, where: Location, state: SessionState) -> None:
        """A session completed a turn (the memory service's signal): the dream gates."""
        self.dream.notify_turn_end(where, state)

    @property
    def config(self) -> LoadedConfig:
        return self.loaded

    @property
    def llm_env(self) -> dict[str, str]:
        """What the model client is configured from: the env file under the real environment.
        Only :func:`open_llm` sees it; nothing memd starts inherits these values."""
        return merged(self.env, self.env_file)

    def _backend_of(self, kind: JobKind) -> str:
        """The backend serving ``kind`` now (the guard holds back per backend)."""
        route = self.llm.route(kind) if self.llm is not None else None
        return str(getattr(route, "backend", ""))

    def _job_failed(self, kind: str, subject: str, error: BaseException) -> None:
        self.health.record(f"{kind} {subject}: {error}".replace("  ", " "))

    async def _notes_input(self, session_id: str) -> NotesInput | None:
        from memd.compaction.strategy import NotesInput

        view = await self.notes.read_notes(session_id)
        if view.text is None:
            return None
        return NotesInput(view.text, view.template, view.last_summarized_id, view.path)

    async def _conversation_view(self, state: SessionState) -> ConversationView:
        """A snapshot taken under the session's lock: the memory service reads it on the
        event loop while the ingest thread may be growing the live conversation."""
        return await self.registry.read(state, Conversation.view)

    async def _memory_index_text(self, cwd: str) -> str | None:
        return (await self.memory.index(cwd)).text or None

    async def notes_text(self, session_id: str) -> str | None:
        """The session's notes for the SessionStart hook on resume/compact, if any."""
        try:
            view = await self.notes.read_notes(session_id)
        except NotFound:
            return None
        return None if view.empty else view.text

    def _on_growth(self, state: SessionState) -> None:
        self.state_changed.set()
        if not self.features_ready.is_set():
            self._early_growth[state.path] = state  # replayed once the features exist
            return
        load_soon()  # a session was read (by a worker or a request): its appends estimate
        if self.optouts.reason(state.cwd) is None:
            self.notes.notify_growth(state)
            self.memory.notify_growth(state)
        serves = self.registry.serves_compaction(state)
        if serves and self.compaction.wants_warming(state):
            self.warm_queue.mark_nowait(Path(state.path))

    async def refresh_own_memory(self) -> None:
        """Read again whether each agent keeps memories of its own (its config files)."""
        sources = [s for s in self.registry.sources if not _per_session(s.agent)]
        own = await anyio.to_thread.run_sync(lambda: {s.agent: s.own_memory("") for s in sources})
        if own != self.own_memory:
            self.own_memory = own
            CHANGES.bump()

    async def wait_features(self) -> None:
        """Wait for the features only while they load: ``Event.wait`` on a set event still
        gives the loop a turn, which doubled the time of an inline ``status``."""
        if not self.features_ready.is_set():
            await self.features_ready.wait()

    @cached_property
    def facts(self) -> dict[str, Any]:
        """What ``status`` says about the process that never changes while it runs (a reload
        keeps the paths): built once, not on every ``status``."""
        paths = self.loaded.paths
        return {
            "version": __version__,
            "pid": os.getpid(),
            "started_at": iso_utc(self.started_at),
            "socket": str(paths.socket_path),
            "projects_root": str(paths.projects_root),
            "state_dir": str(paths.state_dir),
            "log": log_destination(self.env),
        }

    # -- the model client ----------------------------------------------------------------------

    async def open_model(self) -> None:
        """Open the model clients from the config and the env file as they are now, and
        what a look for local servers finds (the SDKs are imported and the clients built in a
        worker thread), hand them to the features and close the ones they replace; nothing
        when the settings and what was found are the same. A
        reload and the first opening after READY both come here, one at a time."""
        from memd.llm.client import close_llm
        from memd.llm.models import open_models

        async with self._llm_lock:
            if self.stopping.is_set():
                return
            settings = (self.loaded.config.llm, self.llm_env, self.llm)
            models = await anyio.to_thread.run_sync(open_models, *settings)
            if models is self.llm:  # the same settings, and the same servers found
                return
            previous, self.llm = self.llm, models
            CHANGES.bump()  # ``llm`` and every section the model turns on or off
            self.notes.llm_changed()
            self.memory.llm_changed()
            if not models.enabled:
                log.warning("model features are off: %s", models.reason)
            else:
                log.info("model client ready (%s)", ", ".join(sorted(models.backends)))
            if previous is not None:
                with anyio.CancelScope(shield=True):
                    await close_llm(previous)

    # -- reload (SIGHUP and `memdctl reload` share this path) -----------------------------------

    async def reload(self) -> str:
        """Re-read the config file and the env file and rebuild what depends on them (the
        model client among them: it is open again when this returns); the outcome in words.
        A failed reload keeps the running config; either way :attr:`last_reload` says what
        happened once it is over."""
        outcome = self._reload_files()
        if outcome.outcome == "reloaded":
            if self.features_ready.is_set():  # else the features are built from the new files
                await self.open_model()
            self.reloads += 1
            log.info("configuration reloaded")
        self.last_reload = outcome
        CHANGES.bump()  # the reload and each setting it changed, for ``status``
        return outcome.text

    def _reload_files(self) -> ReloadOutcome:
        from memd.config import load_config

        env_file = _read_env_file(self.env)
        try:
            fresh = load_config(
                config_file=str(self.loaded.paths.config_file)
                if self.loaded.paths.config_file
                else None,
                env=self.env,
            )
        except ConfigError as exc:
            log.error("config reload failed, keeping the running config: %s", exc)
            return ReloadOutcome.failed(f"reload failed: {exc}")
        waiting = restart_needed(self.loaded, fresh)
        if waiting:
            log.warning("%s changed; that takes effect after a restart", ", ".join(waiting))
        self._apply(LoadedConfig(fresh.config, self.loaded.paths), env_file)
        return ReloadOutcome.reloaded(waiting)

    def _apply(self, fresh: LoadedConfig, env_file: EnvFile) -> None:
        self.loaded = fresh
        self.env_file = env_file
        self.registry.config = fresh.config.transcripts
        self.optouts.reconfigure(fresh.config.privacy.ignore_projects)
        if self.serving.server is not None:  # the limits of compact, recall, …: the model's
            from memd.ipc.handlers import method_timeouts

            self.serving.server.method_timeouts = method_timeouts(self)
        if self.features_ready.is_set():  # otherwise they are built from ``self.loaded``
            self.guard.reconfigure(fresh.config.budget)
            self.compaction.config = fresh.config
            self.notes.reconfigure(notes_settings(fresh))
            self.memory.reconfigure(fresh.config)
            self.dream.reconfigure(fresh.config)
            self.team.reconfigure(fresh.config.team)

    # -- state ---------------------------------------------------------------------------------

    def save_state(self) -> bool:
        """Write the session state; False when the disk refused it (kept and retried)."""
        saved = save_sessions(self.state_file, self.registry.snapshot_for_save())
        self.registry.dirty = False
        return saved


def _per_session(agent: str) -> bool:
    """Whether the agent's native memory is decided per session (not by its config)."""
    room = room_named(agent)
    return room is not None and room.memory_per_session


def own_calls_folder(env: dict[str, str]) -> str:
    """The folder memd runs the agents' CLIs in (its real path: an agent records that)."""
    from memd_client.paths import model_calls_dir

    return os.path.realpath(model_calls_dir(env))


def _read_env_file(env: dict[str, str]) -> EnvFile:
    env_file = read_env_file(env_file_path(env))
    if env_file.problem:
        log.error("env file: %s", env_file.problem)
    elif env_file.exists:
        log.info("read %d settings from %s", len(env_file.values), env_file.path)
    return env_file


def _prepare_dirs(state_dir: Path) -> None:
    try:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise StartupError(
            f"cannot create the state directory {state_dir}: {exc.strerror}"
        ) from exc
