"""R-C6: old tool results cleared in place, pairs intact."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memd.compaction import prompts
from memd.compaction.message import Msg, to_api
from memd.compaction.microcompact import microcompact
from tests.compaction_support import assert_api_valid, conversations, words_estimate


def results_in(msgs: tuple[Msg, ...] | list[Msg]) -> list[dict[str, object]]:
    return [b for m in msgs for b in m.content if b["type"] == "tool_result"]


@settings(max_examples=60, deadline=None)
@given(msgs=conversations(), keep=st.integers(0, 8))
def test_all_but_the_newest_results_are_cleared_and_the_rest_untouched(
    msgs: list[Msg], keep: int
) -> None:
    msgs = [m.with_content(m.content, tokens=words_estimate(list(m.content))) for m in msgs]
    out = microcompact(msgs, keep_recent=keep, estimate=words_estimate)
    assert_api_valid(to_api(out.messages))
    before, after = results_in(msgs), results_in(out.messages)
    assert [b["tool_use_id"] for b in after] == [b["tool_use_id"] for b in before]
    old = max(0, len(before) - keep)
    assert after[old:] == before[old:]
    cleared = []
    for b, a in zip(before[:old], after[:old], strict=True):
        placeholder = {**a, "content": prompts.CLEARED_TOOL_RESULT}
        if a["content"] == prompts.CLEARED_TOOL_RESULT:
            cleared.append(b["tool_use_id"])
            assert words_estimate([b]) > words_estimate([a])
        else:  # left alone only when clearing would not make it smaller
            assert a == b and words_estimate([b]) <= words_estimate([placeholder])
    assert cleared == list(out.cleared_ids)
    assert out.tokens_after <= out.tokens_before
    # Everything that is not an old tool result is exactly as it was.
    assert [m.role for m in out.messages] == [m.role for m in msgs]
    for m, n in zip(msgs, out.messages, strict=True):
        assert [b for b in m.content if b["type"] != "tool_result"] == [
            b for b in n.content if b["type"] != "tool_result"
        ]
        assert n is m or n.tokens == words_estimate(list(n.content))
    again = microcompact(out.messages, keep_recent=keep, estimate=words_estimate)
    assert again.messages == out.messages and again.cleared_ids == ()


def test_only_named_tools_are_cleared_and_errors_stay_errors() -> None:
    msgs = [
        Msg.of("user", "go"),
        Msg.of(
            "assistant",
            [
                {"type": "tool_use", "id": "r", "name": "Read", "input": {"file_path": "/a"}},
                {"type": "tool_use", "id": "b", "name": "Bash", "input": {"command": "x"}},
            ],
        ),
        Msg.of(
            "user",
            [
                {"type": "tool_result", "tool_use_id": "r", "content": "a" * 400},
                {
                    "type": "tool_result",
                    "tool_use_id": "b",
                    "content": "boom " * 100,
                    "is_error": True,
                },
            ],
            tokens=200,
        ),
        Msg.of("assistant", "done"),
    ]
    only_read = microcompact(msgs, keep_recent=0, estimate=words_estimate, tools={"Read"})
    assert only_read.cleared_ids == ("r",)
    assert only_read.tokens_saved > 0
    both = microcompact(msgs, keep_recent=0, estimate=words_estimate)
    assert both.cleared_ids == ("r", "b")
    assert both.messages[2].content[1] == {
        "type": "tool_result",
        "tool_use_id": "b",
        "content": prompts.CLEARED_TOOL_RESULT,
        "is_error": True,
    }
