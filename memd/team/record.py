"""What the last sync of a project agreed on, and the lock that keeps syncs apart.

One folder per synced project under the state dir (``team/<project>/`` or ``sync/<project>/``)
holds the private repository (:mod:`memd.team.store`), ``record.json`` and ``lock``.

The record is written (atomically, :func:`memd.atomic.write_atomic`) only after the remote
took the sync's commit and this machine's files were changed: until then the previous record
stands, and a sync run again merges from it to the same result. ``base`` is per path, not a
commit: a file whose write here was refused (an agent changed it meanwhile) keeps the base
it had, so the next sync merges that change instead of overwriting it.

The record is memd's own file, but it is read as if it were not: anything malformed counts as
no record (a first sync, which loses nothing: files that differ become conflicts, both kept).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memd.atomic import write_atomic
from memd.team.local import Ident

log = logging.getLogger(__name__)

RECORD = "record.json"
LOCK = "lock"
STORE = "store.git"
MAX_RECORD_BYTES = 64 * 1024 * 1024
LOCK_WAIT_S = 30.0


@dataclass(frozen=True)
class Passing:
    """A remote file not taken here: its object id, the local one when it was refused
    (``None``: no file here), and why."""

    remote: str
    local: str | None
    reason: str
    kind: str  # "refused" or "quarantined"


@dataclass
class Record:
    """See the module docstring."""

    tip: str | None = None
    base: dict[str, str] = field(default_factory=dict)
    known: dict[str, tuple[Ident, str]] = field(default_factory=dict)
    passing: dict[str, Passing] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)
    refused: list[tuple[str, str]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)  # url, ref, mode, repo, auto …
    last: dict[str, Any] = field(default_factory=dict)  # the last sync's outcome

    def as_json(self) -> bytes:
        data = {
            "version": 1,
            "tip": self.tip,
            "base": self.base,
            "known": {p: [*ident, oid] for p, (ident, oid) in self.known.items()},
            "passing": {p: vars(x) for p, x in self.passing.items()},
            "held": self.held,
            "refused": [list(r) for r in self.refused],
            "settings": self.settings,
            "last": self.last,
        }
        return json.dumps(data, ensure_ascii=False, indent=0).encode("utf-8", "surrogateescape")


def load(folder: Path) -> Record:
    """The record in ``folder``; an empty one when there is none or it is unreadable."""
    try:
        with open(folder / RECORD, "rb") as handle:
            raw = handle.read(MAX_RECORD_BYTES + 1)
    except FileNotFoundError:
        return Record()
    except OSError as exc:
        log.warning("team: cannot read %s (%s); syncing as if for the first time", folder, exc)
        return Record()
    try:
        return _parsed(json.loads(raw.decode("utf-8", "surrogateescape")))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("team: %s is malformed (%s); syncing as if for the first time", folder, exc)
        return Record()


def _parsed(data: dict[str, Any]) -> Record:
    if data.get("version") != 1:
        raise ValueError("unknown version")
    known = {
        str(p): ((int(v[0]), int(v[1]), int(v[2])), str(v[3])) for p, v in data["known"].items()
    }
    passing = {
        str(p): Passing(str(x["remote"]), x["local"], str(x["reason"]), str(x["kind"]))
        for p, x in data["passing"].items()
    }
    tip = data["tip"]
    return Record(
        tip=str(tip) if tip else None,
        base={str(p): str(o) for p, o in data["base"].items()},
        known=known,
        passing=passing,
        held={str(p): str(r) for p, r in data["held"].items()},
        refused=[(str(n), str(r)) for n, r in data["refused"]],
        settings=dict(data["settings"]),
        last=dict(data["last"]),
    )


def save(folder: Path, record: Record) -> None:
    """Write the record (raises :class:`memd.errors.WriteFailed` when the disk refuses)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(folder / RECORD, record.as_json(), mode=0o600)


class Busy(Exception):
    """Another sync of the project holds its lock."""


@contextmanager
def locked(folder: Path, *, wait_s: float = LOCK_WAIT_S) -> Iterator[int]:
    """Hold the project's sync lock (``flock``; waits up to ``wait_s``, then :class:`Busy`);
    yields its descriptor. A sync in another thread, process or daemon of the same user
    waits for this one; the git processes of a sync inherit the descriptor, so a sync killed
    while git runs keeps the lock held until that git has ended too."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                if time.monotonic() >= deadline:
                    raise Busy("another sync of this project is running") from None
                time.sleep(0.05)
        yield fd
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
