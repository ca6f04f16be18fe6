""":class:`Area`: a folder others can write, held by a directory descriptor (see the package)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple, Protocol

from memd.confined.findings import Refused, findings
from memd.confined.resolve import (
    _DIR_FLAGS,
    _HEAD_CHUNK,
    _O_CLOEXEC,
    _O_DIRECTORY,
    _READ_FLAGS,
    _openat2,
    kind_of,
    replace_at,
    split_relative,
)
from memd.writes import reporting

ChangeKind = Literal["write", "unlink", "mkdir", "rmdir"]


class ChangeGuard(Protocol):
    """Told every change an area makes, before it is made: a file replaced (``write``, with
    the bytes it will hold, after the checks that could refuse it), a file removed
    (``unlink``), a folder made (``mkdir``: each one on the way to a file) or removed
    (``rmdir``). It records what undoes the change (a dream's journal); when it raises, the
    change is not made and the exception goes on to the caller."""

    def before_change(
        self, area: Area, kind: ChangeKind, relative: str, data: bytes | None
    ) -> None: ...


def _load_syncfs() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function: Callable[[int], int] = libc.syncfs
    except (OSError, AttributeError):
        return None
    return function


_syncfs = _load_syncfs()


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
    """A folder others can write, held by a directory descriptor; see the module docstring.

    ``any_owner``: files and folders of any user are read and entered (a repository's code,
    which its other users may have written; links and hard links are still refused), not
    only the user's own. ``report=False``: what is refused is not recorded in
    :data:`findings` (not a folder of memd's: a link in a repository is no one's mistake).
    ``guard`` is told every change before it is made (:class:`ChangeGuard`)."""

    def __init__(
        self,
        root: Path,
        fd: int,
        *,
        any_owner: bool = False,
        report: bool = True,
        guard: ChangeGuard | None = None,
    ):
        self.root = root
        self._fd = fd
        self._any_owner = any_owner
        self._report = report
        self.guard = guard

    @classmethod
    def open(
        cls,
        root: Path,
        *,
        create: bool = False,
        any_owner: bool = False,
        report: bool = True,
        guard: ChangeGuard | None = None,
    ) -> Area:
        """Open ``root`` (links in its own path followed, once). ``FileNotFoundError`` when it
        does not exist (made first with ``create``), :class:`Refused` when it is not a folder
        (of the user's, unless ``any_owner``)."""
        if create:
            root.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        try:
            info = os.fstat(fd)
            if not stat.S_ISDIR(info.st_mode) or not (any_owner or info.st_uid == os.getuid()):
                raise Refused(str(root), f"a folder owned by uid {info.st_uid}")
        except BaseException:
            os.close(fd)
            raise
        return cls(root, fd, any_owner=any_owner, report=report, guard=guard)

    def _owned(self, info: os.stat_result) -> bool:
        return self._any_owner or info.st_uid == os.getuid()

    def _tell(self, kind: ChangeKind, relative: str, data: bytes | None = None) -> None:
        if self.guard is not None:  # it looks whether the entry is there itself
            self.guard.before_change(self, kind, relative, data)

    def _note(self, where: str, kind: str) -> None:
        if self._report:
            findings.record(where, kind)

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
        self._note(where, kind)
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
                    why = kind_of(info, any_owner=self._any_owner)
                    return at, (why or "a file") if last else "not a folder"
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
            why = kind_of(os.fstat(fd), any_owner=self._any_owner)
            if why is not None:
                where = str(self.path(relative))
                self._note(where, why)
                raise Refused(where, why)
        except BaseException:
            os.close(fd)
            raise
        if self._report and len(findings):
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
        if not self._owned(info):
            os.close(fd)
            where = str(self.path(relative))
            self._note(where, f"a folder owned by uid {info.st_uid}")
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
        base = f"{self.root}/" if self._report and len(findings) else None  # to drop the fixed
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
            if stat.S_ISREG(mode) and info.st_nlink == 1 and self._owned(info):
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
                why = kind_of(info, any_owner=self._any_owner)
                self._note(str(self.root / relative), why or "not a regular file")
                seen.refuse(relative)

    def _enter(self, fd: int, name: str, relative: str) -> int | None:
        """A descriptor for the sub-folder ``name`` of ``fd``, or ``None`` (recorded) when it
        is a link by now or another user's."""
        try:
            child = os.open(os.fsencode(name), _DIR_FLAGS, dir_fd=fd)
        except OSError:
            self._note(str(self.root / relative), "a folder that changed meanwhile")
            return None
        if not self._owned(os.fstat(child)):
            os.close(child)
            self._note(str(self.root / relative), "a folder of another user")
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
            parts = split_relative(relative)
            for depth, part in enumerate(parts, 1):
                name = os.fsencode(part)
                self._tell("mkdir", "/".join(parts[:depth]))
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=fd)
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise self._refuse_link(relative, exc) from None
                os.close(fd)
                fd = child
                if not self._owned(os.fstat(fd)):
                    raise Refused(str(self.path(relative)), "a folder of another user")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def write(
        self,
        relative: str,
        data: bytes,
        *,
        mode: int | None = None,
        expected: bytes | None = None,
        durable: bool = True,
    ) -> bool:
        """Replace ``relative`` with ``data`` atomically, making its folders; whether it was.

        An existing entry that is not a regular one-link file of the user's (a link, a hard
        link, a FIFO) is :class:`Refused`, never written through or replaced. The mode of the
        file replaced is kept unless ``mode`` is given (new files: 0600). With ``expected``
        (the file's bytes as the caller read them), nothing is written (``False``) when the
        file is gone or holds anything else, looked at just before the rename: another
        program's write meanwhile is not overwritten (compare and swap, as near as a
        folder others write allows). ``durable=False``: no fsync of the file or its folder
        (a caller writing many files flushes them at once, :meth:`flush`).
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
            if expected is not None and existing is None:
                return False
            if existing is not None:
                why = kind_of(existing, any_owner=self._any_owner)
                if why is not None:
                    where = str(self.path(relative))
                    self._note(where, why)
                    raise Refused(where, why)
                if mode is None:
                    mode = existing.st_mode & 0o7777
            self._tell("write", relative, data)
            with reporting(self.path(relative)):  # a disk fault raises WriteFailed
                chosen = 0o600 if mode is None else mode
                return replace_at(parent, name, data, chosen, expected, durable=durable)
        finally:
            os.close(parent)

    def flush(self) -> None:
        """Put everything written beneath the area on the disk (``syncfs`` of its file
        system where the kernel has it, else ``sync``): one call after many writes made
        with ``durable=False``."""
        with reporting(self.root):
            if _syncfs is None or _syncfs(self._fd) != 0:
                os.sync()

    def unlink(self, relative: str) -> bool:
        """Remove the entry ``relative`` (a link itself, never what it names); whether it was
        there. Folders on the way are walked without following links."""
        parts = split_relative(relative)
        self._tell("unlink", relative)
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
        self._tell("rmdir", relative)
        parent = self.open_dir("/".join(parts[:-1]))
        try:
            os.rmdir(os.fsencode(parts[-1]), dir_fd=parent)
        except OSError:
            return False
        finally:
            os.close(parent)
        return True
