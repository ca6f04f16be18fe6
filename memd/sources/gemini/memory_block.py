"""memd's block in Gemini CLI's project memory file (pure: bytes in, bytes out).

Gemini CLI 0.61.0 sends ``~/.gemini/tmp/<project>/memory/MEMORY.md`` with every request
(docs/ARCHITECTURE.md, "The other agents' own memories"). memd's verified memories go there
as one block between two marker lines, after the user's own bytes::

    <user's bytes>\\n
    <!-- memd:begin … -->
    …
    <!-- memd:end -->\\n

:func:`with_block` adds or replaces the block; :func:`without_block` takes it out and gives
the user's bytes back exactly (the one line break memd put before it too). A marker is a
whole line: ``<!-- memd:begin`` at its start, or exactly ``<!-- memd:end -->``. Text memd
puts inside never holds one (:func:`_inert`), so the block's end is the first end marker
after its begin. A file whose markers do not make exactly one block (someone else's copy,
a half-deleted block) is not touched: :class:`Tangled`. A block in a file memd made says so
in its begin line, and taking it out removes the file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from memd.sources.native import Served

BEGIN: Final = b"<!-- memd:begin"
END: Final = b"<!-- memd:end -->"
MADE: Final = b" (memd made this file)"
_BEGIN_LINE: Final = (
    b"<!-- memd:begin: memd's memories, checked against the code; memd rewrites this block"
    b" (off: agents.gemini.native_memory: false) -->"
)
HEADING: Final = "# Memories memd keeps for this project (checked against the code)"
MEMORY_MARK: Final = "<!-- memd:memory "
_UNSAFE_PATH: Final = re.compile(r"[\x00-\x1f\x7f]|-->")


class Tangled(ValueError):
    """The file's markers do not make one block memd could have written."""


def render(memories: Sequence[Served], budget: int, *, made: bool) -> tuple[bytes, list[str]]:
    """The block for ``memories`` (in order, each whole while the block stays within
    ``budget`` bytes) and the paths of those it holds; ``b""`` when none fits."""
    begin = _BEGIN_LINE[: -len(b" -->")] + (MADE if made else b"") + b" -->"
    head = begin + b"\n" + HEADING.encode() + b"\n"
    tail = END + b"\n"
    parts: list[bytes] = []
    held: list[str] = []
    used = len(head) + len(tail)
    for memory in memories:
        if _UNSAFE_PATH.search(memory.path):
            continue  # a name the marker could not carry back
        part = _entry(memory)
        if used + len(part) > budget:
            continue
        parts.append(part)
        held.append(memory.path)
        used += len(part)
    if not parts:
        return b"", []
    return head + b"".join(parts) + tail, held


def _entry(memory: Served) -> bytes:
    kind = f"{memory.kind} memory" if memory.kind else "memory"
    lines = [
        "",
        f"## {_inert(memory.name)} ({kind}, updated {memory.updated})",
        f"{MEMORY_MARK}{memory.path} -->",
        _inert(memory.content.strip()),
    ]
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")


def _inert(text: str) -> str:
    """``text`` with no line a marker could be read from."""
    return text.replace("<!-- memd:", "<!-- memd\u200b:")


def _span(data: bytes) -> tuple[int, int, bytes] | None:
    """Where memd's block is in ``data`` (start, end past its last line, its begin line),
    None when there is none; :class:`Tangled` when the markers make no single block."""
    begins: list[int] = []
    ends: list[int] = []
    at = 0
    for line in data.split(b"\n"):
        if line.startswith(BEGIN):
            begins.append(at)
        elif line == END:
            ends.append(at)
        at += len(line) + 1
    if not begins and not ends:
        return None
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise Tangled(f"{len(begins)} begin and {len(ends)} end markers of memd's block")
    start, stop = begins[0], ends[0] + len(END)
    if data[stop : stop + 1] == b"\n":
        stop += 1
    return start, stop, data[start : data.index(b"\n", start)]


def with_block(data: bytes, block: bytes) -> bytes:
    """``data`` with memd's block set to ``block`` (``b""``: taken out)."""
    if not block:
        return without_block(data)
    span = _span(data)
    if span is None:
        return data + b"\n" + block if data else block
    start, stop, _ = span
    return data[:start] + block + data[stop:]


def without_block(data: bytes) -> bytes:
    """``data`` without memd's block: the user's bytes as they were before it was added."""
    span = _span(data)
    if span is None:
        return data
    start, stop, _ = span
    return data[: max(0, start - 1)] + data[stop:]


def made_by_memd(data: bytes) -> bool:
    """Whether ``data`` is memd's block alone in a file memd made (taking it out removes
    the file)."""
    span = _span(data)
    return span is not None and span[0] == 0 and span[1] == len(data) and MADE in span[2]


def held(data: bytes) -> frozenset[str]:
    """The memories (absolute paths) memd's block in ``data`` holds; none when the file
    has no block of memd's or its markers are tangled."""
    try:
        span = _span(data)
    except Tangled:
        return frozenset()
    if span is None:
        return frozenset()
    found: set[str] = set()
    mark = MEMORY_MARK.encode()
    for line in data[span[0] : span[1]].split(b"\n"):
        if line.startswith(mark) and line.endswith(b" -->"):
            found.add(line[len(mark) : -len(b" -->")].decode("utf-8", "surrogateescape"))
    return frozenset(found)
