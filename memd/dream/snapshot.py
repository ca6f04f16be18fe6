"""Snapshots of a memory dir (R-B3): a byte copy taken before a dream changes anything.

A snapshot is a folder of copies plus ``manifest.json`` (relative path → SHA-256). It holds
every memory file below the memory dir except the lock files and anything inside a ``.git``
folder. The memory dir is read only through :class:`memd.confined.Area`: symbolic links, hard
links and special files are never followed, read or copied (they are listed in ``skipped``),
and a FIFO cannot hang the daemon. Reads have a total budget: an over-budget tree is refused
(:class:`TooLarge`), because a dream that cannot be undone must not start.

:func:`restore_tree` makes the memory dir's files byte-identical to a snapshot (files not in
it are removed, the lock files are left alone); a link found where a file goes back is left
alone and reported, never written through or over. Everything here blocks; run it in a
worker thread.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from memd.atomic import write_atomic
from memd.confined import Area, ChangeGuard, Refused, shown
from memd.dream.lock import FLOCK_NAME, LOCK_NAME
from memd.records import read_capped
from memd.writes import reporting

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 64 * 1024 * 1024  # a name and a hash per file of a memory dir
FILES = "files"
SNAPSHOT_MAX_BYTES = 64 * 1024 * 1024
EXCLUDED_NAMES = frozenset({LOCK_NAME, FLOCK_NAME})
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def is_lock_file(relative: str) -> bool:
    """The lock, its side file, or a lock being written (``.consolidate-lock.*``)."""
    return relative in EXCLUDED_NAMES or relative.startswith(LOCK_NAME + ".")


class TooLarge(Exception):
    """The memory dir is larger than the snapshot budget."""


@dataclass(frozen=True)
class Tree:
    """Relative path → SHA-256 of the regular files of a memory dir (lock files out)."""

    files: dict[str, str]
    skipped: tuple[str, ...] = ()
    dirs: tuple[str, ...] = ()  # every folder below the memory dir (relative), ``.git`` out


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_regular(path: Path, *, limit: int = SNAPSHOT_MAX_BYTES) -> bytes | None:
    """A regular file's bytes from memd's own snapshot folder (the last component not
    followed, never a FIFO); ``None`` if it is not one or is gone. Raises :class:`TooLarge`
    past ``limit``. The memory dir is read with :func:`area_bytes` instead."""
    try:
        fd = os.open(path, _OPEN)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if st.st_size > limit:
            raise TooLarge(f"{path} is {st.st_size} bytes")
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if total > limit:
                raise TooLarge(f"{path} grew past {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def area_bytes(area: Area, relative: str, *, limit: int = SNAPSHOT_MAX_BYTES) -> bytes | None:
    """A memory file's bytes; ``None`` when it is gone or not a memory file (a link, a hard
    link, a FIFO: never followed or read). Raises :class:`TooLarge` past ``limit``."""
    try:
        data, info = area.read(relative, max_bytes=limit + 1)
    except (OSError, ValueError):
        return None
    if len(data) > limit:
        raise TooLarge(f"{shown(str(area.path(relative)))} is {info.st_size} bytes")
    return data


def memory_bytes(memory_dir: Path, relative: str) -> bytes | None:
    """:func:`area_bytes` of one file; ``None`` also when it is over the budget."""
    try:
        with Area.open(memory_dir) as area:
            return area_bytes(area, relative)
    except (OSError, TooLarge):
        return None


def _is_git(relative: str) -> bool:
    return relative == ".git" or relative.endswith("/.git")


def walk(area: Area, folders: list[str] | None = None) -> tuple[list[str], list[str]]:
    """The memory files (relative, sorted) and the skipped entries (links, hard links,
    special files) of a memory dir; ``folders`` collects the sub-folders."""
    skipped: list[str] = []
    found = area.walk(hidden=True, skip_dir=_is_git, folders=folders, refused=skipped)
    files = [e.relative for e in found if not is_lock_file(e.relative)]
    if folders is not None:
        folders.sort()
    return sorted(files), sorted(skipped)


def current_tree(memory_dir: Path) -> Tree:
    """Hashes of the memory dir as it is now (empty when it is missing)."""
    hashes: dict[str, str] = {}
    skipped: list[str] = []
    for area in _opened(memory_dir):
        files, skipped = walk(area)
        for relative in files:
            data = area_bytes(area, relative)
            if data is not None:
                hashes[relative] = sha256(data)
    return Tree(hashes, tuple(skipped))


def _opened(memory_dir: Path) -> Iterator[Area]:
    """The memory dir opened once, or nothing when it does not exist (it is empty then)."""
    try:
        area = Area.open(memory_dir)
    except FileNotFoundError:
        return
    with area:
        yield area


def take(memory_dir: Path, into: Path, *, max_bytes: int = SNAPSHOT_MAX_BYTES) -> Tree:
    """Copy the memory dir into ``into`` (created); raises :class:`TooLarge` over budget and
    ``OSError`` when the state disk refuses. Every copy and folder is fsynced before the
    manifest is written, last: a snapshot without its manifest is no snapshot."""
    folders: list[str] = []
    store = into / FILES
    _make_dir(store)
    hashes: dict[str, str] = {}
    budget = max_bytes
    skipped: list[str] = []
    made: set[Path] = {into.parent, into, store}
    for area in _opened(memory_dir):
        files, skipped = walk(area, folders)
        for relative in files:
            data = area_bytes(area, relative, limit=budget)
            if data is None:
                continue
            budget -= len(data)
            target = store / relative
            for parent in reversed(target.relative_to(store).parents[:-1]):
                if store / parent not in made:
                    _make_dir(store / parent)
                    made.add(store / parent)
            _write_copy(target, data)
            hashes[relative] = sha256(data)
    for folder in made:
        with reporting(folder):
            sync_dir(folder)
    tree = Tree(hashes, tuple(skipped), tuple(folders))
    manifest = {"files": hashes, "skipped": list(skipped), "dirs": list(tree.dirs)}
    write_atomic(into / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
    return tree


def _make_dir(path: Path) -> None:
    with reporting(path):
        path.mkdir(parents=True, exist_ok=True, mode=0o700)


def _write_copy(target: Path, data: bytes) -> None:
    """``data`` into ``target`` for good (never through a link), or ``OSError``."""
    with reporting(target):
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(target, flags, 0o600)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                if written <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)


def load(into: Path) -> Tree | None:
    """A snapshot's manifest; ``None`` when missing or unreadable."""
    try:
        raw = json.loads(read_capped(into / MANIFEST, MAX_MANIFEST_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    files = raw.get("files") if isinstance(raw, dict) else None
    if not isinstance(files, dict):
        return None
    clean = {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)}
    dirs = raw.get("dirs") if isinstance(raw.get("dirs"), list) else []
    return Tree(
        clean,
        tuple(str(s) for s in raw.get("skipped") or ()),
        tuple(d for d in dirs if isinstance(d, str) and safe_relative(d)),
    )


def saved_bytes(into: Path, relative: str) -> bytes | None:
    """A file's bytes as the snapshot holds them, ``None`` if it holds none."""
    if not safe_relative(relative):
        return None
    return read_regular(into / FILES / relative)


def safe_relative(relative: str) -> bool:
    """A relative path that stays inside its root (no absolute path, no ``..``)."""
    parts = Path(relative).parts
    return bool(parts) and not os.path.isabs(relative) and ".." not in parts


def put_back(
    memory_dir: Path, relative: str, data: bytes | None, guard: ChangeGuard | None = None
) -> bool:
    """Make one file hold ``data`` again (``None``: remove it); False when a link, a hard
    link, a special file or a folder is in its place (left alone: nothing is written through
    or over it). Raises ``OSError`` when the disk (or ``guard``) refuses."""
    try:
        with Area.open(memory_dir, create=data is not None, guard=guard) as area:
            if data is None:
                info = area.lstat(relative)
                if info is not None and not stat.S_ISDIR(info.st_mode):
                    area.unlink(relative)
            else:
                area.write(relative, data)
    except (Refused, ValueError) as exc:
        log.warning("cannot put %s back: %s", shown(str(memory_dir / relative)), exc)
        return False
    return True


def restore_tree(memory_dir: Path, into: Path, guard: ChangeGuard | None = None) -> list[str]:
    """Make ``memory_dir`` byte-identical to the snapshot; the relative paths it changed.
    Each change is told to ``guard`` first; a copy that is not what the manifest says is
    refused (``OSError``) before it is written."""
    saved = load(into)
    if saved is None:
        raise FileNotFoundError(f"no usable snapshot in {into}")
    now = current_tree(memory_dir).files
    changed: list[str] = []
    for relative in sorted(set(now) | set(saved.files)):
        expected = saved.files.get(relative)
        if now.get(relative) == expected:
            continue
        data = saved_bytes(into, relative) if expected is not None else None
        if expected is not None and (data is None or sha256(data) != expected):
            raise OSError(f"the snapshot's copy of {shown(relative)} is damaged or gone")
        if put_back(memory_dir, relative, data, guard):
            changed.append(relative)
    prune_new_dirs(memory_dir, saved, guard)
    return changed


def prune_new_dirs(memory_dir: Path, saved: Tree, guard: ChangeGuard | None = None) -> None:
    """Remove empty folders the snapshot did not have (deepest first; never a full one)."""
    now: list[str] = []
    try:
        area = Area.open(memory_dir, guard=guard)
    except FileNotFoundError:
        return
    with area:
        walk(area, now)
        keep = set(saved.dirs)
        for relative in sorted(now, key=lambda d: d.count("/"), reverse=True):
            if relative not in keep and _empty(area, relative):
                area.rmdir(relative)


def _empty(area: Area, relative: str) -> bool:
    fd = area.open_dir(relative)
    try:
        return not os.listdir(fd)
    finally:
        os.close(fd)


def sync_dir(directory: Path) -> None:
    """fsync a folder (its entries for good); a filesystem that cannot is let be, any other
    error raised."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)
