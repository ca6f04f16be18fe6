"""The real Claude Code CLI in a terminal (a pty), for what only an attended session does
(issue 38: idle compaction), and a wall clock that can be moved for it alone.

:class:`Terminal` runs ``claude`` interactively and keeps what it prints; :func:`trust`
answers the first-run questions of a folder and an API key the way a user does. Claude
Code compacts while idle 54 minutes after its last request; :func:`libfaketime` finds
Debian's ``libfaketime`` (``apt-get install faketime``) and :func:`moved_clock_env` preloads
it in the CLI's environment only, its wall clock offset by the seconds in a file the test
rewrites (read at every clock call), the monotonic clock left alone (Bun hangs on a faked
one, and its timers run on it).
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import select
import struct
import subprocess
import termios
import threading
from collections.abc import Mapping
from pathlib import Path

from tests.claude_cli import API_KEY

# Debian's multiarch folders, then a build from source; the thread-safe variant (Bun runs
# threads).
LIBFAKETIME_GLOBS = (
    "/usr/lib/*/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
)
NO_LIBFAKETIME = (
    "libfaketime is not installed (libfaketimeMT.so.1 in none of {where}): Claude Code "
    "compacts while idle only 54 minutes after its last request, and the test moves the CLI's "
    "wall clock with it; on Debian, `apt-get install faketime` (.ci/run does)"
)


def libfaketime() -> Path | None:
    """The preload library of libfaketime, or ``None`` when it is not installed."""
    for pattern in LIBFAKETIME_GLOBS:
        for found in sorted(glob.glob(pattern)):
            return Path(found)
    return None


def moved_clock_env(env: Mapping[str, str], library: Path, clock: Path) -> dict[str, str]:
    """``env`` with libfaketime preloaded: the wall clock moved by the offset in ``clock``
    (``+0`` to start with; write ``+N`` to move it ``N`` seconds on, at once)."""
    clock.write_text("+0\n")
    return {
        **env,
        "LD_PRELOAD": str(library),
        "FAKETIME_TIMESTAMP_FILE": str(clock),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def trust(home: Path, project: Path) -> None:
    """The folder trusted and the API key approved, as answering the CLI's questions does."""
    state = home / ".claude.json"
    data = json.loads(state.read_text())
    data.setdefault("projects", {}).setdefault(str(project), {})["hasTrustDialogAccepted"] = True
    data["customApiKeyResponses"] = {"approved": [API_KEY[-20:]], "rejected": []}
    state.write_text(json.dumps(data))


class Terminal:
    """``argv`` in a 120x40 pty of its own session; what it prints is kept in :attr:`out`."""

    def __init__(self, argv: list[str], cwd: Path, env: Mapping[str, str]) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**env, "TERM": "xterm-256color"},
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        self.out = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            ready, _, _ = select.select([self.master], [], [], 0.5)
            if not ready:
                if self.proc.poll() is not None:
                    return
                continue
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.out += chunk

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def close(self) -> None:
        """The CLI ended (SIGTERM, then SIGKILL after 10 s), the pty closed."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(2)
        os.close(self.master)
