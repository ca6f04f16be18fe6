"""What memd keeps per session, carried from a session's old id to its agent's own.

memd knew a Gemini chat by its file's name (``session-<time>-<id8>``) until it read Gemini's
own ``sessionId`` (issue 35). A session saved under the old id keeps what memd had of it under
the new one: its notes record (``session-notes/``), its notes (``<projects root>/<project>/
<id>/session-memory/``) and its memory-extraction cursor (``memory-extraction.json``). Done once,
in the worker thread that loads the features, before their stores read those files. A file
that cannot be moved stays where it was (logged): the session's notes start again, nothing is
lost (the old files stay). Nothing is moved over what the new id has already.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Renamed:
    """One session's old and new id, and the project its notes are under."""

    old: str
    new: str
    project: str


def carry_over(renamed: Sequence[Renamed], state_dir: Path, projects_root: Path) -> None:
    """Move each session's records from its old id to its new (blocking; never raises)."""
    if not renamed:
        return
    from memd.memory.cursors import CURSOR_FILE  # the features' modules: loaded in this thread
    from memd.records import UNREADABLE
    from memd.session.notes import notes_path
    from memd.session.store import RECORDS_DIR, ExtractionStore

    records = ExtractionStore(state_dir / RECORDS_DIR)
    for one in renamed:
        try:
            _move_record(records.path_for(one.old), records.path_for(one.new), one.new)
            if one.project:
                old = notes_path(projects_root, one.project, one.old).parent.parent
                new = notes_path(projects_root, one.project, one.new).parent.parent
                _move_folder(old, new)
        except (OSError, *UNREADABLE) as exc:
            log.warning("what memd kept of session %s stays under that id: %s", one.old, exc)
    try:
        _rename_cursors(state_dir / CURSOR_FILE, renamed)
    except (OSError, *UNREADABLE) as exc:
        log.warning("memory cursors stay under the sessions' old ids: %s", exc)
    log.info("%d session(s) now known by their agent's own id", len(renamed))


def _move_record(old: Path, new: Path, session_id: str) -> None:
    """The notes record, rewritten under the new id (the record names its session)."""
    from memd.atomic import persist
    from memd.records import read_capped
    from memd.session.store import MAX_RECORD_BYTES

    if not old.is_file() or os.path.lexists(new):
        return
    data = json.loads(read_capped(old, MAX_RECORD_BYTES))
    if not isinstance(data, dict):
        raise ValueError(f"{old} holds no record")
    data["session_id"] = session_id
    if persist(new, json.dumps(data, separators=(",", ":")).encode("utf-8")):
        old.unlink()


def _move_folder(old: Path, new: Path) -> None:
    """The session's notes folder (a real folder of memd's, never a link), when the new id
    has none yet."""
    try:
        info = os.lstat(old)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not os.path.lexists(new):
        os.rename(old, new)


def _rename_cursors(path: Path, renamed: Sequence[Renamed]) -> None:
    """The sessions' entries of the cursor file, under their new ids."""
    from memd.atomic import persist
    from memd.memory.cursors import MAX_CURSOR_BYTES
    from memd.records import read_capped

    try:
        doc = json.loads(read_capped(path, MAX_CURSOR_BYTES))
    except FileNotFoundError:
        return
    sessions = doc.get("sessions") if isinstance(doc, dict) else None
    if not isinstance(sessions, dict):
        return  # the store moves an unreadable file aside itself
    moved = False
    for one in renamed:
        record = sessions.get(one.old)
        if isinstance(record, dict) and one.new not in sessions:
            sessions[one.new] = {**sessions.pop(one.old), "session_id": one.new}
            moved = True
    if moved:
        persist(path, json.dumps(doc, separators=(",", ":"), sort_keys=True).encode())
