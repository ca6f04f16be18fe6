"""Git's index file read by memd itself: the first check of many citations without a process.

:func:`memd.git.index_entries` asks ``git ls-files --debug`` for what the index holds of each
tracked file (its blob, and the stat it was staged with); on a cold check of thousands of
citations that process is most of the cost. :func:`read_index` reads ``<git dir>/index``
instead, and :func:`parse_index` is a pure function of its bytes, for versions 2, 3 and 4
(v4's path prefix compression, v3's extended flags), SHA-1 or SHA-256 object ids.

The index sits in a folder others may write (a clone of anyone's project), so its bytes are
hostile: it is opened beneath the git dir's descriptor without following a link
(:class:`memd.confined.Area`), at most :data:`MAX_INDEX_BYTES` are read, and every length,
count and offset in it is checked against what was read. Anything this module does not
parse, or that does not add up, is ``None``, never an exception, and the caller asks git
instead: a truncated or lying file, a bad checksum, a split index (the ``link`` extension:
most entries live in another file), a sparse index (``sdir``: folders stand for the files
beneath them), any other extension git requires readers to understand (a lowercase
signature), an unknown version, paths longer together than :data:`MAX_NAME_BYTES` (v4
spells each path as a part of the one before it plus a few bytes: a file of a few MB could
otherwise spell paths of a hundred gigabytes).

Blocking: call from a worker thread.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from pathlib import Path
from typing import NamedTuple

from memd.confined import Area

MAX_INDEX_BYTES = 32 * 1024 * 1024
MAX_NAME_BYTES = 2 * MAX_INDEX_BYTES  # every entry's path together, once v4 spelled them out
_HEADER = struct.Struct(">4sII")
# ctime s/ns, mtime s/ns, dev, ino, mode, uid, gid, size, object id, flags
_ENTRY_20 = struct.Struct(">10I20sH")
_ENTRY_32 = struct.Struct(">10I32sH")
_EXTENSION = struct.Struct(">4sI")
_EXTENDED = 0x4000
_STAGE = 0x3000
_NAME_MASK = 0x0FFF
_MAX_VARINT_BYTES = 9
_NS = 1_000_000_000


class IndexEntry(NamedTuple):
    """What git's index holds of a tracked file: its blob and the stat it was staged with
    (a tuple: thousands are made per index read)."""

    blob: str
    ctime_ns: int
    mtime_ns: int
    ino: int
    size: int


class IndexFile(NamedTuple):
    """The stage-0 entries of an index by path, and the ``fstat`` of the file they came from
    (its mtime tells which entries are "racy")."""

    entries: dict[str, IndexEntry]
    info: os.stat_result


def read_index(git_dir: Path, oid_size: int) -> IndexFile | None:
    """The entries of ``git_dir``'s index (``oid_size``: 20 for SHA-1, 32 for SHA-256), or
    ``None`` when it cannot be read safely or parsed (see the module docstring)."""
    try:
        with Area.open(git_dir, any_owner=True, report=False) as area:
            data, info = area.read("index", max_bytes=MAX_INDEX_BYTES + 1)
    except (OSError, ValueError):
        return None
    if len(data) > MAX_INDEX_BYTES or len(data) != info.st_size:
        return None  # over the cap, or rewritten in place while read
    entries = parse_index(data, oid_size)
    return None if entries is None else IndexFile(entries, info)


def parse_index(data: bytes, oid_size: int) -> dict[str, IndexEntry] | None:
    """The stage-0 entries of an index file's bytes by path (names through ``os.fsdecode``),
    or ``None`` for anything not read here (see the module docstring)."""
    if oid_size not in (20, 32) or len(data) < _HEADER.size + oid_size:
        return None
    body, trailer = data[:-oid_size], data[-oid_size:]
    signature, version, count = _HEADER.unpack_from(body)
    if signature != b"DIRC" or version not in (2, 3, 4) or not _checksum_holds(body, trailer):
        return None
    parsed = _entries(body, version, count, oid_size)
    if parsed is None:
        return None
    entries, end = parsed
    return entries if _extensions_known(body, end) else None


def _checksum_holds(body: bytes, trailer: bytes) -> bool:
    """The trailer is the hash of the rest (or zeros: ``index.skipHash`` writes none)."""
    if not any(trailer):
        return True
    digest = hashlib.sha1 if len(trailer) == 20 else hashlib.sha256
    return digest(body, usedforsecurity=False).digest() == trailer


def _entries(
    body: bytes, version: int, count: int, oid_size: int
) -> tuple[dict[str, IndexEntry], int] | None:
    """The entries and the offset after the last; each takes at least 62 bytes, so a
    ``count`` that lies ends at the end of ``body``, not in a long loop, and their paths
    stop at :data:`MAX_NAME_BYTES` together, so v4's prefixes cannot spell a huge one each."""
    entries: dict[str, IndexEntry] = {}
    head = _ENTRY_20 if oid_size == 20 else _ENTRY_32
    fixed, decode, end = head.size, os.fsdecode, len(body)
    at, previous, named_bytes = _HEADER.size, b"", 0
    for _ in range(count):
        if at + fixed > end:
            return None
        cs, cn, ms, mn, _dev, ino, mode, _uid, _gid, size, oid, flags = head.unpack_from(body, at)
        if (flags & _EXTENDED and version < 3) or stat.S_ISDIR(mode):
            return None  # extended flags in v2, or a sparse index's folder entry
        name_at = at + fixed + (2 if flags & _EXTENDED else 0)
        named = _name(body, version, at, name_at, previous)
        if named is None or flags & _NAME_MASK != min(len(named[0]), _NAME_MASK):
            return None
        name, after = named
        named_bytes += len(name)
        if named_bytes > MAX_NAME_BYTES:
            return None
        if not flags & _STAGE:
            entries[decode(name)] = IndexEntry(oid.hex(), cs * _NS + cn, ms * _NS + mn, ino, size)
        at, previous = after, name
    return entries, at


def _name(
    body: bytes, version: int, start: int, name_at: int, previous: bytes
) -> tuple[bytes, int] | None:
    """An entry's path and the offset of the next entry. v4: how many bytes of the previous
    path to drop (git's offset varint), then the rest up to a NUL, no padding. v2/v3: the
    path up to a NUL, padded with NULs to a multiple of 8 bytes from the entry's start."""
    if version == 4:
        varint = _varint(body, name_at)
        if varint is None:
            return None
        drop, name_at = varint
        if drop > len(previous):
            return None
        prefix = previous[: len(previous) - drop]
    else:
        prefix = b""
    nul = body.find(b"\0", name_at)
    if nul < 0:
        return None
    name = prefix + body[name_at:nul]
    if version == 4:
        return (name, nul + 1) if name else None
    after = start + ((name_at - start + len(name) + 8) & ~7)
    if after > len(body) or any(body[nul:after]) or not name:
        return None
    return name, after


def _varint(body: bytes, at: int) -> tuple[int, int] | None:
    """git's offset varint (``varint.c``) at ``at``, and the offset after it."""
    value = -1
    for used in range(_MAX_VARINT_BYTES):
        if at + used >= len(body):
            return None
        byte = body[at + used]
        value = (value + 1 << 7 | byte & 0x7F) if used else byte & 0x7F
        if not byte & 0x80:
            return value, at + used + 1
    return None


def _extensions_known(body: bytes, at: int) -> bool:
    """The extensions after the entries end exactly at the checksum, and none is one a
    reader must understand (a lowercase signature: ``link``, ``sdir``, …)."""
    while at < len(body):
        if at + _EXTENSION.size > len(body):
            return False
        signature, size = _EXTENSION.unpack_from(body, at)
        if not b"A"[0] <= signature[0] <= b"Z"[0]:
            return False
        at += _EXTENSION.size + size
    return at == len(body)
