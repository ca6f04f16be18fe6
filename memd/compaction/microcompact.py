"""Micro-compaction (R-C6): clear old tool results in place, zero API calls.

Every tool result except the most recent ``keep_recent`` has its content replaced by a short
placeholder. The result blocks themselves stay, with their ``tool_use_id``, so every tool call
keeps its answer and the message list keeps its shape (same messages, same order).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from memd.compaction import prompts
from memd.compaction.message import Block, Msg, TokenEstimator, block_type, to_api, total_tokens


@dataclass(frozen=True)
class Microcompacted:
    """The messages with old results cleared; ``cleared_ids`` names the tool calls touched."""

    messages: tuple[Msg, ...]
    cleared_ids: tuple[str, ...]
    tokens_before: int
    tokens_after: int

    @property
    def tokens_saved(self) -> int:
        return max(0, self.tokens_before - self.tokens_after)

    def as_dict(self) -> dict[str, Any]:
        """The ``microcompact`` reply (no API call, ever)."""
        return {
            "messages": to_api(self.messages),
            "cleared_tool_use_ids": list(self.cleared_ids),
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "api_calls": 0,
        }


def microcompact(
    msgs: Sequence[Msg],
    *,
    keep_recent: int,
    estimate: TokenEstimator,
    tools: Collection[str] | None = None,
) -> Microcompacted:
    """Clear all but the ``keep_recent`` newest tool results.

    Results already cleared are neither counted nor touched again, so repeating the call is
    harmless. With ``tools``, only results of calls to those tool names are considered. An
    old result no bigger than the placeholder is left as it is.
    """
    names = _tool_names(msgs)
    candidates = [
        ident
        for m in msgs
        if m.role == "user"
        for b in m.content
        if (ident := _clearable_id(b)) is not None and (tools is None or names.get(ident) in tools)
    ]
    old = set(candidates[: max(0, len(candidates) - keep_recent)])
    doomed = {
        _clearable_id(b)
        for m in msgs
        for b in m.content
        if _clearable_id(b) in old and estimate([b]) > estimate([_cleared(b)])
    }
    out = [_clear(m, doomed, estimate) for m in msgs]
    cleared = tuple(i for i in candidates if i in doomed)
    return Microcompacted(tuple(out), cleared, total_tokens(msgs), total_tokens(out))


def _tool_names(msgs: Sequence[Msg]) -> dict[str, str]:
    names: dict[str, str] = {}
    for m in msgs:
        if m.role != "assistant":
            continue
        for b in m.content:
            if block_type(b) == "tool_use":
                ident, name = b.get("id"), b.get("name")
                if isinstance(ident, str) and isinstance(name, str):
                    names[ident] = name
    return names


def _clearable_id(block: Block) -> str | None:
    if block_type(block) != "tool_result" or is_cleared(block):
        return None
    ident = block.get("tool_use_id")
    return ident if isinstance(ident, str) else None


def is_cleared(block: Block) -> bool:
    """Whether a tool result was already cleared by micro-compaction."""
    if block_type(block) != "tool_result":
        return False
    return block.get("content") == prompts.CLEARED_TOOL_RESULT


def _clear(msg: Msg, doomed: set[str | None], estimate: TokenEstimator) -> Msg:
    if msg.role != "user" or not any(_clearable_id(b) in doomed for b in msg.content):
        return msg
    content = [_cleared(b) if _clearable_id(b) in doomed else b for b in msg.content]
    return msg.with_content(content, tokens=estimate(content))


def _cleared(block: Block) -> Block:
    cleared: Block = {
        "type": "tool_result",
        "tool_use_id": block["tool_use_id"],
        "content": prompts.CLEARED_TOOL_RESULT,
    }
    if block.get("is_error") is True:
        cleared["is_error"] = True
    return cleared
