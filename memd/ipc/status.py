"""``status``: the daemon's health at a glance, built from every part's figures and kept packed.

``memdctl status`` asks for it once; ``memdctl top`` and the agents' tools many times a second.
A reply is built from some fifteen sections (each a few µs) and a client decodes it at ~4 µs a
KB, so the reply is kept, packed, and sent again while nothing it shows has changed:
:class:`KeptStatus` holds it with the :data:`memd.changes.CHANGES` count it was built at, and
builds it again once the count moved (see :mod:`memd.changes` for where it is bumped) or
once it is :data:`MAX_AGE_S` old, for the figures that move with the clock alone (uptime,
RSS, the last hour's errors and spending, a stall's age) and for any change a bump missed.
It is small too: the session rows in columns (:mod:`memd.ipc.status_rows`), and the
model's reason said once, in ``llm.reason`` (the sections off for that reason point to it,
:data:`memd_client.protocol.SAME_AS_LLM`).
"""

from __future__ import annotations

import functools
import os
import resource
import sys
import time
from typing import TYPE_CHECKING, Any

from memd import gc_pauses
from memd.changes import CHANGES
from memd.foreign_reads import PROBLEMS
from memd.health import pipeline_report
from memd.ipc.status_rows import StatusRows, packer, unreadable
from memd.sources.registry import room_named
from memd.window import auto_compact_threshold
from memd.window import session_window as session_window_of
from memd.writes import WRITES
from memd_client.names import encodable, escape_name
from memd_client.protocol import LLM_REASON_AT, SAME_AS_LLM

if TYPE_CHECKING:
    from msgspec import Raw

    from memd.confined import Findings
    from memd.ipc.face import DaemonFace, HasConfig, HasSessions, SessionRowFace
    from memd.ipc.parts import IngestFigures
    from memd.queues import QueueStats
    from memd.state import SessionState

# How long a kept reply may be sent again with nothing counted as changed: its uptime, RSS
# and the last hour's windows are at most this old. A second is below what ``memdctl top``
# (one refresh a second) or a person reading uptime in seconds can tell, and above the
# ~50 µs a reply costs by three orders: a client polling in a loop gets kept replies.
MAX_AGE_S = 1.0
KEPT_FORMS = 8  # (limit, notes) pairs kept at once: any limit may be asked for


class KeptStatus:
    """The last ``status`` reply for each (limit, notes) asked, packed, with the change
    count and the time it was built at."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self.rows = StatusRows()
        self._clock = clock
        self._kept: dict[tuple[int, bool], tuple[int, float, Raw]] = {}

    def reply(self, daemon: DaemonFace, *, limit: int, notes_rows: bool) -> Raw:
        """The reply, packed: the kept one if nothing changed and it is young enough."""
        count, now = CHANGES.count, self._clock()  # read before building: a change made
        form = (limit, notes_rows)  # while it is built moves the count past this one
        kept = self._kept.get(form)
        if kept is not None and kept[0] == count and now - kept[1] < MAX_AGE_S:
            return kept[2]
        raw, pack = packer()
        result = status_result(daemon, self.rows, limit=limit, notes_rows=notes_rows)
        try:
            built = raw(pack(result))
        except UnicodeEncodeError:  # a name no part escaped: as the server does
            built = raw(pack(encodable(result)))
        if len(self._kept) >= KEPT_FORMS:
            self._kept.clear()
        self._kept[form] = (count, now, built)
        return built


def compact_threshold(daemon: HasConfig) -> int:
    """The threshold of a session whose window is the config's."""
    c = daemon.loaded.config.compaction
    return auto_compact_threshold(c.default_context_window, c.default_max_output_tokens, c)


def session_window(daemon: SessionRowFace, state: SessionState) -> dict[str, Any]:
    """The session's window (issue 38): its ``compact_threshold``, ``context_window`` and
    ``window_source`` (its transcript's model, or the config), as the compaction service
    decides it (:func:`memd.window.session_window`) without needing it: ``sessions``
    answers before the features are loaded."""
    c = daemon.loaded.config.compaction
    window = session_window_of(c, daemon.registry.window_of(state))
    return {
        "compact_threshold": auto_compact_threshold(
            window.context_window, window.max_output_tokens, c
        ),
        "context_window": window.context_window,
        "window_source": window.source,
    }


def window_marks(daemon: SessionRowFace, state: SessionState) -> dict[str, Any] | None:
    """A status row's window marks, None when its window is the config's."""
    window = session_window(daemon, state)
    if window["context_window"] == daemon.loaded.config.compaction.default_context_window:
        return None
    return window


def unreadable_report(daemon: HasSessions, limit: int = 20) -> dict[str, Any]:
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
    result = {
        "daemon": _daemon_status(daemon),
        "llm": llm_status(daemon),
        "ingest": _ingest_status(daemon, reg, queue),
        "notes": notes,
        "compaction": {"takeover": daemon.compaction.takeover.statistics()},
        "memory": memory,
        "dream": daemon.dream.statistics(),
        "team": daemon.team.statistics(),
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
        "foreign_files": foreign_report(),
        "writes": WRITES.statistics(),
        "errors_last_hour": len(errors),
        "last_error": errors[-1][1] if errors else None,
        "ipc": ipc_status(daemon),
        "sessions": rows_kept.packed(rows, threshold, lambda s: window_marks(daemon, s)),
    }
    return reasons_said_once(result)


def reasons_said_once(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with each section off for the model's reason pointing to ``llm.reason``
    (:data:`~memd_client.protocol.LLM_REASON_AT`) instead of repeating it."""
    reason = result["llm"].get("reason")
    if not reason:
        return result
    for *parents, key in LLM_REASON_AT:
        section: Any = result
        for name in parents:
            section = section.get(name) if isinstance(section, dict) else None
        if isinstance(section, dict) and section.get(key) == reason:
            section[key] = SAME_AS_LLM
    return result


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


def _ingest_status(daemon: DaemonFace, reg: IngestFigures, queue: QueueStats) -> dict[str, Any]:
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
    """Each agent memd follows: its root, how it is watched, whether memd leaves the
    extraction of its sessions to the agent's own memory, and why memd's memories are not
    in the agent's own files when serving there failed."""
    return [
        {
            "agent": source.agent,
            "root": escape_name(str(watched.path)),
            "watcher": watched.status.mode,
            "reason": watched.status.reason,
            "own_memory": daemon.own_memory.get(source.agent),
            "unread": source.unread(),
            "native_memory": _native_trouble(source.agent),
        }
        for source, watched in zip(daemon.registry.sources, daemon.watched, strict=True)
    ]


def _native_trouble(agent: str) -> str | None:
    room = room_named(agent)
    return room.native.trouble() if room is not None and room.native is not None else None


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


def foreign_report() -> dict[str, Any]:
    """Other tools' files memd could not use (a ``.git`` file over its cap, a settings file
    that is a FIFO, ...): newest first, each with what is wrong and the fix
    (:mod:`memd.foreign_reads`)."""
    rows = PROBLEMS.as_rows()
    return {"count": len(rows), "entries": rows[:REFUSED_ROWS]}


def ipc_status(daemon: DaemonFace) -> dict[str, Any] | None:
    """The socket's connections: open of the limit, and those turned away or closed."""
    server = daemon.serving.server
    if server is None:
        return None
    stats, limits = server.statistics(), server.limits
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


def llm_status(daemon: DaemonFace) -> dict[str, Any]:
    """``status``'s ``llm``: on or off and why (``reason``: the same words each section off
    for it shows), the default backend, and per job which backend serves it and why, the
    backends opened, what was found and not used, the line that turns each other one on."""
    provider = daemon.loaded.config.llm.provider
    models = daemon.llm
    if models is None:
        return {
            "enabled": False,
            "reason": "starting: the model client is loading",
            "provider": provider,
        }
    enabled, reason = models.enabled, models.reason
    result: dict[str, Any] = {
        "enabled": enabled,
        "reason": None if reason is None else f"disabled: {reason}",
        "provider": models.default or provider,
        **models.status(),
    }
    facts = models.facts()
    main = facts.get(models.default or "") or next(iter(facts.values()), None)
    if main is not None:
        result["base_url"] = main.where
    down = [f for f in facts.values() if f.unreachable_since is not None]
    if down:
        result["unreachable_since"] = down[0].unreachable_since
        result["last_error"] = down[0].last_error
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
