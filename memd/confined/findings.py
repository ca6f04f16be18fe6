"""Refused entries: the error a reader gets, and the registry ``status`` and ``doctor`` show."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass

from memd.changes import CHANGES

log = logging.getLogger(__name__)


class Refused(OSError):
    """Something beneath an area that memd does not read, enter or write; ``kind`` says what."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(errno.EPERM, f"{kind}: not read or written by memd", path)
        self.kind = kind


@dataclass(frozen=True)
class Finding:
    """A refused entry, as ``status`` and ``doctor`` show it."""

    path: str
    kind: str
    first_seen: float
    last_seen: float


class Findings:
    """Refused entries by path, newest last, at most ``limit``.

    Logged at most once per path and kind every ``log_every_s``: a folder that someone flips
    between a link and a folder many times a second is one line per kind, not one per read.
    Thread-safe. A path that is fine again drops out when :meth:`clear` is told so.
    """

    def __init__(self, limit: int = 256, log_every_s: float = 600.0) -> None:
        self._items: dict[str, Finding] = {}
        self._logged: dict[tuple[str, str], float] = {}  # (path, kind) → when, oldest first
        self._lock = threading.Lock()
        self.limit = limit
        self.log_every_s = log_every_s

    def record(self, path: str, kind: str) -> None:
        now = time.time()
        with self._lock:
            known = self._items.pop(path, None)
            first = known.first_seen if known is not None and known.kind == kind else now
            self._items[path] = Finding(path, kind, first, now)
            while len(self._items) > self.limit:
                del self._items[next(iter(self._items))]
            said = self._logged.pop((path, kind), None)
            loud = said is None or now - said >= self.log_every_s
            self._logged[(path, kind)] = now if said is None or loud else said
            while len(self._logged) > 4 * self.limit:
                del self._logged[next(iter(self._logged))]
        CHANGES.bump()  # ``refused`` in ``status``, as a clear and a removal below
        if loud:
            log.warning(
                "skipped %s: %s (memd reads no links, hard links or special files)",
                shown(path),
                kind,
            )

    def clear(self, path: str) -> None:
        with self._lock:
            if self._items.pop(path, None) is None:
                return
        CHANGES.bump()

    def gone(self, folder: str, names: Collection[str]) -> None:
        """``folder`` was listed and holds only ``names``: entries of it that are not there
        any more leave the findings (someone removed them)."""
        with self._lock:
            gone = [p for p in self._items if p.rpartition("/")[0] == folder]
            gone = [p for p in gone if p.rpartition("/")[2] not in names]
            for path in gone:
                del self._items[path]
        if gone:
            CHANGES.bump()

    def fine(self, path: str) -> None:
        """``path`` was found readable: it leaves the findings (someone fixed it). Costs one
        dict lookup when it was never in them."""
        if path in self._items:
            self.clear(path)

    def items(self) -> list[Finding]:
        with self._lock:
            return list(self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def as_rows(self) -> list[dict[str, object]]:
        """The findings newest first, as ``status`` and ``doctor`` show them: the path as
        text (bytes that are not UTF-8 escaped, so a reply always encodes)."""
        return [
            {
                "path": shown(f.path),
                "kind": f.kind,
                "first_seen": f.first_seen,
                "last_seen": f.last_seen,
            }
            for f in reversed(self.items())
        ]


findings = Findings()


def shown(path: str) -> str:
    """A path from the disk as text any encoder takes (undecodable bytes as ``\\xNN``)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")
