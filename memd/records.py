"""memd's own records, read back from its state dir: capped, and never why memd cannot start.

Every record memd keeps (sessions' figures, the usage ledger, extraction cursors, notes
records, the usage and archive records) is read at start or on first use. A record is memd's
own, but the disk is not: a crash half-way through someone's hand edit, a restore from a
backup of another version, a FIFO or a directory left at its name, 20 GB of garbage, or
JSON nested a million deep (which ends Python's parser in ``RecursionError``). Any of them
once kept the daemon from starting at all.

:func:`load_record` reads at most ``cap`` bytes without blocking (a FIFO is refused, not
waited on) and hands them to the caller's decoder. A record that cannot be read or decoded
is moved aside as ``<name>.corrupt`` (its bytes kept for whoever wants to look, never
deleted), logged with the reason, and the caller starts from empty, as after a first start.
A record that is absent is simply ``None``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeVar

from memd.errors import MemdError
from memd.regular_file import open_regular_target, reason

log = logging.getLogger(__name__)

T = TypeVar("T")

# What a decoder may raise on bytes that are not the record it expects: msgspec's DecodeError
# and UnicodeDecodeError are ValueErrors; RecursionError is deep nesting; the rest are shapes.
UNREADABLE: Final = (ValueError, TypeError, KeyError, AttributeError, RecursionError, MemdError)


class Unreadable(ValueError):
    """The file is there but is not a record memd can read (too large, not a file)."""


def load_record(path: Path, cap: int, what: str, decode: Callable[[bytes], T]) -> T | None:
    """``decode`` of the record at ``path``; ``None`` when there is none, and when it cannot
    be read or decoded (then it is moved aside and the reason logged). ``what`` names the
    record in the log ("the usage ledger")."""
    try:
        raw = read_capped(path, cap)
    except FileNotFoundError:
        return None
    except (OSError, Unreadable) as exc:
        set_aside(path, what, reason(exc) if isinstance(exc, OSError) else str(exc))
        return None
    try:
        return decode(raw)
    except UNREADABLE as exc:
        set_aside(path, what, f"{type(exc).__name__}: {str(exc)[:200]}")
        return None


def read_capped(path: Path, cap: int) -> bytes:
    """The bytes of the regular file ``path`` names, refusing one larger than ``cap``.

    Raises :class:`FileNotFoundError` when it is absent, :class:`Unreadable` when it is too
    large, and :class:`OSError` as :func:`memd.regular_file.open_regular_target` does.
    """
    with open_regular_target(path) as file:
        raw = file.read(cap + 1) or b""
    if len(raw) > cap:
        raise Unreadable(f"larger than {cap} bytes")
    return raw


def set_aside(path: Path, what: str, why: str) -> None:
    """Move an unreadable record to ``<name>.corrupt`` so a fresh one can be written without
    losing its bytes. A disk that refuses the move leaves it where it is (the next write
    replaces it then; memd has nothing better to keep)."""
    aside = path.with_name(path.name + ".corrupt")
    try:
        path.replace(aside)
    except OSError as exc:
        log.warning(
            "%s %s is unreadable (%s) and could not be moved aside (%s); starting empty",
            what,
            path,
            why,
            reason(exc),
        )
        return
    log.warning("%s %s is unreadable (%s); moved to %s, starting empty", what, path, why, aside)
