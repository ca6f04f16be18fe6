"""``status``'s session rows: brief, in columns, and each packed once per published state.

The section is ``{"columns": [...], "compact_threshold": n, "rows": [[...], ...]}``: each row
holds the values of :data:`COLUMNS` in that order, then, only when one is set, a map of the
marks of a problem or an estimate (``bad_lines``, ``unreadable``, ``context_stale``). The
threshold is the same for every row (it comes from the config), so it is said once. A map
per row repeated eight key names ten times: ~45 % of the bytes a client decoded.
``memd_client.status_form.expanded`` gives the rows back as maps (``memdctl status``).

A session's :class:`~memd.state.SessionState` is replaced whole whenever anything it shows
changes (the registry publishes a new one), so the state object itself says whether its
packed row is still true: no counter to forget, no time to expire. ``memdctl status`` asks
for the ten newest many times a second in ``top``; a row is packed again only after its
session changed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from memd.clock import iso_utc
from memd.state import SessionState
from memd_client.names import encodable, escape_name

if TYPE_CHECKING:
    from msgspec import Raw

KEPT_ROWS = 512  # packed rows kept at most (the rows of recent replies; then all are dropped)
COLUMNS = (
    "session_id",
    "agent",
    "project",
    "parsed",
    "message_count",
    "context_tokens",
    "last_activity",
)


def brief_row(s: SessionState, window: dict[str, Any] | None = None) -> list[Any]:
    """A session as ``status`` lists it: what a glance shows (``memdctl status`` and ``top``);
    ``sessions`` and ``session`` give every figure. The values of :data:`COLUMNS`, then the
    marks of a problem (``bad_lines``, ``unreadable``), of an estimate (``context_stale``)
    and of a window other than the config's (``window``: its ``compact_threshold``,
    ``context_window`` and ``window_source``, issue 38) in a map, only when one is set."""
    row: list[Any] = [
        escape_name(s.session_id),
        s.agent,
        escape_name(s.project),
        s.parsed,
        s.message_count,
        s.context_tokens,
        iso_utc(s.mtime),
    ]
    marks: dict[str, Any] = {}
    if s.context_stale:
        marks["context_stale"] = True
    if s.bad_lines:
        marks["bad_lines"] = s.bad_lines
    if s.unreadable is not None:
        marks["unreadable"] = unreadable(s)
    if window:
        marks.update(window)
    if marks:
        row.append(marks)
    return row


def unreadable(s: SessionState) -> dict[str, Any] | None:
    """Why the transcript cannot be read (``reason``, ``since`` ISO time), None if it can."""
    if s.unreadable is None:
        return None
    since = s.unreadable.get("since")
    return {
        "reason": s.unreadable.get("reason"),
        "since": iso_utc(since) if isinstance(since, int | float) else None,
    }


@functools.cache
def packer() -> tuple[type[Raw], Callable[[Any], bytes]]:
    """msgspec's ``Raw`` and encoder, loaded after READY with the features (``status`` waits
    for them)."""
    import msgspec

    return msgspec.Raw, msgspec.msgpack.Encoder().encode


class StatusRows:
    """The packed rows of the states ``status`` listed lately, by state."""

    def __init__(self) -> None:
        self._packed: dict[int, tuple[SessionState, dict[str, Any] | None, Raw]] = {}

    def packed(
        self,
        states: Sequence[SessionState],
        threshold: int,
        window_of: Callable[[SessionState], dict[str, Any] | None] = lambda state: None,
    ) -> Raw:
        """``states`` as ``status``'s ``sessions`` section, already msgpack; ``window_of``
        gives a session's window marks when its window is not the config's."""
        raw, pack = packer()
        if len(self._packed) + len(states) > KEPT_ROWS:
            self._packed = {}
        rows = []
        for state in states:
            window = window_of(state)
            kept = self._packed.get(id(state))
            if kept is None or kept[0] is not state or kept[1] != window:
                kept = (state, window, raw(_packed_row(pack, brief_row(state, window))))
                self._packed[id(state)] = kept  # holding the state: its id is not reused
            rows.append(kept[2])
        return raw(pack({"columns": COLUMNS, "compact_threshold": threshold, "rows": rows}))


def _packed_row(pack: Callable[[Any], bytes], row: list[Any]) -> bytes:
    try:
        return pack(row)
    except UnicodeEncodeError:  # a reason naming a path no one escaped: as the server does
        return pack(encodable(row))
