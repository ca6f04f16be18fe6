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

from collections.abc import Callable
from pathlib import Path

from memd_client.atomic import write_atomic
from memd_client.config_read import read_config_bytes

BACKUP_SUFFIX = ".memd-backup"


def backup_path(path: Path) -> Path:
    return path.with_name(path.name + BACKUP_SUFFIX)


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
