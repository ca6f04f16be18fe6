"""Logging for the ``memd`` process: configured once, at the entry point, to stderr.

The service manager owns the destination: journald under systemd (``JOURNAL_STREAM`` names
our stderr), the plist's ``StandardErrorPath`` under launchd, whatever the shell gave
otherwise. :func:`log_destination` tells ``memdctl status`` and ``memdctl logs`` which.

A log line the destination refuses (the log file's disk is full) is a failed write like any
other (:mod:`memd.writes`): ``status`` names the log, the error and since when, instead of a
traceback per line on the same failing stream; the next line written clears it.

Library loggers are chatty at INFO (``httpx`` logs every request, ``watchfiles`` every
batch of changes): they stay at WARNING unless ``-v`` asks for more (:func:`library_level`).
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections.abc import Mapping
from typing import TextIO

from memd.writes import WRITES

# Loggers of libraries memd uses that log routine events at INFO or DEBUG.
LIBRARY_LOGGERS = ("httpx", "httpcore", "watchfiles", "anthropic", "asyncio", "urllib3")
SYSTEMD_UNIT = "memd"


def memd_level(verbose: int) -> int:
    """memd's own loggers: INFO by default, DEBUG from ``-v``."""
    return logging.DEBUG if verbose >= 1 else logging.INFO


def library_level(verbose: int) -> int:
    """Libraries: WARNING by default, INFO with ``-v``, DEBUG with ``-vv``."""
    return {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)


def configure_logging(
    verbose: int, stream: TextIO | None = None, env: Mapping[str, str] | None = None
) -> None:
    env = os.environ if env is None else env
    stream = sys.stderr if stream is None else stream
    journald = log_destination(env, stream)["kind"] == "journald"
    # journald stamps each line itself; a file or a terminal gets the time from us.
    fmt = "%(levelname)s %(name)s: %(message)s"
    handler = ReportingHandler(stream, log_name(env, stream))
    handler.setFormatter(logging.Formatter(fmt if journald else "%(asctime)s " + fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(memd_level(verbose))
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(library_level(verbose))


class ReportingHandler(logging.StreamHandler[TextIO]):
    """A stream handler whose failed writes are reported to :data:`memd.writes.WRITES`
    under ``name`` (and cleared by the next line that gets through)."""

    def __init__(self, stream: TextIO, name: str) -> None:
        super().__init__(stream)
        self.target = name
        self._failures = 0
        self._failing = False

    def emit(self, record: logging.LogRecord) -> None:
        before = self._failures
        super().emit(record)
        if self._failing and self._failures == before:
            self._failing = False
            WRITES.succeeded(self.target)

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            super().handleError(record)
            return
        self._failures += 1
        self._failing = True
        WRITES.failed(self.target, exc, by="the next log line")


def log_name(env: Mapping[str, str], stream: TextIO) -> str:
    """What a failed log write names: the log file, or where stderr goes."""
    where = log_destination(env, stream)
    if where["kind"] == "journald":
        return "the journal (memd's stderr)"
    return where["path"]


def log_destination(env: Mapping[str, str], stream: TextIO | None = None) -> dict[str, str]:
    """Where this process's stderr goes: ``{"kind": "journald", "unit": …}``,
    ``{"kind": "file", "path": …}`` or ``{"kind": "stderr", "path": description}``."""
    stream = sys.stderr if stream is None else stream
    try:
        fd = stream.fileno()
        info = os.fstat(fd)
    except (AttributeError, OSError, ValueError):
        return {"kind": "stderr", "path": "not a file"}
    journal = env.get("JOURNAL_STREAM", "")
    if journal == f"{info.st_dev}:{info.st_ino}":
        return {"kind": "journald", "unit": SYSTEMD_UNIT}
    if stat.S_ISREG(info.st_mode):
        path = _path_of(fd)
        if path:
            return {"kind": "file", "path": path}
    if os.isatty(fd):
        return {"kind": "stderr", "path": "the terminal memd runs in"}
    return {"kind": "stderr", "path": "the stderr of the process that started memd"}


def _path_of(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
    try:
        import fcntl

        raw = fcntl.fcntl(fd, getattr(fcntl, "F_GETPATH", 50), b"\0" * 1024)
        return raw.split(b"\0", 1)[0].decode() or None
    except (OSError, ImportError, AttributeError):
        return None
