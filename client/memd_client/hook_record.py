"""The hook's record of failing open (:func:`memd_client.hook.note_failed_open`), read back for
``memdctl doctor`` and ``memdctl top``.

The record sits beside the socket. Its bytes are read as untrusted: at most
:data:`MAX_BYTES`, a regular file only, not through a link, every field checked (a time that
is not a finite number, a count out of range or a line with control characters makes the
record unreadable or is cleaned), so a damaged or planted file shows as such and nothing more.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from memd_client.hook import FAILED_OPEN_FILE, FAILED_OPEN_TITLE
from memd_client.textfmt import ago

MAX_BYTES = 4096
RECENT_S = 24 * 3600.0  # a failure older than this no longer makes a warning
MAX_FIELD = 300
MAX_EPOCH = 1e11  # year 5138: a time past this is not one


@dataclass(frozen=True)
class FailOpenRecord:
    """The hook's last failure to reach memd: when, since when and how often, which event, why."""

    path: Path
    last: float  # epoch seconds
    first: float  # the first failure of this burst
    count: int
    event: str
    reason: str

    def recent(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) - self.last < RECENT_S

    def summary(self, now: float | None = None) -> str:
        """One line: what happened and when, for a person."""
        times = "once" if self.count == 1 else f"{self.count} times since {ago(self.first, now)}"
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.last))
        return (
            f"the hook failed open {times}, last at {at} ({ago(self.last, now)}, {self.event}): "
            f"{self.reason}; nothing was injected then"
        )

    def fix(self) -> str:
        """What to do about it, by its reason."""
        reason = self.reason
        if "busy" in reason:
            return (
                "memd was at ipc.max_connections with every connection at work: "
                "`memdctl status` shows the clients line; find the client holding them, "
                "or raise ipc.max_connections"
            )
        if "not running" in reason:
            return "start memd: `systemctl --user start memd`, or run `memd`"
        if "did not answer" in reason or "timeout" in reason:
            return (
                "memd was too slow to answer: see `memdctl status` and `memdctl logs`; "
                "MEMD_HOOK_TIMEOUT_MS gives the hook longer"
            )
        return "see `memdctl logs` for what memd said at that time"


def record_path(socket: Path) -> Path:
    return socket.parent / FAILED_OPEN_FILE


def read_failed_open(socket: Path) -> FailOpenRecord | str | None:
    """The record beside ``socket``; None when there is none, a sentence when it cannot be
    read or is not the hook's."""
    path = record_path(socket)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return f"{path} is not a regular file"
        data = os.read(fd, MAX_BYTES + 1)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    finally:
        os.close(fd)
    record = parse_record(path, data)
    return record if record is not None else f"{path} is not a record of the hook's"


def parse_record(path: Path, data: bytes) -> FailOpenRecord | None:
    """Pure: the record in ``data``, None when it is not one."""
    if len(data) > MAX_BYTES:
        return None
    lines = data.decode("utf-8", "replace").split("\n")
    if len(lines) < 6 or lines[0] != FAILED_OPEN_TITLE:
        return None
    try:
        last, first, count = float(lines[1]), float(lines[2]), int(lines[3])
    except ValueError:
        return None
    if not (0 < last < MAX_EPOCH and 0 < first < MAX_EPOCH and 0 < count < 10**9):
        return None
    return FailOpenRecord(path, last, min(first, last), count, _clean(lines[4]), _clean(lines[5]))


def _clean(text: str) -> str:
    return "".join(c if c.isprintable() else " " for c in text)[:MAX_FIELD] or "-"
