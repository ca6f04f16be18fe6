"""A forked session starts with the notes it was made from (issue 38).

``compact --fork`` and the ``/compact`` takeover write a new session whose summary is the
old session's notes. Without notes of its own the new session was extracted at once (it is
past the init threshold: two requests per fork, 42 for 20 takeovers) and its hook put those
new notes beside the ones its summary carries. So before the new session's file is written
(record, then change: the watcher may see the file at once), :func:`seed` gives it a copy of
the notes and a record: the anchor and cursor at the new session's own message ids (the
summary stands for what was dropped), and a growth baseline of the old session's context,
which the fork's figure cannot pass until the resumed session answers (its first answer
brings the figure down, and growth counts from there, :func:`memd.session.triggers.rebase`).
No notes run until the new session has grown past its thresholds since the fork.

Blocking (a notes write and a record write); :func:`unseed` takes both back when the fork
could not be written.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from memd.confined import Area
from memd.session import notes
from memd.session.store import ExtractionRecord, ExtractionStore
from memd.sources.base import Fork


def seed(
    store: ExtractionStore,
    projects_root: Path,
    *,
    source_id: str,
    project: str,
    fork: Fork,
    notes_text: str,
    tokens: int,
) -> None:
    """Give the fork ``fork`` of session ``source_id`` (in ``project``) the notes it was
    made from and a record (see the module doc). Raises ``OSError`` (the notes could not be
    written: the fork then starts without them, as before)."""
    old = store.get(source_id)
    anchor = fork.anchor(old.last_summarized_id if old else None)
    covered = fork.anchor(old.covered_id) if old and old.covered_id else anchor
    path = notes.notes_path(projects_root, project, fork.session_id)
    notes.write_notes(path, notes_text)
    record = ExtractionRecord(
        fork.session_id,
        project,
        last_summarized_id=anchor,
        covered_id=covered,
        tokens_at_extraction=max(0, tokens),
    )
    store.put_sync(record)


def unseed(store: ExtractionStore, projects_root: Path, project: str, fork_id: str) -> None:
    """Take back what :func:`seed` gave a fork that was not written (best effort: the notes
    file and the folders made for it, beneath the project's folder, never through a link)."""
    store.forget(fork_id)
    path = notes.notes_path(projects_root, project, fork_id)
    folder = path.parent.parent.name
    with contextlib.suppress(OSError), Area.open(path.parent.parent.parent) as area:
        area.unlink(f"{folder}/{notes.NOTES_DIR}/{notes.NOTES_FILE}")
        area.rmdir(f"{folder}/{notes.NOTES_DIR}")
        area.rmdir(folder)
