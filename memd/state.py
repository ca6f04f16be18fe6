"""Persisted per-session ingest state: offsets, counters and token figures.

One JSON document under the state dir, replaced atomically. It is a cache of what was read,
never the only copy of anything: if it is lost or unreadable, memd re-reads the transcripts.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from memd.atomic import persist
from memd.records import load_record

log = logging.getLogger(__name__)

STATE_VERSION = 1
# One session's figures take about a kilobyte; a state file past this holds no one's sessions.
MAX_STATE_BYTES = 128 * 1024 * 1024


@dataclass(slots=True)
class SessionState:
    """What memd knows about one main transcript. Mutable; owned by the session registry.

    Slotted: a daemon knows every transcript of the history (10,000 and more), and a
    per-instance ``__dict__`` would be most of what each one costs.
    """

    session_id: str
    project: str  # the project folder name (the cwd slug)
    path: str  # absolute transcript path
    inode: int = 0
    offset: int = 0  # bytes of complete lines consumed
    scanned: int = 0  # how far the newline of the incomplete line at offset was looked for
    size: int = 0  # file size at the last stat
    mtime: float = 0.0
    bytes_parsed: int = 0  # bytes read by tailing since this state began (not re-reads)
    lines: int = 0
    bad_lines: int = 0
    # Lines of types its source does not know, per type (a format change), None: none.
    unknown_types: dict[str, int] | None = None
    resets: int = 0  # truncations or replacements seen
    message_count: int = 0
    context_tokens: int = 0
    context_from_usage: int = 0
    context_estimated_tail: int = 0
    context_stale: bool = False
    boundaries: list[dict[str, Any]] = field(default_factory=list)
    tool_uses: int = 0
    turn_ends: int = 0
    last_timestamp: str = ""
    last_uuid: str = ""
    cwd: str = ""
    slug: str = ""  # Claude Code's readable session name (plan files are named after it)
    parsed: bool = False  # has memd ever read this file?
    # Why the path cannot be read ({"reason", "since" (epoch s), "transient"}), None if it can.
    unreadable: dict[str, Any] | None = None
    pending_tool_calls: int = 0  # calls of a response held back until their results arrive
    agent: str = "claude_code"  # the source the session comes from (memd.sources)
    model: str = ""  # the newest response's model as asked for ("": none known), capped
    ignored: str = ""  # why memd does not follow it (a sub-agent's, a memory job's), or ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionState:
        """Rebuild a state :func:`save_sessions` wrote; raise ``ValueError`` when a figure is
        not one memd could have written (a file under the state dir is read like any other:
        2^70 tokens there would make every ``status`` unencodable)."""
        known = {f.name for f in fields(cls)}
        for f in fields(cls):
            if f.name in data and not _plausible(f.type, data[f.name]):
                raise ValueError(f"{f.name} is not a {f.type} memd writes")
        state = cls(**{k: v for k, v in data.items() if k in known})
        # Many sessions share a project and a cwd: one copy of each string, not one per session.
        if isinstance(state.project, str):
            state.project = sys.intern(state.project)
        if isinstance(state.cwd, str):
            state.cwd = sys.intern(state.cwd)
        state.model = model_name(state.model)
        return state


MAX_MODEL_CHARS = 200  # a model's name as kept (the transcript's is hostile bytes too)


def model_name(raw: str) -> str:
    """A model's name as a session's state keeps it (``status`` shows it, a terminal prints
    it): at most :data:`MAX_MODEL_CHARS`, each character that does not print as ``?``."""
    name = raw[:MAX_MODEL_CHARS]
    return name if name.isprintable() else "".join(c if c.isprintable() else "?" for c in name)


# Each figure saved is a count, an offset or a time: far below this, and so is any sum of them.
_STATE_LIMIT = 2**53


def _plausible(kind: object, value: Any) -> bool:
    """Whether ``value`` fits the field's annotation (``int``, ``float``, ``bool``, ``str``:
    the ones :class:`SessionState` uses for figures) and the figures' range."""
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "dict[str, int] | None":
        return value is None or (
            isinstance(value, dict)
            and len(value) <= 64  # the conversation keeps 17 at most
            and all(isinstance(k, str) and _plausible("int", n) for k, n in value.items())
        )
    if kind not in ("int", "float"):
        return True  # boundaries, unreadable: read where they are used
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if kind == "int":
        return isinstance(value, int) and 0 <= value <= _STATE_LIMIT
    return math.isfinite(value) and abs(value) <= _STATE_LIMIT


def load_sessions(path: Path) -> dict[str, SessionState]:
    """Read the state file; a missing file is an empty state, a broken one is moved aside,
    logged, and the transcripts are read again (:func:`memd.records.load_record`)."""
    return load_record(path, MAX_STATE_BYTES, "the sessions' state file", _decode_sessions) or {}


def _decode_sessions(raw: bytes) -> dict[str, SessionState]:
    doc = json.loads(raw)
    if doc.get("version") != STATE_VERSION:
        raise ValueError(f"unknown state version {doc.get('version')!r}")
    return _each_state(doc["sessions"].items())


def _each_state(items: Iterable[tuple[str, Any]]) -> dict[str, SessionState]:
    """The states that can be read; one that cannot is dropped (its transcript is read again),
    not the whole file."""
    states: dict[str, SessionState] = {}
    for key, value in items:
        try:
            states[key] = SessionState.from_dict(value)
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning(
                "saved state of %s dropped (%s); its transcript will be read again", key, exc
            )
    return states


def save_sessions(path: Path, sessions: dict[str, SessionState]) -> bool:
    """Write the state file; False when the disk refused it and memd keeps it until it can
    (:func:`memd.atomic.persist`)."""
    doc = {"version": STATE_VERSION, "sessions": {k: asdict(v) for k, v in sessions.items()}}
    return persist(path, json.dumps(doc, separators=(",", ":")).encode("utf-8"))
