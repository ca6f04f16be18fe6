"""The notes file of a session: where it lives, reading and writing it, and its budgets.

Path (R-S1): ``<projects_root>/<project slug>/<session id>/session-memory/summary.md``. Writes
are atomic (R-S10): a reader, or a crash, sees the old file or the new one, never a mix.
The session id is the name an agent gave its file: its folder is that name escaped
(``memd_client.names``: a byte that is not UTF-8 is ``\\xNN``), which is the name itself for
every id an agent writes, and text the model can be told. :func:`unkept` says when a session
gets no notes at all (memd cannot place it in a project, or its path cannot be text).
The notes sit beside the memory dir, in a folder an agent can write, so they are read and
written as it is (:class:`memd.confined.Area`, rooted at the session's folder):
``session-memory`` and ``summary.md`` are never followed when they are links, a hard-linked
or special file is not read, and nothing is written through or over one.

Budgets (R-S5): each section should stay near ``section_tokens`` and the whole file near
``total_tokens``. :func:`analyze_budget` measures a notes text against them and
:func:`budget_reminder` turns an overrun into the text appended to the extraction prompt.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memd.config import SessionNotesConfig
from memd.confined import Area, Refused
from memd.session.template import parse_sections
from memd.state import SessionState
from memd_client.names import escape_name, escape_surrogates

NOTES_DIR = "session-memory"
NOTES_FILE = "summary.md"
NOTES_MAX_BYTES = 4 * 1024 * 1024  # read back; the budgets keep real notes far below it
# Sections whose content matters most to the next context: kept when the file must shrink.
PROTECTED_SECTIONS = ("Current State", "Errors & Corrections")

Estimator = Callable[[str], int]


def notes_path(projects_root: Path, project: str, session_id: str) -> Path:
    return Path(notes_location(str(projects_root), project, session_id))


def notes_location(projects_root: str, project: str, session_id: str) -> str:
    """:func:`notes_path` as a string: ``status`` lists one per row, and a ``Path`` built
    per row was half its cost."""
    return os.path.join(projects_root, project, escape_name(session_id), NOTES_DIR, NOTES_FILE)


def unkept(state: SessionState, projects_root: str) -> str | None:
    """Why memd keeps no notes for the session of ``state`` (never extracts them, and
    ``extract`` refuses with this), or None when it does."""
    if not state.project:
        return (
            "memd cannot place this session in a project (it names no working folder memd"
            " can read), so it keeps no notes for it: they would go to a folder of"
            f" {projects_root} that looks like a project's"
        )
    folder = escape_name(state.session_id)
    if folder in (".", "..") or len(folder.encode("utf-8")) > 255:
        return f"its id ({folder[:80]}) cannot name a folder for its notes"
    path = notes_location(projects_root, state.project, state.session_id)
    if escape_surrogates(path) != path:
        return (
            f"the path of its notes ({escape_surrogates(path)}) holds bytes that are not"
            " UTF-8, so the model could not be told where they are; rename that folder"
        )
    return None


def read_notes(path: Path) -> str | None:
    """The notes text, or None when the file does not exist yet or is not one memd reads
    (a link, a hard link, a FIFO: skipped and reported) (blocking)."""
    try:
        with Area.open(path.parent.parent) as area:
            data, _ = area.read(_relative(path), max_bytes=NOTES_MAX_BYTES)
    except (FileNotFoundError, NotADirectoryError, Refused):
        return None
    return data.decode("utf-8")


def write_notes(path: Path, text: str) -> None:
    """Replace the notes atomically; the file is private to the user (blocking).
    :class:`~memd.confined.Refused` when a link or a special file is in its place."""
    with Area.open(path.parent.parent, create=True) as area:
        area.write(_relative(path), text.encode("utf-8"), mode=0o600)


def _relative(path: Path) -> str:
    """The notes file's path below its session folder (``session-memory/summary.md``)."""
    return f"{path.parent.name}/{path.name}"


def ensure_notes(path: Path, template: str) -> tuple[str, bool]:
    """The current notes, creating the file from ``template`` first when it is missing.

    Returns ``(text, created)`` (blocking).
    """
    existing = read_notes(path)
    if existing is not None:
        return existing, False
    write_notes(path, template)
    return template, True


@dataclass(frozen=True)
class SectionSize:
    name: str
    tokens: int


@dataclass(frozen=True)
class Budget:
    """The notes measured against the per-section and total budgets."""

    sections: tuple[SectionSize, ...]
    total_tokens: int
    section_limit: int
    total_limit: int

    @property
    def oversize(self) -> tuple[SectionSize, ...]:
        return tuple(s for s in self.sections if s.tokens > self.section_limit)

    @property
    def over_total(self) -> bool:
        return self.total_tokens > self.total_limit


def analyze_budget(
    notes: str, template: str, config: SessionNotesConfig, estimate: Estimator
) -> Budget:
    """Token sizes of each section's body and of the whole file."""
    sizes = tuple(
        SectionSize(section.name, estimate(section.body))
        for section in parse_sections(notes, template)
    )
    return Budget(sizes, estimate(notes), config.section_tokens, config.total_tokens)


def budget_reminder(budget: Budget) -> str:
    """The text appended to the extraction prompt; empty when the notes are within budget."""
    if budget.over_total:
        kept = " and ".join(f'"{name}"' for name in PROTECTED_SECTIONS)
        listed = ", ".join(
            f'"{s.name}" (~{s.tokens} tokens)'
            for s in sorted(budget.sections, key=lambda s: -s.tokens)
            if s.tokens > 0
        )
        return (
            f"\n\nURGENT — the notes are about {budget.total_tokens} tokens, over the "
            f"{budget.total_limit}-token limit for the whole file. In this update you must cut "
            "them down hard: condense every section, drop details that no longer matter, "
            f"merge old worklog lines into one-line summaries. Keep {kept} complete and "
            f"accurate; shorten the others first. Sizes now: {listed}."
        )
    if budget.oversize:
        listed = ", ".join(f'"{s.name}" (~{s.tokens} tokens)' for s in budget.oversize)
        return (
            f"\n\nNote: these sections are over the ~{budget.section_limit}-token limit per "
            f"section: {listed}. While updating, shorten them: keep what is still relevant "
            "and summarize or drop the rest."
        )
    return ""
