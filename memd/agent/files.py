"""File operations behind the Read, Edit, Write and Delete tools.

Pure parts (:func:`apply_edit`, :func:`numbered`) decide what the result is; the blocking
parts run in a worker thread (the tools call them through ``anyio.to_thread``). Every
function here acts on a name beneath an :class:`~memd.confined.Area` (a place the policy has
allowed), never on a path: reads open through the confined walk and check what they opened
(a regular file with one link, the user's), writes replace the file atomically inside its
parent's descriptor (:meth:`Area.write`), so a folder swapped for a link at any instant
cannot redirect either; an existing file keeps its mode, a new one is 0600.

Writes have a size limit per file and per run (:class:`WriteBudget`): a memory is a short
note, and an agent that writes megabytes has gone wrong (a dream would then roll itself back
whole).
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from memd.confined import Area, Refused
from memd.errors import WriteFailed

_SNIFF_BYTES = 8192


@dataclass(frozen=True)
class FileLimits:
    """Bounds for the file tools (the lead may move these into the config tree)."""

    read_max_lines: int = 2000
    read_max_line_chars: int = 2000
    read_max_bytes: int = 256 * 1024
    edit_max_bytes: int = 4 * 1024 * 1024
    grep_max_files: int = 5000
    grep_max_file_bytes: int = 2 * 1024 * 1024
    grep_max_results: int = 200
    grep_max_line_chars: int = 500
    glob_max_results: int = 200
    search_max_seconds: float = 5.0  # one Grep or Glob call, hostile patterns included
    # What Write and Edit may leave in one file, and write in all during one run (one
    # make_tools call): a memory is a short note, MEMORY.md an index of ~25 KB.
    write_max_file_bytes: int = 256 * 1024
    write_max_run_bytes: int = 4 * 1024 * 1024


@dataclass(frozen=True)
class Problem:
    """An operation that cannot be done; ``message`` tells the model why and what to do."""

    message: str
    denied: bool = False  # refused by what the entry is (a link, a hard link), not a fault


@dataclass(frozen=True)
class Edited:
    replacements: int
    created: bool = False


# ---------------------------------------------------------------------------------------------
# Pure


def apply_edit(content: str, old: str, new: str, *, replace_all: bool) -> str | Problem:
    """Replace ``old`` by ``new`` in ``content``: exactly once, or every time with
    ``replace_all``. Refuses a missing or ambiguous ``old`` with a message the model can act
    on."""
    if old == new:
        return Problem("old_string and new_string are the same; there is nothing to change")
    if not old:
        return Problem("old_string is empty; copy the exact text to replace from the file")
    count = content.count(old)
    if count == 0:
        return Problem(
            "old_string was not found in the file. Read the file again and copy the text "
            "exactly, including whitespace and line breaks"
        )
    if count > 1 and not replace_all:
        return Problem(
            f"old_string occurs {count} times in the file. Include more of the surrounding "
            "text so it matches once, or set replace_all to true to change every occurrence"
        )
    return content.replace(old, new) if replace_all else content.replace(old, new, 1)


def numbered(number: int, text: str, *, max_chars: int) -> str:
    """One output line in the style of ``cat -n``, cut when very long."""
    if len(text) > max_chars:
        text = text[:max_chars] + f" [line cut at {max_chars} characters]"
    return f"{number:>6}\t{text}"


# ---------------------------------------------------------------------------------------------
# The write budget


class WriteBudget:
    """Bytes one run may still write, and the most one file may hold (thread-safe)."""

    def __init__(self, limits: FileLimits) -> None:
        self.max_file = limits.write_max_file_bytes
        self.max_run = limits.write_max_run_bytes
        self.spent = 0
        self._lock = threading.Lock()

    def take(self, where: str, size: int) -> Problem | None:
        """Count ``size`` bytes written to ``where``, or say why they may not be."""
        if size > self.max_file:
            return Problem(
                f"{where} would hold {size} bytes; a file written here may hold at most "
                f"{self.max_file} bytes. Keep memories short: summarize, or split the content "
                "into several topic files"
            )
        with self._lock:
            if self.spent + size > self.max_run:
                return Problem(
                    f"not written: this run has written {self.spent} bytes and may write at "
                    f"most {self.max_run} in all; {where} ({size} bytes) would pass that. "
                    "Finish with the files already written"
                )
            self.spent += size
        return None

    def give_back(self, size: int) -> None:
        """Return ``size`` bytes taken for a write that did not happen."""
        with self._lock:
            self.spent = max(0, self.spent - size)


# ---------------------------------------------------------------------------------------------
# Blocking I/O beneath an area (run in a worker thread)


def open_problem(area: Area, relative: str, exc: OSError | ValueError) -> Problem:
    """What an open beneath ``area`` that failed means, for the model."""
    where = area.path(relative) if relative else area.root
    if isinstance(exc, Refused):
        return Problem(
            f"denied: {where} is not a regular file memd reads or writes ({exc.kind}); links, "
            "hard-linked files and special files in the area are never followed, read or "
            "written",
            denied=True,
        )
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        return Problem(f"{where} does not exist")
    if isinstance(exc, ValueError):
        return Problem(f"denied: {relative!r} is not a plain name beneath the area", denied=True)
    return Problem(f"cannot open {where}: {exc.strerror or exc}")


def is_dir(area: Area, relative: str) -> bool:
    """Whether ``relative`` is a folder of its own (a link to one is not)."""
    if not relative:
        return True
    info = area.lstat(relative)
    return info is not None and stat.S_ISDIR(info.st_mode)


def open_text(area: Area, relative: str) -> BinaryIO | Problem:
    """A handle on the regular, one-link file ``relative``; never blocks on a FIFO."""
    if is_dir(area, relative):
        where = area.path(relative) if relative else area.root
        return Problem(f"{where} is a directory; list it with Glob or Shell (ls)")
    try:
        fd = area.open_file(relative)
    except (OSError, ValueError) as exc:
        return open_problem(area, relative, exc)
    return os.fdopen(fd, "rb")


def _lines(handle: BinaryIO, max_bytes: int) -> Iterator[bytes]:
    """Lines without their newline; a line longer than ``max_bytes`` is cut, in bounded
    memory."""
    while True:
        chunk = handle.readline(max_bytes)
        if not chunk:
            return
        if not chunk.endswith(b"\n"):
            while (rest := handle.readline(max_bytes)) and not rest.endswith(b"\n"):
                pass
        yield chunk.rstrip(b"\n").rstrip(b"\r")


def read_window(
    area: Area, relative: str, *, offset: int, limit: int, limits: FileLimits
) -> str | Problem:
    """Lines ``offset``… (1-based, at most ``limit``) of a text file, numbered."""
    handle = open_text(area, relative)
    if isinstance(handle, Problem):
        return handle
    with handle:
        if b"\0" in handle.read(_SNIFF_BYTES):
            where = area.path(relative)
            return Problem(f"{where} looks like a binary file; it cannot be shown as text")
        handle.seek(0)
        shown: list[str] = []
        size = 0
        number = 0
        note = ""
        for number, raw in enumerate(_lines(handle, limits.read_max_line_chars * 4), 1):
            if number < offset:
                continue
            if len(shown) >= limit or size > limits.read_max_bytes:
                note = f"[more lines follow; continue with offset={number}]"
                break
            text = raw.decode("utf-8", errors="replace")
            shown.append(numbered(number, text, max_chars=limits.read_max_line_chars))
            size += len(shown[-1]) + 1
    if number == 0:
        return "(the file is empty)"
    if not shown:
        return f"(the file has {number} lines; offset {offset} is past the end)"
    return "\n".join([*shown, note] if note else shown)


def read_text(area: Area, relative: str, *, max_bytes: int) -> str | Problem | None:
    """The whole file as UTF-8 text; ``None`` if there is nothing by that name."""
    if area.lstat(relative) is None:
        return None
    handle = open_text(area, relative)
    if isinstance(handle, Problem):
        return handle
    with handle:
        data = handle.read(max_bytes + 1)
    where = area.path(relative)
    if len(data) > max_bytes:
        return Problem(f"{where} is larger than {max_bytes} bytes; it cannot be edited here")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return Problem(f"{where} is not UTF-8 text; it cannot be edited here")


def edit_file(
    area: Area,
    relative: str,
    old: str,
    new: str,
    *,
    replace_all: bool,
    max_bytes: int,
    budget: WriteBudget,
) -> Edited | Problem:
    """Apply one exact replacement to ``relative`` (an empty ``old`` creates a missing file)."""
    current = read_text(area, relative, max_bytes=max_bytes)
    if isinstance(current, Problem):
        return current
    where = area.path(relative)
    if current is None or (not old and not current):
        if old:
            return Problem(f"{where} does not exist; to create it, pass an empty old_string")
        if not is_dir(area, os.path.dirname(relative)):
            return Problem(f"the directory of {where} does not exist")
        problem = write_bytes(area, relative, new.encode("utf-8", errors="replace"), budget)
        return problem or Edited(1, created=current is None)
    changed = apply_edit(current, old, new, replace_all=replace_all)
    if isinstance(changed, Problem):
        return changed
    problem = write_bytes(area, relative, changed.encode("utf-8", errors="replace"), budget)
    return problem or Edited(current.count(old) if replace_all else 1)


def write_bytes(area: Area, relative: str, data: bytes, budget: WriteBudget) -> Problem | None:
    """Replace ``relative`` with ``data`` through the confined writer, within ``budget``.

    Folders on the way are made (never through a link); an existing link, hard-linked file
    or special file is refused, never written through or replaced."""
    where = str(area.path(relative))
    problem = budget.take(where, len(data))
    if problem is not None:
        return problem
    try:
        area.write(relative, data)
    except (OSError, ValueError) as exc:
        budget.give_back(len(data))
        if isinstance(exc, WriteFailed):
            raise  # the disk refuses: the run ends failed (memd.agent.runner)
        if isinstance(exc, (Refused, ValueError)):
            return open_problem(area, relative, exc)
        return Problem(f"could not write {where}: {exc.strerror or exc}")
    return None


def delete_file(area: Area, relative: str) -> Problem | None:
    """Remove a regular file (never a link's target, never a directory)."""
    info = area.lstat(relative)
    where = area.path(relative)
    if info is None:
        return Problem(f"{where} does not exist")
    if not stat.S_ISREG(info.st_mode):
        return Problem(f"{where} is not a regular file; only regular files may be deleted")
    try:
        area.unlink(relative)
    except (OSError, ValueError) as exc:
        if isinstance(exc, WriteFailed):
            raise  # the disk refuses (or the run's journal): the run ends failed
        if isinstance(exc, (Refused, ValueError)):
            return open_problem(area, relative, exc)
        return Problem(f"could not delete {where}: {exc.strerror or exc}")
    return None
