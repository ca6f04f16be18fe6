"""The session registry: every main session of every agent's source, and what it holds.

Agents are known only through their sources (:mod:`memd.sources.base`): which files are
sessions, and a reader per file that builds its conversation.

Startup is cheap (R-T6): transcripts are stat-ed, and only the ones modified within the active
window are parsed. A session's conversation is kept in memory while it is in use and rebuilt
from the file when it is needed again after an eviction or a restart ("rehydration"); tailing
always resumes from the saved byte offset (R-T3).

Threading: the file work of one session runs in a worker thread under that session's lock;
the published :class:`SessionState` is replaced as a whole, so readers on the event loop never
see a half-updated record.

Hostile paths (R-T7): a ``*.jsonl`` that is not a readable regular file (FIFO, directory,
socket, symlink, no permission, EMFILE) is registered with ``unreadable`` set to the reason,
and not tried again until its ``lstat`` changes (or, for a transient reason such as EMFILE,
until :data:`TRANSIENT_RETRY_S` have passed). Bad lines are counted, never raised.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import anyio

from memd import regular_file
from memd.changes import CHANGES
from memd.config import TranscriptsConfig
from memd.daemon.session_index import SessionIndex
from memd.daemon.session_state import from_start, new_state, publish
from memd.errors import NotFound
from memd.sources.base import (
    DreamScope,
    ModelWindow,
    Reader,
    SessionKey,
    Source,
    source_for,
)
from memd.sources.registry import room_named
from memd.sources.room import Room
from memd.state import SessionState
from memd.transcript.content import TranscriptChanged
from memd.transcript.conversation import Conversation
from memd.transcript.tail import (
    LineSplitter,
    Tail,
    TailPosition,
    UnreadableTranscript,
)

log = logging.getLogger(__name__)

GrowthListener = Callable[[SessionState], None]
T = TypeVar("T")
REHYDRATE_STEP = 256 * 1024  # as tail.DEFAULT_MAX_BYTES: short-lived objects stay few
TRANSIENT_RETRY_S = 30.0
# The most one ingest turn reads before the file goes to the back of the queue: the other
# sessions' appends wait for at most about this long per busy file ahead of them.
INGEST_TURN_S = 0.1
Signature = tuple[int, ...] | None


def is_active(mtime: float, started_at: float, window_hours: float) -> bool:
    return mtime >= started_at or mtime >= started_at - window_hours * 3600.0


@dataclass(frozen=True)
class RegistryStats:
    sessions: int
    parsed: int
    in_memory: int
    bytes_parsed: int
    bytes_rehydrated: int
    lines: int
    bad_lines: int
    unknown_lines: int
    unknown_recent: tuple[str, ...]  # newest last


class SessionRegistry:
    def __init__(
        self,
        sources: Sequence[Source],
        config: TranscriptsConfig,
        saved: dict[str, SessionState],
        *,
        started_at: float | None = None,
        own_calls: str | None = None,
    ) -> None:
        self.sources = tuple(sources)
        self.own_calls = own_calls  # memd's agent-CLI calls run here: never followed
        self.config = config
        self.started_at = time.time() if started_at is None else started_at
        self._index = SessionIndex()
        followed = {source.agent for source in self.sources}
        for state in saved.values():
            if state.agent in followed:  # a source turned off forgets its sessions
                self._index.put(state)
        self._readers: dict[str, Reader] = {}
        self._last_used: dict[str, float] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._unreadable: dict[str, Signature] = {}  # path -> lstat signature when it failed
        self._listeners: list[GrowthListener] = []
        self._bytes_rehydrated = 0
        self.dirty = False

    # -- reading -------------------------------------------------------------------------------

    def get(self, session_id: str) -> SessionState | None:
        return self._index.by_id(session_id)

    def get_by_path(self, path: Path) -> SessionState | None:
        return self._index.by_path(str(path))

    def find(self, prefix: str) -> list[SessionState]:
        """Sessions whose id starts with ``prefix`` (so users can type a short id)."""
        return self._index.with_prefix(prefix)

    def states(self) -> Iterator[SessionState]:
        return self._index.values()

    def newest(self, limit: int | None = None, project: str | None = None) -> list[SessionState]:
        """Sessions by last activity, newest first, in O(limit)."""
        return self._index.newest(limit, project)

    def snapshot_for_save(self) -> dict[str, SessionState]:
        return {s.path: s for s in self._index.values()}

    def statistics(self) -> RegistryStats:
        totals = self._index.totals
        return RegistryStats(
            sessions=len(self._index),
            parsed=totals.parsed,
            in_memory=len(self._readers),
            bytes_parsed=totals.bytes_parsed,
            bytes_rehydrated=self._bytes_rehydrated,
            lines=totals.lines,
            bad_lines=totals.bad_lines,
            unknown_lines=totals.unknown_lines,
            unknown_recent=tuple(self._index.recent_unknown),
        )

    def unreadable(self, limit: int = 20) -> tuple[int, list[SessionState]]:
        """How many known paths cannot be read, and up to ``limit`` of them (by path)."""
        paths = sorted(self._unreadable)[:limit]
        states = [s for s in map(self._index.by_path, paths) if s is not None]
        return len(self._unreadable), states

    def add_listener(self, listener: GrowthListener) -> None:
        self._listeners.append(listener)

    # -- discovery -----------------------------------------------------------------------------

    async def discover(self) -> list[Path]:
        """Stat every main transcript; register new ones (by the agent's own id, where the
        file's name does not say it: read from its head); return those that need reading.

        The directory walk runs in a worker thread; the index changes on the event loop.
        """
        known = set(self._index.paths())
        found = await anyio.to_thread.run_sync(self._walk, known)
        return [path for path, st, own in found if self._needs_read(path, st, own)]

    def _walk(self, known: set[str]) -> list[tuple[Path, os.stat_result, str | None]]:
        """Every candidate file, its ``lstat`` and, for one not ``known`` yet, the agent's
        own id of it (blocking)."""
        return [
            (path, st, None if str(path) in known else source.own_id(path))
            for source in self.sources
            for path, st in source.walk()
        ]

    def provisional(self) -> list[SessionState]:
        """The sessions known by their file's name that their agent may know otherwise (its
        own id, which :meth:`learn_ids` reads): saved before memd read agents' ids."""
        out = []
        for state in self._index.values():
            found = self._key(Path(state.path))
            if found is not None and found[1].session_id == state.session_id:
                out.append(state)
        return out

    def learn_ids(self, states: list[SessionState]) -> list[tuple[SessionState, str]]:
        """Each of ``states`` whose agent knows it by another id, and that id (blocking:
        reads the files' heads)."""
        out = []
        for state in states:
            found = self._key(Path(state.path))
            own = found[0].own_id(Path(state.path)) if found is not None else None
            if own and own != state.session_id:
                out.append((state, own))
        return out

    def rename(self, state: SessionState, session_id: str) -> None:
        """Know the session of ``state`` by ``session_id`` from now on (its agent's own)."""
        if self._index.by_path(state.path) is not state:
            return  # read again meanwhile: its reader said the id
        self._index.put(dataclasses.replace(state, session_id=session_id))
        self.dirty = True

    def locate(self, session_id: str) -> Path | None:
        """The session named ``session_id`` in any source, known or not yet (blocking)."""
        for source in self.sources:
            path = source.locate(session_id)
            if path is not None:
                return path
        return None

    def source_of(self, state: SessionState) -> Source | None:
        """The source ``state`` comes from (None: one no longer followed)."""
        for source in self.sources:
            if source.agent == state.agent:
                return source
        return None

    def room_of(self, state: SessionState) -> Room | None:
        """The room of the session's agent, when memd follows it (None: no longer)."""
        source = self.source_of(state)
        return room_named(source.agent) if source is not None else None

    def own_memory_of(self, state: SessionState) -> Callable[[str], str | None] | None:
        """How to learn whether the session's agent keeps memories of its own in a cwd (its
        source's ``own_memory``), or None when that is decided per session (its room's
        ``memory_per_session``) or memd does not follow the agent."""
        source = self.source_of(state)
        room = room_named(source.agent) if source is not None else None
        if source is None or room is None or room.memory_per_session:
            return None
        return source.own_memory

    def dream_scope(self, state: SessionState) -> DreamScope | None:
        """The sessions the dream counts and searches with ``state``'s (its source says),
        or None when they do not count."""
        source = self.source_of(state)
        return source.dream_scope(state) if source is not None else None

    def window_of(self, state: SessionState) -> ModelWindow | None:
        """The context window the session's agent gives the model its transcript records
        (its room's ``window``), None when it does not say or the model is not known."""
        room = self.room_of(state)
        if room is None or room.window is None or not state.model:
            return None
        return room.window(state.model)

    def serves_compaction(self, state: SessionState) -> bool:
        """Whether memd compacts the session's agent's sessions (its room can write a
        compacted session the agent resumes)."""
        room = self.room_of(state)
        return room is not None and room.fork is not None

    def _key(self, path: Path) -> tuple[Source, SessionKey] | None:
        return source_for(self.sources, path)

    def _needs_read(self, path: Path, st: os.stat_result, own_id: str | None = None) -> bool:
        found = self._key(path)
        if found is None:
            return False
        key = found[1]
        if own_id:
            key = dataclasses.replace(key, session_id=own_id)
        state = self._index.by_path(str(path))
        if state is None:
            state = new_state(key, path, st.st_mtime)
            self._index.put(state)
            self.dirty = True
        if not stat.S_ISREG(st.st_mode) or state.unreadable is not None:
            return True  # ingest records why, or sees whether it changed since
        changed = st.st_size != state.offset or st.st_ino != state.inode
        if state.parsed:
            return changed
        return is_active(st.st_mtime, self.started_at, self.config.active_window_hours)

    async def forget_missing(self) -> int:
        """Drop sessions whose transcript is gone (Claude Code's cleanup deletes old ones)."""
        paths = self._index.paths()
        gone = await anyio.to_thread.run_sync(lambda: [p for p in paths if not os.path.lexists(p)])
        for key in gone:
            self._forget(key)
        return len(gone)

    def _forget(self, path: str) -> None:
        """Drop the session and everything kept per path for it."""
        if self._index.remove(path) is not None:
            self.dirty = True
        self._readers.pop(path, None)
        self._last_used.pop(path, None)
        self._unreadable.pop(path, None)
        lock = self._locks.get(path)
        if lock is not None and not lock.locked():
            del self._locks[path]

    # -- ingest --------------------------------------------------------------------------------

    def _kept(self, path: str, keep: Callable[[SessionState], bool]) -> bool:
        state = self._index.by_path(path)
        return state is not None and keep(state)

    def resident(self, path: str) -> bool:
        """Is the session's conversation in memory now?"""
        return path in self._readers

    def lock_for(self, path: str) -> anyio.Lock:
        lock = self._locks.get(path)
        if lock is None:
            lock = self._locks[path] = anyio.Lock()
        return lock

    async def ingest(self, path: Path) -> SessionState | None:
        """Read what was appended to ``path``; publish new figures; notify listeners on growth."""
        state, _ = await self._ingest(path, None)
        return state

    async def ingest_turn(self, path: Path, seconds: float = INGEST_TURN_S) -> bool:
        """One turn of ingest for the queue's worker: read what was appended to ``path`` for
        about ``seconds`` at most (whatever the file: huge, growing, sparse); return whether
        some is left for another turn, so that one file never holds up the others."""
        _, more = await self._ingest(path, seconds)
        return more

    async def _ingest(self, path: Path, turn: float | None) -> tuple[SessionState | None, bool]:
        found = self._key(path)
        if found is None:
            return None, False
        source, key = found
        async with self.lock_for(str(path)):
            before = self._index.by_path(str(path)) or new_state(key, path)
            signature = self._unreadable.get(str(path), False)
            after, more = await anyio.to_thread.run_sync(
                self._ingest_sync, source, key, before, signature, turn
            )
        if after is None:  # the file is gone (the watcher reports deletions too)
            self._forget(str(path))
            return None, False
        if after is before:
            return before, more  # still unreadable, and nothing changed since
        self._note_readability(after)
        grew = after.offset != before.offset or after.resets != before.resets
        self._index.put(after)
        self._last_used[str(path)] = time.monotonic()
        self.dirty = True
        if grew and not after.ignored:
            for listener in self._listeners:
                listener(after)
        return after, more

    async def conversation(self, state: SessionState) -> Conversation:
        """The session's conversation, caught up with its file (rebuilt if it was evicted).

        The caller must not mutate it, and should use it before the next ingest of the session.
        """
        fresh = await self.ingest(Path(state.path))
        reader = self._readers.get((fresh or state).path)
        if reader is None:
            raise NotFound(f"the transcript of session {state.session_id} is gone")
        return reader.conversation

    async def read(self, state: SessionState, fn: Callable[[Conversation], T]) -> T:
        """Catch the session up with its file, then run ``fn`` on its conversation in a worker
        thread under the session's lock, so no ingest mutates it meanwhile.

        When the file no longer holds the lines the conversation was built from (rewritten
        in place), the session is rebuilt from the file and ``fn`` runs once more.
        """
        try:
            return await self._read_once(state, fn)
        except TranscriptChanged as exc:
            log.info("%s; reading session %s again from the start", exc, state.session_id)
            await self._restart(state.path)
            return await self._read_once(state, fn)

    async def _read_once(self, state: SessionState, fn: Callable[[Conversation], T]) -> T:
        fresh = await self.ingest(Path(state.path))
        path = (fresh or state).path
        async with self.lock_for(path):
            reader = self._readers.get(path)
            if reader is None:
                raise NotFound(f"the transcript of session {state.session_id} is gone")
            self._last_used[path] = time.monotonic()
            conv = reader.conversation
            try:
                return await anyio.to_thread.run_sync(fn, conv)
            finally:
                conv.release()

    async def _restart(self, path: str) -> None:
        """Forget what was built from ``path``: the next ingest reads it from the start."""
        async with self.lock_for(path):
            self._readers.pop(path, None)
            state = self._index.by_path(path)
            if state is not None:
                self._index.put(from_start(state))

    def _note_readability(self, state: SessionState) -> None:
        if state.unreadable is None:
            self._unreadable.pop(state.path, None)
        else:
            self._unreadable[state.path] = regular_file.signature(state.path)
            self._readers.pop(state.path, None)

    def _ingest_sync(
        self,
        source: Source,
        key: SessionKey,
        before: SessionState,
        failed: Signature | bool,
        turn: float | None,
    ) -> tuple[SessionState | None, bool]:
        """Read the file in a worker thread, for ``turn`` seconds at most (None: to its end);
        ``failed`` is the signature it had when it last could not be read (``False``: it
        could). Returns the new state and whether there is more to read."""
        if failed is not False and not _worth_retry(before, failed):
            return before, False
        try:
            return self._read_sync(source, key, before, turn)
        except FileNotFoundError:
            return None, False
        except UnreadableTranscript as exc:
            if not os.path.lexists(before.path):
                return None, False
            log.warning("%s", exc)
            since = (before.unreadable or {}).get("since") or time.time()
            state = dataclasses.replace(before, boundaries=list(before.boundaries))
            state.unreadable = {"reason": exc.reason, "since": since, "transient": exc.transient}
            return state, False

    def _read_sync(
        self, source: Source, key: SessionKey, before: SessionState, turn: float | None
    ) -> tuple[SessionState | None, bool]:
        try:
            return self._read_sync_once(source, key, before, turn)
        except TranscriptChanged as exc:  # changed between reading it and reading it back
            log.info("%s; reading it again from the start", exc)
            self._readers.pop(before.path, None)
            return self._read_sync_once(source, key, from_start(before), turn)

    def _read_sync_once(
        self, source: Source, key: SessionKey, before: SessionState, turn: float | None
    ) -> tuple[SessionState | None, bool]:
        path = Path(before.path)
        deadline = None if turn is None else time.monotonic() + turn
        reader = self._readers.get(before.path)
        if reader is None and before.offset > 0:
            reader = self._rehydrate(source, before)
        state = dataclasses.replace(before, boundaries=list(before.boundaries), unreadable=None)
        position = TailPosition(before.offset, before.inode, before.size, before.scanned)
        with Tail(path, position, max_line_bytes=self.config.max_line_bytes) as tail:
            while True:
                try:
                    read = tail.read()
                except FileNotFoundError:
                    return None, False
                if read.reset:
                    log.info("%s was truncated or replaced; reading it again from the start", path)
                    reader = None
                    state = from_start(state)
                    position = TailPosition(0, 0, 0)
                if reader is None:
                    reader = source.reader(before.path, read.position.inode)
                state.bytes_parsed += read.position.offset - position.offset
                state.lines += len(read.lines)
                state.bad_lines += (
                    reader.feed(zip(read.offsets, read.lines, strict=True)) + read.skipped
                )
                position = read.position
                if not read.more or (deadline is not None and time.monotonic() >= deadline):
                    break
        state.inode, state.offset, state.size = position.inode, position.offset, position.size
        state.scanned = position.scanned
        state.mtime = _mtime(path)
        state.parsed = True
        self._readers[before.path] = reader
        publish(source, key, reader, state, self.own_calls)
        return state, read.more

    def _rehydrate(self, source: Source, state: SessionState) -> Reader:
        """Re-read a file up to the saved offset (not counted as newly parsed bytes).

        The offset always sits at a line boundary, so the bytes before it are whole lines.
        """
        splitter = LineSplitter(self.config.max_line_bytes)
        remaining = state.offset
        try:
            f = regular_file.open_regular(state.path)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise UnreadableTranscript.of(state.path, exc) from exc
        with f:
            reader = source.reader(state.path, os.fstat(f.fileno()).st_ino)
            while remaining > 0:
                chunk = f.read(min(REHYDRATE_STEP, remaining))
                if not chunk:
                    break
                remaining -= len(chunk)
                self._bytes_rehydrated += len(chunk)
                reader.feed(splitter.feed_at(chunk))
        self._readers[state.path] = reader
        return reader

    def evict_idle(
        self, idle_seconds: float, *, keep: Callable[[SessionState], bool] = lambda state: False
    ) -> int:
        """Drop in-memory conversations unused for ``idle_seconds``; figures stay. Sessions
        ``keep`` accepts (those near their compaction) stay resident."""
        now = time.monotonic()
        idle = [
            p
            for p, t in self._last_used.items()
            if now - t >= idle_seconds and not self._kept(p, keep)
        ]
        for path in idle:
            self._readers.pop(path, None)
            self._last_used.pop(path, None)
        if idle:
            CHANGES.bump()  # ``in_memory``
        return len(idle)


def _worth_retry(state: SessionState, failed: Signature | bool) -> bool:
    """Try an unreadable path again only when it changed, or after a while when the cause
    was transient: an error that retrying cannot fix is never retried in a loop."""
    if regular_file.signature(state.path) != failed:
        return True
    since = (state.unreadable or {}).get("since", 0.0)
    transient = bool((state.unreadable or {}).get("transient"))
    return transient and time.time() - float(since) >= TRANSIENT_RETRY_S


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
