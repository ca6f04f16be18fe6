"""The usage record: which memories went into which agent's session, and which were used
(issue 36, item 2).

Per memory (by its absolute path): how often it was injected (memd's hook, memd's MCP
``recall`` or ``read_memory`` answers seen in a transcript), how often the agent then used it
(:mod:`memd.memory.usage_evidence`), how often it was ignored (its window of
:data:`USE_TURNS` turn ends closed with no sign of use, or :data:`PENDING_MAX_AGE_S` went by),
when it was last injected and used, and into which session and agent. Per session: the
injections still waiting for a verdict (each with the transcript line it entered after) and
how far the session's transcript was looked through for memd's MCP answers. Per hour of the
last week: injections and how many of them were used (``status``'s shares).

memd's own state, ``<state>/usage.json``: read once at start (an unreadable file is moved
aside and the record starts empty), written through :func:`memd.atomic.persist` (never a lost
write: kept and retried; the write-health registry shows it) when it changed. Bounded: at
most :data:`MAX_MEMORIES` memories (the least recently injected go first),
:data:`MAX_SESSIONS` sessions, :data:`MAX_PENDING` waiting injections a session; a memory
whose file is gone (renamed, deleted, archived) leaves the record at the next
:meth:`UsageRecord.prune`. Thread-safe: the hook records on the event loop, verdicts come
from a worker thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import msgspec

from memd.atomic import persist
from memd.config import MAX_NUMBER
from memd.records import load_record

log = logging.getLogger(__name__)

USAGE_FILE = "usage.json"
MAX_FILE_BYTES = 32 * 1024 * 1024
MAX_MEMORIES = 20_000
MAX_SESSIONS = 512
MAX_PENDING = 64  # waiting injections of one session
MAX_DIRS = 4_096
USE_TURNS = 3  # turn ends after an injection within which a use counts
PENDING_MAX_AGE_S = 86_400.0
HOUR_S = 3_600
WEEK_HOURS = 168
DAY_HOURS = 24
MAX_TEXT = 512  # of a session id, agent or signal kept

Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_NUMBER)]
Stamp = Annotated[float, msgspec.Meta(ge=0, le=MAX_NUMBER)]
Short = Annotated[str, msgspec.Meta(max_length=MAX_TEXT)]


class MemoryUsage(msgspec.Struct, omit_defaults=True):
    """One memory's figures (times: seconds since the epoch, 0: never)."""

    injected: Count = 0
    used: Count = 0
    ignored: Count = 0
    last_injected: Stamp = 0.0
    last_used: Stamp = 0.0
    last_session: Short = ""
    last_agent: Short = ""
    last_signal: Short = ""


class Pending(msgspec.Struct, omit_defaults=True):
    """An injection waiting for its verdict: when, after which transcript line (``""``: the
    session's start), and how many of its turn ends are left."""

    at: Stamp
    anchor: Short = ""
    turns: Annotated[int, msgspec.Meta(ge=0, le=USE_TURNS)] = USE_TURNS


class SessionUsage(msgspec.Struct, omit_defaults=True):
    pending: dict[str, Pending] = {}
    cursor: Short = ""  # the last transcript line looked through for memd's MCP answers
    touched: Stamp = 0.0


class UsageFile(msgspec.Struct):
    version: int = 1
    memories: dict[str, MemoryUsage] = {}
    sessions: dict[Short, SessionUsage] = {}
    hours: dict[str, tuple[Count, Count]] = {}  # hour (since the epoch) -> injected, used
    dirs: dict[str, Stamp] = {}  # memory dir -> since when its memories' use is recorded


@dataclass(frozen=True)
class Verdict:
    """A judged injection: ``signal`` is how the agent used it, None: ignored."""

    path: str
    signal: str | None


class UsageRecord:
    """The record (see the module docstring); ``clock`` gives the wall time."""

    def __init__(self, path: Path, clock: Callable[[], float]) -> None:
        self.path = path
        self._clock = clock
        self._lock = threading.Lock()
        self._data = _load(path)
        self._dirty = False

    # -- injections ---------------------------------------------------------------------------

    def injected(
        self,
        session: str,
        paths: Iterable[str],
        anchor: str = "",
        agent: str = "",
        at: float | None = None,
    ) -> None:
        """``paths`` (absolute) went into ``session``'s context after its line ``anchor``
        (one already there and waiting for its verdict is not counted again)."""
        if not session:
            return
        now = self._clock() if at is None else at
        with self._lock:
            record = self._session(session, now)
            for path in paths:
                if path in record.pending:
                    continue  # in the context already, waiting for its verdict
                row = self._memory(path)
                row.injected += 1
                row.last_injected, row.last_session = now, session[:MAX_TEXT]
                if agent:
                    row.last_agent = agent[:MAX_TEXT]
                record.pending[path] = Pending(now, anchor[:MAX_TEXT])
                self._hour(now, 0)
            while len(record.pending) > MAX_PENDING:
                record.pending.pop(next(iter(record.pending)))
            self._touch()

    def pending(self, session: str) -> dict[str, Pending]:
        """The injections of ``session`` waiting for a verdict (a copy)."""
        with self._lock:
            record = self._data.sessions.get(session)
            return {} if record is None else {k: _copy(v) for k, v in record.pending.items()}

    def cursor(self, session: str) -> str:
        with self._lock:
            record = self._data.sessions.get(session)
            return "" if record is None else record.cursor

    # -- verdicts ---------------------------------------------------------------------------

    def judged(
        self,
        session: str,
        verdicts: Iterable[Verdict],
        *,
        agent: str = "",
        turn_ended: Collection[str] = (),
        cursor: str | None = None,
    ) -> None:
        """Record what a look at ``session``'s transcript found: each verdict closes its
        injection (used, or ignored); each path in ``turn_ended`` (its reply came and showed
        no use) has a turn end less; an injection out of turns, or older than a day, is
        ignored. ``cursor``: how far the transcript was looked through."""
        now = self._clock()
        with self._lock:
            record = self._session(session, now)
            if cursor is not None:
                record.cursor = cursor[:MAX_TEXT]
            for verdict in verdicts:
                self._close(record, verdict.path, verdict.signal, session, agent)
            for path in record.pending if agent else ():
                row = self._data.memories.get(path)
                if row is not None and not row.last_agent:
                    row.last_agent = agent[:MAX_TEXT]  # injected before its session was read
            for path in turn_ended:
                waiting = record.pending.get(path)
                if waiting is not None:
                    waiting.turns = max(0, waiting.turns - 1)
            for path, waiting in list(record.pending.items()):
                if waiting.turns == 0 or now - waiting.at >= PENDING_MAX_AGE_S:
                    self._close(record, path, None, session, agent)
            self._touch()

    def _close(
        self, record: SessionUsage, path: str, signal: str | None, session: str, agent: str
    ) -> None:
        waiting = record.pending.pop(path, None)
        if waiting is None:
            return
        row = self._memory(path)
        if agent:
            row.last_agent = agent[:MAX_TEXT]
        if signal is None:
            row.ignored += 1
            return
        row.used += 1
        row.last_used, row.last_signal = self._clock(), signal[:MAX_TEXT]
        row.last_session = session[:MAX_TEXT]
        self._hour(waiting.at, 1)

    # -- reading --------------------------------------------------------------------------------

    def row(self, path: str) -> MemoryUsage:
        """``path``'s figures (zeros when it was never injected)."""
        with self._lock:
            found = self._data.memories.get(path)
            return _copy(found) if found is not None else MemoryUsage()

    def rows(self, paths: Iterable[str]) -> dict[str, MemoryUsage]:
        with self._lock:
            memories = self._data.memories
            return {p: _copy(memories[p]) for p in paths if p in memories}

    def shares(self) -> dict[str, Any]:
        """For ``status``: injections and uses in the last day and week, and the share used
        (None when nothing was injected)."""
        now_hour = int(self._clock() // HOUR_S)
        with self._lock:
            hours = [(int(h), c) for h, c in self._data.hours.items()]
        result: dict[str, Any] = {}
        for label, span in (("day", DAY_HOURS), ("week", WEEK_HOURS)):
            injected = sum(c[0] for h, c in hours if now_hour - h < span)
            used = sum(c[1] for h, c in hours if now_hour - h < span)
            share = round(used / injected, 3) if injected else None
            result[label] = {"injected": injected, "used": used, "share": share}
        return result

    def tracked(self) -> list[str]:
        """The memory dirs whose memories' use is recorded, first tracked first."""
        with self._lock:
            return list(self._data.dirs)

    def tracked_since(self, memory_dir: str) -> float:
        """Since when memories of ``memory_dir`` have their use recorded (first asked now)."""
        with self._lock:
            since = self._data.dirs.get(memory_dir)
            if since is None:
                since = self._data.dirs[memory_dir] = self._clock()
                while len(self._data.dirs) > MAX_DIRS:
                    self._data.dirs.pop(next(iter(self._data.dirs)))
                self._touch()
            return since

    # -- upkeep ---------------------------------------------------------------------------------

    def forget(self, paths: Iterable[str]) -> None:
        """Drop ``paths`` (files gone: renamed, deleted, archived) from the record."""
        gone = set(paths)
        if not gone:
            return
        with self._lock:
            for path in gone:
                self._data.memories.pop(path, None)
            for record in self._data.sessions.values():
                for path in gone & record.pending.keys():
                    del record.pending[path]
            self._touch()

    def prune(self, exists: Callable[[str], bool]) -> int:
        """Drop every memory whose file ``exists`` says is gone; how many (blocking)."""
        with self._lock:
            paths = list(self._data.memories)
        gone = [p for p in paths if not exists(p)]
        self.forget(gone)
        return len(gone)

    def save(self) -> None:
        """Write the record when it changed (never raises: :func:`memd.atomic.persist`)."""
        with self._lock:
            if not self._dirty:
                return
            data = msgspec.json.encode(self._data)
            self._dirty = False
        persist(self.path, data)

    # -- inside the lock --------------------------------------------------------------------------

    def _touch(self) -> None:
        self._dirty = True

    def _session(self, session: str, now: float) -> SessionUsage:
        sessions = self._data.sessions
        record = sessions.pop(session[:MAX_TEXT], None) or SessionUsage()
        record.touched = now
        sessions[session[:MAX_TEXT]] = record  # the most recent last
        while len(sessions) > MAX_SESSIONS:
            sessions.pop(next(iter(sessions)))
        return record

    def _memory(self, path: str) -> MemoryUsage:
        memories = self._data.memories
        row = memories.pop(path, None) or MemoryUsage()
        memories[path] = row  # the most recently touched last
        while len(memories) > MAX_MEMORIES:
            memories.pop(next(iter(memories)))
        return row

    def _hour(self, at: float, column: int) -> None:
        hours = self._data.hours
        key = str(int(at // HOUR_S))
        counts = list(hours.get(key, (0, 0)))
        counts[column] += 1
        hours[key] = (counts[0], counts[1])
        oldest = int(self._clock() // HOUR_S) - WEEK_HOURS
        for stale in [h for h in hours if not h.lstrip("-").isdigit() or int(h) <= oldest]:
            del hours[stale]


def _copy(value: Any) -> Any:
    return msgspec.structs.replace(value)


def _load(path: Path) -> UsageFile:
    """The record on disk; empty when there is none, and when it cannot be read (moved
    aside as ``usage.json.corrupt``)."""
    return load_record(path, MAX_FILE_BYTES, "the usage record", _decode) or UsageFile()


def _decode(raw: bytes) -> UsageFile:
    data = msgspec.json.decode(raw, type=UsageFile)
    if data.version != 1:
        raise ValueError(f"unknown version {data.version}")
    return _bounded(data)


def _bounded(data: UsageFile) -> UsageFile:
    """``data`` within the record's bounds (a file written by hand may hold more)."""
    data.memories = dict(list(data.memories.items())[-MAX_MEMORIES:])
    data.sessions = dict(list(data.sessions.items())[-MAX_SESSIONS:])
    for record in data.sessions.values():
        record.pending = dict(list(record.pending.items())[-MAX_PENDING:])
    data.hours = dict(list(data.hours.items())[-WEEK_HOURS:])
    data.dirs = dict(list(data.dirs.items())[-MAX_DIRS:])
    return data


def as_dict(row: MemoryUsage) -> dict[str, Any]:
    """A memory's figures as ``memdctl memories --json`` gives them (times in ISO-8601 UTC,
    ``None``: never)."""
    return {
        "injected": row.injected,
        "used": row.used,
        "ignored": row.ignored,
        "last_injected": _iso(row.last_injected),
        "last_used": _iso(row.last_used),
        "last_session": row.last_session or None,
        "last_agent": row.last_agent or None,
        "last_signal": row.last_signal or None,
    }


def _iso(at: float) -> str | None:
    if at <= 0:
        return None
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
