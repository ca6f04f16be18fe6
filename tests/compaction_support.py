"""Shared by the compaction tests: generated conversations and an independent validity check.

The check here is written from the Messages-API rules, not from memd.compaction's code, so a
mistake in the cores' own repair logic cannot hide itself.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from memd.compaction.message import Msg
from memd.llm.client import LLMReply, Usage
from memd.testing.api_rules import request_problems

USER_ONLY = {"tool_result", "image", "document"}
ASSISTANT_ONLY = {"tool_use", "thinking", "redacted_thinking"}


def api_problems(messages: Sequence[dict[str, Any]]) -> list[str]:
    """What the API would refuse in ``messages`` (strict alternation; a trailing assistant
    message may still wait for its tool results)."""
    problems: list[str] = []
    if not messages:
        return ["no messages"]
    if messages[0]["role"] != "user":
        problems.append("first message is not from the user")
    seen_calls: set[str] = set()
    for i, m in enumerate(messages):
        blocks = m["content"]
        if not isinstance(blocks, list) or not blocks:
            problems.append(f"{i}: empty content")
            continue
        if i and messages[i - 1]["role"] == m["role"]:
            problems.append(f"{i}: two {m['role']} messages in a row")
        problems += _block_problems(i, m["role"], blocks)
        calls = [b["id"] for b in blocks if b["type"] == "tool_use"]
        if seen_calls & set(calls):
            problems.append(f"{i}: tool_use id reused")
        seen_calls.update(calls)
        if m["role"] == "user":
            problems += _result_problems(i, messages)
        elif calls and i + 1 < len(messages):
            answered = {b.get("tool_use_id") for b in messages[i + 1]["content"]}
            if not set(calls) <= answered:
                problems.append(f"{i}: tool_use not answered by the next message")
    return problems


def _block_problems(i: int, role: str, blocks: list[dict[str, Any]]) -> list[str]:
    problems = []
    other_seen = False
    for b in blocks:
        kind = b["type"]
        if (role == "user" and kind in ASSISTANT_ONLY) or (
            role == "assistant" and kind in USER_ONLY
        ):
            problems.append(f"{i}: {kind} block in a {role} message")
        if kind == "text" and not str(b.get("text", "")).strip():
            problems.append(f"{i}: blank text block")
        if kind == "tool_result" and other_seen:
            problems.append(f"{i}: tool_result after other content")
        other_seen = other_seen or kind != "tool_result"
    return problems


def _result_problems(i: int, messages: Sequence[dict[str, Any]]) -> list[str]:
    results = [b["tool_use_id"] for b in messages[i]["content"] if b["type"] == "tool_result"]
    if not results:
        return []
    prev = messages[i - 1] if i else None
    asked = (
        {b["id"] for b in prev["content"] if b["type"] == "tool_use"}
        if prev is not None and prev["role"] == "assistant"
        else set()
    )
    problems = []
    if len(set(results)) != len(results):
        problems.append(f"{i}: two results for one call")
    if not set(results) <= asked:
        problems.append(f"{i}: tool_result without its tool_use right before")
    return problems


def assert_api_valid(messages: Sequence[dict[str, Any]]) -> None:
    assert api_problems(messages) == []
    body = {"model": "claude-test", "max_tokens": 1000, "messages": list(messages)}
    assert request_problems(body, strict_alternation=True) == []


# -- generated conversations ------------------------------------------------------------------

_text = st.sampled_from(
    [
        "fix the parser",
        "run the tests",
        "read the config file",
        "the build failed with an error",
        "done",
        "looks good, commit it",
        "why does this crash?",
        "x",
    ]
)
_image: dict[str, Any] = {
    "type": "image",
    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
}
_document: dict[str, Any] = {
    "type": "document",
    "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"},
}


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


@st.composite
def _prompt(draw: st.DrawFn) -> list[dict[str, Any]]:
    blocks = [text_block(draw(_text))]
    if draw(st.integers(0, 9)) == 0:
        blocks.append(dict(_image))
    if draw(st.integers(0, 14)) == 0:
        blocks.insert(0, dict(_document))
    return blocks


@st.composite
def _response(draw: st.DrawFn, ids: itertools.count[int]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if draw(st.booleans()):
        blocks.append({"type": "thinking", "thinking": draw(_text), "signature": "sig"})
    calls = draw(st.integers(0, 3))
    for _ in range(calls):
        if draw(st.booleans()):
            blocks.append(text_block(draw(_text)))
        name = draw(st.sampled_from(["Read", "Bash", "Grep"]))
        path = draw(st.sampled_from(["/p/a.py", "/p/b.py", "/p/c.md", "/p/d.txt"]))
        blocks.append(
            {
                "type": "tool_use",
                "id": f"toolu_{next(ids)}",
                "name": name,
                "input": {"file_path": path} if name == "Read" else {"command": "ls"},
            }
        )
    if not calls or draw(st.booleans()):
        blocks.append(text_block(draw(_text)))
    return blocks


@st.composite
def _results(draw: st.DrawFn, calls: list[str]) -> list[dict[str, Any]]:
    order = draw(st.permutations(calls))
    blocks: list[dict[str, Any]] = []
    for call in order:
        content: Any = draw(_text)
        if draw(st.integers(0, 5)) == 0:
            content = [text_block(draw(_text)), dict(_image)]
        result = {"type": "tool_result", "tool_use_id": call, "content": content}
        if draw(st.integers(0, 7)) == 0:
            result["is_error"] = True
        blocks.append(result)
    if draw(st.integers(0, 5)) == 0:
        blocks.append(text_block(draw(_text)))
    return blocks


@st.composite
def conversations(
    draw: st.DrawFn, *, max_rounds: int = 24, max_tokens: int = 9_000, pending: bool = True
) -> list[Msg]:
    """Valid conversations: prompts with images, parallel tool calls answered in any order,
    thinking and text interleaved with calls; may end on an unanswered call."""
    ids = itertools.count()
    raw: list[tuple[str, list[dict[str, Any]]]] = [("user", draw(_prompt()))]
    for _ in range(draw(st.integers(0, max_rounds))):
        response = draw(_response(ids))
        raw.append(("assistant", response))
        calls = [b["id"] for b in response if b["type"] == "tool_use"]
        if calls:
            raw.append(("user", draw(_results(calls))))
        else:
            raw.append(("user", draw(_prompt())))
    if pending and draw(st.integers(0, 3)) == 0:
        raw.append(("assistant", draw(_response(ids))))
    tokens = draw(st.lists(st.integers(0, max_tokens), min_size=len(raw), max_size=len(raw)))
    return [
        Msg.of("user" if role == "user" else "assistant", blocks, uuid=f"u{i}", tokens=t)
        for i, ((role, blocks), t) in enumerate(zip(raw, tokens, strict=True))
    ]


def flat_blocks(msgs: Sequence[Msg]) -> list[dict[str, Any]]:
    return [b for m in msgs for b in m.content]


def words_estimate(content: str | list[dict[str, Any]]) -> int:
    """A deterministic stand-in for the token estimator: characters / 4."""
    if isinstance(content, str):
        return len(content) // 4
    return sum(len(str(b)) // 4 for b in content)


# -- the level-1 rules, computed the slow and obvious way -------------------------------------


def says_something(msg: Msg) -> bool:
    return any(b["type"] == "text" and b["text"].strip() for b in msg.content)


def rule_start(
    msgs: Sequence[Msg], covered_end: int, min_tokens: int, min_texts: int, max_tokens: int
) -> int:
    """The largest start <= covered_end whose suffix meets the cap or both minimums, else 0."""
    suffix_tokens = [0] * (len(msgs) + 1)
    suffix_texts = [0] * (len(msgs) + 1)
    for i in range(len(msgs) - 1, -1, -1):
        suffix_tokens[i] = suffix_tokens[i + 1] + msgs[i].tokens
        suffix_texts[i] = suffix_texts[i + 1] + says_something(msgs[i])
    for s in range(covered_end, -1, -1):
        tokens, texts = suffix_tokens[s], suffix_texts[s]
        if tokens >= max_tokens or (tokens >= min_tokens and texts >= min_texts):
            return s
    return 0


def closed_start(msgs: Sequence[Msg], start: int) -> int:
    """The largest c <= start where every kept result has its call kept."""
    call_at = {
        b["id"]: i
        for i, m in enumerate(msgs)
        for b in m.content
        if b["type"] == "tool_use" and m.role == "assistant"
    }
    # earliest[c]: the earliest call answered by a result in msgs[c:]
    earliest = [len(msgs)] * (len(msgs) + 1)
    for i in range(len(msgs) - 1, -1, -1):
        calls = [
            call_at[b["tool_use_id"]]
            for b in msgs[i].content
            if b["type"] == "tool_result" and b["tool_use_id"] in call_at
        ]
        earliest[i] = min([earliest[i + 1], *calls])
    return next((c for c in range(start, -1, -1) if earliest[c] >= c), 0)


# -- a scripted model ----------------------------------------------------------------------

GOOD_REPLY = (
    "<analysis>The user wanted X; secret scratch thoughts.</analysis>\n"
    "<summary>1. Primary request and intent: build X.\n9. Optional next step: none.</summary>"
)


class ScriptedLLM:
    """Answers each call with the next scripted outcome and records the requests."""

    def __init__(self, *outcomes: str | Exception) -> None:
        self.outcomes = list(outcomes)
        self.requests: list[dict[str, Any]] = []

    async def create_message(
        self,
        *,
        model: str,
        system: str | list[dict[str, Any]],
        messages: list[dict[str, Any]],
        max_tokens: int,
        tools: list[dict[str, Any]] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the LLM contract
    ) -> LLMReply:
        body = {"model": model, "system": system, "messages": messages, "max_tokens": max_tokens}
        self.requests.append({**body, "tools": tools})
        assert request_problems(body, strict_alternation=True) == []
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        usage = Usage(input_tokens=1_000, output_tokens=200, cache_read_input_tokens=50)
        return LLMReply("msg_1", model, [text_block(outcome)], "end_turn", usage)
