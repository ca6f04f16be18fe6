"""A level-1 compaction written as a new Qwen Code session (``compact --fork``, issue 35).

Qwen Code resumes a session of the project's ``chats`` folder by its id (``qwen --resume
<id>``: the file ``<id>.jsonl``) and rebuilds the model's history from the chain of records,
starting over at a ``chat_compression`` record with its ``compressedHistory``, which is what
its own ``/compress`` writes. So memd writes, beside the old session, one such record (checked
with Qwen Code 0.24.4: the first request after ``qwen --resume <id>`` carries the notes once
and the kept turns, and no compression call is made):

1. ``compressedHistory``: the notes of level 1 as a user message, then the acknowledgement
   Qwen's own compression puts after its summary, then the kept messages (R-C2: the cut
   level 1 computed) as Qwen wrote them (a record's ``message``, or an entry of an earlier
   compression's history), in file order;
2. ``info``: the context before (``originalTokenCount``), the estimate after.

The record carries the old session's working dir and version. Each kept message's entry there
is ``<record uuid>/<k>``, as the reader names an entry of a compressed history:
:attr:`Fork.renamed` maps the old ids to them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from memd.sources.base import Fork
from memd.sources.common import first_line, json_line, kept_items, now_z
from memd.tokens import estimate_text
from memd.transcript.agent_bytes import BadLine, as_node_reads, loads_as_the_agent
from memd.transcript.content import TranscriptChanged
from memd.transcript.conversation import Conversation
from memd.transcript.messages import OutlineMessage
from memd.transcript.model import Entry

Item = dict[str, Any]
HEAD_MAX: Final = 1024 * 1024  # a session's first record: a prompt, usually small
ACK: Final = "Got it. Thanks for the additional context!"  # Qwen's, after its own summary


class QwenFork:
    """Qwen Code's fork writer: a new session beside the old one, as ``qwen --resume`` reads
    a compressed session."""

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
        head = first_line(lines.path, lines.inode, HEAD_MAX)
        head = head if isinstance(head, dict) else {}
        return fork_session(
            head,
            [item for _, item in items],
            [old for old, _ in items],
            session_id=session_id,
            summary=summary,
            pre_tokens=pre_tokens,
        )

    def place(self, transcript: Path, session_id: str) -> Path:
        return transcript.parent / f"{session_id}.jsonl"


def fork_session(
    head: Mapping[str, Any],
    items: Sequence[Item],
    olds: Sequence[str],
    *,
    session_id: str,
    summary: str,
    pre_tokens: int,
) -> Fork:
    """The new session (pure): ``head`` is the old session's first record (its cwd and
    version), ``items`` the kept messages in file order, ``olds`` their entries' ids."""
    record_id = str(uuid.uuid4())
    history: list[Item] = [
        {"role": "user", "parts": [{"text": summary}]},
        {"role": "model", "parts": [{"text": ACK}]},
        *items,
    ]
    record = {
        "uuid": record_id,
        "parentUuid": None,
        "sessionId": session_id,
        "timestamp": now_z(),
        "type": "system",
        "provenance": "system",
        "cwd": head.get("cwd") if isinstance(head.get("cwd"), str) else "",
        "version": head.get("version") if isinstance(head.get("version"), str) else "unknown",
        "subtype": "chat_compression",
        "systemPayload": {
            "info": {
                "originalTokenCount": pre_tokens,
                "newTokenCount": estimate_text(json.dumps(history, ensure_ascii=False)),
                "originalTokenCountIsEstimated": False,
                "newTokenCountIsEstimated": True,
                "compressionStatus": 1,
                "triggerReason": "manual",
            },
            "compressedHistory": history,
        },
    }
    renamed = {old: f"{record_id}/{k}" for k, old in enumerate(olds, start=2)}
    return Fork(session_id, json_line(record) + b"\n", 1, len(items), renamed, f"{record_id}/0")


def item_of(line: bytes, entry: Entry) -> Item:
    """The message ``entry`` was read from, as Qwen wrote it: the record's ``message``, or
    the ``k``-th entry of its ``compressedHistory`` (``<uuid>/<k>``). Raises
    ``TranscriptChanged`` when the line no longer holds a message there."""
    try:
        found = loads_as_the_agent(as_node_reads(line))
    except (BadLine, RecursionError):
        raise TranscriptChanged(f"the line of {entry.uuid} can no longer be read") from None
    _, slash, k = entry.uuid.partition("/")
    item: Any = None
    if isinstance(found, dict) and slash:
        payload = found.get("systemPayload")
        history = payload.get("compressedHistory") if isinstance(payload, dict) else None
        index = int(k) if k.isdigit() else -1
        item = history[index] if isinstance(history, list) and 0 <= index < len(history) else None
    elif isinstance(found, dict):
        item = found.get("message")
    if not isinstance(item, dict) or item.get("role") not in ("user", "model"):
        raise TranscriptChanged(f"the line at byte {entry.at} no longer holds {entry.uuid}")
    return {"role": item["role"], "parts": item.get("parts") or []}
