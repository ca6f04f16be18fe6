"""File operations behind the Read, Edit, Write and Delete tools.

Pure parts (:func:`apply_edit`, :func:`numbered`) decide what the result is; the blocking
parts run in a worker thread (the tools call them through ``anyio.to_thread``). Every function
here acts on a path the policy has already resolved and allowed, and checks again at the last
moment that it is not a symbolic link or a file with other hard links, so a swap between the
check and the write cannot redirect it. Writes are atomic: a unique temporary file in the
same directory, fsync, ``os.replace``; an existing file keeps its mode.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from memd import atomic

NEW_FILE_MODE = 0o600  # notes and memories are private to the user
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


@dataclass(frozen=True)
class Problem:
    """An operation that cannot be done; ``message`` tells the model why and what to do."""

    message: str


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
# Blocking I/O (run in a worker thread)


def open_regular(path: str) -> BinaryIO | Problem:
    """Open for reading without following a final link and without blocking on a FIFO."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return Problem(f"{path} does not exist")
    except OSError as exc:
        return Problem(f"cannot open {path}: {exc.strerror}")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return Problem(f"{path} is not a regular file")
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


def read_window(path: str, *, offset: int, limit: int, limits: FileLimits) -> str | Problem:
    """Lines ``offset``… (1-based, at most ``limit``) of a text file, numbered."""
    handle = open_regular(path)
    if isinstance(handle, Problem):
        return handle
    with handle:
        if b"\0" in handle.read(_SNIFF_BYTES):
            return Problem(f"{path} looks like a binary file; it cannot be shown as text")
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


def read_text(path: str, *, max_bytes: int) -> str | Problem | None:
    """The whole file as UTF-8 text; ``None`` if it does not exist."""
    if not os.path.lexists(path):
        return None
    handle = open_regular(path)
    if isinstance(handle, Problem):
        return handle
    with handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        return Problem(f"{path} is larger than {max_bytes} bytes; it cannot be edited here")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return Problem(f"{path} is not UTF-8 text; it cannot be edited here")


def edit_file(
    path: str, old: str, new: str, *, replace_all: bool, max_bytes: int
) -> Edited | Problem:
    """Apply one exact replacement to ``path`` (an empty ``old`` creates a missing file)."""
    current = read_text(path, max_bytes=max_bytes)
    if isinstance(current, Problem):
        return current
    if current is None or (not old and not current):
        if old:
            return Problem(f"{path} does not exist; to create it, pass an empty old_string")
        if not os.path.isdir(os.path.dirname(path)):
            return Problem(f"the directory of {path} does not exist")
        problem = write_atomic(path, new.encode("utf-8"))
        return problem or Edited(1, created=current is None)
    changed = apply_edit(current, old, new, replace_all=replace_all)
    if isinstance(changed, Problem):
        return changed
    problem = write_atomic(path, changed.encode("utf-8"))
    return problem or Edited(current.count(old) if replace_all else 1)


def write_file(path: str, content: str, *, new_dirs: list[str]) -> Problem | None:
    """Create ``new_dirs`` (outermost first; already allowed) and write ``path``."""
    for directory in new_dirs:
        with suppress(FileExistsError):
            os.mkdir(directory, 0o700)
    return write_atomic(path, content.encode("utf-8"))


def write_atomic(path: str, data: bytes) -> Problem | None:
    """Replace ``path`` with ``data`` atomically, keeping an existing file's mode."""
    try:
        st: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
            return Problem(f"{path} is not a regular file (writes never follow links)")
        if st.st_nlink > 1:
            return Problem(f"{path} has other hard links; writing it would change them too")
    mode = stat.S_IMODE(st.st_mode) if st is not None else NEW_FILE_MODE
    atomic.write_atomic(Path(path), data, mode=mode)
    return None


def delete_file(path: str) -> Problem | None:
    """Remove a regular file (never a link, never a directory)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return Problem(f"{path} does not exist")
    if not stat.S_ISREG(st.st_mode):
        return Problem(f"{path} is not a regular file; only regular files may be deleted")
    os.unlink(path)
    atomic.fsync_dir(Path(path).parent)
    return None


def missing_dirs(directory: str) -> list[str]:
    """The directories that would have to be created for ``directory`` to exist,
    outermost first."""
    missing: list[str] = []
    current = directory
    while current and not os.path.lexists(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return missing[::-1]
