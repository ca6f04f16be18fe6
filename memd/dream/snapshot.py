"""Snapshots of a memory dir (R-B3): a byte copy taken before a dream changes anything.

A snapshot is a folder of copies plus ``manifest.json`` (relative path → SHA-256). It holds
every regular file below the memory dir except the lock files and anything inside a ``.git``
folder; symbolic links and other special files are never followed or copied (they are listed
in ``skipped``). Reads use ``O_NOFOLLOW | O_NONBLOCK`` and a total budget, so a FIFO or a huge
file cannot hang or exhaust the daemon: an over-budget tree is refused (:class:`TooLarge`),
because a dream that cannot be undone must not start.

:func:`restore_tree` makes the memory dir byte-identical to a snapshot (files not in it are
removed, the lock files are left alone). Everything here blocks; run it in a worker thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from memd.atomic import write_atomic
from memd.dream.lock import FLOCK_NAME, LOCK_NAME

MANIFEST = "manifest.json"
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
    """A regular file's bytes (never through a link, never a FIFO); ``None`` if it is not
    one or is gone. Raises :class:`TooLarge` past ``limit``."""
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


def walk(memory_dir: Path, folders: list[str] | None = None) -> tuple[list[str], list[str]]:
    """The regular files (relative, sorted) and the skipped special entries of a memory dir;
    ``folders`` collects the sub-folders."""
    files: list[str] = []
    skipped: list[str] = []
    root = str(memory_dir)
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d != ".git" and not _is_link(folder, d, skipped, root))
        if folders is not None:
            folders.extend(os.path.relpath(os.path.join(folder, d), root) for d in dirs)
        for name in sorted(names):
            relative = os.path.relpath(os.path.join(folder, name), root)
            if is_lock_file(relative):
                continue
            try:
                mode = os.lstat(os.path.join(folder, name)).st_mode
            except OSError:
                continue
            (files if stat.S_ISREG(mode) else skipped).append(relative)
    return files, skipped


def _is_link(folder: str, name: str, skipped: list[str], root: str) -> bool:
    path = os.path.join(folder, name)
    if os.path.islink(path):
        skipped.append(os.path.relpath(path, root))
        return True
    return False


def current_tree(memory_dir: Path) -> Tree:
    """Hashes of the memory dir as it is now."""
    files, skipped = walk(memory_dir)
    hashes: dict[str, str] = {}
    for relative in files:
        data = read_regular(memory_dir / relative)
        if data is not None:
            hashes[relative] = sha256(data)
    return Tree(hashes, tuple(skipped))


def take(memory_dir: Path, into: Path, *, max_bytes: int = SNAPSHOT_MAX_BYTES) -> Tree:
    """Copy the memory dir into ``into`` (created); raises :class:`TooLarge` over budget."""
    folders: list[str] = []
    files, skipped = walk(memory_dir, folders)
    store = into / FILES
    store.mkdir(parents=True, exist_ok=True)
    hashes: dict[str, str] = {}
    budget = max_bytes
    for relative in files:
        data = read_regular(memory_dir / relative, limit=budget)
        if data is None:
            continue
        budget -= len(data)
        target = store / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        hashes[relative] = sha256(data)
    tree = Tree(hashes, tuple(skipped), tuple(sorted(folders)))
    manifest = {"files": hashes, "skipped": list(skipped), "dirs": list(tree.dirs)}
    write_atomic(into / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
    return tree


def load(into: Path) -> Tree | None:
    """A snapshot's manifest; ``None`` when missing or unreadable."""
    try:
        raw = json.loads((into / MANIFEST).read_bytes())
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


def put_back(memory_dir: Path, relative: str, data: bytes | None) -> None:
    """Make one file hold ``data`` again (``None``: remove it)."""
    target = memory_dir / relative
    if data is None:
        with contextlib.suppress(FileNotFoundError):
            if not target.is_dir() or target.is_symlink():
                target.unlink()
        return
    if target.is_symlink() or (target.exists() and not target.is_file()):
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink()
    write_atomic(target, data)


def restore_tree(memory_dir: Path, into: Path) -> list[str]:
    """Make ``memory_dir`` byte-identical to the snapshot; the relative paths it changed."""
    saved = load(into)
    if saved is None:
        raise FileNotFoundError(f"no usable snapshot in {into}")
    now = current_tree(memory_dir).files
    changed: list[str] = []
    for relative in sorted(set(now) | set(saved.files)):
        if now.get(relative) == saved.files.get(relative):
            continue
        put_back(
            memory_dir, relative, saved_bytes(into, relative) if relative in saved.files else None
        )
        changed.append(relative)
    prune_new_dirs(memory_dir, saved)
    return changed


def prune_new_dirs(memory_dir: Path, saved: Tree) -> None:
    """Remove empty folders the snapshot did not have (deepest first; never a full one)."""
    now: list[str] = []
    walk(memory_dir, now)
    keep = set(saved.dirs)
    for relative in sorted(now, key=lambda d: d.count(os.sep), reverse=True):
        if relative not in keep:
            with contextlib.suppress(OSError):
                os.rmdir(memory_dir / relative)
