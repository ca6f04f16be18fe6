"""A level-1 compaction written as a new Gemini CLI chat (``compact --fork``, issue 35).

Gemini CLI resumes a chat of the project's ``chats`` folder by its ``sessionId`` (``gemini
--resume <id>``: it reads every ``session-*.jsonl`` there and picks the one whose header
names it), and rebuilds the history from the file's message records, as its own
``rewriteConversationFile`` writes them. So memd writes, beside the old chat (checked with
Gemini CLI 0.61.0):

1. a header: the new ``sessionId``, the old chat's ``projectHash``, ``kind: "main"``;
2. the notes message of level 1 as a user message, then the model's acknowledgement Gemini's
   own compression puts after its summary (the history alternates, as the API wants);
3. the kept messages (R-C2: the cut level 1 computed), each as Gemini wrote it (a message
   record, or an entry of a ``$set`` history), in file order, under its own id. What
   Gemini leaves out of a resumed history is left out (``<session_context>``, which it sends
   again, and ``<hook_context>``); so is what memd's reading left out (the ``X_response``
   copies of a ``$set``).

On resume Gemini sends its session context, that history and the new prompt: the notes once,
no model call for the compaction. :class:`GeminiFork` is the room's fork writer
(:class:`memd.sources.base.ForkWriter`); it reads the kept lines back (under the session's
lock) and names the file ``session-<UTC minute>-<first 8 of the id>.jsonl``, as Gemini does.
Each message's entry there is its line's offset, as the reader names a record's:
:attr:`Fork.renamed` maps the old ids to them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from memd.sources.base import Fork
from memd.sources.common import first_line, json_line, kept_items, now_z
from memd.transcript.agent_bytes import BadLine, as_node_reads, loads_as_the_agent
from memd.transcript.content import TranscriptChanged
from memd.transcript.conversation import Conversation
from memd.transcript.messages import OutlineMessage
from memd.transcript.model import Entry

Item = dict[str, Any]
HEADER_MAX: Final = 64 * 1024  # a chat's header: a few hundred bytes
ACK: Final = "Got it. Thanks for the additional context!"  # Gemini's, after its own summary
# User messages Gemini leaves out of a resumed history (its isIgnoredUserContent).
RESENT: Final = ("<session_context>", "<hook_context>")


class GeminiFork:
    """Gemini CLI's fork writer: a new chat beside the old one, as ``gemini --resume``
    reads a compressed chat."""

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
        lines, items = kept_items(conv, kept, item_of)
        header = read_header(lines.path, lines.inode)
        return fork_chat(header, items, session_id=session_id, summary=summary, timestamp=now_z())

    def place(self, transcript: Path, session_id: str) -> Path:
        minute = datetime.now(UTC).strftime("%Y-%m-%dT%H-%M")
        return transcript.parent / f"session-{minute}-{session_id[:8]}.jsonl"


def fork_chat(
    header: Mapping[str, Any],
    items: Sequence[tuple[str, Item]],
    *,
    session_id: str,
    summary: str,
    timestamp: str,
) -> Fork:
    """The new chat (pure): ``header`` is the old chat's first line, ``items`` the kept
    messages in file order with their old entry ids."""
    head = {
        "sessionId": session_id,
        "projectHash": header.get("projectHash"),
        "startTime": timestamp,
        "lastUpdated": timestamp,
        "kind": "main",
    }
    notes = _message(str(uuid.uuid4()), timestamp, "user", summary)
    ack = _message(str(uuid.uuid4()), timestamp, "gemini", ACK)
    lines = [json_line(head), json_line(notes), json_line(ack)]
    at = sum(len(line) + 1 for line in lines)
    summary_id = str(len(lines[0]) + 1)
    renamed: dict[str, str] = {}
    seen: set[str] = set()
    for old, item in items:
        ident = item.get("id")
        if resent(item) or not isinstance(ident, str) or ident in seen:
            continue  # Gemini keys its history by id: a second one would replace the first
        seen.add(ident)
        line = json_line(item)
        renamed[old] = str(at)
        lines.append(line)
        at += len(line) + 1
    data = b"".join(line + b"\n" for line in lines)
    return Fork(session_id, data, len(lines), len(renamed), renamed, summary_id)


def _message(ident: str, timestamp: str, kind: str, text: str) -> Item:
    return {"id": ident, "timestamp": timestamp, "type": kind, "content": [{"text": text}]}


def resent(item: Mapping[str, Any]) -> bool:
    """A user message Gemini leaves out of a resumed history (it sends its context again)."""
    if item.get("type") != "user":
        return False
    content = item.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = "".join(p["text"] for p in content if isinstance(p, dict) and _is_text(p))
    else:
        return False
    return text.strip().startswith(RESENT)


def _is_text(part: Mapping[str, Any]) -> bool:
    return isinstance(part.get("text"), str)


def item_of(line: bytes, entry: Entry) -> Item:
    """The message ``entry`` was read from, as Gemini wrote it: the line's record, or the
    ``k``-th message of its ``$set`` (``<offset>/<k>``). Raises ``TranscriptChanged`` when
    the line no longer holds a message there (that it holds the same blocks is the
    reader's check, :func:`memd.sources.common.kept_items`)."""
    try:
        found = loads_as_the_agent(as_node_reads(line))
    except (BadLine, RecursionError):
        raise TranscriptChanged(f"the line of {entry.uuid} can no longer be read") from None
    _, slash, k = entry.uuid.partition("/")
    item: Any = found
    if slash:
        update = found.get("$set") if isinstance(found, dict) else None
        history = update.get("messages") if isinstance(update, dict) else None
        index = int(k) if k.isdigit() else -1
        item = history[index] if isinstance(history, list) and 0 <= index < len(history) else None
    if not isinstance(item, dict) or item.get("type") not in ("user", "gemini"):
        raise TranscriptChanged(f"the line at byte {entry.at} no longer holds {entry.uuid}")
    return item


def read_header(path: str, inode: int) -> dict[str, Any]:
    """The chat's header (its first line: ``sessionId``, ``projectHash``), blocking, bounded."""
    found = first_line(path, inode, HEADER_MAX)
    if not isinstance(found, dict) or not isinstance(found.get("projectHash"), str):
        raise TranscriptChanged(f"{path} does not start with the header of a Gemini chat")
    return found
