"""The registry's indexes: sessions by path, by id and by project, newest first, with totals.

``status`` and ``sessions`` answer from here in O(rows returned): the order index is a sorted
list of ``(-mtime, path)`` kept per project and overall, and the totals the status line shows
are kept as states come and go, never summed over every session. Pure bookkeeping, no I/O;
used from the event loop only.
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


def _discard(order: list[_OrderKey], key: _OrderKey) -> None:
    i = bisect_left(order, key)
    if i < len(order) and order[i] == key:
        del order[i]


class SessionIndex:
    """Every known session, findable by path, id, id prefix and project, newest first."""

    def __init__(self) -> None:
        self._by_path: dict[str, SessionState] = {}
        # id → its path; a tuple of paths for an id that (rarely) exists in two projects. Not
        # a set per id: with 10,000 sessions that alone would be ~2 MiB.
        self._by_id: dict[str, str | tuple[str, ...]] = {}
        self._ids: list[str] = []  # sorted, for prefix lookups
        self._order: list[_OrderKey] = []
        self._project_order: dict[str, list[_OrderKey]] = {}
        self.totals = Totals()
        # The newest names of unknown line types seen (a format change), oldest first.
        self.recent_unknown: dict[str, None] = {}

    def __len__(self) -> int:
        return len(self._by_path)

    def __contains__(self, path: str) -> bool:
        return path in self._by_path

    def values(self) -> Iterator[SessionState]:
        return iter(list(self._by_path.values()))

    def paths(self) -> list[str]:
        return list(self._by_path)

    def by_path(self, path: str) -> SessionState | None:
        return self._by_path.get(path)

    def by_id(self, session_id: str) -> SessionState | None:
        paths = self._by_id.get(session_id)
        if paths is None:
            return None
        return self._by_path[paths if isinstance(paths, str) else min(paths)]

    def _paths_of(self, session_id: str) -> tuple[str, ...]:
        paths = self._by_id.get(session_id, ())
        return (paths,) if isinstance(paths, str) else tuple(sorted(paths))

    def with_prefix(self, prefix: str) -> list[SessionState]:
        """Sessions whose id starts with ``prefix``; O(log n + matches)."""
        out: list[SessionState] = []
        i = bisect_left(self._ids, prefix)
        while i < len(self._ids) and self._ids[i].startswith(prefix):
            out.extend(self._by_path[p] for p in self._paths_of(self._ids[i]))
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
        key = _key(state)
        insort(self._order, key)
        insort(self._project_order.setdefault(state.project, []), key)
        CHANGES.bump()  # a published state: ``status`` shows it at once

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
        key = _key(state)
        _discard(self._order, key)
        project = self._project_order.get(state.project)
        if project is not None:
            _discard(project, key)
            if not project:
                del self._project_order[state.project]


def _discard_id(ids: list[str], session_id: str) -> None:
    i = bisect_left(ids, session_id)
    if i < len(ids) and ids[i] == session_id:
        del ids[i]
