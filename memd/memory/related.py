"""Related words for the lexical ranker's query expansion: a table shipped with memd.

``related.txt`` (package data beside this module) holds, for about 11,000 English terms
(Snowball stems, as :func:`memd.memory.terms.analyze` makes them), the few terms nearest in
meaning, each with how alike it is (the cosine in hundredths): "injuri" -> "injur" 0.88,
"wound" 0.60; "pet" -> "dog" 0.76, "cat" 0.67. It was distilled offline from a static
embedding model (``bench/thesaurus_build.py``; the file's header names the model and the
command), so recall needs no model, no numpy and no download to meet "injury" with "twisted
his knee" a little way.

The table is read at the first lookup and kept as one bytes object (the lines, sorted by
term) and an array of line offsets, so it costs about its file size in memory per process,
and a lookup is a binary search: O(log n) per query term, nothing per memory. A missing,
oversized or malformed file gives an empty table and one log line; a lookup never raises,
whatever the term.
"""

from __future__ import annotations

import logging
import re
import threading
from array import array
from collections.abc import Iterable
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from memd.changes import CHANGES

log = logging.getLogger(__name__)

HEADER_MARK = "#memd-related 2"
SOURCE: Traversable | Path = resources.files(__package__) / "related.txt"
MAX_BYTES = 1024 * 1024  # the table shipped is 0.55 MB
MAX_TERM = 64  # no term of the table is longer; a longer one is looked up no further
NEAREST = 5  # related terms the ranker adds per query term
WEIGHT = 0.6  # a related term weighs this times its cosine squared (a query term: 1.0)
_LOCK = threading.Lock()
_ALLOWED = b"abcdefghijklmnopqrstuvwxyz0123456789 \n"
_GAPS = (b"  ", b" \n", b"\n ", b"\n\n")  # an empty term or line
_LINE = re.compile(rb"[a-z0-9]+(?: [a-z0-9]+ [0-9]{2})*")  # the term, then (near, alike)*
_PROBLEM: list[str] = []  # why the table last read is unusable (status), at most one


class Problem(Exception):
    """The table's bytes are not a table; the message says what is wrong."""


class Related:
    """The table's loaded form: ``blob`` holds the lines, ``starts`` where each begins (and
    one past the last); a line is the term, then each neighbour and its cosine in hundredths
    (two digits), separated by spaces."""

    __slots__ = ("blob", "starts")

    def __init__(self, blob: bytes = b"", starts: array[int] | None = None) -> None:
        self.blob = blob
        self.starts = starts if starts is not None else array("I", [0])

    def __len__(self) -> int:
        return len(self.starts) - 1

    def neighbours(self, term: str) -> tuple[tuple[str, float], ...]:
        """The terms related to ``term`` with how alike each is (a cosine, 0.5-0.99 in the
        table shipped), nearest first; none when it is not in the table."""
        if not term or len(term) > MAX_TERM or not term.isascii():
            return ()
        key = term.encode("ascii")
        low, high = 0, len(self)
        while low < high:
            middle = (low + high) // 2
            found = self._key(middle)
            if found == key:
                line = self.blob[self.starts[middle] : self.starts[middle + 1] - 1]
                words = line.decode("ascii").split()
                pairs = zip(words[1::2], words[2::2], strict=True)
                return tuple((near, int(alike) / 100) for near, alike in pairs)
            if found < key:
                low = middle + 1
            else:
                high = middle
        return ()

    def _key(self, line: int) -> bytes:
        start, end = self.starts[line], self.starts[line + 1] - 1
        space = self.blob.find(b" ", start, end)
        return self.blob[start : end if space < 0 else space]


def expand(terms: Iterable[str], count: int) -> dict[str, float]:
    """The ``count`` nearest related terms of each of ``terms`` (from :func:`table`) with how
    alike each is, in order; never ``terms`` themselves. A term related to two of ``terms``
    keeps its similarity to the first."""
    given = set(terms := list(terms))
    found: dict[str, float] = {}
    for term in terms:
        for near, alike in table().neighbours(term)[:count]:
            if near not in given:
                found.setdefault(near, alike)
    return found


def parse(data: bytes) -> Related:
    """The table in ``data`` (a ``related.txt``), or :class:`Problem`: the header first,
    ``#`` comment lines, then one line per term in strictly increasing order: the term, then
    pairs of a neighbour and its cosine in hundredths (two digits), all lower-case ASCII
    letters and digits separated by single spaces."""
    if len(data) > MAX_BYTES:
        raise Problem(f"{len(data)} bytes, more than {MAX_BYTES}")
    if not data.startswith(HEADER_MARK.encode("ascii")):
        raise Problem(f"it does not start with {HEADER_MARK!r}")
    if not data.endswith(b"\n"):
        raise Problem("its last line is cut short")
    at = 0
    while data.startswith(b"#", at):
        at = data.index(b"\n", at) + 1
    blob = data[at:]
    framed = b"\n" + blob  # so that a gap at the start shows too
    if blob.translate(None, _ALLOWED) or any(gap in framed for gap in _GAPS):
        raise Problem("a line is not lower-case terms separated by single spaces")
    starts = array("I", [0])
    previous, at = b"", 0
    while at < len(blob):  # one key at a time: no list of lines, however long the table
        end = blob.index(b"\n", at)
        space = blob.find(b" ", at, end)
        key = blob[at : end if space < 0 else space]
        if len(key) > MAX_TERM or key <= previous:
            raise Problem(f"line {len(starts)} is out of order or too long: {key[:40]!r}")
        if _LINE.fullmatch(blob, at, end) is None:
            raise Problem(f"line {len(starts)} is not a term, then pairs of a term and two digits")
        previous, at = key, end + 1
        starts.append(at)
    return Related(blob, starts)


def table() -> Related:
    """The shipped table, read at the first call (one reader at a time, so it is read and
    any problem logged once); an empty one if it cannot be read or is not a table."""
    with _LOCK:
        return loaded()


@cache
def loaded() -> Related:
    """:func:`table` without the lock; ``loaded.cache_clear()`` makes the next call read
    :data:`SOURCE` again."""
    _PROBLEM.clear()
    try:
        with SOURCE.open("rb") as file:
            found = parse(file.read(MAX_BYTES + 1))
    except (OSError, Problem, ValueError) as exc:
        log.warning("related-words table %s unusable (%s): recall expands no words", SOURCE, exc)
        _PROBLEM.append(f"the table {SOURCE} is unusable ({exc}); reinstall memd")
        found = Related()
    CHANGES.bump()
    return found


def statistics() -> dict[str, Any]:
    """For ``status`` (``recall_stages.lexical.related``): whether the table has been read
    (at the first recall), the terms it holds, or why it is unusable. Never reads it."""
    if not loaded.cache_info().currsize:
        return {"read": False}
    return {"read": True, "terms": len(loaded()), "off_reason": next(iter(_PROBLEM), None)}
