"""The backup memd keeps of an agent's config file it edits, and giving the file back.

Every installer of memd's entries (``install-hooks`` for Claude Code, Codex and Gemini, the
trust it records in Codex's ``config.toml``, ``install-mcp``) goes through here, on the file
a link names (:func:`memd_client.config_read.config_path`: the link stays a link), so they
all keep the same promise:

- before memd first changes a file, its bytes are saved in ``<file>.memd-backup``, memd's
  own file: created exclusively beside it (a temp file made with ``O_EXCL|O_NOFOLLOW``,
  written, synced, then hard-linked to the name, which fails if anything is there), the
  first line ``memd-backup 1 sha256=<digest of the rest>``, the rest the file's exact bytes
  (or the one line ``memd-backup 1 absent`` when memd creates the file: whichever installer
  empties it last removes it). A later install never overwrites it;
- a backup is trusted only when it is what memd wrote: opened without following a link, a
  regular file of the user's with no other hard link, its header intact and its digest
  right. Anything else at that name (a planted link to another file, an older memd's plain
  copy, a truncated write) is left alone, said so, and never copied into the config;
- when uninstalling leaves the file saying what the backup says (:func:`same_json`,
  :func:`same_toml`: memd's install was the only change since), the backup's exact bytes
  come back and the backup goes; a file memd created, left with nothing in it, is removed;
- otherwise only memd's entries go, and the backup stays.

The containers memd adds its entries to (``hooks`` and its events, ``mcpServers``,
``mcp_servers``, ``[hooks.state]``) say nothing when empty, so an empty one and none are the
same here: a file that had ``"hooks": {}`` comes back with it, byte for byte.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memd_client import foreign_file
from memd_client.atomic import write_atomic
from memd_client.config_read import MAX_CONFIG_BYTES, read_config_bytes

BACKUP_SUFFIX = ".memd-backup"
_HEADER = re.compile(rb"memd-backup 1 sha256=([0-9a-f]{64})\n")
_ABSENT = b"memd-backup 1 absent\n"
_HEADER_BYTES = len(b"memd-backup 1 sha256=") + 64 + 1
_OPEN = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
# the temp file write_atomic (and a backup's creation) renames or links to its target:
# .<name>.<8 random>.tmp
_TEMP = re.compile(r"\.(.+)\.[a-z0-9_]{8}\.tmp")
# What memd adds its entries under, deepest first: empty, each says what its absence says.
MEMD_CONTAINERS: tuple[tuple[str, ...], ...] = (
    ("hooks", "*"),
    ("hooks",),
    ("mcpServers",),
    ("mcp_servers",),
)


def backup_path(path: Path) -> Path:
    return path.with_name(path.name + BACKUP_SUFFIX)


def write_refused(exc: OSError, default: Path) -> str:
    """What to tell a person when the disk refuses a config file or its backup (full,
    read-only): which file (the one the refused temp file was to become, else ``default``),
    why, and that it is as it was (every write here is atomic)."""
    path = default
    if isinstance(exc.filename, str):
        path = Path(exc.filename)
        temp = _TEMP.fullmatch(path.name)
        path = path.with_name(temp.group(1)) if temp else path
    why = exc.strerror or str(exc)
    return (
        f"cannot write {path}: {why}; it is unchanged. Free some space or make it "
        "writable, then run this again"
    )


# ---------------------------------------------------------------------------------------------
# The backup file


@dataclass(frozen=True)
class Original:
    """What a backup memd wrote says the file was: its bytes, or ``None``: there was none
    (memd created it)."""

    data: bytes | None


def backup_bytes(payload: bytes | None) -> bytes:
    """What memd writes in a backup of a file whose bytes are ``payload`` (``None``: a file
    memd creates)."""
    if payload is None:
        return _ABSENT
    return b"memd-backup 1 sha256=%s\n" % hashlib.sha256(payload).hexdigest().encode() + payload


def read_backup(backup: Path) -> Original | str | None:
    """What the file was, from a backup memd wrote; ``None`` when there is none; else why
    it is not trusted, in words (see the module docstring)."""
    try:
        fd = os.open(backup, _OPEN)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "it is a symbolic link, not a backup memd wrote"
        return f"it cannot be read ({(exc.strerror or str(exc)).lower()})"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return f"it is {foreign_file.kind_of(info.st_mode)}, not a backup memd wrote"
        if info.st_nlink != 1:
            return "it has another hard link, so it is not a backup memd wrote"
        if info.st_uid != os.geteuid():
            return "it belongs to another user"
        data = foreign_file.read_fd(str(backup), fd, MAX_CONFIG_BYTES + _HEADER_BYTES)
    except OSError as exc:
        return f"it cannot be read ({(exc.strerror or str(exc)).lower()})"
    finally:
        os.close(fd)
    return _payload(data)


def _payload(data: bytes | foreign_file.Unusable) -> Original | str:
    if isinstance(data, foreign_file.Unusable):
        return f"it {data.problem}"
    if data == _ABSENT:
        return Original(None)
    header = _HEADER.match(data)
    if header is None:
        return "it does not start with memd's header (an older memd's copy, or not memd's)"
    payload = data[header.end() :]
    if hashlib.sha256(payload).hexdigest().encode() != header.group(1):
        return "its bytes are not those memd wrote (the digest in its header differs)"
    return Original(payload)


def _create_backup(backup: Path, payload: bytes | None, mode: int) -> bool:
    """Write ``backup`` exclusively: a temp file of ours, synced, then hard-linked to the
    name (which fails if anything is there, a link included). Whether it was created."""
    fd, temp = tempfile.mkstemp(dir=backup.parent, prefix=f".{backup.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(backup_bytes(payload))
            file.flush()
            os.fchmod(file.fileno(), mode)
            os.fsync(file.fileno())
        try:
            os.link(temp, backup, follow_symlinks=False)
        except FileExistsError:
            return False
    finally:
        with suppress(FileNotFoundError):
            os.unlink(temp)
    _fsync_dir(backup.parent)
    return True


def _fsync_dir(directory: Path) -> None:
    with suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def keep_first_backup(path: Path, *, only_memd: bool = False) -> list[str]:
    """Save the file ``path`` (the one a link names) as it is before memd first changes it,
    or that there is none (memd creates it): a backup memd wrote is never overwritten,
    anything else at the backup's name is left alone (and said), and a file that holds
    nothing but memd's entries (``only_memd``: an older memd created it) has no original
    to keep. What was done, in words."""
    backup = backup_path(path)
    found = read_backup(backup)
    if found is None:
        try:
            original: bytes | None = read_config_bytes(path)
        except FileNotFoundError:
            original = None
        if original is not None and only_memd:
            return []
        mode = os.stat(path).st_mode & 0o666 if original is not None else 0o600
        path.parent.mkdir(parents=True, exist_ok=True)  # as the write that follows does
        if _create_backup(backup, original, mode):
            return [f"backed up the previous file to {backup}"] if original is not None else []
        found = read_backup(backup)  # someone else's, made in between
    if isinstance(found, Original):
        return []
    return [_left_alone(backup, found)]


def _left_alone(backup: Path, why: str | None) -> str:
    return (
        f"left {backup} alone ({why}): memd keeps no backup while it is there, so uninstalling "
        "removes memd's entries but cannot give back the file's exact bytes"
    )


# ---------------------------------------------------------------------------------------------
# Giving the file back


def give_back(
    path: Path, new: bytes, same: Callable[[bytes, bytes], bool], *, empty: bool
) -> list[str]:
    """Write what uninstalling leaves (``new``; ``empty`` when it holds nothing) to ``path``
    (the file a link names): the backup's bytes instead when it is memd's and ``same(backup,
    new)`` says they say the same (the backup then goes), and no file at all when memd
    created it (no backup) and nothing is left."""
    backup = backup_path(path)
    saved = read_backup(backup)
    created = saved is None or (isinstance(saved, Original) and saved.data is None)
    if created and empty:
        path.unlink(missing_ok=True)
        if saved is not None:
            backup.unlink(missing_ok=True)
        return [f"removed {path}, which held only memd's entries"]
    if isinstance(saved, Original) and saved.data is not None and _same(same, saved.data, new):
        write_atomic(path, saved.data)
        backup.unlink(missing_ok=True)
        return [f"restored {path} exactly as it was before memd's change"]
    write_atomic(path, new)
    if isinstance(saved, Original) and saved.data is not None:
        return [f"kept the backup of the original at {backup}"]
    return [f"left {backup} alone ({saved})"] if isinstance(saved, str) else []


def _same(same: Callable[[bytes, bytes], bool], saved: bytes, new: bytes) -> bool:
    try:
        return same(saved, new)
    except (ValueError, RecursionError):
        return False  # a backup that does not parse is never put back


def same_json(saved: bytes, new: bytes) -> bool:
    """Whether two JSON config texts say the same (blank says ``{}``; memd's containers
    empty or absent alike)."""
    return _plain(foreign_file.decode_json_object(_text(saved))) == _plain(
        foreign_file.decode_json_object(_text(new))
    )


def same_toml(saved: bytes, new: bytes) -> bool:
    """Whether two TOML config texts say the same (memd's tables empty or absent alike)."""
    return _plain(foreign_file.decode_toml(_text(saved))) == _plain(
        foreign_file.decode_toml(_text(new))
    )


def _text(data: bytes) -> str:
    return foreign_file.decode_text(data, nul=True)


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` without the containers of :data:`MEMD_CONTAINERS` that are empty."""
    out = dict(data)
    for keys in MEMD_CONTAINERS:
        *parents, last = keys
        node: Any = out
        for key in parents:
            child = node.get(key) if isinstance(node, dict) else None
            if not isinstance(child, dict):
                node = None
                break
            node[key] = child = dict(child)
            node = child
        if isinstance(node, dict):
            names = list(node) if last == "*" else [last]
            for name in names:
                if node.get(name) in ({}, []):
                    del node[name]
    return out


# ---------------------------------------------------------------------------------------------
# All or nothing


@contextmanager
def undone_on_refusal(*files: Path) -> Iterator[None]:
    """Put ``files`` (the files links name) and their backups back as they were when the
    disk refuses one of the writes inside: an install or uninstall that fails leaves no
    half (Codex's hooks.json rewritten but not the trust in its config.toml) and no backup
    of a file memd did not change. Best effort: a disk that refused one write may refuse
    these too. What is not memd's at a backup's name is never read or touched."""
    kept: dict[Path, bytes | None] = {}
    for file in files:
        with suppress(OSError, ValueError):  # one it cannot read is left alone
            kept[file] = _bytes_of(file)
        if not isinstance(read_backup(backup_path(file)), str):  # memd's, or none
            kept[backup_path(file)] = _raw(backup_path(file))
    try:
        yield
    except OSError:
        for path, before in kept.items():
            with suppress(OSError, ValueError):
                if before is None:
                    path.unlink(missing_ok=True)
                elif _raw(path) != before:
                    write_atomic(path, before)
        raise


def _bytes_of(path: Path) -> bytes | None:
    try:
        return read_config_bytes(path)
    except FileNotFoundError:
        return None


def _raw(path: Path) -> bytes | None:
    """The bytes at ``path`` (not through a link; a backup's header included)."""
    found = foreign_file.read_bytes(path, MAX_CONFIG_BYTES + _HEADER_BYTES, links="refuse")
    return found if isinstance(found, bytes) else None
