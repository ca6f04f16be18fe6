"""What a memory's use tells the ranking (issue 36, item 3; pure).

A step after the lexical ranker (:func:`reweighed`, applied in :mod:`memd.memory.recall`):
each candidate's score is multiplied by :func:`usage_weight` of its record (how often an agent
used it, how often it was injected and ignored: :mod:`memd.memory.usage`), and the candidates
are sorted again. A memory never injected, or injected and ignored once, keeps its score: one
ignored injection says little (the prompt may simply not have needed it). Each use lifts it,
up to :data:`MAX_WEIGHT` (a memory used every time it came, at least :data:`USES_FOR_FULL`
times); each ignored injection past the first that its uses do not answer for lowers it by
:data:`IGNORED_STEP`, down to :data:`MIN_WEIGHT`. A strong lexical match still beats a weak
one that was used: the weight only moves a memory among those of near scores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

H = TypeVar("H")

MAX_WEIGHT = 1.25
MIN_WEIGHT = 0.5
USES_FOR_FULL = 3
IGNORED_STEP = 0.1
IGNORES_PER_USE = 2  # a use answers for this many ignored injections

# relatives -> their (used, ignored) counts, for the memories that have any
UsageCounts = Callable[[Sequence[str]], Mapping[str, tuple[int, int]]]


def usage_weight(used: int, ignored: int) -> float:
    """The factor a memory's score is multiplied by (see the module docstring)."""
    used, ignored = max(0, used), max(0, ignored)
    lift = 0.0
    if used:
        lift = (MAX_WEIGHT - 1.0) * min(used, USES_FOR_FULL) / USES_FOR_FULL
        lift *= used / (used + ignored)
    unanswered = max(0, ignored - 1 - IGNORES_PER_USE * used)
    return max(MIN_WEIGHT, (1.0 + lift) * (1.0 - IGNORED_STEP * unanswered))


def reweighed(
    ranked: Sequence[tuple[H, float]], relative: Callable[[H], str], counts: UsageCounts
) -> list[tuple[H, float]]:
    """``ranked`` (best first) with each score weighed by its memory's use, best first again
    (ties keep the ranker's order)."""
    found = counts([relative(h) for h, _ in ranked])
    if not found:
        return list(ranked)
    weighed = [(h, score * usage_weight(*found.get(relative(h), (0, 0)))) for h, score in ranked]
    order = sorted(range(len(weighed)), key=lambda i: -weighed[i][1])
    return [weighed[i] for i in order]
