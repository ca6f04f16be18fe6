"""Level 3 (R-C4): plan what to drop when even the summary request is too long.

The conversation is split into API rounds and the oldest rounds are dropped: exactly enough
to cover the token gap when the API stated it (using the rounds' token estimates), else a
fixed fraction of the rounds (at least one). The caller retries with the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memd.compaction import prompts
from memd.compaction.boundaries import api_rounds
from memd.compaction.message import Msg
from memd.config import CompactionConfig


@dataclass(frozen=True)
class Retry:
    """Try again with ``messages``: a marker for the dropped part, then the kept rounds."""

    messages: tuple[Msg, ...]
    dropped_rounds: int
    dropped_tokens: int


@dataclass(frozen=True)
class GiveUp:
    reason: str


def rounds_to_drop(round_tokens: Sequence[int], gap: int | None, fraction: float) -> int:
    """How many of the oldest rounds to drop (may equal ``len(round_tokens)``: all of them).

    With a stated ``gap`` the fewest rounds whose estimates add up to at least the gap, at
    least one; without it ``fraction`` of the rounds, rounded down, at least one.
    """
    if gap is None:
        return max(1, int(len(round_tokens) * fraction))
    covered = 0
    for count, tokens in enumerate(round_tokens, start=1):
        covered += tokens
        if covered >= gap:
            return count
    return len(round_tokens)


def plan_retry(msgs: Sequence[Msg], gap: int | None, cfg: CompactionConfig) -> Retry | GiveUp:
    """Drop the oldest rounds of ``msgs``; give up if that would leave no round.

    The marker left by an earlier retry is not a round: it is replaced, never counted.
    """
    if msgs and _is_marker(msgs[0]):
        msgs = msgs[1:]
    rounds = api_rounds(msgs)
    count = rounds_to_drop([r.tokens for r in rounds], gap, cfg.ptl_drop_fraction)
    if count >= len(rounds):
        return GiveUp(
            f"dropping enough of its {len(rounds)} rounds to fit would leave nothing to summarise"
        )
    kept = msgs[rounds[count].start :]
    marker = Msg.of("user", prompts.OMITTED_FOR_RETRY)
    dropped_tokens = sum(r.tokens for r in rounds[:count])
    return Retry((marker, *kept), count, dropped_tokens)


def _is_marker(msg: Msg) -> bool:
    return msg.role == "user" and msg.content == Msg.of("user", prompts.OMITTED_FOR_RETRY).content
