"""A level-1 compaction written as a new Codex rollout (``compact --fork``, issue 35).

Codex resumes any rollout under ``$CODEX_HOME/sessions`` by its thread id (``codex resume
<id>``, ``codex exec resume <id>``: a file it never indexed is found by its name), and it
rebuilds a history from a ``compacted`` line's ``replacement_history``, as after its own
compaction. So memd writes, beside the old rollout (checked with Codex 0.171.0):

1. the old ``session_meta`` (its cwd, model provider, base instructions, git, source) under
   the new thread id, with a new context window and without what tied it to another thread's
   history (``history_base``, ``forked_from_*``);
2. one ``compacted`` line: ``message`` is the notes message of level 1 and
   ``replacement_history`` the whole new history, that message as a user message, then the
   kept items (R-C2: the cut level 1 computed) as Codex wrote them, in file order. The
   environment and AGENTS.md messages Codex sends again at every resume are left out, and so
   is what memd's reading left out of the conversation (developer messages, reasoning, a
   call nothing answered).

On resume Codex sends its instructions, that history, its environment context and the new
prompt: the notes once, no model call for the compaction. :class:`CodexFork` is the room's
fork writer (:class:`memd.sources.base.ForkWriter`); it reads the kept lines back (under the
session's lock) and names the file ``rollout-<local time>-<thread id>.jsonl``. Each kept
item's entry there is ``"<offset of the compacted line>.<k>"``, as the reader names the items
of a replacement history: :attr:`Fork.renamed` maps the old ids to them.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from memd.sources.base import Fork
from memd.sources.common import first_line, json_line, kept_items, now_z
from memd.transcript.agent_bytes import BadLine, loads_as_the_agent
from memd.transcript.content import TranscriptChanged
from memd.transcript.conversation import Conversation
from memd.transcript.messages import OutlineMessage
from memd.transcript.model import Entry

Item = dict[str, Any]
META_MAX: Final = 4 * 1024 * 1024  # session_meta holds the base instructions (~20 KiB)
# What Codex puts in a history again at every resume (a kept copy would be there twice).
RESENT: Final = ("<environment_context>", "<user_instructions>")
# Fields of the old session_meta that tie it to another thread's history or window.
UNTIED: Final = ("history_base", "forked_from_id", "forked_from_ordinal_exclusive")


class CodexFork:
    """Codex CLI's fork writer: a new rollout beside the old one, as ``codex resume`` reads a
    compacted thread."""

    def new_id(self) -> str:
        return uuid7()

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
        meta = read_meta(lines.path, lines.inode)
        return fork_rollout(meta, items, session_id=session_id, summary=summary, timestamp=now_z())

    def place(self, transcript: Path, session_id: str) -> Path:
        stamp = time.strftime("%Y-%m-%dT%H-%M-%S", time.localtime())
        return transcript.parent / f"rollout-{stamp}-{session_id}.jsonl"


def fork_rollout(
    meta: Mapping[str, Any],
    items: Sequence[tuple[str, Item]],
    *,
    session_id: str,
    summary: str,
    timestamp: str,
) -> Fork:
    """The new rollout (pure): ``meta`` is the old ``session_meta`` payload, ``items`` the
    kept items in file order with their old entry ids."""
    payload = {k: v for k, v in meta.items() if k not in UNTIED}
    payload.update(id=session_id, session_id=session_id, timestamp=timestamp)
    payload["context_window"] = {"window_id": uuid7()}
    first = json_line(_line(timestamp, 0, "session_meta", payload))
    at = len(first) + 1  # the compacted line's offset: its items are "<at>.<k>"
    history: list[Item] = [summary_item(summary)]
    renamed: dict[str, str] = {}
    for old, item in items:
        if resent(item):
            continue
        renamed[old] = f"{at}.{len(history)}"
        history.append(item)
    compacted = {"message": summary, "replacement_history": history}
    second = json_line(_line(timestamp, 1, "compacted", compacted))
    data = first + b"\n" + second + b"\n"
    return Fork(session_id, data, 2, len(history) - 1, renamed, f"{at}.0")


def _line(timestamp: str, ordinal: int, kind: str, payload: Mapping[str, Any]) -> Item:
    return {"timestamp": timestamp, "ordinal": ordinal, "type": kind, "payload": payload}


def summary_item(text: str) -> Item:
    """The notes message as the user message Codex's own summary is."""
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def resent(item: Mapping[str, Any]) -> bool:
    """A user message Codex sends again at every resume (its environment, AGENTS.md)."""
    if item.get("type") != "message" or item.get("role") != "user":
        return False
    parts = item.get("content")
    texts = [p.get("text") for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []
    return bool(texts) and all(isinstance(t, str) and t.startswith(RESENT) for t in texts)


def item_of(line: bytes, entry: Entry) -> Item:
    """The history item ``entry`` was read from, as Codex wrote it (raises
    ``TranscriptChanged`` when the line no longer holds it; that it holds the same blocks is
    the reader's check, :func:`memd.sources.common.kept_items`)."""
    try:
        found = loads_as_the_agent(line)
    except (BadLine, RecursionError):
        raise TranscriptChanged(f"the line of {entry.uuid} can no longer be read") from None
    payload = found.get("payload") if isinstance(found, dict) else None
    _, dot, k = entry.uuid.partition(".")
    if dot and isinstance(payload, dict):
        history = payload.get("replacement_history")
        payload = history[int(k)] if isinstance(history, list) and int(k) < len(history) else None
    if not isinstance(payload, dict):
        raise TranscriptChanged(f"the line at byte {entry.at} no longer holds {entry.uuid}")
    return payload


def read_meta(path: str, inode: int) -> dict[str, Any]:
    """The ``session_meta`` payload on the rollout's first line (blocking, bounded)."""
    found = first_line(path, inode, META_MAX)
    payload = found.get("payload") if isinstance(found, dict) else None
    if (
        not isinstance(found, dict)
        or found.get("type") != "session_meta"
        or not isinstance(payload, dict)
    ):
        raise TranscriptChanged(f"{path} does not start with a session_meta line Codex resumes")
    return payload


def uuid7() -> str:
    """A new UUID of version 7 (time first, then random), the form of Codex's thread ids."""
    millis = time.time_ns() // 1_000_000 & (1 << 48) - 1
    rand = int.from_bytes(os.urandom(10), "big")
    value = millis << 80 | 0x7 << 76 | (rand >> 62 & 0xFFF) << 64 | 0b10 << 62
    value |= rand & (1 << 62) - 1
    return str(uuid.UUID(int=value))
