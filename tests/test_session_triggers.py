"""The extraction trigger (R-S3): pure, checked against a plain restatement of the rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.config import SessionNotesConfig
from memd.session.triggers import Go, Skip, TriggerInput, decide, next_trigger, rebase

CONFIG = SessionNotesConfig()


def reference(
    context: int, last: int | None, tools: int, busy: bool, config: SessionNotesConfig
) -> bool:
    """SPEC R-S3, word for word."""
    if last is None:
        return context >= config.init_tokens
    grown_enough = context - last >= config.update_tokens
    return grown_enough and (tools >= config.tool_calls_between_updates or not busy)


configs = st.builds(
    SessionNotesConfig,
    init_tokens=st.integers(0, 50_000),
    update_tokens=st.integers(0, 20_000),
    tool_calls_between_updates=st.integers(0, 10),
)


@given(
    context=st.integers(0, 300_000),
    last=st.none() | st.integers(0, 300_000),
    tools=st.integers(0, 50),
    busy=st.booleans(),
    config=configs,
)
def test_decide_matches_the_rule(
    context: int, last: int | None, tools: int, busy: bool, config: SessionNotesConfig
) -> None:
    decision = decide(TriggerInput(context, last, tools, busy), config)
    assert isinstance(decision, Go) == reference(context, last, tools, busy, config)
    assert decision.reason  # every answer says why


@given(
    context=st.integers(0, 300_000),
    last=st.none() | st.integers(0, 300_000),
    tools=st.integers(0, 50),
    busy=st.booleans(),
)
def test_below_the_next_trigger_point_nothing_fires(
    context: int, last: int | None, tools: int, busy: bool
) -> None:
    snapshot = TriggerInput(context, last, tools, busy)
    if context < next_trigger(snapshot, CONFIG).at_tokens:
        assert isinstance(decide(snapshot, CONFIG), Skip)


@pytest.mark.parametrize(
    ("snapshot", "fires"),
    [
        (TriggerInput(9_999, None, 10, False), False),
        (TriggerInput(10_000, None, 0, True), True),  # init needs nothing else
        (TriggerInput(14_999, 10_000, 10, False), False),  # growth is required
        (TriggerInput(15_000, 10_000, 3, True), True),  # three tool calls
        (TriggerInput(15_000, 10_000, 2, True), False),  # two, and still calling tools
        (TriggerInput(15_000, 10_000, 0, False), True),  # a natural pause
    ],
)
def test_the_spec_examples(snapshot: TriggerInput, fires: bool) -> None:
    assert isinstance(decide(snapshot, CONFIG), Go) is fires


def test_the_next_trigger_point_for_status() -> None:
    assert next_trigger(TriggerInput(3_000, None, 0, False), CONFIG).at_tokens == 10_000
    upcoming = next_trigger(TriggerInput(30_000, 22_000, 1, True), CONFIG)
    assert upcoming.at_tokens == 27_000 and "3 tool calls" in upcoming.condition


@given(last=st.none() | st.integers(0, 300_000), context=st.integers(0, 300_000))
def test_rebase_only_ever_lowers_the_baseline_to_the_context(
    last: int | None, context: int
) -> None:
    based = rebase(last, context)
    if last is None:
        assert based is None
    else:
        assert based == min(last, context)
        # after a compaction growth counts from the smaller context, never negative
        assert context - based >= 0
