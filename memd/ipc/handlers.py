"""The daemon's method table: one small function per IPC method.

Each handler takes the request's ``params`` map and returns plain data (msgpack-able). Bad
params raise :class:`InvalidParams`; an unknown session raises :class:`NotFound`.
"""

from __future__ import annotations

import functools
import os
import resource
import sys
import time
from typing import TYPE_CHECKING, Any

import anyio

from memd import __version__
from memd.clock import iso_utc
from memd.config import config_as_dict
from memd.daemon import gc_pauses
from memd.daemon.health import pipeline_report
from memd.errors import NotFound
from memd.ipc.notes_methods import MAX_EXTRACT_WAIT_S
from memd.ipc.params import checked, find_session, int_param, opt_str
from memd.ipc.server import Handler
from memd.ipc.status_rows import StatusRows, unreadable
from memd.memory.paths import project_slug
from memd.state import SessionState
from memd.writes import WRITES
from memd_client.names import escape_name, unescape_name
from memd_client.protocol import hello_result

if TYPE_CHECKING:
    from memd.confined import Findings
    from memd.daemon.queues import QueueStats
    from memd.daemon.sessions import RegistryStats
    from memd.ipc.face import DaemonFace
    from memd.llm.client import AnthropicLLM, Disabled


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
    "recall",
    "hook",
    "remember",
    "project_status",
    "project_notes",
    "read_memory",
    "dream",
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


def method_timeouts(daemon: DaemonFace) -> dict[str, float]:
    """Limits for the methods that may run longer than ``ipc.request_timeout_s``."""
    cfg = daemon.loaded.config
    summary = cfg.llm.timeout_s * (cfg.compaction.ptl_max_retries + 1)
    notes_wait = cfg.session_notes.wait_timeout_s
    return {
        "compact": summary + notes_wait + 30.0,
        "extract": MAX_EXTRACT_WAIT_S + 10.0,
        "wait_extraction": notes_wait + 10.0,
        "recall": cfg.memory.recall_timeout_s + 10.0,
        "dream": DREAM_REQUEST_S,
    }


def method_table(daemon: DaemonFace) -> dict[str, Handler]:
    """The explicit method table (no registries): name → handler bound to ``daemon``."""

    async def hello(params: dict[str, Any]) -> Any:
        """Protocol handshake. Result: protocol version, daemon version, pid."""
        return {**hello_result(), "version": __version__, "pid": os.getpid()}

    rows = StatusRows()

    async def status(params: dict[str, Any]) -> Any:
        """Health at a glance. Params: ``limit`` (the newest sessions listed, default 10),
        ``notes`` (true: each listed session's notes status too, in ``notes.sessions``)."""
        limit = int_param(params, "limit", STATUS_ROWS)
        await daemon.wait_features()
        return status_result(daemon, rows, limit=limit, notes_rows=bool(params.get("notes")))

    async def sessions(params: dict[str, Any]) -> Any:
        """Every known session, newest first. Params: ``project`` (folder name filter) or
        ``cwd`` (the project's directory), ``limit`` (default all)."""
        cwd = opt_str(params, "cwd")
        project = project_slug(cwd) if cwd else unescape_name(opt_str(params, "project") or "")
        limit = int_param(params, "limit", 0)
        threshold = compact_threshold(daemon)
        rows = daemon.registry.newest(limit or None, project or None)
        return [session_row(daemon, s, threshold) for s in rows]

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
            "claude_code": await daemon.memory.claude_code_status(state),
        }

    table: dict[str, Handler] = {
        "hello": hello,
        "status": status,
        "sessions": sessions,
        "session": session,
        **_config_methods(daemon),
        **deferred_methods(daemon),
    }
    return checked(table)  # null and wrong-kind params answer invalid_params for every method


def _config_methods(daemon: DaemonFace) -> dict[str, Handler]:
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


def feature_methods(daemon: DaemonFace) -> dict[str, Handler]:
    """The feature methods' table (imports the features: call it once they are built)."""
    from memd.ipc.compaction_methods import compaction_methods
    from memd.ipc.doctor_methods import doctor_methods
    from memd.ipc.dream_methods import dream_methods
    from memd.ipc.mcp_methods import mcp_methods
    from memd.ipc.memory_methods import memory_methods
    from memd.ipc.notes_methods import notes_methods

    return {
        **compaction_methods(daemon),
        **notes_methods(daemon),
        **memory_methods(daemon),
        **mcp_methods(daemon),
        **dream_methods(daemon),
        **doctor_methods(daemon),
    }


def deferred_methods(daemon: DaemonFace) -> dict[str, Handler]:
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


def config_result(daemon: DaemonFace) -> dict[str, Any]:
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


def compact_threshold(daemon: DaemonFace) -> int:
    c = daemon.loaded.config.compaction
    effective = c.default_context_window - min(c.default_max_output_tokens, c.max_output_reserve)
    return effective - c.buffer_tokens


def session_row(
    daemon: DaemonFace, s: SessionState, threshold: int | None = None
) -> dict[str, Any]:
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
        "compact_threshold": compact_threshold(daemon) if threshold is None else threshold,
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


async def session_read_first(daemon: DaemonFace, ident: str | None) -> SessionState:
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


def unreadable_report(daemon: DaemonFace, limit: int = 20) -> dict[str, Any]:
    """``unreadable_count`` and the first ``limit`` unreadable transcripts with their reasons."""
    count, states = daemon.registry.unreadable(limit)
    return {
        "unreadable_count": count,
        "unreadable": [
            {
                "session_id": escape_name(s.session_id),
                "path": escape_name(s.path),
                **(unreadable(s) or {}),
            }
            for s in states
        ],
    }


def status_result(
    daemon: DaemonFace, rows_kept: StatusRows, *, limit: int, notes_rows: bool = False
) -> dict[str, Any]:
    """``status``: figures kept as they change, and only the rows asked for, each packed
    once per state (its cost does not grow with the sessions known; ``memdctl status``
    sends it on every refresh)."""
    reg = daemon.registry.statistics()
    queue = daemon.ingest_queue.statistics()
    rows = daemon.registry.newest(limit)
    threshold = compact_threshold(daemon)
    errors = daemon.health.last_hour()
    notes = daemon.notes.statistics([s.session_id for s in rows] if notes_rows else ()).as_dict()
    if not notes_rows:
        del notes["sessions"]
    memory = daemon.memory.statistics()
    guard = daemon.guard.statistics().as_dict()
    return {
        "daemon": _daemon_status(daemon),
        "llm": llm_status(daemon),
        "ingest": _ingest_status(daemon, reg, queue),
        "notes": notes,
        "compaction": {"takeover": daemon.compaction.takeover.statistics()},
        "memory": memory,
        "dream": daemon.dream.statistics(),
        "usage": daemon.ledger.usage(),
        "guard": guard,
        "pipeline": pipeline_report(
            notes=notes,
            memory=memory,
            ingest_pending=queue.queued + queue.running,
            health=daemon.health,
            started_at=daemon.started_at,
            paused_until=guard["budget"]["paused_until"],
            stall_after_s=daemon.loaded.config.daemon.stall_after_minutes * 60.0,
        ),
        "refused": refused_report(),
        "writes": WRITES.statistics(),
        "errors_last_hour": len(errors),
        "last_error": errors[-1][1] if errors else None,
        "ipc": ipc_status(daemon),
        "sessions": rows_kept.packed(rows, threshold),
    }


def _daemon_status(daemon: DaemonFace) -> dict[str, Any]:
    """``status``'s ``daemon`` section: facts, env file, uptime, memory, reloads."""
    return {
        **daemon.facts,
        "env_file": daemon.env_file.status(),
        "uptime_s": round(time.time() - daemon.started_at, 1),
        "rss_bytes": _rss_bytes(),
        "gc": gc_pauses.status(),
        "reloads": daemon.reloads,
        "last_reload": daemon.last_reload.as_dict() if daemon.last_reload else None,
    }


def _ingest_status(daemon: DaemonFace, reg: RegistryStats, queue: QueueStats) -> dict[str, Any]:
    """``status``'s ``ingest`` section: what was read, what waits, what could not be."""
    return {
        "sessions": reg.sessions,
        "parsed": reg.parsed,
        "in_memory": reg.in_memory,
        "bytes_parsed": reg.bytes_parsed,
        "bytes_rehydrated": reg.bytes_rehydrated,
        "lines": reg.lines,
        "bad_lines": reg.bad_lines,
        "unknown_types": {
            "lines": reg.unknown_lines,
            "recent": [escape_name(name) for name in reversed(reg.unknown_recent)],
        },
        "queued": queue.queued,
        "running": queue.running,
        **unreadable_report(daemon),
        "watcher": daemon.watcher_status.as_dict(),
        "sources": sources_report(daemon),
        "token_estimates": len(daemon.compaction.tokens),  # kept across restarts
    }


def sources_report(daemon: DaemonFace) -> list[dict[str, Any]]:
    """Each agent memd follows: its root, how it is watched, and whether memd leaves the
    extraction of its sessions to the agent's own memory."""
    return [
        {
            "agent": source.agent,
            "root": escape_name(str(watched.path)),
            "watcher": watched.status.mode,
            "reason": watched.status.reason,
            "own_memory": daemon.own_memory.get(source.agent),
            "unread": source.unread(),
        }
        for source, watched in zip(daemon.registry.sources, daemon.watched, strict=True)
    ]


REFUSED_ROWS = 50  # the newest refused entries ``status`` lists; ``count`` says how many more


@functools.cache
def _findings() -> Findings:
    """Loaded after READY, with the features (as :func:`_llm_classes`)."""
    from memd.confined import findings

    return findings


def refused_report() -> dict[str, Any]:
    """What memd found in memory dirs and did not read: links, hard links, special files
    (each once, newest first, with its path); see :mod:`memd.confined`."""
    found = _findings()
    if not len(found):
        return {"count": 0, "entries": []}
    rows = found.as_rows()
    return {"count": len(rows), "entries": rows[:REFUSED_ROWS]}


def ipc_status(daemon: DaemonFace) -> dict[str, Any] | None:
    """The socket's connections: open of the limit, and those turned away or closed."""
    if daemon.server is None:
        return None
    stats = daemon.server.statistics()
    limits = daemon.server.limits
    return {
        "connections_open": stats.connections_open,
        "max_connections": limits.max_connections,
        "idle_timeout_s": limits.idle_timeout_s,
        "busy": stats.connections_busy,
        "evicted": stats.connections_evicted,
        "idle_closed": stats.connections_idle_closed,
        "stalled": stats.connections_stalled,
        "refused": stats.connections_refused,
        "accept_failures": stats.accept_failures,
    }


@functools.cache
def _llm_classes() -> tuple[type[AnthropicLLM], type[Disabled]]:
    """Loaded after READY, with the features (an import statement per call cost ~6 µs)."""
    from memd.llm.client import AnthropicLLM, Disabled

    return AnthropicLLM, Disabled


def llm_status(daemon: DaemonFace) -> dict[str, Any]:
    provider = daemon.loaded.config.llm.provider
    llm = daemon.llm
    if llm is None:
        return {
            "enabled": False,
            "reason": "starting: the model client is loading",
            "provider": provider,
        }
    anthropic_llm, disabled = _llm_classes()
    if isinstance(llm, disabled):
        return {"enabled": False, "reason": f"disabled: {llm.reason}", "provider": provider}
    result: dict[str, Any] = {"enabled": True, "reason": None, "provider": provider}
    if isinstance(llm, anthropic_llm):
        result["base_url"] = llm.base_url
        result["unreachable_since"] = llm.unreachable_since
        result["last_error"] = llm.unreachable_error
    return result


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_STATM: list[int] = []  # the descriptor of /proc/self/statm, opened once
_RSS = [float("-inf"), 0.0]  # when it was last read (monotonic), and what it said
RSS_EVERY_S = 1.0  # status may be polled many times a second; the kernel's answer costs ~8 µs


def _rss_bytes() -> int:
    """The daemon's resident set size, read at most once a second."""
    now = time.monotonic()
    if now - _RSS[0] < RSS_EVERY_S:
        return int(_RSS[1])
    _RSS[:] = [now, _read_rss()]
    return int(_RSS[1])


def _read_rss() -> int:
    try:
        if not _STATM:
            _STATM.append(os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC))
        return int(os.pread(_STATM[0], 256, 0).split()[1]) * _PAGE  # re-read on every pread
    except (OSError, IndexError, ValueError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024
