"""A level-1 compaction written as a new Claude Code session (``compact --fork``, issue 25).

Claude Code cannot take a summary from outside (its PreCompact hook can only block), but it
resumes any session file in the project's transcript folder. So memd writes one beside the
old session: the lines ``claude --resume <new id>`` reads as a compacted conversation, from
the notes and with no model call:

1. a ``compact_boundary`` (``parentUuid`` null: the chain starts here, FORMAT.md §5);
2. the compaction summary: a user line flagged ``isCompactSummary`` that carries the notes
   message of level 1 (:func:`memd.compaction.session_memory.notes_message_text`), once;
3. the kept messages (R-C2: the cut level 1 computed), each line as Claude Code wrote it,
   with a new ``uuid``, its ``parentUuid`` the line before (one chain, no branches), the new
   ``sessionId``, and ``message.content`` reduced to the blocks memd's reading of the
   conversation kept (the API-valid form: every kept tool call is answered by the next
   message, no orphan result, no blank text). A line whose blocks went to two places is
   written as two lines; parallel tool calls streamed interleaved are written call lines
   first, then their results, the order Claude Code itself writes for one call at a time.

:func:`fork_session` is pure; :class:`ClaudeFork` (the room's fork writer,
:class:`memd.sources.base.ForkWriter`) reads the kept lines back from the transcript (under
the session's lock) and names the file, ``<project folder>/<new id>.jsonl``; the compaction
plans the cut and writes the file (:mod:`memd.compaction.forked_session`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memd.sources.base import Fork
from memd.sources.common import json_line as encode_line
from memd.transcript.agent_bytes import loads_as_the_agent
from memd.transcript.content import TranscriptChanged
from memd.transcript.conversation import Conversation
from memd.transcript.messages import OutlineMessage
from memd.transcript.model import Entry

Line = dict[str, Any]
BOUNDARY_TEXT = "Conversation compacted"
# Envelope fields the boundary and the summary copy from the first kept line.
ENVELOPE_FIELDS = ("userType", "cwd", "version", "gitBranch", "slug", "entrypoint")
# Flags a kept line loses: only the new summary is the compaction summary.
DROPPED_FIELDS = ("logicalParentUuid", "isCompactSummary", "isVisibleInTranscriptOnly")


class LineMismatch(ValueError):
    """A line read back does not hold what the conversation's outline says (file changed)."""


class ClaudeFork:
    """Claude Code's fork writer: the new session beside the old one, as ``claude --resume``
    reads a compacted conversation."""

    def new_id(self) -> str:
        return str(uuid.uuid4())

    def write(
        self,
        conv: Conversation,
        kept: Sequence[OutlineMessage],
        *,
        session_id: str,
        summary: str,
        pre_tokens: int,
    ) -> Fork:
        entries: list[Entry] = [line for message in kept for line in message.lines()]
        raw = read_lines(conv, entries)
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        try:
            return fork_session(
                kept,
                raw,
                session_id=session_id,
                summary=summary,
                pre_tokens=pre_tokens,
                timestamp=now,
                new_uuid=self.new_id,
            )
        except LineMismatch as exc:
            raise TranscriptChanged(str(exc)) from None

    def place(self, transcript: Path, session_id: str) -> Path:
        return transcript.parent / f"{session_id}.jsonl"


def read_lines(conv: Conversation, entries: Sequence[Entry]) -> dict[str, Line]:
    """The decoded transcript lines of ``entries`` by uuid (each checked to be that line)."""
    by_offset = conv.lines.read(entries)
    out: dict[str, Line] = {}
    for entry in entries:
        try:
            line = loads_as_the_agent(by_offset[entry.at])  # never an Infinity to write
        except (KeyError, ValueError, RecursionError):  # BadLine is a ValueError
            raise TranscriptChanged(f"the line of {entry.uuid} can no longer be read") from None
        if not isinstance(line, dict) or line.get("uuid") != entry.uuid:
            raise TranscriptChanged(f"the line at byte {entry.at} is no longer {entry.uuid}")
        out[entry.uuid] = line
    return out


def fork_session(
    kept: Sequence[OutlineMessage],
    raw_lines: Mapping[str, Line],
    *,
    session_id: str,
    summary: str,
    pre_tokens: int,
    timestamp: str,
    new_uuid: Callable[[], str],
) -> Fork:
    """The new session file for ``kept`` (the messages after level 1's cut, in order).

    ``raw_lines`` maps each kept line's uuid to its decoded transcript line. Raises
    :class:`LineMismatch` when a line does not hold a block the outline names.
    """
    first = raw_lines[next(iter(kept[0].lines())).uuid] if kept else {}
    envelope = {k: first[k] for k in ENVELOPE_FIELDS if k in first}
    boundary = _boundary(envelope, session_id, new_uuid(), pre_tokens, timestamp)
    summary_line = _summary(envelope, session_id, new_uuid(), boundary["uuid"], summary, timestamp)
    out: list[Line] = [boundary, summary_line]
    renamed: dict[str, str] = {}
    for message in kept:
        for old, blocks in _line_runs(message, raw_lines):
            line = _copied(raw_lines[old], blocks, session_id, new_uuid(), out[-1]["uuid"])
            source = line.pop("sourceToolAssistantUUID", None)
            if isinstance(source, str) and source in renamed:
                line["sourceToolAssistantUUID"] = renamed[source]
            renamed[old] = line["uuid"]
            out.append(line)
    data = b"".join(encode_line(line) + b"\n" for line in out)
    return Fork(session_id, data, len(out), len(kept), renamed, summary_line["uuid"])


def _boundary(
    envelope: Mapping[str, Any], session_id: str, uuid: str, pre_tokens: int, timestamp: str
) -> Line:
    return {
        "parentUuid": None,
        "logicalParentUuid": None,
        "isSidechain": False,
        **envelope,
        "sessionId": session_id,
        "type": "system",
        "subtype": "compact_boundary",
        "content": BOUNDARY_TEXT,
        "isMeta": False,
        "timestamp": timestamp,
        "uuid": uuid,
        "level": "info",
        "compactMetadata": {"trigger": "manual", "preTokens": max(0, pre_tokens)},
    }


def _summary(
    envelope: Mapping[str, Any],
    session_id: str,
    uuid: str,
    parent: str,
    text: str,
    timestamp: str,
) -> Line:
    return {
        "parentUuid": parent,
        "isSidechain": False,
        **envelope,
        "sessionId": session_id,
        "type": "user",
        "message": {"role": "user", "content": text},
        "isVisibleInTranscriptOnly": True,
        "isCompactSummary": True,
        "uuid": uuid,
        "timestamp": timestamp,
    }


def _line_runs(
    message: OutlineMessage, raw_lines: Mapping[str, Line]
) -> Iterable[tuple[str, list[dict[str, Any]]]]:
    """(line uuid, its blocks) for each run of the message's blocks that one line holds."""
    runs: list[tuple[str, list[dict[str, Any]]]] = []
    for line, (index, kind, _ident, _ok) in message.parts:
        blocks = content_blocks(raw_lines[line.uuid])
        block = blocks[index] if index < len(blocks) else None
        if block is None or block.get("type") != kind:
            raise LineMismatch(f"line {line.uuid} no longer holds block {index} ({kind})")
        if runs and runs[-1][0] == line.uuid:
            runs[-1][1].append(block)
        else:
            runs.append((line.uuid, [block]))
    return runs


def content_blocks(line: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A line's ``message.content`` as blocks, indexed as the parser's outline counts them
    (objects only; a string is one text block, none if empty)."""
    message = line.get("message")
    value = message.get("content") if isinstance(message, dict) else None
    if isinstance(value, str):
        return [{"type": "text", "text": value}] if value else []
    if not isinstance(value, list):
        return []
    return [block for block in value if isinstance(block, dict)]


def _copied(
    raw: Mapping[str, Any], blocks: list[dict[str, Any]], session_id: str, uuid: str, parent: str
) -> Line:
    line = {k: v for k, v in raw.items() if k not in DROPPED_FIELDS}
    message = raw.get("message")
    line["message"] = {**(message if isinstance(message, dict) else {}), "content": blocks}
    line.update(parentUuid=parent, uuid=uuid, sessionId=session_id)
    return line
