"""``memdctl team share`` / ``unshare``: one memory moved into ``team/`` or out of it.

A move is a copy and a removal, and a kill between them would leave the memory twice. So a
move is marked first (``moves.json`` in the project's state folder, written atomically),
then made (the copy, the index line moved from one ``MEMORY.md`` to the other, the
original removed only while it still holds what was copied), then the mark is removed; a
mark left by a kill is finished by the next share, unshare or sync of the project
(:func:`finish_moves`), so the memory ends in one place.

A memory is shared only if it may leave (:func:`memd.team.gates.outgoing`): what would be
held back by a sync is refused here with the same reason. Everything goes through
:mod:`memd.confined` (the memory dir is read and written beneath its descriptor).
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath

from memd.atomic import write_atomic
from memd.confined import Area
from memd.git import blob_id
from memd.memory.paths import INDEX_FILENAME, TEAM_DIRNAME
from memd.records import UNREADABLE, read_capped
from memd.team import gates
from memd.team.entries import Limits, name_problem
from memd.team.local import read, write

MOVES = "moves.json"
MAX_MARK_BYTES = 64 * 1024  # two names and a blob id


class ShareProblem(Exception):
    """Why a memory cannot be moved, in words."""


def relative_memory(memory_dir: Path, given: str) -> str:
    """``given`` (a path relative to the memory dir, or an absolute path inside it) as a
    relative path; :class:`ShareProblem` when it is neither."""
    path = Path(given)
    if path.is_absolute():
        try:
            path = path.relative_to(memory_dir)
        except ValueError:
            raise ShareProblem(f"{given} is not in the memory dir {memory_dir}") from None
    text = PurePosixPath(path).as_posix()
    problem = name_problem(os.fsencode(text))
    if problem is not None or text.rpartition("/")[2] == INDEX_FILENAME:
        raise ShareProblem(f"{given!r} is not a memory file ({problem or 'an index'})")
    return text


def share(memory_dir: Path, state: Path, given: str, limits: Limits) -> str:
    """Move a personal memory into ``team/``; its new relative path."""
    source = relative_memory(memory_dir, given)
    if source.split("/")[0] == TEAM_DIRNAME:
        raise ShareProblem(f"{source} is already a team memory")
    target = f"{TEAM_DIRNAME}/{source}"
    with Area.open(memory_dir) as area:
        data = _present(area, source, limits)
        reason = gates.outgoing(data, max_bytes=limits.max_file_bytes)
        if reason is not None:
            raise ShareProblem(f"{source} is not shared: {reason}")
        _move(area, state, source, target, data)
    return target


def unshare(memory_dir: Path, state: Path, given: str, limits: Limits) -> str:
    """Move a team memory out of ``team/`` (the next sync removes it for everyone; it stays
    in the team's history); its new relative path."""
    source = relative_memory(memory_dir, given)
    if source.split("/")[0] != TEAM_DIRNAME:
        source = f"{TEAM_DIRNAME}/{source}"
    target = source.split("/", 1)[1]
    with Area.open(memory_dir) as area:
        data = _present(area, source, limits)
        _move(area, state, source, target, data)
    return target


def _present(area: Area, relative: str, limits: Limits) -> bytes:
    data = read(area, relative, limits.max_file_bytes)
    if data is None:
        raise ShareProblem(f"{area.path(relative)} does not exist or is not a plain file")
    if len(data) > limits.max_file_bytes:
        raise ShareProblem(f"{relative} is over team.max_file_bytes ({limits.max_file_bytes})")
    return data


def _move(area: Area, state: Path, source: str, target: str, data: bytes) -> None:
    existing = read(area, target, len(data))
    if existing is not None and existing != data:
        raise ShareProblem(f"{area.path(target)} exists with other content: rename one first")
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    mark = {"source": source, "target": target, "oid": blob_id(data)}
    write_atomic(state / MOVES, json.dumps(mark).encode(), mode=0o600)  # marked, then made
    try:
        _finish(area, mark, data)
    finally:
        (state / MOVES).unlink(missing_ok=True)


def _finish(area: Area, mark: dict[str, str], data: bytes) -> None:
    source, target = mark["source"], mark["target"]
    if not write(area, target, data, None):
        raise ShareProblem(f"{area.path(target)} changed meanwhile; nothing was moved")
    _move_index_line(area, source, target)
    if not write(area, source, None, data):
        raise ShareProblem(f"{area.path(source)} changed meanwhile; it is kept, and copied")


def finish_moves(memory_dir: Path, state: Path, limits: Limits) -> None:
    """Finish a move a kill interrupted (see the module docstring); nothing when none is."""
    try:
        mark = json.loads(read_capped(state / MOVES, MAX_MARK_BYTES))
        source, target, oid = str(mark["source"]), str(mark["target"]), str(mark["oid"])
    except (OSError, *UNREADABLE):
        return
    with Area.open(memory_dir) as area:
        copied = read(area, target, limits.max_file_bytes)
        original = read(area, source, limits.max_file_bytes)
        data = copied if copied is not None and blob_id(copied) == oid else original
        if data is not None and blob_id(data) == oid:
            try:
                _finish(area, {"source": source, "target": target}, data)
            except ShareProblem:
                pass  # changed since: both are kept, as the interrupted move said
    (state / MOVES).unlink(missing_ok=True)


def _move_index_line(area: Area, source: str, target: str) -> None:
    """The line of ``source`` in its folder's index, moved to ``target``'s folder's index
    with its link made relative to it (Claude Code's team index lists ``team/``'s files)."""
    src_index, src_link = _index_of(source)
    dst_index, dst_link = _index_of(target)
    old = read(area, src_index, 1 << 20)
    if old is None:
        return
    lines = old.decode("utf-8", "replace").splitlines(keepends=True)
    found = [line for line in lines if f"]({src_link})" in line]
    if not found:
        return
    moved = [line.replace(f"]({src_link})", f"]({dst_link})") for line in found]
    before = read(area, dst_index, 1 << 20)
    kept = (before or b"").decode("utf-8", "replace")
    added = "".join(line if line.endswith("\n") else line + "\n" for line in moved)
    glue = "" if not kept or kept.endswith("\n") else "\n"
    if write(area, dst_index, (kept + glue + added).encode(), before):
        rest = "".join(line for line in lines if line not in found)
        write(area, src_index, rest.encode(), old)


def _index_of(relative: str) -> tuple[str, str]:
    """The index that lists ``relative`` and the link it uses for it."""
    if relative.split("/")[0] == TEAM_DIRNAME:
        return f"{TEAM_DIRNAME}/{INDEX_FILENAME}", relative.split("/", 1)[1]
    return INDEX_FILENAME, relative
