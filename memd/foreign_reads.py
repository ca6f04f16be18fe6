"""The daemon's reads of other tools' files, and the problems ``status`` and ``doctor`` show.

Every file memd reads outside its own areas goes through :mod:`memd_client.foreign_file` (the
one door: no link followed unless the file is the user's own, regular files only, a cap read
on the descriptor, nesting judged before decoding). Here the daemon's readers call it: a
file that cannot be used counts as absent for the decision at hand (the folder is its own
project, a setting keeps its default), and the reason is kept in :data:`PROBLEMS`, which
``status`` lists (``foreign_files``) and ``memdctl doctor`` checks, with the fix. A file
fixed, or gone, leaves the list at its next read.

A module-level registry, like :data:`memd.confined.findings`: one per process, bounded,
thread-safe (readers run in worker threads), each problem logged once per
:attr:`ForeignProblems.log_every_s`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from memd.changes import CHANGES
from memd_client import foreign_file
from memd_client.foreign_file import Links, Unusable
from memd_client.names import escape_name

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Problem:
    """An unusable file, as ``status`` shows it."""

    unusable: Unusable
    first_seen: float
    last_seen: float


class ForeignProblems:
    """The unusable files by path, newest last, at most ``limit``."""

    def __init__(self, limit: int = 64, log_every_s: float = 600.0) -> None:
        self._items: dict[str, Problem] = {}
        self._logged: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self.limit = limit
        self.log_every_s = log_every_s

    def record(self, unusable: Unusable) -> None:
        now, path = time.time(), unusable.path
        with self._lock:
            known = self._items.pop(path, None)
            same = known is not None and known.unusable == unusable
            first = known.first_seen if known is not None and same else now
            self._items[path] = Problem(unusable, first, now)
            while len(self._items) > self.limit:
                del self._items[next(iter(self._items))]
            key = (path, unusable.problem)
            said = self._logged.get(key)
            loud = said is None or now - said >= self.log_every_s
            if loud:
                self._logged.pop(key, None)
                self._logged[key] = now
                while len(self._logged) > 4 * self.limit:
                    del self._logged[next(iter(self._logged))]
        if not same:
            CHANGES.bump()
        if loud:
            log.warning("not using %s", unusable.message())

    def fine(self, path: str) -> None:
        """``path`` was read, or is gone: it leaves the list (a lookup when it was not in it)."""
        if path not in self._items:
            return
        with self._lock:
            gone = self._items.pop(path, None)
        if gone is not None:
            CHANGES.bump()

    def __len__(self) -> int:
        return len(self._items)

    def as_rows(self) -> list[dict[str, object]]:
        """Newest first: the path (escaped: a reply always encodes), what is wrong, the fix."""
        with self._lock:
            items = list(self._items.values())
        return [
            {
                "path": escape_name(p.unusable.path),
                "problem": p.unusable.problem,
                "fix": p.unusable.fix,
                "first_seen": p.first_seen,
                "last_seen": p.last_seen,
            }
            for p in reversed(items)
        ]


PROBLEMS = ForeignProblems()


def noted(found: Any, path: str | os.PathLike[str]) -> Any:
    """``found`` (a door's answer for ``path``), its problem recorded or cleared: ``None``
    for a file that is missing or cannot be used."""
    if isinstance(found, Unusable):
        PROBLEMS.record(found)
        return None
    PROBLEMS.fine(os.fspath(path))
    return found


def noted_as_is(found: Any, path: str | os.PathLike[str]) -> Any:
    """``found``, its problem recorded or cleared as :func:`noted` does, but returned as it
    is (for a caller that shows the problem itself too)."""
    noted(found, path)
    return found


def read_bytes(path: str | os.PathLike[str], cap: int, *, links: Links) -> bytes | None:
    """:func:`memd_client.foreign_file.read_bytes`, a problem recorded (then ``None``)."""
    found: bytes | None = noted(foreign_file.read_bytes(path, cap, links=links), path)
    return found


def read_text(path: str | os.PathLike[str], cap: int, *, links: Links) -> str | None:
    """:func:`memd_client.foreign_file.read_text`, a problem recorded (then ``None``)."""
    found: str | None = noted(foreign_file.read_text(path, cap, links=links), path)
    return found


def read_name(path: str | os.PathLike[str], cap: int, *, links: Links) -> str | None:
    """:func:`memd_client.foreign_file.read_name`, a problem recorded (then ``None``)."""
    found: str | None = noted(foreign_file.read_name(path, cap, links=links), path)
    return found


def read_json_object(
    path: str | os.PathLike[str], cap: int, *, links: Links
) -> dict[str, Any] | None:
    """:func:`memd_client.foreign_file.read_json_object`, a problem recorded (then ``None``)."""
    found: dict[str, Any] | None = noted(
        foreign_file.read_json_object(path, cap, links=links), path
    )
    return found


def read_toml(path: str | os.PathLike[str], cap: int, *, links: Links) -> dict[str, Any] | None:
    """:func:`memd_client.foreign_file.read_toml`, a problem recorded (then ``None``)."""
    found: dict[str, Any] | None = noted(foreign_file.read_toml(path, cap, links=links), path)
    return found
