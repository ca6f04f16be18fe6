"""What the registry puts into a session's state: a new one, one reset to read its file from
the start, and the figures a read publishes (context size, messages, tool calls, boundaries,
cwd, project). Pure functions of the reader and the state, no I/O.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from memd.sources.base import Reader, SessionKey, Source
from memd.state import SessionState, model_name
from memd.transcript.conversation import Conversation


def from_start(state: SessionState) -> SessionState:
    """``state`` as if nothing of its file had been read (figures are rebuilt by the read)."""
    return SessionState(
        state.session_id,
        state.project,
        state.path,
        resets=state.resets + 1,
        bytes_parsed=state.bytes_parsed,
        agent=state.agent,
    )


def new_state(key: SessionKey, path: Path, mtime: float = 0.0) -> SessionState:
    """A session's state before anything of its file was read."""
    return SessionState(key.session_id, key.project, str(path), mtime=mtime, agent=key.agent)


OWN_CALL = "memd's own model call (an agent's CLI run as memd's backend)"


def publish(
    source: Source,
    key: SessionKey,
    reader: Reader,
    state: SessionState,
    own_calls: str | None = None,
) -> None:
    """The reader's figures into ``state``; its conversation keeps no derived values. A
    session in ``own_calls`` (the folder memd runs the agents' CLIs in) is never followed."""
    conv = reader.conversation
    _publish_figures(conv, state)
    conv.release()
    if reader.session_id and reader.session_id != state.session_id:
        state.session_id = reader.session_id  # the agent's own id (the index re-keys it)
    cwd = reader.cwd
    state.cwd = sys.intern(cwd) if cwd else state.cwd
    if not state.project:  # once known it stays: the notes file lives under it
        state.project = sys.intern(source.project_of(key, state.cwd or None))
    state.ignored = reader.ignored or ""
    if not state.ignored and own_calls and _below(state.cwd, own_calls):
        state.ignored = OWN_CALL


def _below(cwd: str, folder: str) -> bool:
    return cwd == folder or cwd.startswith(folder.rstrip("/") + "/")


def _publish_figures(conv: Conversation, state: SessionState) -> None:
    figure = conv.context()
    state.context_tokens = figure.tokens
    state.context_from_usage = figure.from_usage
    state.context_estimated_tail = figure.estimated_tail
    state.context_stale = figure.stale
    state.message_count = conv.message_count
    state.pending_tool_calls = len(conv.pending_tool_use_ids())
    state.boundaries = [dataclasses.asdict(b) for b in conv.boundaries]
    state.tool_uses = conv.tool_use_count
    state.turn_ends = conv.turn_ends
    state.unknown_types = dict(conv.unknown_types) if conv.unknown_types else None
    state.last_timestamp = conv.last_timestamp or ""
    state.last_uuid = conv.last_uuid or ""
    state.slug = conv.slug or state.slug
    state.model = model_name(conv.model) if conv.model else state.model
