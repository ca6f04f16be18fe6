"""Spend windows over the ledger's points: what the hour and day windows hold, when a full
one frees up, and how long a figure computed from them holds (so ``status`` and every guard
decision need not walk up to 5,000 records each time; :class:`memd.llm.ledger.Ledger`
remembers them)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from memd.config_llm import BudgetConfig

HOUR_S = 3_600.0
DAY_S = 86_400.0

SpendPoint = tuple[float, int]  # (wall time, billed tokens)


def window_spent(points: Iterable[SpendPoint], now: float, window_s: float) -> int:
    """Billed tokens spent in the window ``(now - window_s, now]`` (later points count too)."""
    start = now - window_s
    return sum(billed for at, billed in points if at > start)


def window_frees_at(
    points: Iterable[SpendPoint], now: float, window_s: float, limit: int
) -> float | None:
    """When the spend in the window drops below ``limit`` again; None if it is below now.

    ``limit <= 0`` means unlimited.
    """
    if limit <= 0:
        return None
    start = now - window_s
    inside = sorted(p for p in points if p[0] > start)
    spent = sum(billed for _, billed in inside)
    if spent < limit:
        return None
    for at, billed in inside:
        spent -= billed
        if spent < limit:
            return at + window_s
    raise AssertionError("unreachable: spend falls to 0 < limit")  # pragma: no cover


@dataclass(frozen=True)
class BudgetStatus:
    hour_limit: int
    hour_spent: int
    hour_frees_at: float | None  # None: not exhausted
    day_limit: int
    day_spent: int
    day_frees_at: float | None

    @property
    def paused_until(self) -> float | None:
        """When background work may run again, or None when the budget allows it now."""
        times = [t for t in (self.hour_frees_at, self.day_frees_at) if t is not None]
        return max(times) if times else None


def budget_status(budget: BudgetConfig, points: list[SpendPoint], now: float) -> BudgetStatus:
    return BudgetStatus(
        hour_limit=budget.tokens_per_hour,
        hour_spent=window_spent(points, now, HOUR_S),
        hour_frees_at=window_frees_at(points, now, HOUR_S, budget.tokens_per_hour),
        day_limit=budget.tokens_per_day,
        day_spent=window_spent(points, now, DAY_S),
        day_frees_at=window_frees_at(points, now, DAY_S, budget.tokens_per_day),
    )


def windows_valid_until(points: Iterable[SpendPoint], now: float) -> float:
    """Until when the hour and day windows at ``now`` hold the same points: the first moment
    one of them leaves a window (a point counts while it is later than ``now - window``).
    Whatever is computed from the windows' contents alone holds from ``now`` until then."""
    until = math.inf
    for at, _ in points:
        for leaves in (at + HOUR_S, at + DAY_S):
            if now < leaves < until:
                until = leaves
    return until


@dataclass(frozen=True)
class Remembered:
    """A figure computed from the ledger at ``since``, good while the ledger is unchanged and
    the clock is in ``[since, until)``."""

    version: int
    since: float
    until: float
    key: object
    value: Any

    def holds(self, version: int, now: float, key: object) -> bool:
        return version == self.version and self.since <= now < self.until and key is self.key
