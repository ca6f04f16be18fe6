"""MEMORY.md, the memory index: loading under the size cap (R-M2) and editing its entries.

The index goes into every session's context, so only its head is loaded: at most 200 lines and
25,000 bytes (UTF-8), whichever limit is reached first, always cut at a line boundary. When
anything is cut, a notice is appended saying the index is too large and entries should stay
short. An index within both limits is loaded whole.

What is loaded, and counted, is what Claude Code loads since 2.1.211 (:func:`loaded_content`,
measured with 2.1.331): a frontmatter block at the top and HTML comment blocks (lines from
one starting ``<!--`` to the one holding ``-->``) are left out; a comment inside an entry's
line stays.

Entries are single lines ``- [Title](file.md) — one-line hook``. Parsing accepts the variants
found in the wild (``*`` bullets, ``:`` or ``-`` instead of the dash, no hook).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal
from urllib.parse import unquote

from memd.memory.frontmatter import normalize_line

DEFAULT_MAX_LINES = 200
DEFAULT_MAX_BYTES = 25_000
ENTRY_MAX_CHARS = 150

CutReason = Literal["lines", "bytes"]
_COMMENT_OPEN = re.compile(r"^ {0,3}<!--")


@dataclass(frozen=True)
class LoadedIndex:
    """What goes into context. ``body`` is the kept head of the file, ``text`` adds the notice."""

    text: str
    body: str
    cut: CutReason | None
    total_lines: int
    total_bytes: int
    kept_lines: int
    kept_bytes: int

    @property
    def truncated(self) -> bool:
        return self.cut is not None


def index_warning(cut: CutReason, kept_lines: int, total_lines: int, total_bytes: int) -> str:
    """The notice appended to a cut index (own wording)."""
    limit = "line" if cut == "lines" else "size"
    return (
        f"\n> memd: MEMORY.md is over its {limit} limit ({total_lines} lines, {total_bytes:,} "
        f"bytes); only the first {kept_lines} lines were loaded. Keep the index to one short "
        "line per memory (about 150 characters) and put the details in the topic files.\n"
    )


def loaded_content(raw: str) -> str:
    """``raw`` without a leading frontmatter block and without HTML comment blocks: what
    Claude Code loads of an index, and counts against its limits (``raw`` itself when it
    has neither)."""
    if "<!--" not in raw and not raw.startswith("---"):
        return raw
    lines = raw.splitlines(keepends=True)
    start = 0
    if lines and lines[0].strip() == "---":
        close = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
        if close is not None:
            start = close + 1
            while start < len(lines) and not lines[start].strip():
                start += 1
    kept: list[str] = []
    in_comment = False
    for line in lines[start:]:
        if in_comment:
            in_comment = "-->" not in line
        elif _COMMENT_OPEN.match(line):
            in_comment = "-->" not in line[line.index("<!--") + 4 :]
        else:
            kept.append(line)
    return "".join(kept)


def load_index(
    raw: str, *, max_lines: int = DEFAULT_MAX_LINES, max_bytes: int = DEFAULT_MAX_BYTES
) -> LoadedIndex:
    """Cut ``raw`` to ``max_lines`` lines and ``max_bytes`` UTF-8 bytes at a line boundary.

    Only :func:`loaded_content` is loaded and counted. Blank lines after the cut do not count
    as cut content. A first line that alone exceeds ``max_bytes`` is the one case without a
    line boundary to cut at: it is cut at the last whole character that fits.
    """
    raw = loaded_content(raw)
    total_bytes = len(raw.encode("utf-8"))
    total_lines = _count_lines(raw)
    if total_lines <= max_lines and total_bytes <= max_bytes:
        return LoadedIndex(raw, raw, None, total_lines, total_bytes, total_lines, total_bytes)
    end, kept_lines, kept_bytes, cut = _cut_point(raw, max_lines, max_bytes)
    if end == 0 and raw:
        end = len(raw.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore"))
        kept_bytes = len(raw[:end].encode("utf-8"))
    body = raw[:end]
    if not raw[end:].strip():
        return LoadedIndex(body, body, None, total_lines, total_bytes, kept_lines, kept_bytes)
    notice = index_warning(cut, kept_lines, total_lines, total_bytes)
    text = body + ("" if body.endswith("\n") or not body else "\n") + notice
    return LoadedIndex(text, body, cut, total_lines, total_bytes, kept_lines, kept_bytes)


def _count_lines(text: str) -> int:
    return text.count("\n") + (0 if not text or text.endswith("\n") else 1)


def _cut_point(raw: str, max_lines: int, max_bytes: int) -> tuple[int, int, int, CutReason]:
    """(end offset, lines kept, bytes kept, which limit stopped us)."""
    pos = lines = size = 0
    while pos < len(raw):
        if lines >= max_lines:
            return pos, lines, size, "lines"
        newline = raw.find("\n", pos)
        stop = len(raw) if newline < 0 else newline + 1
        width = len(raw[pos:stop].encode("utf-8"))
        if size + width > max_bytes:
            return pos, lines, size, "bytes"
        pos, lines, size = stop, lines + 1, size + width
    return pos, lines, size, "lines"  # pragma: no cover - only reached when nothing is cut


# ---------------------------------------------------------------------------------------------
# Entries


@dataclass(frozen=True)
class IndexEntry:
    title: str
    file: str
    hook: str = ""


_ENTRY = re.compile(
    r"^\s*[-*+]\s+\[(?P<title>(?:\\.|[^\]\\])*)\]\((?P<file>[^)\s]+)\)"
    r"\s*(?:(?:—|–|--|-|:)\s*(?P<hook>.*?))?\s*$"
)


def parse_entry(line: str) -> IndexEntry | None:
    """The entry on ``line``, or ``None`` when the line is not an index entry."""
    match = _ENTRY.match(line)
    if match is None:
        return None
    title = re.sub(r"\\(.)", r"\1", match.group("title"))
    return IndexEntry(title, unquote(match.group("file")), match.group("hook") or "")


def parse_index(text: str) -> list[IndexEntry]:
    """Every entry line of an index, in order (headings and prose are skipped)."""
    return [entry for line in text.splitlines() if (entry := parse_entry(line)) is not None]


def render_entry(entry: IndexEntry, *, max_chars: int = ENTRY_MAX_CHARS) -> str:
    """``- [Title](file.md) — hook`` on one line; the hook is shortened to fit ``max_chars``."""
    title = normalize_line(entry.title).replace("\\", "\\\\").replace("]", "\\]")
    target = entry.file.replace("%", "%25").replace(" ", "%20")
    target = target.replace("(", "%28").replace(")", "%29")
    head = f"- [{title}]({target})"
    hook = normalize_line(entry.hook)
    if not hook:
        return head
    room = max_chars - len(head) - 3
    if len(hook) > room:
        hook = hook[: max(room - 1, 0)].rstrip() + "…" if room > 1 else ""
    return f"{head} — {hook}" if hook else head


def assemble_index(rows: Sequence[tuple[str, str, str]]) -> str:
    """An index assembled from the memories themselves: one entry per ``(file, name,
    description)``, in the order given (the scan's: newest first). What is loaded when a
    memory dir has topic files and no ``MEMORY.md`` (the assembled-index mode)."""
    return "".join(
        render_entry(IndexEntry(name or PurePosixPath(file).stem, file, description)) + "\n"
        for file, name, description in rows
    )


def upsert_entry(index_text: str, entry: IndexEntry, *, max_chars: int = ENTRY_MAX_CHARS) -> str:
    """The index with ``entry``'s line replaced (same file) or appended; the rest untouched."""
    line = render_entry(entry, max_chars=max_chars)
    lines = index_text.splitlines(keepends=True)
    wanted = _same_file_key(entry.file)
    for i, existing in enumerate(lines):
        parsed = parse_entry(existing)
        if parsed is not None and _same_file_key(parsed.file) == wanted:
            ending = existing[len(existing.rstrip("\r\n")) :]
            lines[i] = line + ending
            return "".join(lines)
    prefix = index_text if not index_text or index_text.endswith("\n") else index_text + "\n"
    return prefix + line + "\n"


def _same_file_key(file: str) -> str:
    return file.strip().removeprefix("./")
