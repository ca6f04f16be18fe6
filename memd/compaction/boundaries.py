"""Where a conversation may be cut: tool-pair protection and API rounds.

Both compaction paths drop a prefix of the conversation. A prefix may only end where the API
would still accept what follows: no kept tool result may lose the call it answers, and the
blocks of one assistant response (text, thinking, tool calls) stay together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from memd.compaction.message import Msg, tool_result_ids, tool_use_ids
from memd.compaction.threshold import Trigger


@dataclass(frozen=True)
class CompactBoundary:
    """The marker that starts a compacted conversation (a transcript's ``compact_boundary``).

    Metadata for the client and the status, not an API message: ``pre_tokens`` is the size of
    the conversation before compaction, ``logical_parent_uuid`` the uuid of its last message.
    """

    trigger: Trigger
    pre_tokens: int
    level: int
    logical_parent_uuid: str | None

    def as_dict(self) -> dict[str, object]:
        return {
            "type": "compact_boundary",
            "trigger": self.trigger,
            "pre_tokens": self.pre_tokens,
            "level": self.level,
            "logical_parent_uuid": self.logical_parent_uuid,
        }


def protect_tool_pairs(msgs: Sequence[Msg], start: int) -> int:
    """Move a proposed cut ``start`` back until the kept suffix ``msgs[start:]`` is whole.

    Whole means: every tool result kept has its tool call kept (results whose call is not in
    ``msgs`` at all are left to :func:`memd.compaction.api_form.repair`), and the suffix does
    not begin inside an assistant response split over several messages (same ``api_id``).
    Returns the largest such index ``<= start``; ``start`` itself when nothing needs moving.
    """
    start = max(0, min(start, len(msgs)))
    call_at = _call_index(msgs)
    needed = _unanswered_results(msgs[start:], call_at)
    while True:
        earliest = min((call_at[c] for c in needed if call_at[c] < start), default=start)
        earliest = _response_start(msgs, earliest)
        if earliest == start:
            return start
        for m in msgs[earliest:start]:
            needed.update(c for c in tool_result_ids(m) if c in call_at)
        start = earliest


def _call_index(msgs: Sequence[Msg]) -> dict[str, int]:
    """Tool-call id → index of the message that makes the call (the first, if repeated)."""
    at: dict[str, int] = {}
    for i, m in enumerate(msgs):
        for c in tool_use_ids(m):
            at.setdefault(c, i)
    return at


def _unanswered_results(kept: Sequence[Msg], call_at: dict[str, int]) -> set[str]:
    return {c for m in kept for c in tool_result_ids(m) if c in call_at}


def _response_start(msgs: Sequence[Msg], index: int) -> int:
    """First message of the assistant response that ``msgs[index]`` belongs to."""
    while (
        0 < index < len(msgs)
        and msgs[index].role == "assistant"
        and msgs[index].api_id is not None
        and msgs[index - 1].role == "assistant"
        and msgs[index - 1].api_id == msgs[index].api_id
    ):
        index -= 1
    return index


@dataclass(frozen=True)
class Round:
    """``msgs[start:end]``: one API round and its token estimate.

    A round is an assistant response and the user messages after it up to the next response
    (its tool results, then any new prompt). Messages before the first response form a
    leading round of their own. Dropping whole rounds from the front never orphans a result.
    """

    start: int
    end: int
    tokens: int


def api_rounds(msgs: Sequence[Msg]) -> list[Round]:
    """Split ``msgs`` into consecutive rounds covering every message."""
    starts = [
        i
        for i, m in enumerate(msgs)
        if i == 0 or (m.role == "assistant" and _response_start(msgs, i) == i)
    ]
    bounds = [*starts, len(msgs)]
    return [Round(s, e, sum(m.tokens for m in msgs[s:e])) for s, e in pairwise(bounds)]
