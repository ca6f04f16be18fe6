"""R-C1: the auto-compaction threshold and the circuit breaker."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memd.compaction.threshold import (
    BreakerState,
    auto_compact_threshold,
    effective_window,
    should_compact,
)
from memd.config import CompactionConfig

CFG = CompactionConfig()


def test_effective_window_keeps_room_for_the_reply_up_to_20k() -> None:
    assert effective_window(200_000, 32_000) == 180_000
    assert effective_window(200_000, 8_192) == 191_808
    assert effective_window(1_000_000, 64_000, reserve=20_000) == 980_000


def test_threshold_is_13k_below_the_effective_window() -> None:
    assert auto_compact_threshold(200_000, 32_000, CFG) == 167_000
    # about 93% of the effective window
    assert round(167_000 / 180_000, 2) == 0.93


def test_decision_carries_the_figures_for_status() -> None:
    below = should_compact(166_999, 200_000, 32_000, CFG)
    at = should_compact(167_000, 200_000, 32_000, CFG)
    assert not below.compact and at.compact
    assert below.threshold == at.threshold == 167_000
    assert below.effective_window == 180_000
    assert below.tokens_left == 1 and at.tokens_left == 0
    assert at.percent_of_threshold == 100.0


@settings(max_examples=100, deadline=None)
@given(
    tokens=st.integers(0, 2_000_000),
    window=st.integers(50_000, 2_000_000),
    max_output=st.integers(1, 128_000),
)
def test_compacts_exactly_from_the_threshold_on(tokens: int, window: int, max_output: int) -> None:
    decision = should_compact(tokens, window, max_output, CFG)
    limit = window - min(max_output, 20_000) - 13_000
    assert decision.threshold == limit
    assert decision.compact == (tokens >= limit)


def test_breaker_opens_after_three_failures_for_auto_only() -> None:
    state = BreakerState()
    for _ in range(2):
        state = state.after_failure()
        assert state.allows("auto", CFG)
    state = state.after_failure()
    assert not state.allows("auto", CFG)
    assert state.allows("manual", CFG)
    state = state.after_failure()  # a failed manual run keeps it open
    assert not state.allows("auto", CFG)
    assert state.after_success() == BreakerState(0)
    assert state.after_success().allows("auto", CFG)


@settings(max_examples=100, deadline=None)
@given(events=st.lists(st.booleans(), max_size=30))
def test_breaker_counts_only_the_failures_since_the_last_success(events: list[bool]) -> None:
    state = BreakerState()
    for success in events:
        state = state.after_success() if success else state.after_failure()
    trailing = len(events) - (max(i for i, s in enumerate(events) if s) + 1 if any(events) else 0)
    assert state.consecutive_failures == trailing
    assert state.allows("auto", CFG) == (trailing < 3)
    assert state.allows("manual", CFG)
