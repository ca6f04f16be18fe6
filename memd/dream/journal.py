"""A dream's write-ahead journal (R-B3): every change a run makes to the memory dir, written
down with what undoes it, on a disk that took it, before the change is made.

One line per change (a :class:`Step`): what it is (``write``, ``unlink``, ``mkdir``,
``rmdir``), the entry's relative path, its state before (a file's SHA-256 and mode, a folder,
or nothing) and the state the change leaves. The bytes a file held before are kept too: in the
run's snapshot when it holds exactly them, else in ``undo/<sha256>`` beside the journal
(:meth:`Journal.keep`). A line counts only once it is whole and fsynced; a write or fsync that
fails (a full disk writes part of a line and says nothing) takes the partial line back, the
change is not made, and the journal takes no more lines (:class:`RecordRefused`: the run ends
failed, undone from the lines that did count).

:func:`read` gives the steps back, hostile lines skipped, and reads the journals of earlier
versions too (an ``intent`` line before each write and a ``done`` line after, with only the
path: what a file held before comes from the snapshot then). Everything here blocks.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from memd.atomic import write_atomic
from memd.confined import ChangeKind
from memd.dream import snapshot
from memd.errors import WriteFailed
from memd.writes import reporting

JOURNAL: Final = "journal.jsonl"
UNDO_DIR: Final = "undo"
MAX_LINE_BYTES: Final = 64 * 1024
MAX_JOURNAL_BYTES: Final = 256 * 1024 * 1024
DIR: Final = "dir"  # a state: a folder
ANY: Final = "*"  # a state an old journal did not record: whatever is there now
_KIND: Final[dict[str, ChangeKind]] = {k: k for k in ("write", "unlink", "mkdir", "rmdir")}
KINDS: Final = tuple(_KIND)
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Step:
    """One change. A state is a file's SHA-256, :data:`DIR`, ``None`` (nothing there) or, in
    an old journal's ``after``, :data:`ANY`."""

    kind: ChangeKind
    relative: str
    before: str | None
    after: str | None
    mode: int | None = None  # the file's mode before (it is put back with it)
    merged_into: str | None = None  # a delete: the file that holds its content now

    def as_dict(self) -> dict[str, Any]:
        return {
            "op": self.kind,
            "path": self.relative,
            "before": self.before,
            "after": self.after,
            "mode": self.mode,
            "merged_into": self.merged_into,
        }


class RecordRefused(WriteFailed):
    """The state disk did not take a change's record: the change is not made and the run
    ends failed (a :class:`~memd.errors.WriteFailed`, which ends an agent's run)."""


class Journal:
    """Appends to ``<run dir>/journal.jsonl``; thread-safe. One per run: after a refusal it
    takes nothing more."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / JOURNAL
        self._lock = threading.Lock()
        self._refused: RecordRefused | None = None

    def create(self) -> None:
        """Make the empty journal, on disk for good (file and folder entry), before the run
        changes anything."""
        with self._lock, self._recording(self.path):
            fd = os.open(self.path, _APPEND | os.O_CREAT, 0o600)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            snapshot.sync_dir(self.run_dir)

    def keep(self, data: bytes) -> str:
        """Keep ``data`` (what a file held before a change) under ``undo/``; its SHA-256."""
        digest = snapshot.sha256(data)
        blob = self.run_dir / UNDO_DIR / digest
        with self._lock, self._recording(blob):
            if not blob.parent.is_dir():
                blob.parent.mkdir(mode=0o700)
                snapshot.sync_dir(self.run_dir)
            if snapshot.read_regular(blob) != data:
                write_atomic(blob, data)
        return digest

    def append(self, step: Step) -> None:
        """Write ``step`` down for good, or raise :class:`RecordRefused` (and take nothing)."""
        line = json.dumps(step.as_dict(), ensure_ascii=True).encode() + b"\n"
        with self._lock, self._recording(self.path):
            fd = os.open(self.path, _APPEND)
            try:
                start = os.fstat(fd).st_size
                try:
                    _write_whole(fd, line)
                    os.fsync(fd)
                except OSError:
                    _take_back(fd, start)
                    raise
            finally:
                os.close(fd)

    @contextlib.contextmanager
    def _recording(self, path: Path) -> Iterator[None]:
        """Any ``OSError`` inside becomes :class:`RecordRefused` (reported in
        :mod:`memd.writes`), and so does every later record."""
        if self._refused is not None:
            raise RecordRefused(self._refused.path, self._refused.error)
        try:
            with reporting(path):
                yield
        except OSError as exc:
            cause = exc.error if isinstance(exc, WriteFailed) else exc
            self._refused = RecordRefused(str(path), cause)
            raise self._refused from exc


def _write_whole(fd: int, data: bytes) -> None:
    """All of ``data``: a full disk may take part of it and say nothing, so a write that took
    none is the refusal (the next one raises ``ENOSPC``)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def _take_back(fd: int, size: int) -> None:
    """Cut a partial line off. If even that fails the journal takes no more lines, so the
    partial line stays the last one and is never read as part of another."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, size)
        os.fsync(fd)


@dataclass(frozen=True)
class Journaled:
    steps: tuple[Step, ...]
    old: bool  # an earlier version's journal (its folders were not recorded)


def read(run_dir: Path, before: Mapping[str, str]) -> Journaled:
    """The journal's steps in order; ``before`` (the snapshot's manifest) fills in what an
    old journal did not record. Hostile or partial lines are skipped, never raised."""
    steps: list[Step] = []
    old: dict[str, Step] = {}  # an old journal: the latest entry per file
    for record in _records(run_dir / JOURNAL):
        relative, op = record["path"], record["op"]
        if op in KINDS:
            step = _step(record)
            if step is not None:
                steps.append(step)
        elif op == "intent":
            old[relative] = Step("write", relative, before.get(relative), ANY)
        else:
            after = record.get("after")
            merged = record.get("merged_into")
            old[relative] = Step(
                "write" if isinstance(after, str) else "unlink",
                relative,
                before.get(relative),
                after if isinstance(after, str) else None,
                merged_into=merged if isinstance(merged, str) else None,
            )
    return Journaled((*steps, *old.values()), bool(old))


def _step(record: dict[str, Any]) -> Step | None:
    before, after = record.get("before"), record.get("after")
    mode, merged = record.get("mode"), record.get("merged_into")
    kind = _KIND.get(record["op"])
    if kind is None or not (_state(before) and _state(after)):
        return None
    return Step(
        kind,
        record["path"],
        before,
        after,
        mode if isinstance(mode, int) and 0 <= mode <= 0o7777 else None,
        merged if isinstance(merged, str) and snapshot.safe_relative(merged) else None,
    )


def _state(value: object) -> bool:
    return value is None or (isinstance(value, str) and (value == DIR or _is_sha(value)))


def _is_sha(value: str) -> bool:
    return len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _records(path: Path) -> Iterator[dict[str, Any]]:
    """The parsed lines of the journal at ``path`` (a regular file, no link followed), at
    most :data:`MAX_JOURNAL_BYTES` of it; an overlong line is passed over."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        total = 0
        while total < MAX_JOURNAL_BYTES and (line := handle.readline(MAX_LINE_BYTES + 1)):
            total += len(line)
            if len(line) <= MAX_LINE_BYTES:
                record = _parse(line)
                if record is not None:
                    yield record
                continue
            while line and not line.endswith(b"\n") and total < MAX_JOURNAL_BYTES:
                line = handle.readline(MAX_LINE_BYTES)
                total += len(line)


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("op") not in (*KINDS, "intent", "done"):
        return None
    relative = record.get("path")
    if not isinstance(relative, str) or not snapshot.safe_relative(relative):
        return None
    return record


def kept_bytes(run_dir: Path, snapshot_dir: Path, relative: str, digest: str) -> bytes | None:
    """The bytes with SHA-256 ``digest`` that ``relative`` held before a change: from
    ``undo/`` or the snapshot, checked against the digest; ``None`` when neither has them."""
    for path in (run_dir / UNDO_DIR / digest, snapshot_dir / snapshot.FILES / relative):
        try:
            data = snapshot.read_regular(path)
        except snapshot.TooLarge:
            continue
        if data is not None and snapshot.sha256(data) == digest:
            return data
    return None
