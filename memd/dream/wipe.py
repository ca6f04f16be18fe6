"""The wipe guard (R-B3): is what a dream left behind a failure? A pure decision.

A run fails the guard when it leaves

* an empty or missing ``MEMORY.md`` (unless the memory dir never had any memory at all);
* more than half of the topic files that were there before deleted;
* an index it made larger that is over the R-M2 limits (lines or bytes);
* a topic file it wrote whose frontmatter is broken (unclosed, no name or description, no
  valid type). Both forms Claude Code writes count as valid: ``type`` at the top level or
  under ``metadata:``; and a block that is not strict YAML because of an unquoted colon in a
  description is read line by line (:func:`memd.memory.frontmatter.parse_document`).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from pathlib import PurePosixPath

from memd.memory.frontmatter import parse_document, parse_memory_type
from memd.memory.index import loaded_content
from memd.memory.paths import INDEX_FILENAME


@dataclass(frozen=True)
class Limits:
    index_max_lines: int = 200
    index_max_bytes: int = 25_000


@dataclass(frozen=True)
class After:
    """What the run left: every file's relative path, the index bytes (``None``: missing),
    and the text of each topic file the run wrote (``None``: not text)."""

    files: Set[str]
    index: bytes | None
    written: Mapping[str, str | None]


def is_topic(relative: str) -> bool:
    path = PurePosixPath(relative)
    hidden = any(part.startswith(".") for part in path.parts)
    return path.suffix == ".md" and relative != INDEX_FILENAME and not hidden


def problems(
    before: Set[str], index_before: bytes | None, after: After, limits: Limits
) -> list[str]:
    """Why the run must be undone; empty when it may stay."""
    found: list[str] = []
    topics_before = {f for f in before if is_topic(f)}
    topics_after = {f for f in after.files if is_topic(f)}
    had_memory = bool(topics_before) or bool(index_before and index_before.strip())
    if (after.index is None or not after.index.strip()) and (had_memory or topics_after):
        found.append("MEMORY.md is empty or missing")
    deleted = topics_before - topics_after
    if topics_before and len(deleted) * 2 > len(topics_before):
        found.append(f"{len(deleted)} of {len(topics_before)} topic files deleted")
    found.extend(_index_growth(index_before, after.index, limits))
    for relative, text in sorted(after.written.items()):
        if is_topic(relative) and relative in after.files:
            bad = frontmatter_problem(text)
            if bad:
                found.append(f"{relative}: {bad}")
    return found


def _index_growth(before: bytes | None, after: bytes | None, limits: Limits) -> list[str]:
    if after is None:
        return []
    lines_after, lines_before = _lines(after), _lines(before or b"")
    size_after, size_before = _size(after), _size(before or b"")
    out: list[str] = []
    if lines_after > limits.index_max_lines and lines_after > lines_before:
        out.append(f"MEMORY.md grew to {lines_after} lines (limit {limits.index_max_lines})")
    if size_after > limits.index_max_bytes and size_after > size_before:
        out.append(f"MEMORY.md grew to {size_after} bytes (limit {limits.index_max_bytes})")
    return out


def _loaded(data: bytes) -> str:
    """What Claude Code loads of an index, and counts (no frontmatter, no HTML comments)."""
    return loaded_content(data.decode("utf-8", "replace"))


def _lines(data: bytes) -> int:
    return len(_loaded(data).splitlines())


def _size(data: bytes) -> int:
    return len(_loaded(data).encode("utf-8"))


def frontmatter_problem(text: str | None) -> str | None:
    """Why a topic file's frontmatter is broken, or ``None`` when it is usable."""
    if text is None:
        return "not UTF-8 text"
    doc = parse_document(text)
    if not doc.has_frontmatter:
        return "no frontmatter"
    unclosed = [p for p in doc.problems if "not closed" in p]
    if unclosed:
        return unclosed[0]
    missing = [k for k in ("name", "description") if not getattr(doc.meta, k)]
    if missing:
        return f"frontmatter lacks {', '.join(missing)}"
    nested = dict(doc.meta.extra).get("metadata")
    nested_type = nested.get("type") if isinstance(nested, dict) else None
    if doc.meta.type is None and parse_memory_type(nested_type) is None:
        return "frontmatter has no valid type (user, feedback, project, reference)"
    return None
