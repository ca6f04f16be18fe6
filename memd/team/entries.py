"""A tree from a remote, read as hostile input (pure).

``git ls-tree -r -z -l`` lists every entry of a tree the remote sent: its mode, type, object
id, size and name. Anyone who can push to the remote chose all of them, so each entry is
judged before memd reads a byte of its content:

* only regular files are memories (modes 100644 and 100755); a symbolic link (120000), a
  submodule (160000) or anything else is refused, whatever its name;
* a name must be UTF-8 without control characters, hidden parts (``.git``, ``.x``), ``..`` or
  empty parts, at most :data:`MAX_DEPTH` folders deep and :data:`MAX_NAME_BYTES` long, end in
  ``.md``, and not differ from another only in case or Unicode form (two files that would be
  one on macOS or Windows);
* a file larger than the limit is refused unread, and so is every file past the count or the
  total size the limits allow (in name order, so every machine refuses the same ones).

What is refused is named with the reason (a name that is not UTF-8 is shown escaped) and never
written here; the sync leaves it on the remote as it is.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

from memd_client.names import escape_name

MAX_DEPTH = 4  # folders and the file: team/<a>/<b>/<c>/x.md
MAX_NAME_BYTES = 512
MAX_PART_BYTES = 255
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")
_OID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
FILE_MODES = frozenset({b"100644", b"100755"})
_KIND_OF_MODE = {
    b"120000": "a symbolic link",
    b"160000": "a submodule (gitlink)",
    b"040000": "a folder",
}


@dataclass(frozen=True)
class Limits:
    """What one tree may hold: files, bytes per file, bytes in all."""

    max_files: int = 20_000
    max_file_bytes: int = 64 * 1024
    max_total_bytes: int = 64 * 1024 * 1024


@dataclass(frozen=True)
class Blob:
    """A file of the tree memd may read: its object id and size."""

    oid: str
    size: int


@dataclass(frozen=True)
class Refusal:
    """An entry memd does not take: its name as shown (escaped), why, and its object id."""

    name: str
    reason: str
    oid: str = ""


@dataclass(frozen=True)
class Listing:
    """A tree as memd takes it: the files by name, what was refused, whether git's listing
    was cut at its output limit (then more entries exist than were read)."""

    blobs: dict[str, Blob]
    refused: tuple[Refusal, ...]
    cut: bool = False


def shown(raw: bytes) -> str:
    """A name from a remote as memd shows it: UTF-8 as is, other bytes escaped."""
    return escape_name(os.fsdecode(raw))


def name_problem(raw: bytes) -> str | None:
    """Why ``raw`` (a path inside the tree) is not a memory's name, else ``None``."""
    if len(raw) > MAX_NAME_BYTES:
        return f"its name is longer than {MAX_NAME_BYTES} bytes"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "its name is not UTF-8"
    parts = text.split("/")
    if len(parts) > MAX_DEPTH:
        return f"it is more than {MAX_DEPTH - 1} folders deep"
    for part in parts:
        if part in ("", ".", ".."):
            return "its name has an empty, '.' or '..' part"
        if part.startswith("."):
            return "its name has a hidden part (starting with '.')"
        if len(part.encode()) > MAX_PART_BYTES:
            return f"a part of its name is longer than {MAX_PART_BYTES} bytes"
    if _BAD_CHARS.search(text):
        return "its name holds a control character or a backslash"
    if not text.endswith(".md") or text.endswith("/.md"):
        return "it is not a Markdown file (*.md)"
    return None


def fold(name: str) -> str:
    """The form two names share when a case-insensitive or normalising file system would
    make them one file."""
    return unicodedata.normalize("NFC", name).casefold()


def read_listing(out: bytes, *, cut: bool, limits: Limits, prefix: bytes = b"") -> Listing:
    """The entries of ``ls-tree -r -z -l`` output ``out`` judged (see the module docstring).
    ``prefix``: a folder the listing is of (folder mode), stripped from every name; entries
    outside it are ignored. ``cut``: git's output was cut at its limit."""
    blobs: dict[str, Blob] = {}
    refused: list[Refusal] = []
    seen: dict[str, str] = {}
    total = 0
    for mode, kind, oid, size, raw in _entries(out):
        if prefix:
            if not raw.startswith(prefix):
                continue
            raw = raw[len(prefix) :]
        why = _entry_problem(mode, kind, size, raw, limits)
        if why is None:
            name = raw.decode("utf-8")
            other = seen.setdefault(fold(name), name)
            if other != name:
                why = f"its name differs from {other!r} only in case or Unicode form"
            elif len(blobs) >= limits.max_files:
                why = f"the tree holds more than team.max_files ({limits.max_files}) files"
            elif total + size > limits.max_total_bytes:
                why = f"the tree holds more than team.max_total_bytes ({limits.max_total_bytes})"
        if why is not None:
            refused.append(Refusal(shown(raw), why, oid))
            continue
        blobs[raw.decode("utf-8")] = Blob(oid, size)
        total += size
    return Listing(blobs, tuple(refused), cut)


def _entry_problem(mode: bytes, kind: bytes, size: int, raw: bytes, limits: Limits) -> str | None:
    if mode not in FILE_MODES or kind != b"blob":
        return f"it is {_KIND_OF_MODE.get(mode, f'an entry of mode {shown(mode)}')}"
    problem = name_problem(raw)
    if problem is not None:
        return problem
    if size < 0:
        return "git gave no size for it"
    if size > limits.max_file_bytes:
        return f"it is {size} bytes, over team.max_file_bytes ({limits.max_file_bytes})"
    return None


def _entries(out: bytes) -> Iterator[tuple[bytes, bytes, str, int, bytes]]:
    """(mode, type, object id, size, name) of each whole entry; a cut last one is skipped."""
    for record in out.split(b"\0"):
        head, tab, raw = record.partition(b"\t")
        fields = head.split()
        if not tab or len(fields) != 4 or not raw:
            continue
        mode, kind, oid, size = fields
        oid_text = oid.decode("ascii", "replace")
        if not _is_oid(oid_text):
            continue
        yield mode, kind, oid_text, int(size) if size.isdigit() and len(size) < 16 else -1, raw


def _is_oid(text: str) -> bool:
    return _OID.fullmatch(text) is not None
