"""The team tier in the daemon: syncs asked for, automatic ones, and what ``status`` shows.

:class:`TeamService` runs every sync in a worker thread (git and the disk block), at most
:data:`PARALLEL` at once, and never on a hook's path: a hook reads ``team/`` as it is. The
daemon builds it with the few things it uses (its config section, the state dir, where a
cwd's memories are, which agent a session is, the clock, the daemon's environment) and runs
:meth:`TeamService.run` in its background task group.

Automatic syncs are opt-in per repository (``memdctl team auto on``, kept in the project's
record). Every ``team.check_interval_s`` the service looks at each such project's files
(names and identities only, :func:`memd.team.local.changed`): a change (an agent's memory,
a dream's, a person's edit) is synced once ``team.min_interval_s`` have passed since the
last sync of the project; without one, the remote is asked every ``team.interval_minutes``.
A failed automatic sync waits twice as long each time (up to :data:`MAX_BACKOFF_S`), so a
remote that is down or refuses the user's credentials is not asked in a loop.

Credentials are the user's own: a sync runs git with the daemon's environment and, for a
project ``memdctl`` synced, the git-related variables that command forwarded (its
``SSH_AUTH_SOCK``, proxies …; :data:`memd.team.store.FORWARDED_KEYS`), kept in memory only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from anyio.abc import TaskStatus

from memd.changes import CHANGES
from memd.clock import Clock, iso_utc
from memd.config import TeamConfig
from memd.memory.location import Location
from memd.team import history, share
from memd.team.local import Scope, changed
from memd.team.outcome import Outcome
from memd.team.prepare import (
    FOLDERS,
    Prepared,
    Request,
    ScopeName,
    limits_of,
    prepare,
    remember,
    state_folder,
)
from memd.team.project import ProjectProblem
from memd.team.record import STORE, Busy, load, locked
from memd.team.store import FORWARDED_KEYS, GitError, Store, user_environment
from memd.team.sync import sync

log = logging.getLogger(__name__)

PARALLEL = 2
MAX_BACKOFF_S = 6 * 3600.0
MAX_SHOWN = 20  # held, quarantined or refused files listed per project in status


class TeamProblem(Exception):
    """A team request that cannot be done, in words (the IPC method's ``invalid_params``)."""


@dataclass
class _Project:
    """What the service knows of one synced project (``status`` shows it)."""

    name: str
    scope: ScopeName
    folder: Path
    cwd: str = ""
    auto: bool = False
    last: dict[str, Any] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)
    quarantined: dict[str, str] = field(default_factory=dict)
    refused: int = 0
    failures: int = 0
    last_at: float = 0.0  # monotonic
    due_at: float = 0.0  # monotonic: the next automatic sync at the latest
    env: dict[str, str] = field(default_factory=dict)
    running: bool = False

    def row(self) -> dict[str, Any]:
        return {
            "project": self.name,
            "scope": self.scope,
            "auto": self.auto,
            "running": self.running,
            "last": self.last or None,
            "held": [{"path": p, "reason": r} for p, r in list(self.held.items())[:MAX_SHOWN]],
            "held_count": len(self.held),
            "quarantined": [
                {"path": p, "reason": r} for p, r in list(self.quarantined.items())[:MAX_SHOWN]
            ],
            "quarantined_count": len(self.quarantined),
            "refused_count": self.refused,
        }


class TeamService:
    def __init__(
        self,
        config: TeamConfig,
        state_dir: Path,
        *,
        locate: Callable[[str], Awaitable[Location]],
        agent_of: Callable[[str], str | None],
        clock: Clock,
        env: Mapping[str, str],
    ) -> None:
        self.config = config
        self._state_dir = state_dir
        self._locate = locate
        self._agent_of = agent_of
        self._clock = clock
        self._env = user_environment(env)
        self._projects: dict[tuple[str, str], _Project] = {}
        self._limiter = anyio.CapacityLimiter(PARALLEL)

    def reconfigure(self, config: TeamConfig) -> None:
        self.config = config

    # -- requests ------------------------------------------------------------------------

    async def sync(
        self,
        *,
        cwd: str | None,
        project: str | None,
        scope: ScopeName = "team",
        remote: str | None = None,
        mode: str | None = None,
        allow_deletes: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """One sync now (``memdctl team sync``, ``memdctl sync``); its outcome."""
        where, root = await self._where(cwd, project, scope)
        request = Request(scope, where.memory_dir, root, remote, mode, allow_deletes)
        entry = self._entry(scope, where.memory_dir)
        entry.cwd = root
        if env:
            entry.env = {k: v for k, v in env.items() if k in FORWARDED_KEYS}
        outcome = await self._run(entry, request)
        return {"project": entry.name, "scope": scope, **outcome.as_dict()}

    async def set_auto(self, *, cwd: str | None, project: str | None, on: bool) -> dict[str, Any]:
        """Turn automatic syncs of the project's team memories on or off."""
        where, root = await self._where(cwd, project, "team")
        entry = self._entry("team", where.memory_dir)
        entry.cwd, entry.auto = root, on
        entry.due_at = self._clock.monotonic()
        values = {"auto": on, "cwd": root, "memory_dir": str(where.memory_dir)}
        await anyio.to_thread.run_sync(remember, entry.folder, values)
        CHANGES.bump()
        return {"project": entry.name, "auto": on}

    async def status_of(self, *, cwd: str | None, project: str | None) -> dict[str, Any]:
        """The project's row (held, quarantined, the last sync), read from its record."""
        where, _ = await self._where(cwd, project, "team")
        entry = self._entry("team", where.memory_dir)
        record = await anyio.to_thread.run_sync(load, entry.folder)
        self._learn(entry, record.last, record.held, record.passing, len(record.refused))
        return {**entry.row(), "memory_dir": str(where.memory_dir)}

    async def share(
        self, *, cwd: str | None, project: str | None, memory: str, out: bool
    ) -> dict[str, Any]:
        """Move one memory into ``team/`` (``out``: out of it)."""
        where, _ = await self._where(cwd, project, "team")
        folder = state_folder(self._state_dir, "team", where.memory_dir)
        move = share.unshare if out else share.share
        call = partial(move, where.memory_dir, folder, memory, limits_of(self.config))
        try:
            moved = await anyio.to_thread.run_sync(call)
        except share.ShareProblem as exc:
            raise TeamProblem(str(exc)) from None
        CHANGES.bump()
        return {"memory": memory, "now": moved, "memory_dir": str(where.memory_dir)}

    async def log(self, *, cwd: str | None, project: str | None, limit: int) -> dict[str, Any]:
        where, _ = await self._where(cwd, project, "team")
        folder = state_folder(self._state_dir, "team", where.memory_dir)
        return {"commits": await anyio.to_thread.run_sync(self._log, folder, limit)}

    def _log(self, folder: Path, limit: int) -> list[dict[str, Any]]:
        record = load(folder)
        store = Store(folder / STORE, self._env, timeout_s=self.config.timeout_s)
        target_folder = str(record.settings.get("mode")) == "folder"
        try:
            return history.log(
                store, record.tip, folder=self.config.folder if target_folder else "", limit=limit
            )
        except GitError as exc:
            raise TeamProblem(exc.reason) from None

    async def restore(
        self, *, cwd: str | None, project: str | None, memory: str, commit: str | None
    ) -> dict[str, Any]:
        """Bring back a removed team memory, then sync (it is shared again)."""
        where, root = await self._where(cwd, project, "team")
        folder = state_folder(self._state_dir, "team", where.memory_dir)
        call = partial(self._restore, folder, Scope(where.memory_dir, "team"), memory, commit)
        restored = await anyio.to_thread.run_sync(call)
        synced = await self.sync(cwd=root, project=None)
        return {"restored": restored.path, "from": restored.commit, "sync": synced}

    def _restore(
        self, folder: Path, scope: Scope, memory: str, commit: str | None
    ) -> history.Restored:
        relative = memory.removeprefix("team/")
        with locked(folder):
            record = load(folder)
            store = Store(folder / STORE, self._env, timeout_s=self.config.timeout_s)
            mode_folder = self.config.folder if record.settings.get("mode") == "folder" else ""
            try:
                return history.restore(
                    store,
                    record.tip,
                    scope,
                    relative,
                    commit=commit,
                    folder=mode_folder,
                    limits=limits_of(self.config),
                )
            except (history.HistoryProblem, GitError) as exc:
                raise TeamProblem(str(exc)) from None

    # -- running a sync ------------------------------------------------------------------

    async def _run(self, entry: _Project, request: Request) -> Outcome:
        env = {**self._env, **entry.env}
        call = partial(
            prepare,
            request,
            self.config,
            self._state_dir,
            env,
            agent_of=self._agent_of,
            now=self._clock.now,
        )
        try:
            prepared = await anyio.to_thread.run_sync(call)
        except ProjectProblem as exc:
            raise TeamProblem(str(exc)) from None
        async with self._limiter:
            entry.running = True
            CHANGES.bump()
            try:
                outcome = await anyio.to_thread.run_sync(self._sync_blocking, prepared, env)
            finally:
                entry.running = False
        self._after(entry, outcome)
        return outcome

    def _sync_blocking(self, prepared: Prepared, env: Mapping[str, str]) -> Outcome:
        if prepared.scope.folder:
            share.finish_moves(prepared.scope.memory_dir, prepared.folder, prepared.settings.limits)
        try:
            remember(prepared.folder, prepared.remembered)
        except Busy as exc:
            return Outcome(message=str(exc))
        started = time.monotonic()
        outcome = sync(
            prepared.folder,
            prepared.scope,
            prepared.target,
            prepared.settings,
            env,
            timeout_s=self.config.timeout_s,
        )
        log.info(
            "team sync of %s: %s (%.1f s, %d git calls)",
            prepared.folder.name,
            outcome.message,
            time.monotonic() - started,
            outcome.git_calls,
        )
        return outcome

    def _after(self, entry: _Project, outcome: Outcome) -> None:
        now = self._clock.monotonic()
        entry.last_at = now
        entry.failures = 0 if outcome.ok else entry.failures + 1
        wait = self.config.interval_minutes * 60.0
        if not outcome.ok:
            wait = min(MAX_BACKOFF_S, self.config.min_interval_s * 2.0**entry.failures)
        entry.due_at = now + wait
        entry.last = {
            "at": iso_utc(self._clock.now()),
            "ok": outcome.ok,
            "message": outcome.message,
            "nothing_new": outcome.nothing_new,
        }
        entry.held = dict(outcome.held)
        entry.quarantined.update(outcome.quarantined)
        entry.refused = len(outcome.refused) or entry.refused
        CHANGES.bump()

    def _learn(
        self,
        entry: _Project,
        last: Mapping[str, Any],
        held: Mapping[str, str],
        passing: Mapping[str, Any],
        refused: int,
    ) -> None:
        if last and not entry.last:
            at = last.get("at")
            entry.last = {
                "at": iso_utc(float(at)) if isinstance(at, int | float) else None,
                "ok": bool(last.get("ok")),
                "message": str(last.get("message") or ""),
            }
        entry.held = dict(held)
        entry.quarantined = {
            p: x.reason for p, x in passing.items() if getattr(x, "kind", "") == "quarantined"
        }
        entry.refused = refused

    # -- where -------------------------------------------------------------------------

    async def _where(
        self, cwd: str | None, project: str | None, scope: ScopeName
    ) -> tuple[Location, str]:
        """The memory dir and the repository's folder of ``cwd`` or ``project`` (a project
        folder name synced before from its repository)."""
        if cwd:
            where = await self._locate(cwd)
            root = cwd
        elif project:
            folder = self._state_dir / FOLDERS[scope] / Path(project).name
            known = (await anyio.to_thread.run_sync(load, folder)).settings
            root = str(known.get("cwd") or "")
            if not root:
                raise TeamProblem(
                    f"project {project!r} was never synced here: run the command once inside "
                    "its repository"
                )
            where = await self._locate(root)
        else:
            raise TeamProblem("give the repository's folder (cwd) or a project")
        if where.opted_out:
            raise TeamProblem(f"memory is off for this project: {where.opted_out}")
        return where, root

    def _entry(self, scope: ScopeName, memory_dir: Path) -> _Project:
        key = (scope, memory_dir.parent.name)
        entry = self._projects.get(key)
        if entry is None:
            folder = state_folder(self._state_dir, scope, memory_dir)
            entry = self._projects[key] = _Project(key[1], scope, folder)
        return entry

    # -- automatic syncs -----------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Load what earlier syncs recorded, then sync the opted-in projects as they change
        and every so often, until cancelled."""
        await anyio.to_thread.run_sync(self._load_projects)
        task_status.started()
        while True:
            await anyio.sleep(self.config.check_interval_s)
            for entry in [e for e in self._projects.values() if e.auto and e.cwd]:
                await self._maybe_sync(entry)

    async def _maybe_sync(self, entry: _Project) -> None:
        now = self._clock.monotonic()
        if entry.running or now - entry.last_at < self.config.min_interval_s:
            return
        if now < entry.due_at and not await anyio.to_thread.run_sync(self._changed, entry):
            return
        try:
            await self.sync(cwd=entry.cwd, project=None, scope=entry.scope)
        except TeamProblem as exc:
            self._after(entry, Outcome(message=str(exc)))
            log.warning("automatic team sync of %s: %s", entry.name, exc)

    def _changed(self, entry: _Project) -> bool:
        record = load(entry.folder)
        memory_dir = record.settings.get("memory_dir")
        if not isinstance(memory_dir, str):
            return True
        scope = Scope(Path(memory_dir), "team" if entry.scope == "team" else "")
        return changed(scope, record.known, limits_of(self.config))

    def _load_projects(self) -> None:
        for scope, name in FOLDERS.items():
            base = self._state_dir / name
            if not base.is_dir():
                continue
            for folder in sorted(base.iterdir())[:200]:
                record = load(folder)
                entry = _Project(folder.name, scope, folder)  # type: ignore[arg-type]
                entry.cwd = str(record.settings.get("cwd") or "")
                entry.auto = record.settings.get("auto") is True and scope == "team"
                self._learn(entry, record.last, record.held, record.passing, len(record.refused))
                self._projects[(scope, folder.name)] = entry

    def statistics(self) -> dict[str, Any]:
        """``status``'s ``team`` section: every project synced, newest first."""
        rows = sorted(self._projects.values(), key=lambda e: e.last_at, reverse=True)
        return {"projects": [e.row() for e in rows[:50]]}
