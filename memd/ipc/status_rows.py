"""``status``'s session rows: brief, and each packed once per published state.

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


def brief_row(s: SessionState, threshold: int) -> dict[str, Any]:
    """A session as ``status`` lists it: what a glance shows (``memdctl status`` and ``top``);
    ``sessions`` and ``session`` give every figure. The marks of a problem (``bad_lines``,
    ``unreadable``) and of an estimate (``context_stale``) are there only when set."""
    row: dict[str, Any] = {
        "session_id": escape_name(s.session_id),
        "agent": s.agent,
        "project": escape_name(s.project),
        "parsed": s.parsed,
        "message_count": s.message_count,
        "context_tokens": s.context_tokens,
        "compact_threshold": threshold,
        "last_activity": iso_utc(s.mtime),
    }
    if s.context_stale:
        row["context_stale"] = True
    if s.bad_lines:
        row["bad_lines"] = s.bad_lines
    if s.unreadable is not None:
        row["unreadable"] = unreadable(s)
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
def _msgspec() -> tuple[type[Raw], Callable[[Any], bytes]]:
    """Loaded after READY, with the features (``status`` waits for them)."""
    import msgspec

    return msgspec.Raw, msgspec.msgpack.Encoder().encode


class StatusRows:
    """The packed rows of the states ``status`` listed lately, by state."""

    def __init__(self) -> None:
        self._packed: dict[int, tuple[SessionState, int, bytes]] = {}

    def packed(self, states: Sequence[SessionState], threshold: int) -> Raw:
        """``states`` as ``status``'s ``sessions`` array, already msgpack."""
        raw, pack = _msgspec()
        if len(self._packed) + len(states) > KEPT_ROWS:
            self._packed = {}
        parts = [_array_header(len(states))]
        for state in states:
            kept = self._packed.get(id(state))
            if kept is None or kept[0] is not state or kept[1] != threshold:
                kept = (state, threshold, _packed_row(pack, brief_row(state, threshold)))
                self._packed[id(state)] = kept  # holding the state: its id is not reused
            parts.append(kept[2])
        return raw(b"".join(parts))


def _packed_row(pack: Callable[[Any], bytes], row: dict[str, Any]) -> bytes:
    try:
        return pack(row)
    except UnicodeEncodeError:  # a reason naming a path no one escaped: as the server does
        return pack(encodable(row))


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes([0x90 | n])
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")
