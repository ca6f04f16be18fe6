"""Recording what memories memd's agents wrote cite, in their files (issue 26).

``remember`` records a memory's citations as it writes it (:func:`memd.memory.remember.
write_memory`); a memory extraction's or a dream's agent writes files itself, so once its run
is kept, :func:`record_citations` goes over the files it touched and writes each one's
``citations`` frontmatter (see :mod:`memd.memory.citations`) as seen now: the commit, branch
and hash the cited code has when the memory was written.

Only the frontmatter is touched: a file without a ``citations`` key gets the block appended
before its closing fence, every other byte kept; one that has the key gets it replaced. A file
whose recorded citations still name what its text cites (the same paths and lines, and every
recorded symbol still named) keeps them: a run that leaves a memory's claims alone does not
move its baseline, so a claim the code stopped matching still warns. A file whose
frontmatter does not parse cleanly, a link, or one over the size limit is left alone (its
citations are inferred when read, as for anyone's memory). A file another program (Claude
Code, the user) writes while memd cites it is not overwritten: what the file holds is
compared with what was read just before the rename, and when it differs the file is read
and cited again.

Blocking: call from a worker thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from memd.confined import Area, ChangeGuard, shown
from memd.memory.citations import Citation, candidate_symbols, from_frontmatter, infer
from memd.memory.frontmatter import parse_document
from memd.memory.paths import INDEX_FILENAME
from memd.memory.scan import opened_area

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 256 * 1024
WRITE_ATTEMPTS = 3
_FENCE = "---"

Cite = Callable[[str], list[dict[str, Any]] | None]


@dataclass(frozen=True)
class Recorded:
    changed: tuple[str, ...]  # files whose citations were written
    failed: tuple[tuple[str, str], ...] = ()  # (file, why) the disk refused


def record_citations(
    memory_dir: Path,
    relatives: Iterable[str],
    cite: Cite,
    guard: ChangeGuard | None = None,
) -> Recorded:
    """Write the ``citations`` of each topic file in ``relatives`` (relative to
    ``memory_dir``) that does not record them as its text cites them now; the relative paths
    rewritten and those the disk refused. ``guard`` is told each rewrite before it is made
    (a dream records it; one it refuses is not made, and counts as refused by the disk). A
    file that cites nothing and records nothing is left as it is; one that cannot be read is
    passed over, never raised."""
    changed: list[str] = []
    failed: list[tuple[str, str]] = []
    with opened_area(memory_dir, guard) as area:
        if area is None:
            return Recorded((), ())
        for relative in dict.fromkeys(relatives):
            if not relative.endswith(".md") or relative.rsplit("/", 1)[-1] == INDEX_FILENAME:
                continue
            done = _record_one(area, relative, cite)
            if isinstance(done, str):
                failed.append((relative, done))
            elif done:
                changed.append(relative)
    return Recorded(tuple(changed), tuple(failed))


def _record_one(area: Area, relative: str, cite: Cite) -> bool | str:
    """Whether the file was rewritten, or why the disk refused it. A file someone else
    wrote while its citations were made is read again and cited anew, at most
    :data:`WRITE_ATTEMPTS` times, then left as they wrote it (never overwritten)."""
    for _ in range(WRITE_ATTEMPTS):
        done = _record_once(area, relative, cite)
        if done is not None:
            return done
    log.info("left the citations of %s unrecorded: it kept changing", shown(relative))
    return False


def _record_once(area: Area, relative: str, cite: Cite) -> bool | str | None:
    """As :func:`_record_one`; ``None`` when the file changed between the read and the
    write (nothing was written)."""
    try:
        data, _ = area.read(relative, max_bytes=MAX_FILE_BYTES + 1)
    except (OSError, ValueError):
        return False
    if len(data) > MAX_FILE_BYTES:
        return False
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    document = parse_document(text)
    if not document.has_frontmatter or document.problems:
        return False
    recorded = from_frontmatter(document.meta.extra)
    if recorded is not None and _still_cited(recorded, document.body):
        return False
    rows = cite(document.body)
    if rows is None or (not rows and recorded is None):
        return False  # checks off, or it cites nothing: no key needed to say so
    updated = with_citations(text, rows, replace=recorded is not None)
    if updated is None or updated == text:
        return False
    try:
        written = area.write(relative, updated.encode("utf-8"), expected=data)
    except OSError as exc:
        log.warning("cannot record the citations of %s: %s", shown(relative), exc)
        return exc.strerror or type(exc).__name__
    return True if written else None


def _still_cited(recorded: Sequence[Citation], body: str) -> bool:
    """The recorded citations name what ``body`` cites: the same paths and lines, and each
    recorded symbol still named in it."""
    inferred = {(c.path, c.lines) for c in infer(body)}
    named = set(candidate_symbols(body))
    same_places = {(c.path, c.lines) for c in recorded} == inferred
    return same_places and all(s in named for c in recorded for s in c.symbols)


def with_citations(text: str, rows: list[dict[str, Any]], *, replace: bool) -> str | None:
    """``text`` (a memory with clean frontmatter) with ``citations: rows`` in its
    frontmatter; ``None`` when its frontmatter cannot be found again."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != _FENCE:
        return None
    close = next((i for i in range(1, len(lines)) if lines[i].strip() in (_FENCE, "...")), None)
    if close is None:
        return None
    block = "".join(lines[1:close])
    if replace:
        loaded = yaml.safe_load(block) if block.strip() else {}
        if not isinstance(loaded, dict):
            return None
        loaded["citations"] = rows
        new_block = _dump(loaded)
    else:
        if block and not block.endswith("\n"):
            block += "\n"
        new_block = block + _dump({"citations": rows})
    return "".join([lines[0], new_block, *lines[close:]])


def _dump(data: dict[str, Any]) -> str:
    return str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1 << 30))
