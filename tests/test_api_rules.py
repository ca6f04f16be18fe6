"""The request validator accepts what the Messages API accepts and names what it rejects."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.testing.api_rules import count_cache_breakpoints, request_problems

READ_TOOL = {"name": "Read", "description": "read", "input_schema": {"type": "object"}}


def body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "claude-test", "max_tokens": 100, "messages": messages, **extra}


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant(content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def use(use_id: str, name: str = "Read") -> dict[str, Any]:
    return {"type": "tool_use", "id": use_id, "name": name, "input": {"file_path": "/x"}}


def result(use_id: str, content: Any = "data") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": use_id, "content": content}


def cached_text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}


VALID: dict[str, dict[str, Any]] = {
    "plain string": body([user("hello")]),
    "tool round trip": body(
        [
            user("read it"),
            assistant([{"type": "text", "text": "reading"}, use("t1"), use("t2")]),
            user(
                [
                    result("t1"),
                    result("t2", [{"type": "text", "text": "b"}]),
                    {"type": "text", "text": "go"},
                ]
            ),
            assistant("done"),
        ],
        tools=[READ_TOOL],
    ),
    "final assistant prefill may be empty": body([user("hi"), assistant("")]),
    "pending tool_use at the end": body([user("hi"), assistant([use("t1")])]),
    "consecutive user messages are merged by the API": body([user("a"), user("b")]),
    "system as text blocks with breakpoints": body(
        [user([cached_text("q")])],
        system=[{"type": "text", "text": "rules"}, cached_text("more")],
        tools=[{**READ_TOOL, "cache_control": {"type": "ephemeral"}}],
    ),
    "thinking blocks in assistant turns": body(
        [
            user("q"),
            assistant([{"type": "thinking", "thinking": "hmm", "signature": "s"}, use("t1")]),
            user([result("t1")]),
        ]
    ),
    "server tool without schema": body(
        [user("q")], tools=[{"type": "web_search_20250305", "name": "web_search"}]
    ),
    "tool_result without content": body(
        [user("q"), assistant([use("t1")]), user([{"type": "tool_result", "tool_use_id": "t1"}])]
    ),
}

INVALID: dict[str, tuple[Any, str]] = {
    "not an object": ([], "(body)"),
    "no model": ({"max_tokens": 5, "messages": [user("x")]}, "model:"),
    "no max_tokens": ({"model": "m", "messages": [user("x")]}, "max_tokens:"),
    "zero max_tokens": (body([user("x")], max_tokens=0), "max_tokens: must be at least 1"),
    "no messages": (body([]), "messages: at least one"),
    "bad role": (body([{"role": "system", "content": "x"}]), "messages.0.role"),
    "assistant first": (body([assistant("x"), user("y")]), "messages.0.role: the first"),
    "empty user string": (body([user("")]), "messages.0.content: must not be empty"),
    "empty user list": (body([user([])]), "messages.0.content: must not be empty"),
    "empty middle assistant": (body([user("a"), assistant(""), user("b")]), "messages.1.content"),
    "empty text block": (body([user([{"type": "text", "text": ""}])]), "messages.0.content.0.text"),
    "blank text block": (body([user([{"type": "text", "text": "  \n"}])]), "content.0.text"),
    "prefill ends with whitespace": (body([user("a"), assistant("b ")]), "end with whitespace"),
    "unknown block": (body([user([{"type": "video"}])]), "unknown content block type"),
    "tool_use in user turn": (body([user([use("t1")])]), "only appear in assistant"),
    "tool_result in assistant turn": (
        body([user("q"), assistant([result("t1")])]),
        "only appear in user",
    ),
    "unanswered tool_use": (
        body([user("q"), assistant([use("t1"), use("t2")]), user([result("t1")])]),
        "messages.1: tool_use ids without a tool_result in the next message: t2",
    ),
    "answer one message late": (
        body(
            [user("q"), assistant([use("t1")]), user("wait"), assistant("ok"), user([result("t1")])]
        ),
        "messages.4: tool_result for ids the previous assistant message did not ask for: t1",
    ),
    "stray tool_result": (body([user([result("nope")])]), "did not ask for: nope"),
    "tool_result after text": (
        body(
            [user("q"), assistant([use("t1")]), user([{"type": "text", "text": "x"}, result("t1")])]
        ),
        "messages.2.content.1: tool_result blocks must come before",
    ),
    "duplicate tool_use id": (
        body([user("q"), assistant([use("t1")]), user([result("t1")]), assistant([use("t1")])]),
        "used twice",
    ),
    "two results for one use": (
        body([user("q"), assistant([use("t1")]), user([result("t1"), result("t1")])]),
        "more than one tool_result",
    ),
    "tool_use without input": (
        body([user("q"), assistant([{"type": "tool_use", "id": "t", "name": "R"}])]),
        "content.0.input",
    ),
    "bad tool name": (
        body([user("q")], tools=[{**READ_TOOL, "name": "read file"}]),
        "tools.0.name: must match",
    ),
    "long tool name": (body([user("q")], tools=[{**READ_TOOL, "name": "x" * 65}]), "tools.0.name"),
    "duplicate tool names": (body([user("q")], tools=[READ_TOOL, READ_TOOL]), "must be unique"),
    "schema not an object": (
        body([user("q")], tools=[{**READ_TOOL, "input_schema": {"type": "string"}}]),
        "tools.0.input_schema",
    ),
    "system not text": (
        body([user("q")], system=[{"type": "image", "source": {}}]),
        "system.0: only text blocks",
    ),
    "system wrong type": (body([user("q")], system=5), "system: must be a string"),
    "five breakpoints": (
        body(
            [user([cached_text(str(i)) for i in range(3)])],
            system=[cached_text("a"), cached_text("b")],
        ),
        "at most 4 blocks may carry cache_control, found 5",
    ),
}


@pytest.mark.parametrize("name", VALID)
def test_valid_requests_have_no_problems(name: str) -> None:
    assert request_problems(VALID[name]) == []


@pytest.mark.parametrize("name", INVALID)
def test_invalid_requests_name_the_problem(name: str) -> None:
    request, expected = INVALID[name]
    problems = request_problems(request)
    assert any(expected in p for p in problems), problems


def test_strict_alternation_reports_same_role_twice() -> None:
    request = body([user("a"), user("b")])
    assert request_problems(request) == []
    assert request_problems(request, strict_alternation=True) == [
        "messages.1.role: two user messages in a row"
    ]


def test_every_problem_is_listed_not_just_the_first() -> None:
    problems = request_problems({"messages": [assistant("")]})
    assert len(problems) >= 3  # model, max_tokens, first role (the empty prefill is allowed)


def test_breakpoints_are_counted_across_tools_system_and_messages() -> None:
    request = body(
        [user([cached_text("a")]), assistant([cached_text("b")])],
        system=[cached_text("s")],
        tools=[{**READ_TOOL, "cache_control": {"type": "ephemeral"}}],
    )
    assert count_cache_breakpoints(request) == 4


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
KEYS = st.sampled_from(["model", "max_tokens", "messages", "system", "tools", "role", "content"])


@given(st.dictionaries(KEYS, JSON | st.lists(st.dictionaries(KEYS, JSON, max_size=3), max_size=3)))
def test_validator_never_crashes_on_arbitrary_json(request: dict[str, Any]) -> None:
    assert isinstance(request_problems(request), list)
