"""A dream's steps, one at a time: a world to dream in, and a hook on every write.

:class:`Steps` is a ``sys.audit`` hook (installed once per process, idle until armed) that
counts each operation that writes beneath the folders it watches (an open for writing, a
rename, a folder made or removed, a file removed, a time set) and calls an
action just before the one it is armed at: fill the state disk, make it read-only, raise the
disk's error, or SIGKILL the process. Files and folders opened by name beneath a folder's
descriptor (a memory dir's :class:`~memd.confined.Area`) name no folder in their open: they
count when ``relative`` is set.

The world: a memory dir of three topic files and an index, and a model that merges one note
into another (a Write, a Delete naming the merge), dates a third (an Edit), adds a note in a
new folder, writes a new index, and leaves a private span for the scrub to take out.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from memd.dream.lock import FLOCK_NAME, LOCK_NAME
from memd.llm.backends import Protocol
from memd.llm.client import LLM
from memd.testing import loopback_replies as replies
from tests.dream_support import make_service

PRIOR_NS = 1_700_000_000_987_654_321
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_PATH_EVENTS = {"os.rename": 2, "os.mkdir": 2, "os.remove": 1, "os.rmdir": 1, "os.utime": 3}


class Steps:
    """Counts writes beneath ``roots`` and acts before the ``at``-th (see the module)."""

    def __init__(self) -> None:
        self.roots: tuple[str, ...] = ()
        self.relative = False
        self.count = 0
        self.labels: list[str] = []
        self.at = 0
        self.action: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._busy = threading.local()

    def arm(
        self,
        roots: list[Path],
        *,
        at: int = 0,
        action: Callable[[], None] | None = None,
        relative: bool = False,
    ) -> None:
        with self._lock:
            named = {os.path.abspath(r) for r in roots} | {os.path.realpath(r) for r in roots}
            self.roots = tuple(os.path.join(r, "") for r in named)
            self.relative, self.count, self.labels = relative, 0, []
            self.at, self.action = at, action

    def disarm(self) -> None:
        with self._lock:
            self.roots, self.action = (), None

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.roots or getattr(self._busy, "on", False):
            return
        where = self._where(event, args)
        if where is None:
            return
        with self._lock:
            self.count += 1
            self.labels.append(f"{event} {where}")
            fire = self.count == self.at and self.action is not None
            action = self.action
        if fire and action is not None:
            self._busy.on = True  # the action's own writes are not steps
            try:
                action()
            finally:
                self._busy.on = False

    def _where(self, event: str, args: tuple[Any, ...]) -> str | None:
        if event == "open":  # by name: a descriptor wrapped (fdopen) was counted when opened
            path, _, flags = args
            if not isinstance(flags, int) or flags < 0 or not flags & _WRITING:
                return None
        elif event in _PATH_EVENTS:
            path = args[0]
            dir_fd = args[_PATH_EVENTS[event]] if event != "os.utime" else args[3]
            if isinstance(dir_fd, int) and dir_fd >= 0:
                path = os.path.join(_fd_path(dir_fd) or "?", os.fsdecode(path))
        else:
            return None
        if not isinstance(path, (str, bytes, os.PathLike)):
            return None
        text = os.fsdecode(path)
        if not os.path.isabs(text):
            return f"<beneath a folder>/{text}" if self.relative else None
        for root in self.roots:
            if text.startswith(root) or text == root[:-1]:
                return text
        return None


def _fd_path(fd: object) -> str | None:
    if not isinstance(fd, int) or fd < 0:
        return None
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


STEPS = Steps()
sys.addaudithook(STEPS.hook)


def note(name: str, body: str) -> str:
    return f"---\nname: {name}\ndescription: {name} notes\ntype: project\n---\n{body}\n"


MERGED = note("a", "alpha\n- and the only copy of this <private>a token</private>")
NEW_INDEX = "- [a](a.md) — a\n- [c](c.md) — c\n- [new](notes/new.md) — new\n"


def prepare(memory: Path) -> None:
    """The memory dir before the dream (made)."""
    memory.mkdir(parents=True)
    (memory / "MEMORY.md").write_text(
        "- [a](a.md) — a\n- [merged_494](merged_494.md) — m\n- [c](c.md) — c\n"
    )
    (memory / "a.md").write_text(note("a", "alpha"))
    (memory / "merged_494.md").write_text(note("merged_494", "the only copy of this"))
    (memory / "c.md").write_text(note("c", "gamma, seen yesterday"))
    lock = memory / LOCK_NAME
    lock.write_text("")
    os.utime(lock, ns=(PRIOR_NS, PRIOR_NS))


def tree(memory: Path) -> dict[str, str]:
    """Relative path → SHA-256 of every file (hidden ones too), the lock files left out;
    folders as ``/``."""
    out = {}
    for path in sorted(memory.rglob("*")):
        relative = str(path.relative_to(memory))
        if path.is_dir():
            out[relative] = "/"
        elif path.name not in (LOCK_NAME, FLOCK_NAME):
            out[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def lock_rolled_back(memory: Path) -> bool:
    lock = memory / LOCK_NAME
    return lock.stat().st_mtime_ns == PRIOR_NS and lock.read_bytes() == b""


def dream_script() -> replies.Message:
    """The model's one turn of changes (its next answer ends the run)."""
    return replies.tool_uses(
        [
            ("Write", {"file_path": "notes/new.md", "content": note("new", "a new note")}),
            (
                "Edit",
                {"file_path": "c.md", "old_string": "yesterday", "new_string": "on 2026-11-21"},
            ),
            ("Write", {"file_path": "a.md", "content": MERGED}),
            ("Delete", {"file_path": "merged_494.md", "merged_into": "a.md"}),
            ("Write", {"file_path": "MEMORY.md", "content": NEW_INDEX}),
        ]
    )


def one_answer() -> replies.Message:
    """The same changes asked for in one answer (a dream on a ``whole`` route): the merge,
    the date, the index; no new note (one answer makes none)."""
    ops = [
        {"op": "merge", "files": ["a.md", "merged_494.md"], "text": MERGED},
        {"op": "edit", "file": "c.md", "old": "yesterday", "new": "on 2026-11-21"},
        {"op": "index", "lines": ["- [a](a.md) — a", "- [c](c.md) — c"]},
    ]
    return replies.text(json.dumps({"summary": "Merged and dated.", "operations": ops}))


def handler(
    on_second: Callable[[], None] | None = None, protocol: Protocol = "tools"
) -> Callable[[Any], replies.Reply]:
    """The loopback's answers: the changes, then the end (``on_second`` runs before it)."""
    calls: list[int] = []

    def answer(body: Any) -> replies.Reply:
        calls.append(1)
        if protocol == "whole":
            return one_answer()
        if len(calls) == 1:
            return dream_script()
        if on_second is not None:
            on_second()
        return replies.text("Merged merged_494.md into a.md, dated c.md, added a note.")

    return answer


def memory_of(root: Path) -> Path:
    return root / "projects" / "proj" / "memory"


async def run_once(root: Path, llm: LLM, protocol: Protocol = "tools") -> dict[str, Any]:
    """One forced dream by a fresh service over ``root``; its run as ``status`` shows it, or
    (state ``not started``) the gate that kept it from starting."""
    service = make_service(root, llm, protocol=protocol)
    async with anyio.create_task_group() as tg:
        await tg.start(service.run)
        with anyio.fail_after(60):
            answer = await service.check(cwd=None, project="proj", force=True)
            running = service.find_dir(memory_of(root)).running
            if running is not None:
                await running.done.wait()
        tg.cancel_scope.cancel()
    if not answer["started"]:
        verdict, holder = answer["verdict"], service.row(memory_of(root))["lock"]["holder"]
        return {
            "state": "not started",
            "reason": verdict["reason"],
            "gate": verdict["gate"],
            "lock_holder": holder,
            "run_id": None,
        }
    last: dict[str, Any] = service.row(memory_of(root))["last_runs"][0]
    return last


async def restart(root: Path, llm: LLM) -> dict[str, Any]:
    """The dream service's start path (it undoes what a run left unsettled); the last run."""
    service = make_service(root, llm)
    async with anyio.create_task_group() as tg:
        await tg.start(service.run)
        tg.cancel_scope.cancel()
    runs = service.row(memory_of(root))["last_runs"]
    return runs[0] if runs else {}
