"""Transcripts for the dream: the session gate's stat-only count, and the agent's narrow
search.

:func:`count_sessions` lists the ``*.jsonl`` files directly inside each project folder whose
sessions share the memory dir and keeps those modified after the lock's mtime, the
triggering session left out. It uses ``os.scandir`` and one ``stat`` per entry; it never
opens a transcript.

:class:`TranscriptGrep` is the agent's only way into transcripts: a literal term (never a
regular expression, which could backtrack without end on a long line), searched line by
line, answering with at most :data:`MAX_MATCHES` excerpts of at most :data:`EXCERPT_CHARS`
characters around each match, cut from the line after it was scrubbed of private spans and
secrets. Files are opened with ``O_NOFOLLOW | O_NONBLOCK``; only regular files are read, each
up to a byte budget, and one search reads at most :data:`MAX_TOTAL_BYTES`.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread

from memd.agent.tools import ToolResult, denial, error
from memd.privacy import scrub_text
from memd.sources.base import DreamScope

MAX_MATCHES = 40
EXCERPT_CHARS = 240
MAX_OUTPUT_CHARS = 12_000
MAX_BYTES_PER_FILE = 64 * 1024 * 1024
MAX_LINE_BYTES = 4 * 1024 * 1024
MAX_FILES = 2_000
MAX_TOTAL_BYTES = 512 * 1024 * 1024  # read per search, over every transcript
MIN_TERM_CHARS = 3
MAX_TERM_CHARS = 200
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# memd's own search for a one-answer dream: what it shows the model of the transcripts.
GATHER_PER_TERM = 3
GATHER_MAX_EXCERPTS = 24
GATHER_MAX_CHARS = 6_000
GATHER_MAX_FILES = 50
GATHER_MAX_BYTES = 64 * 1024 * 1024  # read over every transcript, for one run


def count_sessions(
    scopes: Sequence[DreamScope], since: float, exclude: str = ""
) -> tuple[str, ...]:
    """Sessions (as their scopes name them) with a file modified after ``since`` (stat only,
    sorted)."""
    found: set[str] = set()
    for scope in scopes:
        try:
            entries = os.scandir(scope.folder)
        except OSError:
            continue
        with entries:
            for entry in entries:
                session = scope.session_of(entry.name)
                if session is None or session == exclude:
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_mtime > since:
                    found.add(session)
    return tuple(sorted(found))


@dataclass(frozen=True)
class TranscriptGrep:
    """The TranscriptGrep tool over the session files of ``scopes``."""

    scopes: tuple[DreamScope, ...]
    secrets: bool = True

    name = "TranscriptGrep"
    description = (
        "Search this project's session transcripts (JSONL) for a specific word or phrase "
        "(literal text, at least 3 characters, not a regular expression). Returns at most 40 "
        "short excerpts around matches, newest sessions first. Whole transcripts cannot be "
        "read."
    )

    @property
    def input_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "the literal text to find"},
                "case_insensitive": {"type": "boolean", "default": False},
            },
            "required": ["pattern"],
            "additionalProperties": False,
        }

    async def run(self, args: Mapping[str, Any]) -> ToolResult:
        term = args.get("pattern")
        fold = args.get("case_insensitive", False)
        if not isinstance(term, str) or not isinstance(fold, bool):
            return error("TranscriptGrep: pattern must be a string, case_insensitive a boolean")
        if len(term.strip()) < MIN_TERM_CHARS or "\n" in term or len(term) > MAX_TERM_CHARS:
            return denial(
                f"denied: search for one specific word or phrase of {MIN_TERM_CHARS} to "
                f"{MAX_TERM_CHARS} characters on one line"
            )
        # Literal text only: a regular expression could backtrack for hours on a long line,
        # and the matching engine holds the interpreter while it does.
        regex = re.compile(re.escape(term), re.IGNORECASE if fold else 0)
        text = await anyio.to_thread.run_sync(self._search, regex)
        return ToolResult(text)

    def _search(self, regex: re.Pattern[str]) -> str:
        out: list[str] = []
        size = 0
        budget = [MAX_TOTAL_BYTES]
        for path in _newest_first(self.scopes):
            for number, excerpt, _ in _matches(path, regex, self.secrets, budget):
                line = f"{path.name}:{number}: {excerpt}"
                out.append(line)
                size += len(line) + 1
                if len(out) >= MAX_MATCHES or size >= MAX_OUTPUT_CHARS:
                    out.append("[more matches not shown; use a narrower term]")
                    return "\n".join(out)
            if budget[0] <= 0:
                out.append("[search stopped at its reading budget; use a narrower term]")
                break
        return "\n".join(out) if out else "No matches found"


def excerpts(
    scopes: Sequence[DreamScope],
    terms: Sequence[str],
    *,
    sessions: Collection[str] = (),
    secrets: bool = True,
    max_chars: int = GATHER_MAX_CHARS,
) -> list[str]:
    """Excerpts of the newest session files (of ``sessions`` when any are named) around any of
    ``terms`` (literal, case ignored), at most :data:`GATHER_PER_TERM` per term and
    :data:`GATHER_MAX_EXCERPTS` in all, within ``max_chars``; one pass reading
    at most :data:`GATHER_MAX_BYTES` (blocking)."""
    usable = [
        term.strip()
        for term in dict.fromkeys(terms)
        if MIN_TERM_CHARS <= len(term.strip()) <= MAX_TERM_CHARS and "\n" not in term
    ]
    if not usable:
        return []
    regex = re.compile("|".join(re.escape(term) for term in usable), re.IGNORECASE)
    left = {term.casefold(): GATHER_PER_TERM for term in usable}
    out: list[str] = []
    size = 0
    budget = [GATHER_MAX_BYTES]
    paths = _newest_first(scopes, frozenset(sessions))[:GATHER_MAX_FILES]
    for path in paths:
        for number, excerpt, term in _matches(path, regex, secrets, budget):
            if left.get(term, 0) <= 0:
                continue
            line = f"{path.name}:{number}: {excerpt}"
            if size + len(line) > max_chars:
                return out
            left[term] -= 1
            out.append(line)
            size += len(line) + 1
            if len(out) >= GATHER_MAX_EXCERPTS or not any(left.values()):
                return out
        if budget[0] <= 0:
            break
    return out


def _newest_first(
    scopes: Sequence[DreamScope], sessions: frozenset[str] = frozenset()
) -> list[Path]:
    """The session files of ``scopes`` (of ``sessions`` only, when any are named), newest
    first, at most :data:`MAX_FILES`."""
    found: dict[Path, float] = {}
    for scope in scopes:
        try:
            with os.scandir(scope.folder) as entries:
                for entry in entries:
                    session = scope.session_of(entry.name)
                    if session is None or (sessions and session not in sessions):
                        continue
                    if entry.is_file(follow_symlinks=False):
                        found[Path(entry.path)] = entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
    ordered = sorted(found.items(), key=lambda item: (-item[1], str(item[0])))
    return [path for path, _ in ordered[:MAX_FILES]]


def _matches(
    path: Path, regex: re.Pattern[str], secrets: bool, budget: list[int]
) -> Iterator[tuple[int, str, str]]:
    """Excerpts of matching lines (line number, excerpt, what matched, case folded), cut from
    the line after it was scrubbed whole (a secret or a private span that straddles the
    excerpt's edge never leaks a piece)."""
    for number, raw in _lines(path, budget):
        text = raw.decode("utf-8", "replace")
        if regex.search(text) is None:
            continue
        clean = scrub_text(text, secrets=secrets)
        hit = regex.search(clean)
        if hit is None:
            continue  # the match was inside something scrubbed away
        start = max(0, hit.start() - EXCERPT_CHARS // 2)
        excerpt = clean[start : start + EXCERPT_CHARS].replace("\n", " ")
        yield number, ("…" if start else "") + excerpt, hit.group(0).casefold()


def _lines(path: Path, budget: list[int]) -> Iterator[tuple[int, bytes]]:
    try:
        fd = os.open(path, _OPEN)
    except OSError:
        return
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return
        left = MAX_BYTES_PER_FILE
        number = 0
        continuing = False  # inside a line longer than MAX_LINE_BYTES: its head was searched
        while left > 0 and budget[0] > 0:
            raw = handle.readline(MAX_LINE_BYTES)
            if not raw:
                return
            left -= len(raw)
            budget[0] -= len(raw)
            if not continuing:
                number += 1
                yield number, raw
            continuing = not raw.endswith(b"\n")
