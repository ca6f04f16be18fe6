"""IPC methods for agents other than Claude Code (``memd-mcp``): ``remember``,
``read_memory``, ``project_status`` and ``project_notes``.

A project is named by a directory inside it (``cwd``) and mapped to its memory dir exactly as
a Claude Code session's working directory is (git root, R-M1); the per-project opt-out and
``memory.auto_memory`` hold here as everywhere (R-B4).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from memd.confined import Refused, shown
from memd.errors import NotFound, WriteFailed
from memd.ipc.params import opt_str, req_str
from memd.ipc.server import Handler, InvalidParams
from memd.memory.location import Location
from memd.memory.paths import project_root, project_slug
from memd.memory.remember import Limits, MemoryDraft, Written, write_memory
from memd.memory.remember import read_memory as read_memory_file
from memd.privacy import scrub_text
from memd.state import SessionState

if TYPE_CHECKING:
    from memd.ipc.face import McpFace

MAX_PROJECT_SESSIONS = 20
HOLD_WAIT_S = 15.0  # for an extraction or a dream holding the memory dir


class Busy(InvalidParams):
    """The memory dir is held by a longer writer (a dream, an extraction)."""


def mcp_methods(daemon: McpFace) -> dict[str, Handler]:
    return {
        "remember": partial(remember, daemon),
        "read_memory": partial(read_memory, daemon),
        "project_status": partial(project_status, daemon),
        "project_notes": partial(project_notes, daemon),
    }


async def remember(daemon: McpFace, params: dict[str, Any]) -> Any:
    """Params: ``cwd`` (absolute, inside the project), ``type``, ``name``, ``description``,
    ``content``, optional ``agent`` (who writes). Writes one memory file and its index line
    (see :mod:`memd.memory.remember`) while no extraction or dream holds the dir (waiting up
    to 15 s). Result: ``file``, ``path``, ``created``, ``redacted`` (kind → count),
    ``memory_dir``. Errors: invalid_params (a bad field, the size limit, a full index,
    memory off for the project, the dir busy); unavailable (the disk refuses the write: full,
    read-only, no descriptor left)."""
    where = await _located(daemon, params)
    draft = MemoryDraft(
        req_str(params, "type", "one of user, feedback, project, reference"),
        req_str(params, "name", "a short title for the memory"),
        req_str(params, "description", "one line saying when the memory is useful"),
        req_str(params, "content", "the memory itself"),
        opt_str(params, "agent") or "",
    )
    cfg = daemon.loaded.config
    limits = Limits(
        cfg.mcp.remember_max_bytes,
        cfg.memory.index_max_lines,
        cfg.memory.index_max_bytes,
        cfg.privacy.redact_secrets,
    )
    cite = partial(daemon.memory.citations.cite, _cwd(params), where.memory_dir)
    written = await _write_held(daemon, where.memory_dir, draft, limits, cite)
    return {
        "file": written.relative,
        "path": str(written.path),
        "created": written.created,
        "redacted": dict(written.redacted),
        "memory_dir": str(where.memory_dir),
    }


async def _write_held(
    daemon: McpFace,
    directory: Path,
    draft: MemoryDraft,
    limits: Limits,
    cite: Callable[[str], list[dict[str, Any]] | None],
) -> Written:
    key = str(directory)
    with anyio.move_on_after(HOLD_WAIT_S):
        async with daemon.exclusion.hold(key, "remember"):
            try:
                write = partial(write_memory, directory, draft, limits, cite)
                return await anyio.to_thread.run_sync(write)
            except ValueError as exc:  # RememberRefused, or a path outside the dir
                raise InvalidParams(str(exc)) from None
            except Refused as exc:  # a link or a hard link where the index or the file goes
                raise InvalidParams(
                    f"{shown(exc.filename)} is {exc.kind}: memd never writes through or over "
                    "one, so nothing was written. Remove it, or make it a plain file of your "
                    "own, then save again"
                ) from None
            except WriteFailed:
                raise  # the disk refuses it for now: answered ``unavailable``, not a bad param
            except OSError as exc:
                raise InvalidParams(f"the memory could not be written: {exc}") from None
    raise Busy(
        f"{daemon.exclusion.holder(key) or 'another writer'} is changing this project's "
        "memories; nothing was written. Try again in a minute"
    )


async def project_status(daemon: McpFace, params: dict[str, Any]) -> Any:
    """Params: ``cwd``. Result: the project root and memory dir, opt-out, the index
    figures, the number of memories, the last extraction run for the project, its Claude
    Code sessions (newest first, at most 20) with their notes status, its dream row."""
    cwd = _cwd(params)
    svc = daemon.memory
    index = await _valid(svc.index(cwd))
    listing = await _valid(svc.memories(cwd=cwd))
    sessions = await project_sessions(daemon, cwd)
    runs = svc.statistics()["projects"].get(index.memory_dir)
    shown = ("exists", "total_lines", "total_bytes", "truncated")
    return {
        "project_root": str(await anyio.to_thread.run_sync(project_root, Path(cwd))),
        "memory_dir": index.memory_dir,
        "opted_out": index.opted_out,
        "disabled": index.disabled,
        "index": {k: getattr(index, k) for k in shown},
        "memories": len(listing["memories"]),
        "extraction": runs,
        "sessions": [_session_row(daemon, s) for s in sessions[:MAX_PROJECT_SESSIONS]],
        "dream": _dream_row(daemon, index.memory_dir),
    }


async def project_notes(daemon: McpFace, params: dict[str, Any]) -> Any:
    """Params: ``cwd``, optional ``session`` (id or unique prefix). The working notes of
    the named session, else of the project's most recently active session that has notes
    (else its most recent one). Errors: not_found (no session in the project),
    invalid_params (memory work is off for the project)."""
    where = await _located(daemon, params)
    sessions = await project_sessions(daemon, _cwd(params))
    wanted = opt_str(params, "session")
    if wanted:
        sessions = [s for s in sessions if s.session_id.startswith(wanted)]
    if not sessions:
        suffix = f" matching {wanted!r}" if wanted else ""
        raise NotFound(f"no Claude Code session{suffix} in the project of {where.memory_dir}")
    view = await daemon.notes.read_notes(sessions[0].session_id)
    for other in sessions[1:MAX_PROJECT_SESSIONS]:
        if view.text is not None and not view.empty:
            break
        candidate = await daemon.notes.read_notes(other.session_id)
        if candidate.text is not None and not candidate.empty:
            view = candidate
    data = view.as_dict()
    if data["text"] is not None:
        data["text"] = scrub_text(data["text"], secrets=daemon.loaded.config.privacy.redact_secrets)
    state = daemon.registry.get(view.session_id)
    data["cwd"] = state.cwd if state else ""
    data["last_activity"] = state.mtime if state else 0.0
    return {**data, "disabled": daemon.notes.disabled_reason}


async def read_memory(daemon: McpFace, params: dict[str, Any]) -> Any:
    """Params: ``cwd``, ``name`` (a memory's file or its frontmatter name). Result: the
    memory in full (scrubbed) with type, agent, mtime, age and freshness warning.
    Errors: not_found, invalid_params (memory off for the project)."""
    where = await _located(daemon, params)
    wanted = req_str(params, "name", "a memory's file (as list_memories shows) or name")
    now_ms = int(daemon.clock.now() * 1000)
    secrets = daemon.loaded.config.privacy.redact_secrets
    read = partial(read_memory_file, where.memory_dir, wanted, now_ms=now_ms, secrets=secrets)
    return await _valid(anyio.to_thread.run_sync(read))


def _dream_row(daemon: McpFace, memory_dir: str) -> dict[str, Any] | None:
    """The project's consolidation state, if the dream service has seen it (read-only)."""
    rows = daemon.dream.statistics()["projects"]
    return next((r for r in rows if r.get("memory_dir") == memory_dir), None)


def _cwd(params: dict[str, Any]) -> str:
    cwd = req_str(params, "cwd", "an absolute directory inside the project")
    if not os.path.isabs(cwd):
        raise InvalidParams(f"'cwd' must be an absolute path, got {cwd!r}")
    return cwd


async def _valid(call: Any) -> Any:
    try:
        return await call
    except ValueError as exc:
        raise InvalidParams(str(exc)) from None


async def _located(daemon: McpFace, params: dict[str, Any]) -> Location:
    """The project's memory dir; InvalidParams when memory work is off for it."""
    where = await _valid(daemon.memory.locate(_cwd(params)))
    off = where.opted_out or daemon.memory.disabled_reason()
    if off:
        raise InvalidParams(f"memory is off for this project: {off}")
    assert isinstance(where, Location)
    return where


async def project_sessions(daemon: McpFace, cwd: str) -> list[SessionState]:
    """Claude Code sessions whose working directory is in the same project as ``cwd``,
    most recently active first. Waits for the start-up read of the active sessions: until
    then a session's project may be unknown."""
    await daemon.history_read.wait()
    states = list(daemon.registry.states())
    return await anyio.to_thread.run_sync(partial(_same_project, states, cwd))


def _same_project(states: Sequence[SessionState], cwd: str) -> list[SessionState]:
    root = project_root(Path(cwd))
    roots: dict[str, Path] = {}
    found = []
    for state in states:
        if state.cwd and os.path.isabs(state.cwd):
            if state.cwd not in roots:
                roots[state.cwd] = project_root(Path(state.cwd))
            same = roots[state.cwd] == root
        else:
            same = state.project == project_slug(str(root))
        if same:
            found.append(state)
    found.sort(key=lambda s: s.mtime, reverse=True)
    return found


def _session_row(daemon: McpFace, state: SessionState) -> dict[str, Any]:
    notes = daemon.notes.status(state.session_id)
    return {
        "session_id": state.session_id,
        "cwd": state.cwd,
        "last_activity": state.mtime,
        "context_tokens": state.context_tokens,
        "notes_extractions": notes.extractions if notes else 0,
        "notes_last_extracted_at": notes.last_extracted_at if notes else None,
    }
