"""Turning an active chain of transcript entries into Messages-API messages (FORMAT.md §6).

Pure functions over entries. Grouping (:func:`group_lines`) looks at roles, ``message.id`` and
the tool ids the parser already extracted, so counting messages decodes no content; only
:func:`to_message` decodes the contents of the lines it is given.

The rules, which are what the API needs from a rebuilt history:

* the lines of one response (one ``message.id``) are one assistant message, also when tool
  results were written between them (parallel tool calls stream as tool_use, tool_result,
  tool_use, … all under one id);
* consecutive user lines are one user message, its ``tool_result`` blocks first;
* progress, system, attachment and synthetic (``<synthetic>`` model) entries are left out;
  responses with different ids stay separate messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from memd.transcript.model import AssistantEntry, Entry, UserEntry, content_blocks


@dataclass(frozen=True)
class ApiMessage:
    """One Messages-API message and the transcript lines it was built from (file order)."""

    role: Literal["user", "assistant"]
    content: list[dict[str, Any]]
    uuids: tuple[str, ...]

    @property
    def last_uuid(self) -> str:
        """The uuid of the message's last transcript line (``lastSummarizedMessageId``)."""
        return self.uuids[-1]

    def to_api(self) -> dict[str, Any]:
        return {"role": self.role, "content": list(self.content)}


@dataclass
class MessageLines:
    """The transcript lines that make up one API message, in file order."""

    role: Literal["user", "assistant"]
    message_id: str | None  # the response id, for assistant messages
    lines: list[UserEntry | AssistantEntry]
    only_tool_results: bool  # a user message holding nothing but tool results

    @property
    def uuids(self) -> tuple[str, ...]:
        return tuple(line.uuid for line in self.lines)


def group_lines(chain: Iterable[Entry]) -> list[MessageLines]:
    """Group the entries of an active chain (oldest first) into API messages."""
    groups: list[MessageLines] = []
    for entry in chain:
        if isinstance(entry, UserEntry):
            tool_results = bool(entry.tool_result_ids)
            if groups and groups[-1].role == "user":
                groups[-1].lines.append(entry)
                groups[-1].only_tool_results &= tool_results
            else:
                groups.append(MessageLines("user", None, [entry], tool_results))
        elif isinstance(entry, AssistantEntry) and not entry.synthetic:
            owner = _open_response(groups, entry.message_id)
            if owner is not None:
                owner.lines.append(entry)
            else:
                groups.append(MessageLines("assistant", entry.message_id, [entry], False))
    return groups


def _open_response(groups: list[MessageLines], message_id: str) -> MessageLines | None:
    """The assistant message of ``message_id`` if only tool results were written since."""
    for group in reversed(groups):
        if group.role == "assistant":
            return group if group.message_id == message_id else None
        if not group.only_tool_results:
            return None
    return None


def to_message(group: MessageLines) -> ApiMessage:
    """Decode the lines' contents into one API message."""
    blocks: list[dict[str, Any]] = []
    for line in group.lines:
        blocks.extend(content_blocks(line.content))
    if group.role == "user":
        results = [b for b in blocks if b.get("type") == "tool_result"]
        blocks = results + [b for b in blocks if b.get("type") != "tool_result"]
    else:
        # Streaming leaves "\n\n" text blocks between thinking and tool calls; the API refuses
        # whitespace-only text, and they carry nothing.
        blocks = [b for b in blocks if not _blank_text(b)] or blocks
    return ApiMessage(group.role, blocks, group.uuids)


def _blank_text(block: dict[str, Any]) -> bool:
    text = block.get("text")
    return block.get("type") == "text" and (not isinstance(text, str) or not text.strip())
