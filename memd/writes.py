"""Write health: every file write that failed, since when, and when it is tried again.

A failed write is a state of the daemon, not an end of it. Every write memd makes reports
here (:mod:`memd.atomic` does it for its writers, :func:`reporting` for the others, the log
handler for the log): a failure records the path, the error and since when; the next write
of the same path that works clears it. ``status`` and ``memdctl doctor`` show what is
recorded.

Two kinds of write fail differently:

* memd's own state (the session state, the spend ledger, the cursors, the notes records, the
  breakers, the token estimates) is *kept*: :func:`memd.atomic.persist` never raises for a
  failed write; the registry keeps the newest bytes of each such path and
  :func:`run_write_retries` writes them, with back-off, once the disk takes them again. The
  daemon serves from memory meanwhile, and what was in memory lands on disk without a
  restart. While a path is backing off, a new write of it only replaces the kept bytes: a
  full disk is tried once per back-off step, not once per flush.
* a write done for a job (notes, memories, a dream's files) raises: the job fails, is
  recorded as failed and is retried by its own scheduling. Its entry here names the path
  until a later write of it works, or for an hour.

The registry is process-wide (:data:`WRITES`), as the log is: every writer reaches it
without being handed it. It only keeps books; the writing is :mod:`memd.atomic`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc

from memd.changes import CHANGES
from memd.clock import iso_utc
from memd.errors import WriteFailed
from memd_client.names import escape_name

log = logging.getLogger(__name__)

# A full, read-only or failing disk, or no descriptor left: the errors waiting can fix.
DISK_FAULTS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EMFILE, errno.ENFILE}
)
FIRST_RETRY_S = 1.0
MAX_RETRY_S = 30.0  # a disk that recovers is written within this
OTHER_RETRY_S = 300.0  # other errors (a permission taken away) are tried this rarely
KEEP_JOB_FAILURES_S = 3600.0  # a job's failed write not seen again is forgotten after this
MAX_ENTRIES = 1000  # job failures beyond this push out the oldest ones
REPORT_ROWS = 20


@dataclass
class _Entry:
    path: str
    errno: int | None
    message: str
    since: float  # the first failure of this run of failures
    last: float  # the latest failure
    attempts: int
    retry_at: float | None  # kept bytes are written again then; None: ``by`` retries
    by: str  # who writes it again when memd keeps no bytes of it
    data: bytes | None = None
    mode: int | None = None


@dataclass(frozen=True)
class Kept:
    """Bytes the registry writes again for their path."""

    path: str
    data: bytes
    mode: int | None


def error_name(code: int | None) -> str:
    """``ENOSPC`` for errno 28; ``OSError`` when there is no number."""
    if code is None:
        return "OSError"
    return errno.errorcode.get(code, f"errno {code}")


def shown(path: str) -> str:
    """A path as text any reply can carry, escaped as every name memd shows
    (:mod:`memd_client.names`: a byte that is not UTF-8 as ``\\xNN``)."""
    return escape_name(path)


def retry_delay(code: int | None, attempts: int) -> float:
    """The pause before attempt ``attempts + 1`` of a kept write (pure)."""
    if code not in DISK_FAULTS:
        return OTHER_RETRY_S
    return min(MAX_RETRY_S, FIRST_RETRY_S * 2.0 ** min(attempts - 1, 30))


class WriteHealth:
    """The failed writes of this process, by path. Thread-safe: writes run in worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._failures = 0
        self._recoveries = 0
        self._wake: Callable[[], None] | None = None

    # -- what writers report -----------------------------------------------------------------

    def failed(
        self, path: str, exc: OSError, *, keep: Kept | None = None, by: str = "its job"
    ) -> None:
        """A write of ``path`` failed with ``exc``; with ``keep``, hold its bytes and write
        them again later (see the module doc); else ``by`` says who tries again."""
        now = time.time()
        with self._lock:
            self._failures += 1
            entry = self._entries.get(path)
            first = entry is None
            if entry is None:
                entry = self._entries[path] = _Entry(path, exc.errno, "", now, now, 0, None, by)
                self._trim()
            entry.errno, entry.message = exc.errno, exc.strerror or str(exc)
            entry.last, entry.attempts = now, entry.attempts + 1
            if keep is not None:
                entry.data, entry.mode = keep.data, keep.mode
            if entry.data is not None:
                entry.retry_at = now + retry_delay(entry.errno, entry.attempts)
            wake = self._wake
        CHANGES.bump()  # a failing write is a state ``status`` shows at once
        if first:
            log.error(
                "cannot write %s: %s (%s); %s",
                shown(path),
                entry.message,
                error_name(entry.errno),
                "memd keeps it in memory and writes it when it can"
                if entry.data is not None
                else f"{entry.by} tries again",
            )
            if wake is not None and entry.data is not None:
                wake()

    def succeeded(self, path: str) -> None:
        """A write of ``path`` worked: whatever was recorded for it is over."""
        if path not in self._entries:  # the common case, without the lock
            return
        with self._lock:
            entry = self._entries.pop(path, None)
            if entry is None:
                return
            self._recoveries += 1
        CHANGES.bump()
        log.warning(
            "writing %s works again (it failed %d times since %s)",
            shown(path),
            entry.attempts,
            iso_utc(entry.since),
        )

    def hold(self, kept: Kept) -> bool:
        """While ``kept.path`` waits for its retry, take its newer bytes and say so (True):
        the caller does not try the disk now. False: write it now."""
        with self._lock:
            entry = self._entries.get(kept.path)
            if entry is None or entry.data is None:
                return False
            entry.data, entry.mode = kept.data, kept.mode
        CHANGES.bump()  # ``kept_bytes``
        return True

    def kept(self, path: str) -> Kept | None:
        """The bytes held for ``path``, if any."""
        with self._lock:
            entry = self._entries.get(path)
            if entry is None or entry.data is None:
                return None
            return Kept(path, entry.data, entry.mode)

    # -- what the retry task asks ------------------------------------------------------------

    def due(self, now: float, *, every: bool = False) -> list[str]:
        """Paths whose kept bytes are due for another attempt (``every``: all of them)."""
        with self._lock:
            return [
                e.path
                for e in self._entries.values()
                if e.data is not None and (every or (e.retry_at or 0.0) <= now)
            ]

    def next_due(self) -> float | None:
        """When the next kept write is due (epoch seconds), None when none is kept."""
        with self._lock:
            times = [e.retry_at for e in self._entries.values() if e.retry_at is not None]
        return min(times) if times else None

    def postpone(self, paths: list[str], *, behind: str) -> None:
        """Try ``paths`` no earlier than ``behind``'s next attempt (the disk just refused it)."""
        with self._lock:
            first = self._entries.get(behind)
            until = first.retry_at if first is not None else None
            if until is None:
                return
            for path in paths:
                entry = self._entries.get(path)
                if entry is not None and entry.retry_at is not None:
                    entry.retry_at = max(entry.retry_at, until)

    def on_failure(self, wake: Callable[[], None] | None) -> None:
        """Call ``wake`` (from any thread) when a path starts failing with kept bytes."""
        with self._lock:
            self._wake = wake

    # -- what status shows -------------------------------------------------------------------

    def statistics(self, limit: int = REPORT_ROWS, now: float | None = None) -> dict[str, Any]:
        """``status``'s ``writes``: the failing paths, newest first, and the totals."""
        now = time.time() if now is None else now
        with self._lock:
            self._forget_old(now)
            entries = sorted(self._entries.values(), key=lambda e: e.since, reverse=True)
            rows = [_row(e) for e in entries[:limit]]
            kept = sum(len(e.data) for e in entries if e.data is not None)
            return {
                "failing": len(entries),
                "paths": rows,
                "kept_bytes": kept,
                "failures_total": self._failures,
                "recovered_total": self._recoveries,
            }

    def _forget_old(self, now: float) -> None:
        for path in [
            e.path
            for e in self._entries.values()
            if e.data is None and now - e.last > KEEP_JOB_FAILURES_S
        ]:
            del self._entries[path]

    def _trim(self) -> None:
        if len(self._entries) <= MAX_ENTRIES:
            return
        jobs = [e for e in self._entries.values() if e.data is None]
        for entry in sorted(jobs, key=lambda e: e.last)[: len(self._entries) - MAX_ENTRIES]:
            del self._entries[entry.path]


def _row(e: _Entry) -> dict[str, Any]:
    return {
        "path": shown(e.path),
        "error": error_name(e.errno),
        "message": e.message,
        "since": iso_utc(e.since),
        "last_attempt": iso_utc(e.last),
        "attempts": e.attempts,
        "next_retry": iso_utc(e.retry_at) if e.retry_at is not None else None,
        "retried_by": "memd" if e.data is not None else e.by,
        "kept_bytes": len(e.data) if e.data is not None else 0,
    }


WRITES = WriteHealth()


@contextlib.contextmanager
def reporting(path: str | os.PathLike[str], writes: WriteHealth = WRITES) -> Iterator[None]:
    """Report the write done inside to ``writes``: an ``OSError`` is recorded and raised, as
    :class:`memd.errors.WriteFailed` when it is a disk fault (the job fails and is retried)."""
    name = os.fspath(path)
    try:
        yield
    except OSError as exc:
        writes.failed(name, exc)
        if exc.errno in DISK_FAULTS and not isinstance(exc, WriteFailed):
            raise WriteFailed(name, exc) from exc
        raise
    writes.succeeded(name)


async def run_write_retries(
    retry: Callable[[], int],
    writes: WriteHealth = WRITES,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Write the kept bytes again when they are due, until cancelled. ``retry()`` does the
    writing (blocking; :func:`memd.atomic.retry_kept`). Sleeps while nothing is kept: a
    failure wakes it. The last attempt, at exit, is the daemon's (after every flusher)."""
    wake = anyio.Event()
    loop = asyncio.get_running_loop()  # the daemon runs on asyncio (as memd.ipc.reader)

    def woken() -> None:
        wake.set()

    def notify() -> None:  # never blocks: a writer may hold a lock the loop wants
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to wake
            loop.call_soon_threadsafe(woken)

    writes.on_failure(notify)
    task_status.started()
    try:
        while True:
            due = writes.next_due()
            if due is None:
                await wake.wait()
            else:
                with anyio.move_on_after(max(0.0, due - time.time())):
                    await wake.wait()
            wake = anyio.Event()
            await anyio.to_thread.run_sync(retry)
    finally:
        writes.on_failure(None)
