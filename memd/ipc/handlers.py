"""The daemon's method table: one small function per IPC method.

Each handler takes the request's ``params`` map and returns plain data (msgpack-able). Bad
params raise :class:`InvalidParams`; an unknown session raises :class:`NotFound`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import anyio

from memd import __version__
from memd.changes import CHANGES
from memd.clock import iso_utc
from memd.config import config_as_dict
from memd.errors import NotFound
from memd.ipc.notes_methods import MAX_EXTRACT_WAIT_S
from memd.ipc.params import checked, find_session, int_param, opt_str
from memd.ipc.server import Handler
from memd.ipc.status import KeptStatus, session_window
from memd.ipc.status_rows import unreadable
from memd.memory.paths import project_slug
from memd.state import SessionState
from memd_client.names import escape_name, unescape_name
from memd_client.protocol import hello_result

if TYPE_CHECKING:
    from memd.ipc.face import (
        DaemonFace,
        FeaturesFace,
        HasConfig,
        HasSessions,
        ReloadFace,
        SessionRowFace,
    )


DREAM_REQUEST_S = 180.0  # an abort waits for the undo; a restore copies the memory dir

# The methods served by the features, which load after READY (their modules import the
# compaction, notes, memory and dream services). tests/test_layering.py checks this list
# against the tables the feature modules build.
FEATURE_METHODS = (
    "should_compact",
    "compact",
    "microcompact",
    "notes",
    "extract",
    "wait_extraction",
    "memory_index",
    "memories",
    "restore_memory",
    "recall",
    "hook",
    "remember",
    "project_status",
    "project_notes",
    "read_memory",
    "dream",
    "team",
    "probe_api",
    "doctor_facts",
)

# Methods whose handlers never wait on I/O (no thread, no lock, no model call): the server
# answers them inline on their connection, with no task and no timeout scope of their own.
# memory_index, memories, notes and session (Claude Code's settings, the transcript's new
# lines) read files in a worker thread, so they keep a timeout. tests/test_ipc_params.py
# checks that each inline handler finishes at its first step.
STATUS_ROWS = 10  # sessions ``status`` lists unless asked: the newest, as ``memdctl status`` shows

INLINE_METHODS = frozenset({"hello", "status", "sessions", "should_compact", "config"})

# Methods that change nothing ``status`` shows (they may read a transcript's new lines, but
# the registry counts that publish itself). Every other request counts as a change when it
# starts and when it ends (memd.changes): a ``status`` after a ``remember``, ``reload`` or
# ``hook`` answer is built anew, whatever part of the daemon the request changed.
READ_ONLY_METHODS = frozenset(
    {"hello", "status", "sessions", "session", "config", "notes", "memory_index", "memories"}
)


# probe_api: memd.llm.client.PROBE_MAX_S (an agent CLI's start) and room to answer, the
# backends probed at once; a number here, as no model module is imported before READY
PROBE_REQUEST_S = 70.0


def method_timeouts(daemon: HasConfig) -> dict[str, float]:
    """Limits for the methods that may run longer than ``ipc.request_timeout_s``."""
    cfg = daemon.loaded.config
    summary = cfg.llm.timeout_s * (cfg.compaction.ptl_max_retries + 1)
    notes_wait = cfg.session_notes.wait_timeout_s
    return {
        "compact": summary + notes_wait + 30.0,
        "extract": MAX_EXTRACT_WAIT_S + 10.0,
        "probe_api": PROBE_REQUEST_S,
        "wait_extraction": notes_wait + 10.0,
        "recall": cfg.memory.recall_timeout_s + 10.0,
        "dream": DREAM_REQUEST_S,
        # a sync: a fetch and a push per try, a restore's sync too, and the lock's wait
        "team": cfg.team.timeout_s * 2 * (cfg.team.push_retries + 1) * 2 + 60.0,
    }


def method_table(daemon: DaemonFace) -> dict[str, Handler]:
    """The explicit method table (no registries): name → handler bound to ``daemon``."""

    async def hello(params: dict[str, Any]) -> Any:
        """Protocol handshake. Result: protocol version, daemon version, pid."""
        return {**hello_result(), "version": __version__, "pid": os.getpid()}

    kept = KeptStatus()

    async def status(params: dict[str, Any]) -> Any:
        """Health at a glance (:mod:`memd.ipc.status`). Params: ``limit`` (the newest sessions
        listed, default 10), ``notes`` (true: each listed session's notes status too, in
        ``notes.sessions``)."""
        limit = int_param(params, "limit", STATUS_ROWS)
        await daemon.wait_features()
        return kept.reply(daemon, limit=limit, notes_rows=bool(params.get("notes")))

    async def sessions(params: dict[str, Any]) -> Any:
        """Every known session, newest first. Params: ``project`` (folder name filter) or
        ``cwd`` (the project's directory), ``limit`` (default all)."""
        cwd = opt_str(params, "cwd")
        project = project_slug(cwd) if cwd else unescape_name(opt_str(params, "project") or "")
        limit = int_param(params, "limit", 0)
        rows = daemon.registry.newest(limit or None, project or None)
        return [session_row(daemon, s) for s in rows]

    async def session(params: dict[str, Any]) -> Any:
        """One session in full. Params: ``session`` (id or unique prefix). Errors: not_found."""
        state = await session_read_first(daemon, opt_str(params, "session"))
        await daemon.wait_features()
        notes = daemon.notes.status(state.session_id)
        return {
            **session_row(daemon, state),
            "boundaries": state.boundaries,
            "notes": notes.as_dict() if notes else None,
            "opted_out": daemon.optouts.reason(state.cwd),
            "claude_code": await daemon.memory.beside.status(state),
        }

    table: dict[str, Handler] = {
        "hello": hello,
        "status": status,
        "sessions": sessions,
        "session": session,
        **_config_methods(daemon),
        **deferred_methods(daemon),
    }
    table = {name: counted(name, handler) for name, handler in table.items()}
    return checked(table)  # null and wrong-kind params answer invalid_params for every method


def counted(method: str, handler: Handler) -> Handler:
    """``handler``, counting a change (:data:`memd.changes.CHANGES`) as it starts and once it
    has ended, unless ``method`` is read-only."""
    if method in READ_ONLY_METHODS:
        return handler

    async def run(params: dict[str, Any]) -> Any:
        CHANGES.bump()
        try:
            return await handler(params)
        finally:
            CHANGES.bump()

    run.__doc__ = handler.__doc__
    return run


def _config_methods(daemon: ReloadFace) -> dict[str, Handler]:
    """``config`` and ``reload``: the configuration as in effect, and reading it again."""

    async def config(params: dict[str, Any]) -> Any:
        """The effective configuration and the resolved paths."""
        return config_result(daemon)

    async def reload(params: dict[str, Any]) -> Any:
        """Reload the config file and the env file (the same path as SIGHUP). Result: outcome
        text, and the settings that changed but wait for a restart."""
        result = await daemon.reload()
        last = daemon.last_reload
        return {
            "result": result,
            "restart_needed": list(last.restart_needed) if last else [],
            "env_file_problem": daemon.env_file.problem,
        }

    return {"config": config, "reload": reload}


def feature_methods(daemon: FeaturesFace) -> dict[str, Handler]:
    """The feature methods' table (imports the features: call it once they are built)."""
    from memd.ipc.compaction_methods import compaction_methods
    from memd.ipc.doctor_methods import doctor_methods
    from memd.ipc.dream_methods import dream_methods
    from memd.ipc.mcp_methods import mcp_methods
    from memd.ipc.memory_methods import memory_methods
    from memd.ipc.notes_methods import notes_methods
    from memd.ipc.team_methods import team_methods

    return {
        **compaction_methods(daemon),
        **notes_methods(daemon),
        **memory_methods(daemon),
        **mcp_methods(daemon),
        **dream_methods(daemon),
        **doctor_methods(daemon),
        **team_methods(daemon),
    }


def deferred_methods(daemon: FeaturesFace) -> dict[str, Handler]:
    """One stand-in per feature method: it waits for the features, then calls the real one.

    A request arriving while the features load waits (within its timeout); none is refused.
    """
    built: dict[str, Handler] = {}

    def stand_in(name: str) -> Handler:
        async def call(params: dict[str, Any]) -> Any:
            await daemon.wait_features()
            if not built:
                built.update(feature_methods(daemon))
            return await built[name](params)

        return call

    return {name: stand_in(name) for name in FEATURE_METHODS}


def config_result(daemon: HasConfig) -> dict[str, Any]:
    paths = daemon.loaded.paths
    return {
        "config": config_as_dict(daemon.loaded.config),
        "paths": {
            "config_file": escape_name(str(paths.config_file)) if paths.config_file else None,
            "projects_root": escape_name(str(paths.projects_root)),
            "state_dir": escape_name(str(paths.state_dir)),
            "socket": escape_name(str(paths.socket_path)),
        },
    }


def session_row(daemon: SessionRowFace, s: SessionState) -> dict[str, Any]:
    return {
        "session_id": escape_name(s.session_id),
        "agent": s.agent,
        "project": escape_name(s.project),
        "path": escape_name(s.path),
        "cwd": s.cwd,
        "parsed": s.parsed,
        "in_memory": daemon.registry.resident(s.path),
        "message_count": s.message_count,
        "context_tokens": s.context_tokens,
        "context_from_usage": s.context_from_usage,
        "context_estimated_tail": s.context_estimated_tail,
        "context_stale": s.context_stale,
        "model": s.model or None,
        **session_window(daemon, s),
        "last_activity": iso_utc(s.mtime),
        "last_timestamp": s.last_timestamp,
        "boundaries_seen": len(s.boundaries),
        "tool_uses": s.tool_uses,
        "turn_ends": s.turn_ends,
        "bytes_parsed": s.bytes_parsed,
        "offset": s.offset,
        "size": s.size,
        "lines": s.lines,
        "bad_lines": s.bad_lines,
        "unknown_types": {escape_name(k): n for k, n in (s.unknown_types or {}).items()},
        "unreadable": unreadable(s),
        "ignored": s.ignored or None,
        "pending_tool_calls": s.pending_tool_calls,
    }


async def session_read_first(daemon: HasSessions, ident: str | None) -> SessionState:
    """:func:`find_session`; a whole id not known yet whose transcript is on disk is read
    first. A session that has just started is on disk before the watcher reports it, and
    ``memdctl session <id>`` right after Claude Code exits must not say it does not exist."""
    try:
        return find_session(daemon, ident)
    except NotFound:
        name = unescape_name(ident or "")
        path = await anyio.to_thread.run_sync(daemon.registry.locate, name)
        if path is None or await daemon.registry.ingest(path) is None:
            raise
        return find_session(daemon, ident)
