"""The notes template and the invariant extraction must keep (R-S2).

A template is Markdown: level-1 headers (``# Name``), each followed on the next line by one
italic description (``_…_``) saying what belongs below it. The *skeleton* of a notes file is
its preamble (text before the first header), every header line and every description line.
Extraction edits only the text between them; :func:`check_skeleton` proves it did, byte for
byte, and a notes file that fails the check is rolled back by the extraction job.

Notes are split into sections by the template's own header lines, in order, so a body may
hold lines that look like headers (a ``# comment`` in a shell snippet) without confusing the
parse. A user template at ``<claude_dir>/session-memory/config/template.md`` replaces
:data:`DEFAULT_TEMPLATE` (:func:`load_template`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from memd import foreign_reads
from memd.session.prompts import MAX_USER_FILE_BYTES

DEFAULT_SECTIONS: tuple[tuple[str, str], ...] = (
    ("Session Title", "A few distinctive words naming what this session is about."),
    (
        "Current State",
        "What is being done right now, what is half-finished, and the very next step.",
    ),
    (
        "Task specification",
        "What the user asked for, with the decisions and constraints that shape it.",
    ),
    (
        "Files and Functions",
        "The files and functions that matter here: what each holds and why it matters.",
    ),
    ("Workflow", "Commands that get run (build, test, lint) and the order that works."),
    (
        "Errors & Corrections",
        "Errors met and how they were fixed; what the user corrected or rejected.",
    ),
    (
        "Codebase and System Documentation",
        "How the relevant parts of the system fit together and behave.",
    ),
    ("Learnings", "What worked, what did not, and what to avoid next time."),
    ("Key results", "Exact answers or outputs the user asked for, copied verbatim."),
    ("Worklog", "One terse line per step: what was tried and what came of it."),
)


def _render(sections: tuple[tuple[str, str], ...]) -> str:
    return "\n".join(f"# {name}\n_{description}_\n" for name, description in sections)


DEFAULT_TEMPLATE = _render(DEFAULT_SECTIONS)
TEMPLATE_RELATIVE = Path("session-memory") / "config" / "template.md"


@dataclass(frozen=True)
class Section:
    """One section of a notes file: its header line, description line and body text.

    ``header`` and ``description`` are whole lines without their newline (``description`` is
    ``""`` when the template has none for this header); ``body`` is everything after them up
    to the next header, newlines included.
    """

    header: str
    description: str
    body: str

    @property
    def name(self) -> str:
        return self.header.removeprefix("#").strip()


@dataclass(frozen=True)
class Skeleton:
    """The parts of a template that notes must keep verbatim."""

    preamble: str
    headers: tuple[tuple[str, str], ...]  # (header line, description line or "")


@dataclass(frozen=True)
class Intact:
    """Every header and description line of the template is present, unchanged, in order."""


@dataclass(frozen=True)
class Broken:
    """The notes no longer match the template's skeleton; ``problems`` says where."""

    problems: tuple[str, ...]


SkeletonCheck = Intact | Broken


def load_template(path: Path | None) -> str:
    """The user template at ``path`` if it exists and has a header, else the default (also
    when it cannot be used: ``status`` says why, :mod:`memd.foreign_reads`)."""
    if path is None:
        return DEFAULT_TEMPLATE
    text = foreign_reads.read_text(path, MAX_USER_FILE_BYTES, links="follow")
    return text if text is not None and skeleton_of(text).headers else DEFAULT_TEMPLATE


def template_path(claude_dir: Path) -> Path:
    return claude_dir / TEMPLATE_RELATIVE


def _is_header(line: str) -> bool:
    return line.startswith("# ") and bool(line[2:].strip())


def _is_description(line: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= 2 and stripped.startswith("_") and stripped.endswith("_")


def skeleton_of(template: str) -> Skeleton:
    """The preamble, header lines and description lines of a template."""
    lines = template.split("\n")
    first = next((i for i, line in enumerate(lines) if _is_header(line)), len(lines))
    headers: list[tuple[str, str]] = []
    for i in range(first, len(lines)):
        if _is_header(lines[i]):
            following = lines[i + 1] if i + 1 < len(lines) else ""
            headers.append((lines[i], following if _is_description(following) else ""))
    return Skeleton("\n".join(lines[:first]), tuple(headers))


def parse_sections(notes: str, template: str) -> tuple[Section, ...]:
    """Split ``notes`` at the template's header lines (found in order).

    A header the notes lack is skipped; text before the first header found is not part of
    any section. The description is taken only when the line after the header is exactly
    the template's description.
    """
    lines = notes.split("\n")
    starts: list[tuple[int, str, str]] = []
    cursor = 0
    for header, description in skeleton_of(template).headers:
        index = _find_line(lines, header, cursor)
        if index is None:
            continue
        starts.append((index, header, description))
        cursor = index + 1
    sections = []
    for k, (index, header, description) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(lines)
        body_from = index + 1
        has_description = bool(description) and body_from < end and lines[body_from] == description
        if has_description:
            body_from += 1
        body = "\n".join(lines[body_from:end])
        sections.append(Section(header, description if has_description else "", body))
    return tuple(sections)


def _find_line(lines: list[str], wanted: str, start: int) -> int | None:
    for i in range(start, len(lines)):
        if lines[i] == wanted:
            return i
    return None


def check_skeleton(notes: str, template: str) -> SkeletonCheck:
    """Whether every header and description line of ``template`` is in ``notes`` unchanged.

    Also refuses a header that appears twice, a changed preamble, and a template header
    moved out of order.
    """
    skeleton = skeleton_of(template)
    problems: list[str] = []
    lines = notes.split("\n")
    if skeleton.preamble.strip() and not notes.startswith(skeleton.preamble):
        problems.append("the text before the first header was changed")
    cursor = 0
    for header, description in skeleton.headers:
        index = _find_line(lines, header, cursor)
        if index is None:
            where = "is missing" if header not in lines else "is out of order"
            problems.append(f"header {header!r} {where}")
            continue
        if description and (index + 1 >= len(lines) or lines[index + 1] != description):
            problems.append(f"the description line under {header!r} was changed or removed")
        cursor = index + 1
    for header, _ in skeleton.headers:
        if lines.count(header) > 1:
            problems.append(f"header {header!r} appears more than once")
    return Broken(tuple(problems)) if problems else Intact()


def is_empty_template(notes: str, template: str) -> bool:
    """True when ``notes`` holds nothing beyond the template (every body blank)."""
    if notes.strip() == template.strip():
        return True
    if not isinstance(check_skeleton(notes, template), Intact):
        return False
    return all(not section.body.strip() for section in parse_sections(notes, template))
