"""When to compact (R-C1): the auto-compaction threshold and the per-session circuit breaker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from memd.config import CompactionConfig

# The formulas live in memd.window (light: status shows a session's threshold before READY).
from memd.window import auto_compact_threshold as auto_compact_threshold
from memd.window import effective_window as effective_window

Trigger = Literal["auto", "manual"]


@dataclass(frozen=True)
class Decision:
    """Whether a context of ``tokens`` should be compacted now, with the figures behind it."""

    compact: bool
    tokens: int
    threshold: int
    effective_window: int

    @property
    def tokens_left(self) -> int:
        """Tokens that may still be added before auto-compaction starts (never negative)."""
        return max(0, self.threshold - self.tokens)

    @property
    def percent_of_threshold(self) -> float:
        if self.threshold <= 0:
            return 100.0
        return round(100.0 * self.tokens / self.threshold, 1)


def should_compact(tokens: int, window: int, max_output: int, cfg: CompactionConfig) -> Decision:
    """Compare a context size with the auto-compaction threshold."""
    limit = auto_compact_threshold(window, max_output, cfg)
    return Decision(
        compact=tokens >= limit,
        tokens=tokens,
        threshold=limit,
        effective_window=effective_window(window, max_output, cfg.max_output_reserve),
    )


@dataclass(frozen=True)
class BreakerState:
    """Consecutive failed compactions of one session.

    After ``cfg.max_consecutive_failures`` failures in a row the breaker is open: automatic
    compaction of that session stops, so a conversation that cannot be compacted does not
    burn an API call on every turn. A manual compaction still runs; any success closes it.
    """

    consecutive_failures: int = 0

    def is_open(self, cfg: CompactionConfig) -> bool:
        return self.consecutive_failures >= cfg.max_consecutive_failures

    def allows(self, trigger: Trigger, cfg: CompactionConfig) -> bool:
        """Whether a compaction with this trigger may run."""
        return trigger == "manual" or not self.is_open(cfg)

    def after_success(self) -> BreakerState:
        return BreakerState(0)

    def after_failure(self) -> BreakerState:
        return BreakerState(self.consecutive_failures + 1)
