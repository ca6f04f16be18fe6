"""Per-session extraction records, persisted so they survive restarts (R-S7, R-S10).

One small JSON file per session under ``<state_dir>/session-notes/``, replaced atomically.
A record holds the compaction anchor (``lastSummarizedMessageId``), the delta cursor (the last
message the notes have seen: it moves on every success, while the anchor waits for a point
where no tool call is pending), the growth baseline, what
the last run cost and how it ended, and a *pending* mark: written before a run starts and
cleared when it ends, so a run killed mid-way (``kill -9``) is found at the next start and
done again. An unreadable record is moved aside and the session starts afresh; the notes
file itself is never touched by this module.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import anyio.to_thread

from memd.atomic import persist
from memd.changes import CHANGES
from memd.config import MAX_NUMBER
from memd.errors import StateError
from memd.records import load_record

log = logging.getLogger(__name__)

RECORDS_DIR = "session-notes"
# A record names its session and its last runs: a few KB. Past this it is not one of memd's.
MAX_RECORD_BYTES = 16 * 1024 * 1024
FORMAT_VERSION = 1
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


@dataclass(frozen=True)
class ExtractionRecord:
    """What memd remembers about one session's notes between runs."""

    session_id: str
    project: str
    last_summarized_id: str | None = None  # lastSummarizedMessageId: the compaction anchor
    covered_id: str | None = None  # the last message the notes have seen (the delta cursor)
    tokens_at_extraction: int | None = None  # growth baseline (None: never extracted)
    extracted_at: float | None = None  # wall time of the last success
    extractions: int = 0  # successful runs
    last_duration_s: float | None = None
    last_cost_tokens: int = 0  # billed-equivalent tokens of the last run
    total_cost_tokens: int = 0
    last_error: str | None = None
    last_error_at: float | None = None
    pending: bool = False  # a run started and has not ended (redo after a crash)
    pending_since: float | None = None
    pending_manual: bool = False  # the pending run was asked for by a user

    def to_json(self) -> dict[str, Any]:
        return {"version": FORMAT_VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExtractionRecord:
        """Decode a stored record; raise :class:`StateError` when it cannot be one."""
        if data.get("version") != FORMAT_VERSION:
            raise StateError(f"unknown record version {data.get('version')!r}")
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        if not isinstance(values.get("session_id"), str) or not isinstance(
            values.get("project"), str
        ):
            raise StateError("a record needs a session_id and a project")
        record = cls(**values)
        _check_types(record)
        return record


def _check_types(record: ExtractionRecord) -> None:
    optional_str = (record.last_summarized_id, record.covered_id, record.last_error)
    optional_num = (
        record.tokens_at_extraction,
        record.extracted_at,
        record.last_duration_s,
        record.last_error_at,
        record.pending_since,
    )
    counts = (record.extractions, record.last_cost_tokens, record.total_cost_tokens)
    ok = (
        all(v is None or isinstance(v, str) for v in optional_str)
        and all(v is None or _figure(v) for v in optional_num)
        and all(isinstance(v, int) and _figure(v) for v in counts)
        and isinstance(record.pending, bool)
        and isinstance(record.pending_manual, bool)
    )
    if not ok:
        raise StateError("a record field has the wrong type or is out of 0 … MAX_NUMBER")


def _figure(value: object) -> bool:
    """A number a record may hold: 0 … MAX_NUMBER, finite (``json`` reads ``Infinity``,
    ``NaN`` and ``1e400``; ``status`` cannot show 2^64)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= MAX_NUMBER
    )


# ---------------------------------------------------------------------------------------------
# Transitions (pure)


def started(record: ExtractionRecord, *, at: float) -> ExtractionRecord:
    """The pending mark, written before a run."""
    return replace(record, pending=True, pending_since=at)


def progressed(
    record: ExtractionRecord, *, covered: str | None, anchor: str | None
) -> ExtractionRecord:
    """A chunk's edits are kept: move the cursor, and the anchor when it is safe."""
    return replace(
        record,
        covered_id=covered or record.covered_id,
        last_summarized_id=anchor or record.last_summarized_id,
    )


def succeeded(
    record: ExtractionRecord,
    *,
    covered: str | None,
    anchor: str | None,
    tokens: int,
    at: float,
    took: float,
    cost: int,
) -> ExtractionRecord:
    """The run ended well: new baseline, figures, no error, not pending."""
    return replace(
        progressed(record, covered=covered, anchor=anchor),
        tokens_at_extraction=tokens,
        extracted_at=at,
        extractions=record.extractions + 1,
        last_duration_s=took,
        last_cost_tokens=cost,
        total_cost_tokens=record.total_cost_tokens + cost,
        last_error=None,
        last_error_at=None,
        pending=False,
        pending_since=None,
    )


def failed(record: ExtractionRecord, *, error: str, at: float) -> ExtractionRecord:
    """The run ended badly (or never started): keep the error, clear the pending mark."""
    return replace(record, last_error=error, last_error_at=at, pending=False, pending_since=None)


class ExtractionStore:
    """The records of every session, in memory, each write-through to its own file."""

    def __init__(self, directory: Path, records: Mapping[str, ExtractionRecord] | None = None):
        self.directory = directory
        self._records: dict[str, ExtractionRecord] = dict(records or {})

    @classmethod
    def load(cls, state_dir: Path) -> ExtractionStore:
        """Read every record under ``state_dir``; broken files are moved aside with a warning."""
        directory = state_dir / RECORDS_DIR
        records: dict[str, ExtractionRecord] = {}
        for path in sorted(directory.glob("*.json")) if directory.is_dir() else ():
            record = load_record(path, MAX_RECORD_BYTES, "the notes record", _decode)
            if record is not None:
                records[record.session_id] = record
        return cls(directory, records)

    def get(self, session_id: str) -> ExtractionRecord | None:
        return self._records.get(session_id)

    def records(self) -> tuple[ExtractionRecord, ...]:
        return tuple(self._records.values())

    def pending(self) -> tuple[ExtractionRecord, ...]:
        """Records whose last run never ended: the work to redo after a restart."""
        return tuple(r for r in self._records.values() if r.pending)

    def path_for(self, session_id: str) -> Path:
        """The record's file: the id itself when it is a short plain ASCII name, else ``_``
        and the SHA-256 of its bytes. A session id is the name an agent gave its file, any
        bytes (a Gemini chat named with bytes that are not UTF-8, accents, spaces): refusing
        it meant no notes for the session, ever, and no record of why."""
        if _SAFE_ID.match(session_id):
            return self.directory / f"{session_id}.json"
        digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
        return self.directory / f"_{digest}.json"

    def replace_nowait(self, record: ExtractionRecord) -> None:
        """Change the record in memory only; the next :meth:`put` of it writes it too."""
        self._records[record.session_id] = record
        CHANGES.bump()  # the session's notes status, in ``status``

    def put_sync(self, record: ExtractionRecord) -> None:
        """Replace the record and its file (blocking; a write the disk refuses is kept and
        retried, :func:`memd.atomic.persist`)."""
        path = self.path_for(record.session_id)
        self._records[record.session_id] = record
        CHANGES.bump()
        persist(path, json.dumps(record.to_json(), separators=(",", ":")).encode("utf-8"))

    def forget(self, session_id: str) -> None:
        """Drop the record and its file (blocking; a file that will not go is left)."""
        if self._records.pop(session_id, None) is not None:
            CHANGES.bump()
        with contextlib.suppress(FileNotFoundError):
            self.path_for(session_id).unlink()

    async def put(self, record: ExtractionRecord) -> None:
        """Replace the record; the file is written in a worker thread."""
        await anyio.to_thread.run_sync(self.put_sync, record)


def _decode(raw: bytes) -> ExtractionRecord:
    return ExtractionRecord.from_json(json.loads(raw))
