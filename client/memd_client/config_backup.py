"""The backup memd keeps of an agent's config file it edits, and giving the file back.

Every installer of memd's entries (``install-hooks`` for Claude Code, Codex and Gemini, and
the trust it records in Codex's ``config.toml``) goes through here, so they all keep the same
promise:

- before memd first changes a file, its bytes are copied to ``<file>.memd-backup`` (with the
  file's mode); a later install never overwrites that copy, which stays the user's original;
- when uninstalling leaves the file saying what the backup says (memd's install was the
  only change since), the backup's exact bytes come back and the backup goes; a file memd
  created, left with nothing in it, is removed;
- otherwise only memd's entries go, and the backup stays.

Whether two texts "say the same" is the caller's parser's call (JSON, TOML): layout alone
never keeps the original from coming back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from memd_client.atomic import write_atomic
from memd_client.config_read import read_config_bytes

BACKUP_SUFFIX = ".memd-backup"
# the temp file write_atomic renames over its target: .<name>.<8 random>.tmp
_TEMP = re.compile(r"\.(.+)\.[a-z0-9_]{8}\.tmp")


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


def keep_first_backup(path: Path, *, only_memd: bool = False) -> list[str]:
    """Save the file as it is before memd first changes it; an existing backup (the user's
    original, from an earlier install) is never overwritten, and a file that holds nothing
    but memd's entries (``only_memd``: memd created it) has no original to keep. What was
    done, in words."""
    backup = backup_path(path)
    if only_memd or not path.exists() or backup.exists():
        return []
    mode = path.stat().st_mode & 0o7777
    write_atomic(backup, read_config_bytes(path), mode=mode)
    return [f"backed up the previous file to {backup}"]


def give_back(
    path: Path, new: bytes, same: Callable[[bytes, bytes], bool], *, empty: bool
) -> list[str]:
    """Write what uninstalling leaves (``new``; ``empty`` when it holds nothing): the backup's
    bytes instead when ``same(backup, new)`` says they say the same (the backup then goes),
    and no file at all when memd created it (no backup) and nothing is left."""
    backup = backup_path(path)
    try:
        saved: bytes | None = read_config_bytes(backup)
    except (OSError, ValueError):
        saved = None
    if saved is not None and _same(same, saved, new):
        write_atomic(path, saved)
        backup.unlink(missing_ok=True)
        return [f"restored {path} exactly as it was before memd's change"]
    if saved is None and empty:
        path.unlink(missing_ok=True)
        return [f"removed {path}, which held only memd's entries"]
    write_atomic(path, new)
    return [f"kept the backup of the original at {backup}"] if saved is not None else []


def _same(same: Callable[[bytes, bytes], bool], saved: bytes, new: bytes) -> bool:
    try:
        return same(saved, new)
    except (ValueError, RecursionError, UnicodeDecodeError):
        return False  # a backup that does not parse is never put back


@contextmanager
def undone_on_refusal(*files: Path) -> Iterator[None]:
    """Put ``files`` and their backups back as they were when the disk refuses one of the
    writes inside: an install or uninstall that fails leaves no half (Codex's hooks.json
    rewritten but not the trust in its config.toml) and no backup of a file memd did not
    change. Best effort: a disk that refused one write may refuse these too."""
    kept: dict[Path, bytes | None] = {}
    for path in (p for file in files for p in (file, backup_path(file))):
        with suppress(OSError, ValueError):  # one it cannot read is left alone
            kept[path] = _bytes_of(path)
    try:
        yield
    except OSError:
        for path, before in kept.items():
            with suppress(OSError, ValueError):
                if before is None:
                    path.unlink(missing_ok=True)
                elif _bytes_of(path) != before:
                    write_atomic(path, before)
        raise


def _bytes_of(path: Path) -> bytes | None:
    try:
        return read_config_bytes(path)
    except FileNotFoundError:
        return None
