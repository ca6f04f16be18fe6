"""The registry's indexes: sessions by path, by id and by project, newest first, with totals.

A session is its id: the files that carry one id (a Gemini chat a resume in a new minute
continued beside a 2-line file of the same ``sessionId``; the rare Claude Code session found
in two project folders) are one session, shown and found as its *head*: the file memd
follows, else the newest (:func:`_head_key`). ``status`` and ``sessions`` answer from here in
O(rows returned): the order index is a sorted list of ``(-mtime, path)`` of the heads, kept
per project and overall, and the totals the status line shows are kept as states come and go,
never summed over every session. Pure bookkeeping, no I/O; used from the event loop only.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator
from dataclasses import dataclass

from memd.changes import CHANGES
from memd.state import SessionState

_OrderKey = tuple[float, str]
RECENT_UNKNOWN = 5


@dataclass
class Totals:
    """Sums over every known session, kept incrementally."""

    parsed: int = 0
    bytes_parsed: int = 0
    lines: int = 0
    bad_lines: int = 0
    unknown_lines: int = 0  # lines of types their source does not know

    def add(self, state: SessionState, sign: int) -> None:
        self.parsed += sign * int(state.parsed)
        self.bytes_parsed += sign * state.bytes_parsed
        self.lines += sign * state.lines
        self.bad_lines += sign * state.bad_lines
        if state.unknown_types:
            self.unknown_lines += sign * sum(state.unknown_types.values())


def _key(state: SessionState) -> _OrderKey:
    return (-state.mtime, state.path)


def _head_key(state: SessionState) -> tuple[bool, float, str]:
    """Which of one id's files is the session: one memd follows, then the newest."""
    return (bool(state.ignored), -state.mtime, state.path)


def _discard(order: list[_OrderKey], key: _OrderKey) -> None:
    i = bisect_left(order, key)
    if i < len(order) and order[i] == key:
        del order[i]


class SessionIndex:
    """Every known session file, findable by path; every session (an id and its head file)
    by id, id prefix and project, newest first."""

    def __init__(self) -> None:
        self._by_path: dict[str, SessionState] = {}
        # id → its path; a tuple of paths for an id that (rarely) exists in two projects. Not
        # a set per id: with 10,000 sessions that alone would be ~2 MiB.
        self._by_id: dict[str, str | tuple[str, ...]] = {}
        self._ids: list[str] = []  # sorted, for prefix lookups
        self._heads: dict[str, SessionState] = {}  # id → its head file's state, as ordered
        self._order: list[_OrderKey] = []
        self._project_order: dict[str, list[_OrderKey]] = {}
        self.totals = Totals()
        # The newest names of unknown line types seen (a format change), oldest first.
        self.recent_unknown: dict[str, None] = {}

    def __len__(self) -> int:
        """How many sessions (ids)."""
        return len(self._heads)

    def __contains__(self, path: str) -> bool:
        return path in self._by_path

    def values(self) -> Iterator[SessionState]:
        return iter(list(self._by_path.values()))

    def paths(self) -> list[str]:
        return list(self._by_path)

    def by_path(self, path: str) -> SessionState | None:
        return self._by_path.get(path)

    def by_id(self, session_id: str) -> SessionState | None:
        """The session's head file's state."""
        return self._heads.get(session_id)

    def _paths_of(self, session_id: str) -> tuple[str, ...]:
        paths = self._by_id.get(session_id, ())
        return (paths,) if isinstance(paths, str) else tuple(sorted(paths))

    def with_prefix(self, prefix: str) -> list[SessionState]:
        """Sessions (their heads) whose id starts with ``prefix``; O(log n + matches)."""
        out: list[SessionState] = []
        i = bisect_left(self._ids, prefix)
        while i < len(self._ids) and self._ids[i].startswith(prefix):
            out.append(self._heads[self._ids[i]])
            i += 1
        return out

    def newest(self, limit: int | None = None, project: str | None = None) -> list[SessionState]:
        """Sessions by last activity, newest first; O(limit)."""
        order = self._order if project is None else self._project_order.get(project, [])
        keys = order if limit is None else order[:limit]
        return [self._by_path[path] for _, path in keys]

    def put(self, state: SessionState) -> None:
        """Add ``state`` or replace the state held for its path."""
        old = self._by_path.get(state.path)
        if old is not None:
            self._unlink(old)
        self._by_path[state.path] = state
        self.totals.add(state, 1)
        if state.unknown_types:
            self._note_unknown(state.unknown_types)
        paths = self._paths_of(state.session_id)
        if not paths:
            insort(self._ids, state.session_id)
            self._by_id[state.session_id] = state.path
        else:
            self._by_id[state.session_id] = (*paths, state.path)
        self._choose_head(state.session_id)
        CHANGES.bump()  # a published state: ``status`` shows it at once

    def _choose_head(self, session_id: str) -> None:
        """Order the id's head file (none when the id has no file left)."""
        old = self._heads.pop(session_id, None)
        if old is not None:
            self._unorder(old)
        states = [self._by_path[p] for p in self._paths_of(session_id)]
        if not states:
            return
        head = min(states, key=_head_key)
        self._heads[session_id] = head
        key = _key(head)
        insort(self._order, key)
        insort(self._project_order.setdefault(head.project, []), key)

    def _unorder(self, state: SessionState) -> None:
        key = _key(state)
        _discard(self._order, key)
        project = self._project_order.get(state.project)
        if project is not None:
            _discard(project, key)
            if not project:
                del self._project_order[state.project]

    def _note_unknown(self, counts: dict[str, int]) -> None:
        recent = self.recent_unknown
        for name in counts:
            recent.pop(name, None)
            recent[name] = None
        while len(recent) > RECENT_UNKNOWN:
            del recent[next(iter(recent))]

    def remove(self, path: str) -> SessionState | None:
        state = self._by_path.pop(path, None)
        if state is not None:
            self._unlink(state)
            CHANGES.bump()
        return state

    def _unlink(self, state: SessionState) -> None:
        self.totals.add(state, -1)
        rest = tuple(p for p in self._paths_of(state.session_id) if p != state.path)
        if not rest:
            self._by_id.pop(state.session_id, None)
            _discard_id(self._ids, state.session_id)
        else:
            self._by_id[state.session_id] = rest[0] if len(rest) == 1 else rest
        if self._heads.get(state.session_id) is state:
            self._choose_head(state.session_id)


def _discard_id(ids: list[str], session_id: str) -> None:
    i = bisect_left(ids, session_id)
    if i < len(ids) and ids[i] == session_id:
        del ids[i]
