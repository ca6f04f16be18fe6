"""The one way into a folder that other programs can write: a memory dir above all.

An agent with a shell, a shared repository or a careless script can put anything in a memory
dir: ``MEMORY.md -> ~/.ssh/id_rsa``, a hard link to a token file, a folder that flips to a
symlink between a check and a use, a FIFO. memd reads those folders into prompts, hooks and
MCP replies, so every reader and writer goes through :class:`Area`, which is secure by
construction rather than by checking a path first:

- The area's root is resolved once, when it is opened (the path *up to* it may be a link the
  user made: a symlinked ``~/.claude`` is common) and held as a directory descriptor that must
  be a directory owned by the user.
- Everything beneath is opened relative to that descriptor without following any link:
  ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`` where the kernel has
  it, else a component-by-component walk with ``O_NOFOLLOW`` from the directory descriptor.
  A relative name with ``..``, ``.``, an empty part, a NUL or a leading ``/`` never reaches the
  kernel.
- What was opened is checked on its descriptor (``fstat``), never on a path before the open: a
  file is read only when it is a regular file with one link, owned by the user; a folder is
  entered only when it is a directory owned by the user. Anything else (a link, a hard-linked
  file, a FIFO, a device, a socket, someone else's file) is :class:`Refused`: skipped by
  listings, never replaced with what it points to, never written through or over, and
  recorded once in :data:`findings` for ``status`` and ``doctor``.
- Writes are atomic (a unique temp file beside the target, created ``O_EXCL | O_NOFOLLOW``,
  fsync, ``renameat``) inside the parent's descriptor, so a folder swapped for a link after the
  walk cannot redirect them.

Names are bytes on disk: relative paths here are ``str`` with surrogate escapes (what
``os.fsdecode`` gives), and go back to the kernel through ``os.fsencode``.

Blocking I/O: call it from a worker thread. An :class:`Area` holds one descriptor; use it as a
context manager and keep it no longer than one operation.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple

log = logging.getLogger(__name__)

_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY: Final = getattr(os, "O_DIRECTORY", 0)
_O_NOCTTY: Final = getattr(os, "O_NOCTTY", 0)
_DIR_FLAGS: Final = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
_READ_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | _O_NOFOLLOW | _O_NOCTTY | _O_CLOEXEC

# linux/openat2.h
_RESOLVE_NO_MAGICLINKS: Final = 0x02
_RESOLVE_NO_SYMLINKS: Final = 0x04
_RESOLVE_BENEATH: Final = 0x08
_SYS_OPENAT2: Final = 437  # the same number on every architecture (added after the unification)

TEMP_MARK: Final = ".memd-"
_HEAD_CHUNK: Final = 4096


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
    """Refused entries by path, newest last, at most ``limit``; logged once per path and kind.

    Thread-safe. A path that is fine again drops out when :meth:`clear` is told so.
    """

    def __init__(self, limit: int = 256) -> None:
        self._items: dict[str, Finding] = {}
        self._lock = threading.Lock()
        self.limit = limit

    def record(self, path: str, kind: str) -> None:
        now = time.time()
        with self._lock:
            known = self._items.pop(path, None)
            first = known.first_seen if known is not None and known.kind == kind else now
            self._items[path] = Finding(path, kind, first, now)
            while len(self._items) > self.limit:
                del self._items[next(iter(self._items))]
        if known is None or known.kind != kind:
            log.warning(
                "skipped %s: %s (memd reads no links, hard links or special files)",
                shown(path),
                kind,
            )

    def clear(self, path: str) -> None:
        with self._lock:
            self._items.pop(path, None)

    def gone(self, folder: str, names: Collection[str]) -> None:
        """``folder`` was listed and holds only ``names``: entries of it that are not there
        any more leave the findings (someone removed them)."""
        with self._lock:
            for path in [p for p in self._items if p.rpartition("/")[0] == folder]:
                if path.rpartition("/")[2] not in names:
                    del self._items[path]

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


def split_relative(relative: str) -> list[str]:
    """The parts of a relative POSIX path; ``ValueError`` for anything that could climb out."""
    if not relative or relative.startswith("/") or "\0" in relative:
        raise ValueError(f"{relative!r} is not a relative path")
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"{relative!r} is not a plain relative path")
    return parts


def kind_of(info: os.stat_result) -> str | None:
    """Why a file's ``fstat`` keeps it out of an area, or ``None`` when it may be read."""
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    if not stat.S_ISREG(mode):
        return "not a regular file"
    if info.st_nlink != 1:
        return f"a file with {info.st_nlink} hard links"
    if info.st_uid != os.getuid():
        return f"a file owned by uid {info.st_uid}"
    return None


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


class _Openat2:
    """``openat2`` through libc's ``syscall``, or ``None`` once the kernel says it has none."""

    def __init__(self) -> None:
        self.available = os.uname().sysname == "Linux"
        self._syscall: object = None
        if self.available:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                func = libc.syscall
                func.restype = ctypes.c_long
                self._syscall = func
            except (OSError, AttributeError):
                self.available = False

    def __call__(self, dirfd: int, name: bytes, flags: int) -> int | None:
        """The descriptor, or ``None`` when openat2 is not there (then walk instead)."""
        if not self.available:
            return None
        how = _OpenHow(flags, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
        fd = self._syscall(  # type: ignore[operator]
            ctypes.c_long(_SYS_OPENAT2),
            ctypes.c_int(dirfd),
            ctypes.c_char_p(name),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err == errno.ENOSYS:
            self.available = False  # an old kernel, or a seccomp filter that hides it
            return None
        if err == errno.EAGAIN:
            return None  # a rename raced the lookup: the walk below decides instead
        raise OSError(err, os.strerror(err), os.fsdecode(name))


_openat2 = _Openat2()


def use_openat2(enabled: bool) -> bool:
    """Turn the ``openat2`` path on or off (tests run both); returns the previous setting."""
    previous = _openat2.available
    _openat2.available = enabled and os.uname().sysname == "Linux"
    return previous


class Entry(NamedTuple):
    """A regular file beneath an area, as a listing found it (checked on its own ``fstatat``).

    A tuple: recall lists thousands of them per prompt."""

    relative: str
    info: os.stat_result


@dataclass
class _Listing:
    """The options of one :meth:`Area.walk`, and what it collects besides files."""

    hidden: bool
    max_depth: int
    skip_dir: Callable[[str], bool] | None
    folders: list[str] | None
    refused: list[str] | None

    def refuse(self, relative: str) -> None:
        if self.refused is not None:
            self.refused.append(relative)


class Area:
    """A folder others can write, held by a directory descriptor; see the module docstring."""

    def __init__(self, root: Path, fd: int) -> None:
        self.root = root
        self._fd = fd

    @classmethod
    def open(cls, root: Path, *, create: bool = False) -> Area:
        """Open ``root`` (links in its own path followed, once). ``FileNotFoundError`` when it
        does not exist (made first with ``create``), :class:`Refused` when it is not a folder
        of the user's."""
        if create:
            root.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        try:
            info = os.fstat(fd)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                raise Refused(str(root), f"a folder owned by uid {info.st_uid}")
        except BaseException:
            os.close(fd)
            raise
        return cls(root, fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Area:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def path(self, relative: str) -> Path:
        """The path a relative name stands for (for messages and records; never opened)."""
        return self.root.joinpath(*split_relative(relative))

    # -- opening --------------------------------------------------------------------------

    def _open(self, parts: list[str], flags: int) -> int:
        """Open ``parts`` beneath the root with ``flags``, following no link on the way."""
        name = os.fsencode("/".join(parts))
        fd = _openat2(self._fd, name, flags)
        if fd is not None:
            return fd
        parent = self._fd
        try:
            for part in parts[:-1]:
                child = os.open(os.fsencode(part), _DIR_FLAGS, dir_fd=parent)
                if parent != self._fd:
                    os.close(parent)
                parent = child
            return os.open(os.fsencode(parts[-1]), flags, dir_fd=parent)
        finally:
            if parent != self._fd:
                os.close(parent)

    def _refuse_link(self, relative: str, exc: OSError) -> OSError:
        """ELOOP/EXDEV/ENOTDIR out of an open beneath: :class:`Refused`, naming the part that
        is a link or not a folder (recorded in :data:`findings` under that part's path)."""
        if exc.errno not in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR):
            return exc
        parts = split_relative(relative)
        at, kind = self._first_refused(parts)
        where = str(self.path("/".join(parts[: at + 1])))
        findings.record(where, kind)
        return Refused(where, kind)

    def _first_refused(self, parts: list[str]) -> tuple[int, str]:
        """The index of the first part of ``parts`` that is a link (or not a folder where
        one is needed), and what it is; looked at without following anything."""
        fd = os.dup(self._fd)
        try:
            for at, part in enumerate(parts):
                try:
                    info = os.stat(os.fsencode(part), dir_fd=fd, follow_symlinks=False)
                except OSError:
                    break
                last = at == len(parts) - 1
                if stat.S_ISLNK(info.st_mode):
                    return at, "a symbolic link"
                if not stat.S_ISDIR(info.st_mode):
                    return at, (kind_of(info) or "a file") if last else "not a folder"
                if last:
                    break
                try:
                    child = os.open(os.fsencode(part), _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    return at, "a folder that changed meanwhile"
                os.close(fd)
                fd = child
        finally:
            os.close(fd)
        return len(parts) - 1, "a symbolic link (itself or a folder on its path)"

    def open_file(self, relative: str) -> int:
        """A read descriptor for the regular, one-link, user-owned file ``relative``.

        Raises ``FileNotFoundError`` when it is gone, :class:`Refused` for anything else that
        is there (recorded in :data:`findings`), ``OSError`` as ``open`` does.
        """
        parts = split_relative(relative)
        try:
            fd = self._open(parts, _READ_FLAGS)
        except OSError as exc:
            raise self._refuse_link(relative, exc) from None
        try:
            why = kind_of(os.fstat(fd))
            if why is not None:
                where = str(self.path(relative))
                findings.record(where, why)
                raise Refused(where, why)
        except BaseException:
            os.close(fd)
            raise
        if len(findings):
            findings.fine(str(self.path(relative)))
        return fd

    def read(self, relative: str, *, max_bytes: int) -> tuple[bytes, os.stat_result]:
        """At most ``max_bytes`` of ``relative`` and its ``fstat``; raises as :meth:`open_file`."""
        fd = self.open_file(relative)
        try:
            info = os.fstat(fd)
            chunks: list[bytes] = []
            left = max_bytes
            while left > 0:
                block = os.read(fd, min(left, 1 << 20))
                if not block:
                    break
                chunks.append(block)
                left -= len(block)
            return b"".join(chunks), info
        finally:
            os.close(fd)

    def read_head(
        self, relative: str, *, max_lines: int, max_bytes: int
    ) -> tuple[bytes, os.stat_result]:
        """The first ``max_lines`` lines of ``relative`` (at most ``max_bytes``) and its
        ``fstat``; raises as :meth:`open_file`. A file without line breaks costs
        ``max_bytes`` at most."""
        fd = self.open_file(relative)
        try:
            info = os.fstat(fd)
            data = b""
            while len(data) < max_bytes and data.count(b"\n") < max_lines:
                block = os.read(fd, min(_HEAD_CHUNK, max_bytes - len(data)))
                if not block:
                    break
                data += block
        finally:
            os.close(fd)
        cut = -1
        for _ in range(max_lines):
            cut = data.find(b"\n", cut + 1)
            if cut < 0:
                return data, info
        return data[: cut + 1], info

    def read_text(self, relative: str, *, max_bytes: int) -> str | None:
        """The file's text (invalid UTF-8 replaced), or ``None`` when it is missing or refused."""
        try:
            data, _ = self.read(relative, max_bytes=max_bytes)
        except (FileNotFoundError, NotADirectoryError, Refused):
            return None
        return data.decode("utf-8", errors="replace")

    def open_dir(self, relative: str) -> int:
        """A descriptor for the user's own folder ``relative`` (``""`` is the root itself)."""
        if not relative:
            return os.dup(self._fd)
        try:
            fd = self._open(split_relative(relative), _DIR_FLAGS)
        except OSError as exc:
            raise self._refuse_link(relative, exc) from None
        info = os.fstat(fd)
        if info.st_uid != os.getuid():
            os.close(fd)
            where = str(self.path(relative))
            findings.record(where, f"a folder owned by uid {info.st_uid}")
            raise Refused(where, f"a folder owned by uid {info.st_uid}")
        return fd

    # -- listing --------------------------------------------------------------------------

    def walk(
        self,
        *,
        hidden: bool = False,
        max_depth: int = 16,
        skip_dir: Callable[[str], bool] | None = None,
        folders: list[str] | None = None,
        refused: list[str] | None = None,
    ) -> Iterator[Entry]:
        """Every regular, one-link, user-owned file beneath the root, in no set order.

        Hidden names (``.git``, temp files) are passed over unless ``hidden``; a folder whose
        relative path ``skip_dir`` accepts is not entered. Links, hard links and special files
        are recorded in :data:`findings` (and appended to ``refused``, relative) and passed
        over. A folder that changes into a link meanwhile is refused by its own open, not
        entered. ``folders`` collects the relative path of every folder entered.
        """
        pending: list[tuple[int, str, int]] = [(os.dup(self._fd), "", 0)]
        seen = _Listing(hidden, max_depth, skip_dir, folders, refused)
        try:
            while pending:
                fd, prefix, depth = pending.pop()
                try:
                    yield from self._list_one(fd, prefix, depth, seen, pending)
                finally:
                    os.close(fd)
        finally:
            for fd, _, _ in pending:
                os.close(fd)

    def _list_one(
        self,
        fd: int,
        prefix: str,
        depth: int,
        seen: _Listing,
        pending: list[tuple[int, str, int]],
    ) -> Iterator[Entry]:
        try:
            names = os.listdir(fd)
        except OSError:
            return
        uid = os.getuid()
        base = f"{self.root}/" if len(findings) else None  # to drop what was fixed
        if base is not None:
            findings.gone((base + prefix).rstrip("/"), set(names))
        for name in names:
            if name[0] == "." and not seen.hidden:
                continue
            relative = prefix + name
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            mode = info.st_mode
            if stat.S_ISREG(mode) and info.st_nlink == 1 and info.st_uid == uid:
                if base is not None:
                    findings.fine(base + relative)
                yield Entry(relative, info)  # the common case, without kind_of's questions
            elif stat.S_ISDIR(mode):
                if depth + 1 < seen.max_depth and not (seen.skip_dir and seen.skip_dir(relative)):
                    child = self._enter(fd, name, relative)
                    if child is None:
                        seen.refuse(relative)
                    else:
                        pending.append((child, relative + "/", depth + 1))
                        if base is not None:
                            findings.fine(base + relative)
                        if seen.folders is not None:
                            seen.folders.append(relative)
            else:
                findings.record(str(self.root / relative), kind_of(info) or "not a regular file")
                seen.refuse(relative)

    def _enter(self, fd: int, name: str, relative: str) -> int | None:
        """A descriptor for the sub-folder ``name`` of ``fd``, or ``None`` (recorded) when it
        is a link by now or another user's."""
        try:
            child = os.open(os.fsencode(name), _DIR_FLAGS, dir_fd=fd)
        except OSError:
            findings.record(str(self.root / relative), "a folder that changed meanwhile")
            return None
        if os.fstat(child).st_uid != os.getuid():
            os.close(child)
            findings.record(str(self.root / relative), "a folder of another user")
            return None
        return child

    def lstat(self, relative: str) -> os.stat_result | None:
        """The entry ``relative`` itself (a link is not followed), ``None`` when it is absent
        or a folder on the way to it is a link."""
        parts = split_relative(relative)
        try:
            parent = self.open_dir("/".join(parts[:-1]))
        except (OSError, ValueError):
            return None
        try:
            return os.stat(os.fsencode(parts[-1]), dir_fd=parent, follow_symlinks=False)
        except OSError:
            return None
        finally:
            os.close(parent)

    # -- writing --------------------------------------------------------------------------

    def make_dirs(self, relative: str) -> int:
        """Create the folders of ``relative`` beneath the root (none of them a link) and return
        a descriptor for the last; ``""`` is the root."""
        fd = os.dup(self._fd)
        if not relative:
            return fd
        try:
            for part in split_relative(relative):
                name = os.fsencode(part)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=fd)
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise self._refuse_link(relative, exc) from None
                os.close(fd)
                fd = child
                if os.fstat(fd).st_uid != os.getuid():
                    raise Refused(str(self.path(relative)), "a folder of another user")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def write(self, relative: str, data: bytes, *, mode: int | None = None) -> None:
        """Replace ``relative`` with ``data`` atomically, making its folders.

        An existing entry that is not a regular one-link file of the user's (a link, a hard
        link, a FIFO) is :class:`Refused`, never written through or replaced. The mode of the
        file replaced is kept unless ``mode`` is given (new files: 0600).
        """
        parts = split_relative(relative)
        parent = self.make_dirs("/".join(parts[:-1]))
        try:
            name = os.fsencode(parts[-1])
            try:
                existing: os.stat_result | None = os.stat(
                    name, dir_fd=parent, follow_symlinks=False
                )
            except FileNotFoundError:
                existing = None
            if existing is not None:
                why = kind_of(existing)
                if why is not None:
                    where = str(self.path(relative))
                    findings.record(where, why)
                    raise Refused(where, why)
                if mode is None:
                    mode = existing.st_mode & 0o7777
            self._replace(parent, name, data, 0o600 if mode is None else mode)
        finally:
            os.close(parent)

    @staticmethod
    def _replace(parent: int, name: bytes, data: bytes, mode: int) -> None:
        temp = b"." + name + os.fsencode(TEMP_MARK) + secrets.token_hex(4).encode() + b".tmp"
        fd = os.open(
            temp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC,
            0o600,
            dir_fd=parent,
        )
        try:
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fchmod(fd, mode)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=parent)
            raise
        with contextlib.suppress(OSError):
            os.fsync(parent)

    def unlink(self, relative: str) -> bool:
        """Remove the entry ``relative`` (a link itself, never what it names); whether it was
        there. Folders on the way are walked without following links."""
        parts = split_relative(relative)
        parent = self.open_dir("/".join(parts[:-1]))
        try:
            os.unlink(os.fsencode(parts[-1]), dir_fd=parent)
        except FileNotFoundError:
            return False
        finally:
            os.close(parent)
        return True

    def rmdir(self, relative: str) -> bool:
        """Remove the empty folder ``relative``; whether it was removed."""
        parts = split_relative(relative)
        parent = self.open_dir("/".join(parts[:-1]))
        try:
            os.rmdir(os.fsencode(parts[-1]), dir_fd=parent)
        except OSError:
            return False
        finally:
            os.close(parent)
        return True


# -- a tree beneath an area, for the agents' tools ------------------------------------------


@dataclass(frozen=True)
class Folder:
    """A folder beneath an area as a listing found it (entered later, through its own open)."""

    relative: str
    info: os.stat_result


@dataclass(frozen=True)
class Skipped:
    """An entry :func:`tree` passed over: a link, a hard link, a special file, a folder that
    could not be entered; ``kind`` says which (also recorded in :data:`findings`)."""

    relative: str
    kind: str


def tree(
    area: Area, relative: str = "", *, skip: frozenset[str] = frozenset(), max_depth: int = 16
) -> Iterator[Entry | Folder | Skipped]:
    """Everything beneath the folder ``relative`` of ``area``, depth first in name order.

    Files come as :class:`Entry` (regular, one link, the user's: checked on their own
    ``fstatat``; open them with :meth:`Area.open_file`, which checks again on the descriptor),
    folders as :class:`Folder` before what they hold, and the rest as :class:`Skipped`. Names
    in ``skip`` (``.git``) are passed over silently. Each folder is opened afresh beneath the
    root (:meth:`Area.open_dir`), so one descriptor at a time is held whatever the breadth,
    and a folder swapped for a link meanwhile is refused by that open, not entered. Raises
    as :meth:`Area.open_dir` for ``relative`` itself.
    """
    first = True
    pending: list[tuple[str, int]] = [(relative, 0)]
    while pending:
        where, depth = pending.pop()
        try:
            fd = area.open_dir(where)
        except (OSError, ValueError) as exc:
            if first:
                raise
            yield Skipped(where, exc.kind if isinstance(exc, Refused) else "a folder that changed")
            continue
        first = False
        folders: list[str] = []
        try:
            yield from _tree_level(fd, where, depth + 1 < max_depth, skip, folders, area)
        finally:
            os.close(fd)
        pending.extend((folder, depth + 1) for folder in reversed(folders))


def _tree_level(
    fd: int, where: str, descend: bool, skip: frozenset[str], folders: list[str], area: Area
) -> Iterator[Entry | Folder | Skipped]:
    try:
        names = sorted(os.listdir(fd))
    except OSError:
        return
    for name in names:
        if name in skip:
            continue
        relative = f"{where}/{name}" if where else name
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode):
            if descend:
                folders.append(relative)
                yield Folder(relative, info)
            continue
        why = kind_of(info)
        if why is not None:
            findings.record(str(area.root / relative), why)
            yield Skipped(relative, why)
            continue
        yield Entry(relative, info)
