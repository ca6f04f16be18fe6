"""The real daemon, killed with SIGKILL just before one of its archive's writes.

``python -m tests.archive_steps LABELS AT[:FAULT] PROJECT STATE -- <memd's arguments>`` runs
``memd.daemon.main`` in this process under a ``sys.audit`` hook that counts each write the
archive makes: beneath the project folder ``PROJECT`` (the memory dir, the archive beside
it: a file opened for writing, a rename, a folder made, a file removed; by name beneath a
folder's descriptor too, which no one else in a daemon without a model writes) and its
record in ``STATE`` (``archive.json`` and its temp files). Each is appended to the file
``LABELS`` as it comes; just before the ``AT``-th (0: never) the process kills itself, or,
with ``:ENOSPC`` or ``:EROFS``, the state disk (a :func:`tests.disk_support.faulty_disk` on
``STATE``) fails from then on. Used by ``tests/archive_kill.py`` and
``tests/test_archive_disk.py``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

# memd.memory.archive.ARCHIVE_FILE (not imported: memd's own start imports it, after its
# signal handlers; tests/test_archive_kill.py checks they agree)
ARCHIVE_FILE = "archive.json"
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_DIR_FD_AT = {"os.rename": 2, "os.mkdir": 2, "os.remove": 1, "os.rmdir": 1}


class Steps:
    def __init__(self, labels: str, at: str, project: str, state: str) -> None:
        self.labels = open(labels, "a", buffering=1)  # noqa: SIM115 - open for the process
        number, _, self.fault = at.partition(":")
        self.at = int(number)
        self.project = os.path.join(os.path.realpath(project), "")
        self.state = os.path.realpath(state)
        self.count = 0
        self.lock = threading.Lock()
        self.acting = threading.local()

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if getattr(self.acting, "on", False):
            return  # the fault's own writes are no steps
        where = self.where(event, args)
        if where is None:
            return
        with self.lock:
            self.count += 1
            self.labels.write(f"{event} {where}\n")
            if self.count == self.at:
                self.act()

    def act(self) -> None:
        if not self.fault:
            os.kill(os.getpid(), signal.SIGKILL)
        from pathlib import Path

        from tests.disk_support import fault_here

        self.acting.on = True
        try:
            fault_here(Path(self.state), self.fault)
        finally:
            self.acting.on = False

    def where(self, event: str, args: tuple[Any, ...]) -> str | None:
        if event == "open":
            path, _, flags = args
            if not isinstance(flags, int) or flags < 0 or not flags & _WRITING:
                return None
            dir_fd = None
        elif event in _DIR_FD_AT:
            path, dir_fd = args[0], args[_DIR_FD_AT[event]]
        else:
            return None
        if not isinstance(path, str | bytes):
            return None
        text = os.fsdecode(path)
        if isinstance(dir_fd, int) and dir_fd >= 0:
            try:
                text = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), text)
            except OSError:
                return None
        if not os.path.isabs(text):
            return f"<beneath a folder>/{text}"
        if text.startswith(self.project):
            return text
        parent, name = os.path.split(text)
        if parent == self.state and name.lstrip(".").startswith(ARCHIVE_FILE):
            return text
        return None


def main() -> None:
    cut = sys.argv.index("--")
    labels, at, project, state = sys.argv[1:cut]
    steps = Steps(labels, at, project, state)
    sys.addaudithook(steps.hook)
    from memd.daemon.main import main as memd

    sys.exit(memd(sys.argv[cut + 1 :]))


if __name__ == "__main__":
    main()
