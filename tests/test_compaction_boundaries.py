"""Cut points: tool-pair protection, API rounds, and the API-form repair."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from memd.compaction import prompts
from memd.compaction.api_form import repair
from memd.compaction.boundaries import api_rounds, protect_tool_pairs
from memd.compaction.message import Msg, to_api
from tests.compaction_support import (
    api_problems,
    assert_api_valid,
    closed_start,
    conversations,
    text_block,
)


def call(ident: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": ident, "name": "Bash", "input": {"command": "ls"}}


def result(ident: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": ident, "content": "out"}


@settings(max_examples=80, deadline=None)
@given(msgs=conversations(), data=st.data())
def test_protection_moves_back_exactly_to_the_nearest_whole_cut(
    msgs: list[Msg], data: st.DataObject
) -> None:
    start = data.draw(st.integers(0, len(msgs)))
    protected = protect_tool_pairs(msgs, start)
    assert protected == closed_start(msgs, start)
    if protected:
        kept = [Msg.of("user", "earlier work, summarised"), *msgs[protected:]]
        assert_api_valid(to_api(repair(kept)))


def test_parallel_calls_answered_later_pull_in_their_call() -> None:
    msgs = [
        Msg.of("user", "go"),
        Msg.of("assistant", [{"type": "thinking", "thinking": "hm", "signature": "s"}, call("a")]),
        Msg.of("user", [result("a")]),
        Msg.of("assistant", [call("b"), text_block("and"), call("c")]),
        Msg.of("user", [result("c"), result("b")]),
        Msg.of("assistant", "done"),
    ]
    assert protect_tool_pairs(msgs, 4) == 3
    assert protect_tool_pairs(msgs, 2) == 1
    assert protect_tool_pairs(msgs, 5) == 5
    assert protect_tool_pairs(msgs, 99) == 6


def test_a_response_split_over_messages_stays_together() -> None:
    msgs = [
        Msg.of("user", "go"),
        Msg.of("assistant", [{"type": "thinking", "thinking": "t", "signature": "s"}], api_id="m1"),
        Msg.of("assistant", [text_block("let me look")], api_id="m1"),
        Msg.of("assistant", [call("a")], api_id="m1"),
        Msg.of("user", [result("a")]),
    ]
    assert protect_tool_pairs(msgs, 3) == 1
    assert protect_tool_pairs(msgs, 4) == 1
    rounds = api_rounds(msgs)
    assert [(r.start, r.end) for r in rounds] == [(0, 1), (1, 5)]


def test_a_result_whose_call_is_nowhere_does_not_move_the_cut() -> None:
    msgs = [Msg.of("user", "go"), Msg.of("assistant", "ok"), Msg.of("user", [result("gone")])]
    assert protect_tool_pairs(msgs, 2) == 2
    fixed = repair(msgs[2:])
    assert fixed == []  # the orphan result is all there was


@settings(max_examples=50, deadline=None)
@given(msgs=conversations())
def test_rounds_cover_the_conversation_and_each_starts_with_a_response(msgs: list[Msg]) -> None:
    rounds = api_rounds(msgs)
    assert rounds[0].start == 0 and rounds[-1].end == len(msgs)
    for before, after in pairwise(rounds):
        assert before.end == after.start
        assert msgs[after.start].role == "assistant"
    assert sum(r.tokens for r in rounds) == sum(m.tokens for m in msgs)
    for r in rounds[1:]:
        # Dropping every round before r leaves a suffix that needs nothing dropped.
        assert protect_tool_pairs(msgs, r.start) == r.start


@settings(max_examples=50, deadline=None)
@given(msgs=conversations())
def test_repair_leaves_valid_conversations_alone(msgs: list[Msg]) -> None:
    assert api_problems(to_api(msgs)) == []  # the generator makes valid conversations
    fixed = repair(msgs)
    assert len(fixed) == len(msgs)
    assert all(a is b for a, b in zip(fixed, msgs, strict=True))


@settings(max_examples=50, deadline=None)
@given(msgs=conversations(), data=st.data())
def test_repair_makes_any_slice_or_shuffle_valid(msgs: list[Msg], data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(msgs) - 1))
    dropped = data.draw(st.sets(st.integers(0, len(msgs) - 1), max_size=4))
    broken = [m for i, m in enumerate(msgs[start:], start) if i not in dropped]
    fixed = repair(broken, close_pending=True)
    if fixed:
        assert_api_valid(to_api(fixed))
        assert fixed[-1].role == "user" or not any(
            b["type"] == "tool_use" for b in fixed[-1].content
        )


def test_repair_answers_open_calls_and_puts_results_first() -> None:
    msgs = [
        Msg.of("assistant", [call("a"), call("b")]),
        Msg.of("user", [text_block("note"), result("b")]),
        Msg.of("user", "more"),
        Msg.of("assistant", [call("c")]),
    ]
    fixed = repair(msgs, close_pending=True)
    assert [m.role for m in fixed] == ["user", "assistant", "user", "assistant", "user"]
    assert fixed[0].content[0]["text"] == prompts.OMITTED_START
    answer = fixed[2].content
    assert [b["type"] for b in answer] == ["tool_result", "tool_result", "text", "text"]
    assert answer[0]["tool_use_id"] == "b"
    assert answer[1] == {
        "type": "tool_result",
        "tool_use_id": "a",
        "content": prompts.MISSING_RESULT,
        "is_error": True,
    }
    assert fixed[4].content[0]["tool_use_id"] == "c"
    assert_api_valid(to_api(fixed))
    open_end = repair(msgs)
    assert open_end[-1].role == "assistant"  # a client will append the real result
