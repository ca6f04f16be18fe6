"""The dream service: gates at turn ends and on request, one locked run per memory dir,
abort, log, restore, status (R-D1 … R-D4, R-B3).

* :meth:`DreamService.notify_turn_end` (a session of the project completed a turn; never
  blocks) queues a gate check for the memory dir; :meth:`DreamService.check` runs the same
  check on request (``force`` skips time, throttle and sessions, never the lock).
* A check that passes every gate starts a run in the service's task group: it holds the
  memory dir against memd's own extraction (:class:`~memd.dream.exclusion.DirExclusion`),
  records the run on disk (its intent: a kill from then on is undone at the next start, the
  lock rolled back), takes the consolidation lock (:mod:`memd.dream.claim`), runs
  :func:`memd.dream.consolidate.consolidate`, then marks the lock (success) or rolls it back.
* :meth:`DreamService.abort`, :meth:`DreamService.log` and :meth:`DreamService.restore` serve
  ``memdctl dream``; :meth:`DreamService.statistics` is the ``dream`` section of ``status``:
  the gates as last computed (it never scans), the lock as last seen, live progress, history.
* At start, runs a killed daemon left ``running`` are undone
  (:func:`memd.dream.restore.recover_all`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from memd.agent.runner import AgentProgress
from memd.clock import Clock
from memd.config import Config
from memd.confined import ChangeGuard
from memd.dream import claim, gates, lock
from memd.dream.consolidate import DreamOutcome, consolidate
from memd.dream.dirs import DreamDir, Running
from memd.dream.exclusion import DirExclusion
from memd.dream.gates import Go, NeedScan, Observed, Skip, Verdict
from memd.dream.job import CiteRun, DreamSettings, Job
from memd.dream.restore import pending_reason, recover_all, recover_run
from memd.dream.runs import UNDO_PENDING, RunRecord, RunStore
from memd.dream.status import dir_row, printable
from memd.dream.transcripts import count_sessions
from memd.errors import NotFound
from memd.llm.client import Disabled
from memd.llm.guard import CostGuard
from memd.llm.guard import Go as GuardGo
from memd.llm.ledger import Ledger, billed_tokens
from memd.llm.models import Models, Route, job_route
from memd.memory.location import Location, locate_project
from memd.queues import CoalescingQueue
from memd.sources.base import DreamScope, any_session
from memd.state import SessionState

log = logging.getLogger(__name__)

# The sessions the dream counts and searches with a session's project (its room says).
ScopeOf = Callable[[SessionState], DreamScope | None]
# (cwd, memory dir, files, the guard told each rewrite first) → the files whose citations
# were recorded.
CiteFiles = Callable[[str, Path, Sequence[str], ChangeGuard], tuple[str, ...]]
# A dream parked by the cost guard (an error retrying cannot fix) stays parked for automatic
# checks; `memdctl dream --force` is the manual trigger that releases it.
GUARD_KEY = "dream"
ABORT_WAIT_S = 120.0


class DreamService:
    def __init__(
        self,
        projects_root: Path,
        state_dir: Path,
        config: Config,
        clock: Clock,
        ledger: Ledger,
        guard: CostGuard,
        get_llm: Callable[[], Models | None],
        locate: Callable[[str], Awaitable[Location]],
        exclusion: DirExclusion,
        *,
        retire_candidates: Callable[[Path], list[str]] | None = None,
        cite_files: CiteFiles | None = None,
        scope_of: ScopeOf = lambda state: None,
    ) -> None:
        self.projects_root = projects_root
        self._scope_of = scope_of
        self._retire_candidates = retire_candidates
        self._cite_files = cite_files
        self.config = config
        self.store = RunStore(state_dir)
        self._clock = clock
        self._ledger = ledger
        self._guard = guard
        self._get_llm = get_llm
        self._locate = locate
        self.exclusion = exclusion
        self._dirs: dict[str, DreamDir] = {}
        self._queue: CoalescingQueue[str] = CoalescingQueue()
        self._tg: anyio.abc.TaskGroup | None = None
        self._ready = anyio.Event()

    def reconfigure(self, config: Config) -> None:
        self.config = config

    # -- triggers ----------------------------------------------------------------------------

    def notify_turn_end(self, where: Location, state: SessionState) -> None:
        """A session of the project completed a turn: check the gates soon (never blocks)."""
        if where.opted_out:
            return
        found = self._dir(where.memory_dir)
        scope = self._scope_of(state)  # None: its agent's sessions do not count
        if scope is not None:
            found.scopes.add(scope)
        found.trigger = state.session_id
        named = scope.session_of(Path(state.path).name) if scope is not None else None
        found.exclude = named or state.session_id
        found.cwd = state.cwd or found.cwd
        self._queue.mark_nowait(found.key)

    async def check(self, *, cwd: str | None, project: str | None, force: bool) -> dict[str, Any]:
        """Run the gates now (``memdctl dream``); start a run when they pass."""
        await self._ready.wait()
        where = await self.where(cwd, project)
        if where.opted_out:
            raise ValueError(f"the project is opted out of memory: {where.opted_out}")
        found = self._dir(where.memory_dir)
        found.cwd = cwd or found.cwd
        if force:
            self._guard.release("dream", subject=found.key)
        verdict, record = await self._check(found, force=force, trigger="", auto=False)
        return {
            "memory_dir": str(found.memory_dir),
            "verdict": gates.verdict_row(verdict, found.verdict_at),
            "started": record.as_dict() if record else None,
        }

    async def where(self, cwd: str | None, project: str | None) -> Location:
        """A project's location: a session ``cwd``, a project folder name, or its path."""
        if cwd:
            return await self._locate(cwd)
        if not project:
            raise ValueError("give either 'cwd' or 'project'")
        globs = self.config.privacy.ignore_projects
        where = locate_project(self.projects_root, project, globs, None)
        return where if where is not None else await self._locate(project)

    def _dir(self, memory_dir: Path) -> DreamDir:
        key = str(memory_dir)
        found = self._dirs.get(key)
        if found is None:
            # Claude Code's own count: the transcripts beside the memory dir's folder.
            found = DreamDir(key, memory_dir, {DreamScope(memory_dir.parent, any_session)})
            self._dirs[key] = found
        return found

    # -- the gates ---------------------------------------------------------------------------

    async def _check(
        self, found: DreamDir, *, force: bool, trigger: str, auto: bool
    ) -> tuple[Verdict, RunRecord | None]:
        cfg = self.config.dream
        limits = gates.Thresholds(cfg.min_hours, cfg.scan_throttle_minutes, cfg.min_sessions)
        now = self._clock.now()
        disabled = self._disabled(found.key, auto=auto) or await self._pending_undo(found)
        mtime = None
        if disabled is None:
            path = lock.lock_path(found.memory_dir)
            mtime = await anyio.to_thread.run_sync(lock.stat_mtime, path)
            found.lock_mtime = mtime
            if found.running is not None:  # the time gate never counts a run that is not over
                prior = found.running.record.prior_mtime_ns
                mtime = prior / 1e9 if prior else None
            if mtime is None and not await anyio.to_thread.run_sync(found.memory_dir.is_dir):
                disabled = "the project has no memory dir yet"
        seen = Observed(now, disabled, mtime, found.last_scan_at, None, force)
        verdict = gates.evaluate(seen, limits)
        if isinstance(verdict, NeedScan) or (isinstance(verdict, Go) and force):
            found.last_scan_at = now
            scopes = _ordered(found.scopes)
            since = verdict.since if isinstance(verdict, NeedScan) else mtime or 0.0
            exclude = found.exclude if trigger else ""
            sessions = await anyio.to_thread.run_sync(count_sessions, scopes, since, exclude)
            verdict = gates.evaluate(dataclasses.replace(seen, sessions=sessions), limits)
        record = None
        if isinstance(verdict, Go):
            started = await self._start(found, verdict, trigger)
            verdict, record = (started, None) if isinstance(started, Skip) else (verdict, started)
        found.verdict, found.verdict_at = verdict, now
        return verdict, record

    async def _pending_undo(self, found: DreamDir) -> str | None:
        """Undo again the runs whose undo the disk refused; why no dream may start while one
        is still pending (it would snapshot a half-undone dir as its "before")."""
        for i, record in enumerate(found.history):
            if record.state != UNDO_PENDING:
                continue
            record = await anyio.to_thread.run_sync(recover_run, self.store, record)
            found.history[i] = record
            if record.state == UNDO_PENDING:
                return f"the undo of run {record.run_id} waits for the disk"
        return None

    def _disabled(self, key: str, *, auto: bool) -> str | None:
        if not self.config.memory.auto_memory:
            return "memory.auto_memory is false"
        if auto and not self.config.dream.auto_dream:
            return "dream.auto_dream is false"
        llm = job_route(self._get_llm(), "dream")
        if llm is None:
            return "the model client is loading"
        if isinstance(llm, Disabled):
            return llm.reason
        decision = self._guard.check("dream", subject=key, input_key=GUARD_KEY)
        if not isinstance(decision, GuardGo):
            return f"cost guard: {decision.reason}"
        return None

    # -- a run -------------------------------------------------------------------------------

    async def _start(self, found: DreamDir, go: Go, trigger: str) -> Skip | RunRecord:
        if found.running is not None:
            return Skip("lock", f"lock: this daemon is consolidating there ({os.getpid()})")
        assert self._tg is not None
        started: Skip | RunRecord = await self._tg.start(self._attempt, found, go, trigger)
        return started

    async def _attempt(
        self,
        found: DreamDir,
        go: Go,
        trigger: str,
        *,
        task_status: anyio.abc.TaskStatus[Skip | RunRecord] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        async with self.exclusion.hold(found.key, "dream"):
            got = await anyio.to_thread.run_sync(partial(self.acquire_recorded, found, "dream", go))
            found.busy = got if isinstance(got, lock.Busy) else None
            if isinstance(got, lock.Busy):
                task_status.started(Skip("lock", f"lock: {got.reason}"))
                return
            if isinstance(got, lock.Unrecorded):
                task_status.started(Skip("state", f"state: {got.reason}"))
                return
            record = got
            running = Running(record)
            found.running = running
            task_status.started(record)
            try:
                await self._dream(found, running, trigger)
            except Exception as exc:  # the isolation boundary of one run: the service goes on
                log.exception("dream %s in %s crashed", record.run_id, record.memory_dir)
                await self._crashed(record, exc)
            finally:
                found.running = None
                found.history.appendleft(record)
                running.done.set()

    async def _crashed(self, record: RunRecord, exc: Exception) -> None:
        """Undo a run that crashed outside the agent (as a restart would) and record why."""
        with anyio.CancelScope(shield=True):
            record.state, record.reason = "running", f"crashed: {type(exc).__name__}: {exc}"
            try:
                await anyio.to_thread.run_sync(recover_run, self.store, record)
            except OSError as again:
                log.error("dream %s: the undo failed too: %s", record.run_id, again)
            if record.state != UNDO_PENDING:
                record.state, record.reason = "failed", f"crashed: {type(exc).__name__}: {exc}"
            await anyio.to_thread.run_sync(self.store.keep, record)

    @property
    def lock_stale_s(self) -> float:
        """A lock older than this is taken over whoever holds it (R-D2)."""
        return self.config.dream.lock_stale_minutes * 60.0

    def acquire_recorded(
        self, found: DreamDir, kind: str, go: Go | None
    ) -> RunRecord | lock.Busy | lock.Unrecorded:
        """Take the lock for a run recorded first (blocking): see
        :func:`memd.dream.claim.acquire_recorded`."""
        return claim.acquire_recorded(
            self.store,
            self._clock,
            found.memory_dir,
            kind,
            go,
            stale_s=self.lock_stale_s,
            running_here=found.running is not None,
        )

    async def _retire(self, memory_dir: Path) -> tuple[str, ...]:
        """The notes offered to fix or retire (their citations have failed for long)."""
        if self._retire_candidates is None:
            return ()
        return tuple(await anyio.to_thread.run_sync(self._retire_candidates, memory_dir))

    def _citer(self, cwd: str, memory_dir: Path) -> CiteRun | None:
        """What records the citations of a run's files, for the repository at ``cwd``."""
        if self._cite_files is None or not cwd:
            return None
        return partial(self._cite_files, cwd, memory_dir)

    async def _dream(self, found: DreamDir, running: Running, trigger: str) -> None:
        record = running.record
        llm = job_route(self._get_llm(), "dream")
        cfg = self.config
        settings = DreamSettings(
            model=llm.model if isinstance(llm, Route) else "",
            max_turns=cfg.dream.max_turns,
            timeout_s=cfg.dream.timeout_s,
            max_tokens=cfg.llm.max_output_tokens,
            index_max_lines=cfg.memory.index_max_lines,
            index_max_bytes=cfg.memory.index_max_bytes,
            redact_secrets=cfg.privacy.redact_secrets,
        )
        job = Job(
            memory_dir=Path(record.memory_dir),
            run_dir=self.store.run_dir(record.project, record.run_id),
            transcripts=tuple(_ordered(found.scopes)),
            sessions=tuple(record.sessions),
            project=record.project,
            today=datetime.fromtimestamp(self._clock.now(), UTC).strftime("%Y-%m-%d"),
            trigger_session=trigger,
            retire=await self._retire(Path(record.memory_dir)),
            cite=self._citer(found.cwd, Path(record.memory_dir)),
        )
        log.info(
            "dream in %s: run %s starts (%d sessions)",
            job.memory_dir,
            record.run_id,
            len(job.sessions),
        )

        def progress(update: AgentProgress) -> None:
            running.progress = update

        try:
            if not isinstance(llm, Route):
                outcome = DreamOutcome("failed", "the model client went away", (), ())
            else:
                outcome = await consolidate(
                    llm.llm,
                    settings,
                    job,
                    ledger=self._ledger,
                    clock=self._clock,
                    abort=running.abort,
                    on_progress=progress,
                    protocol=llm.protocol,
                )
        except BaseException:
            with anyio.CancelScope(shield=True):
                record.ended_at = self._clock.now()
                await anyio.to_thread.run_sync(claim.write_stopped, self.store, record)
            raise
        await self._settle(found, record, outcome)

    async def _settle(self, found: DreamDir, record: RunRecord, outcome: DreamOutcome) -> None:
        ok = outcome.state == "completed"
        if ok:
            self._guard.record_success("dream", subject=found.key)
        elif outcome.error is not None:
            self._guard.record_failure(
                "dream", outcome.error, subject=found.key, input_key=GUARD_KEY
            )
        record.state, record.reason = outcome.state, outcome.reason
        if outcome.undo_failed:  # the disk refused the undo: kept, and tried again (a state)
            record.state = UNDO_PENDING
            record.reason = pending_reason(outcome.reason, outcome.undo_failed)
        record.turns, record.tool_calls = outcome.turns, outcome.tool_calls
        record.tokens = billed_tokens(outcome.usage)
        record.files = [c.relative for c in outcome.changes]
        record.flagged = list(outcome.flagged)
        record.summary = outcome.summary
        record.ended_at = self._clock.now()

        def write() -> None:
            claim.write_down(self.store, record, list(outcome.changes))
            self.store.prune(record.project, self.config.dream.snapshots_kept)

        await anyio.to_thread.run_sync(write)
        log.info(
            "dream in %s: %s %s (%d files, %d turns, %d tokens)",
            record.memory_dir,
            record.state,
            record.reason,
            len(record.files),
            record.turns,
            record.tokens,
        )

    # -- the task ----------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Undo interrupted runs, then check gates as turn ends arrive, until cancelled."""
        recovered = await anyio.to_thread.run_sync(recover_all, self.store)
        for record in reversed(recovered):
            self._dir(Path(record.memory_dir)).history.appendleft(record)
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._worker, name="dream gate checks")
            self._ready.set()
            task_status.started()

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            try:
                found = self._dirs[key]
                await self._check(found, force=False, trigger=found.trigger, auto=True)
            except Exception:  # the isolation boundary of one check: the queue goes on
                log.exception("dream gate check for %s failed", key)
            finally:
                self._queue.done(key)

    async def wait_checked(self) -> None:
        """Wait until no gate check is queued or running (tests, shutdown)."""
        await self._queue.wait_idle()

    # -- abort, log, restore, status --------------------------------------------------------

    async def abort(self, *, cwd: str | None, project: str | None) -> dict[str, Any]:
        where = await self.where(cwd, project)
        found = self._dirs.get(str(where.memory_dir))
        running = found.running if found else None
        if running is None:
            raise NotFound(f"no dream is running in {where.memory_dir}")
        running.abort.set()
        with anyio.fail_after(ABORT_WAIT_S):
            await running.done.wait()
        return running.record.as_dict()

    def clock_now(self) -> float:
        return self._clock.now()

    def find_dir(self, memory_dir: Path) -> DreamDir:
        return self._dir(memory_dir)

    def row(self, memory_dir: Path) -> dict[str, Any]:
        """One memory dir's status row (no I/O; an unknown dir is not remembered)."""
        found = self._dirs.get(str(memory_dir)) or DreamDir(
            str(memory_dir), memory_dir, {DreamScope(memory_dir.parent, any_session)}
        )
        row: dict[str, Any] = printable(dir_row(found, self._clock.now()))
        return row

    def statistics(self) -> dict[str, Any]:
        """The ``dream`` section of ``status`` (no I/O)."""
        cfg = self.config.dream
        return {
            "auto_dream": cfg.auto_dream,
            "thresholds": {
                "min_hours": cfg.min_hours,
                "scan_throttle_minutes": cfg.scan_throttle_minutes,
                "min_sessions": cfg.min_sessions,
            },
            "queued_checks": self._queue.statistics().queued,
            "projects": [printable(dir_row(d, self._clock.now())) for d in self._dirs.values()],
        }


def _ordered(scopes: set[DreamScope]) -> list[DreamScope]:
    """The scopes in a stable order (by folder, then what they name)."""
    return sorted(scopes, key=lambda scope: (str(scope.folder), repr(scope.session_of)))
