"""Memory-extraction cursors: how far each session's extraction got (R-M3).

The per-session cursors live in one small JSON file under the state dir
(:class:`CursorStore`), replaced atomically, with a *pending* mark for sessions whose turn
end has not been handled yet: a restart neither loses nor repeats work.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from memd.atomic import persist
from memd.records import load_record

log = logging.getLogger(__name__)

CURSOR_FILE = "memory-extraction.json"
# A session's cursor is a few hundred bytes; past this the file is no cursor file of memd's.
MAX_CURSOR_BYTES = 64 * 1024 * 1024
FORMAT_VERSION = 1


@dataclass(frozen=True)
class SessionCursor:
    """What memd remembers about one session's memory extraction."""

    session_id: str
    project: str  # the transcript's project folder name
    path: str  # the transcript
    cwd: str
    memory_dir: str
    cursor: str | None = None  # the last message covered by a run or a skip
    pending: bool = False  # a turn ended and has not been handled yet
    updated_at: float = 0.0


class CursorStore:
    """All cursors, in one JSON file replaced atomically. Load it with :meth:`load`."""

    def __init__(self, path: Path, records: dict[str, SessionCursor] | None = None) -> None:
        self.path = path
        self._records = dict(records or {})
        self._lock = anyio.Lock()

    @classmethod
    def load(cls, state_dir: Path) -> CursorStore:
        """Read the file (blocking); an unreadable one is moved aside and starts empty."""
        path = state_dir / CURSOR_FILE
        found = load_record(path, MAX_CURSOR_BYTES, "the memory cursors", _decode)
        return cls(path, found)

    def get(self, session_id: str) -> SessionCursor | None:
        return self._records.get(session_id)

    def pending(self) -> list[SessionCursor]:
        return [r for r in self._records.values() if r.pending]

    async def update(self, default: SessionCursor, **changes: Any) -> SessionCursor:
        """Change one session's record (``default`` when it has none) and write the file.

        The change is applied before anything is awaited, so concurrent updates never undo
        each other; each write encodes the records as they are when it runs.
        """
        current = self._records.get(default.session_id, default)
        record = replace(current, **changes)
        self._records[record.session_id] = record
        async with self._lock:
            data = encode_cursors(self._records)
            await anyio.to_thread.run_sync(persist, self.path, data)
        return record


def encode_cursors(records: dict[str, SessionCursor]) -> bytes:
    doc = {"version": FORMAT_VERSION, "sessions": {k: asdict(v) for k, v in records.items()}}
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def decode_cursors(doc: Any) -> dict[str, SessionCursor]:
    """Records from the decoded file; raises ``ValueError`` on anything unexpected."""
    if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
        raise ValueError("unknown format version")
    sessions = doc["sessions"]
    if not isinstance(sessions, dict):
        raise ValueError("'sessions' is not a map")
    known = {f.name for f in fields(SessionCursor)}
    out: dict[str, SessionCursor] = {}
    for key, raw in sessions.items():
        if not isinstance(raw, dict):
            raise ValueError(f"record {key!r} is not a map")
        record = SessionCursor(**{k: v for k, v in raw.items() if k in known})
        if not all(isinstance(v, str) for v in (record.session_id, record.path, record.memory_dir)):
            raise ValueError(f"record {key!r} lacks its ids")
        out[record.session_id] = record
    return out


def _decode(raw: bytes) -> dict[str, SessionCursor]:
    return decode_cursors(json.loads(raw))
