"""Index files merged by lines, and conflict copies (pure).

An index (``MEMORY.md``) is a list of one-line pointers that two people extend at once all
the time; a conflict copy of it would help no one. :func:`merge_lines` keeps every line both
sides kept, and every line either side added; a line goes when either side removed it and
the other did not add it back. The remote's order comes first, then this machine's new lines.

A memory both sides changed keeps the remote's version under its name and this machine's
beside it, under :func:`conflict_name`: the name carries the copy's own object id, so a sync
that runs again after a kill finds the copy it made instead of making a second one. The copy
is marked (:func:`mark_conflict`: ``metadata.reconcile_with``) so that the next dream merges
the two and removes the copy.
"""

from __future__ import annotations

from memd.team.provenance import set_metadata

RECONCILE_KEY = "reconcile_with"
CONFLICT_MARK = ".conflict-"


def merge_lines(base: bytes, local: bytes, remote: bytes) -> bytes:
    """The three-way union of ``base``, ``local`` and ``remote`` by lines (see above). A line
    that occurs more than once (blank lines) counts each occurrence apart."""
    b, here, r = _keyed(base), _keyed(local), _keyed(remote)
    removed = (b.keys() - here.keys()) | (b.keys() - r.keys())
    out: dict[tuple[bytes, int], None] = {}
    for key in r:
        if key not in removed:
            out.setdefault(key, None)
    for key in here:
        if key not in b:
            out.setdefault(key, None)
    return b"".join(line for line, _ in out)


def _keyed(data: bytes) -> dict[tuple[bytes, int], None]:
    """Each line of ``data`` (ended with a newline) with its occurrence number."""
    lines = data.splitlines(keepends=True)
    if lines and not lines[-1].endswith(b"\n"):
        lines[-1] += b"\n"
    seen: dict[bytes, int] = {}
    keyed: dict[tuple[bytes, int], None] = {}
    for line in lines:
        seen[line] = seen.get(line, 0) + 1
        keyed[(line, seen[line])] = None
    return keyed


def conflict_name(path: str, oid: str) -> str:
    """Where the local side of a conflict on ``path`` is kept: ``x.md`` →
    ``x.conflict-<8 hex of the copy's id>.md``."""
    stem = path[:-3] if path.endswith(".md") else path
    return f"{stem}{CONFLICT_MARK}{oid[:8]}.md"


def mark_conflict(text: str, path: str) -> str:
    """``text`` (the local side of a conflict on ``path``) marked for the dream."""
    return set_metadata(text, {RECONCILE_KEY: path})
