"""Levels 2 and 3: the summary request, reading the reply, and the prompt-too-long retry."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.compaction import prompts
from memd.compaction.boundaries import api_rounds
from memd.compaction.full import (
    build_summary_request,
    compact_full,
    extract_summary,
)
from memd.compaction.message import Msg, to_api
from memd.compaction.retry import GiveUp, Retry, plan_retry, rounds_to_drop
from memd.config import CompactionConfig
from memd.config_llm import LLMConfig
from memd.errors import CompactionFailed, PromptTooLong, RateLimited
from memd.llm.backends import open_llm
from memd.llm.client import Disabled, close_llm
from memd.testing import loopback_replies as replies
from memd.testing.api_rules import request_problems
from memd.testing.loopback import LoopbackAPI
from memd.tokens import estimate_content
from tests.compaction_support import (
    GOOD_REPLY,
    ScriptedLLM,
    assert_api_valid,
    conversations,
    text_block,
    words_estimate,
)

CFG = CompactionConfig()


def media_count(value: Any, kind: str) -> int:
    if isinstance(value, dict):
        return (value.get("type") == kind) + sum(media_count(v, kind) for v in value.values())
    if isinstance(value, list):
        return sum(media_count(v, kind) for v in value)
    return 0


def placeholder_count(value: Any, text: str) -> int:
    if isinstance(value, dict):
        own = value.get("type") == "text" and value.get("text") == text
        return own + sum(placeholder_count(v, text) for v in value.values())
    if isinstance(value, list):
        return sum(placeholder_count(v, text) for v in value)
    return 0


def test_the_prompt_asks_for_analysis_then_a_summary_in_nine_parts() -> None:
    text = prompts.SUMMARY_INSTRUCTIONS
    assert text.index("<analysis>") < text.index("<summary>")
    parts = re.findall(r"^(\d)\. ([^:]+):", text, re.MULTILINE)
    assert [int(n) for n, _ in parts] == list(range(1, 10))
    titles = " | ".join(t.lower() for _, t in parts)
    for needed in (
        "primary request",
        "technical concepts",
        "files and code",
        "errors and fixes",
        "problem solving",
        "all user messages",
        "pending tasks",
        "current work",
        "next step",
    ):
        assert needed in titles
    assert "verbatim" in text
    assert "no tools" in prompts.SUMMARY_SYSTEM


@settings(max_examples=50, deadline=None)
@given(msgs=conversations())
def test_the_request_is_valid_and_carries_no_media_or_thinking(msgs: list[Msg]) -> None:
    request = build_summary_request(msgs, custom_instructions="Focus on the tests.")
    body = {"model": "m", "max_tokens": request.max_tokens, "messages": request.messages}
    assert_api_valid(request.messages)
    assert request_problems({**body, "system": request.system}, strict_alternation=True) == []
    sent = to_api(msgs)
    assert media_count(request.messages, "image") == 0
    assert media_count(request.messages, "document") == 0
    assert media_count(request.messages, "thinking") == 0
    images = placeholder_count(request.messages, prompts.IMAGE_PLACEHOLDER)
    assert images == media_count(sent, "image")
    docs = placeholder_count(request.messages, prompts.DOCUMENT_PLACEHOLDER)
    assert docs == media_count(sent, "document")
    last = request.messages[-1]
    assert last["role"] == "user"
    assert last["content"][-1]["text"].startswith(prompts.SUMMARY_INSTRUCTIONS)
    assert last["content"][-1]["text"].endswith("Focus on the tests.")
    calls = media_count(sent, "tool_use")
    assert media_count(request.messages, "tool_use") == calls


def test_images_nested_in_tool_results_become_placeholders() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}
    doc = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "d"}}
    msgs = [
        Msg.of("user", [text_block("look"), image]),
        Msg.of("assistant", [{"type": "tool_use", "id": "t", "name": "Read", "input": {}}]),
        Msg.of(
            "user",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "t",
                    "content": [image, doc, text_block("ok")],
                }
            ],
        ),
    ]
    request = build_summary_request(msgs)
    assert request.messages[0]["content"] == [text_block("look"), text_block("[image]")]
    result = request.messages[2]["content"][0]
    assert result["content"] == [text_block("[image]"), text_block("[document]"), text_block("ok")]


def test_analysis_is_stripped_and_the_summary_kept() -> None:
    assert extract_summary(GOOD_REPLY) == (
        "1. Primary request and intent: build X.\n9. Optional next step: none."
    )
    assert "secret" not in extract_summary(GOOD_REPLY)
    assert extract_summary("<analysis>a</analysis>plain summary") == "plain summary"
    assert extract_summary("<summary>cut off by max_tokens") == "cut off by max_tokens"
    assert extract_summary("no tags at all") == "no tags at all"
    for empty in ("", "<analysis>only thinking</analysis>", "<analysis>never closed"):
        with pytest.raises(CompactionFailed, match="no summary"):
            extract_summary(empty)


@settings(max_examples=100, deadline=None)
@given(
    analysis=st.text(alphabet="abc <>/\n", max_size=60),
    summary=st.text(alphabet="xyz .\n", min_size=1, max_size=60).filter(lambda s: s.strip()),
    noise=st.text(alphabet=" \n", max_size=3),
)
def test_any_analysis_is_dropped(analysis: str, summary: str, noise: str) -> None:
    analysis = analysis.replace("</analysis>", "")
    reply = f"{noise}<analysis>{analysis}</analysis>{noise}<summary>{summary}</summary>{noise}"
    assert extract_summary(reply) == re.sub(r"\n{3,}", "\n\n", summary).strip()


@settings(max_examples=200, deadline=None)
@given(tokens=st.lists(st.integers(0, 5_000), min_size=1, max_size=40), gap=st.integers(0, 90_000))
def test_a_stated_gap_drops_exactly_enough_rounds(tokens: list[int], gap: int) -> None:
    n = rounds_to_drop(tokens, gap, 0.2)
    assert 1 <= n <= len(tokens)
    if sum(tokens) >= gap:
        assert sum(tokens[:n]) >= gap
        assert n == 1 or sum(tokens[: n - 1]) < gap
    else:
        assert n == len(tokens)


@settings(max_examples=50, deadline=None)
@given(count=st.integers(1, 200))
def test_without_a_gap_a_fifth_of_the_rounds_goes(count: int) -> None:
    n = rounds_to_drop([10] * count, None, 0.2)
    assert n == max(1, count // 5)


@settings(max_examples=50, deadline=None)
@given(msgs=conversations(), gap=st.one_of(st.none(), st.integers(0, 60_000)))
def test_a_retry_keeps_whole_rounds_after_a_marker(msgs: list[Msg], gap: int | None) -> None:
    rounds = api_rounds(msgs)
    plan = plan_retry(msgs, gap, CFG)
    n = rounds_to_drop([r.tokens for r in rounds], gap, 0.2)
    if n >= len(rounds):
        assert isinstance(plan, GiveUp)
        return
    assert isinstance(plan, Retry)
    assert plan.dropped_rounds == n
    assert plan.messages[0].content[0]["text"] == prompts.OMITTED_FOR_RETRY
    assert list(plan.messages[1:]) == msgs[rounds[n].start :]
    assert_api_valid(build_summary_request(plan.messages).messages)


def rounds_conversation(n: int, tokens: int = 1_000) -> list[Msg]:
    msgs = [Msg.of("user", "build the thing", uuid="u0", tokens=10)]
    for i in range(n):
        msgs.append(
            Msg.of(
                "assistant",
                [{"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"n": i}}],
                uuid=f"a{i}",
                tokens=tokens // 2,
            )
        )
        msgs.append(
            Msg.of(
                "user",
                [{"type": "tool_result", "tool_use_id": f"t{i}", "content": f"out {i}"}],
                uuid=f"r{i}",
                tokens=tokens // 2,
            )
        )
    return msgs


@pytest.mark.anyio
async def test_one_call_gives_a_level_2_summary() -> None:
    llm = ScriptedLLM(GOOD_REPLY)
    msgs = rounds_conversation(5)
    result = await compact_full(llm, "claude-x", msgs, cfg=CFG, estimate=words_estimate)
    assert result.level == 2
    assert result.spent.api_calls == 1
    assert (result.spent.input_tokens, result.spent.output_tokens) == (1_000, 200)
    assert result.spent.cache_read_input_tokens == 50
    assert llm.requests[0]["tools"] is None
    (message,) = result.messages
    assert message.role == "user"
    text = message.content[0]["text"]
    assert "build X" in text and "secret" not in text and "<analysis>" not in text
    assert result.tokens_before == 5_010
    assert result.tokens_after == words_estimate(text)
    assert result.boundary.level == 2 and result.boundary.logical_parent_uuid == "r4"


@pytest.mark.anyio
async def test_a_stated_gap_drops_just_enough_rounds_and_retries() -> None:
    too_long = PromptTooLong("prompt is too long", actual=202_500, limit=200_000)
    llm = ScriptedLLM(too_long, GOOD_REPLY)
    msgs = rounds_conversation(10)
    result = await compact_full(llm, "claude-x", msgs, cfg=CFG, estimate=words_estimate)
    assert result.level == 3 and result.retries == 1
    # Round 0 is the first prompt (10 tokens), then rounds of 1,000: 2,500 needs 3 more.
    assert result.dropped_rounds == 4
    second = llm.requests[1]["messages"]
    assert second[0]["content"][0]["text"] == prompts.OMITTED_FOR_RETRY
    assert second[1]["content"][0]["id"] == "t3"
    assert result.spent.api_calls == 2


@pytest.mark.anyio
async def test_without_a_gap_a_fifth_of_the_rounds_is_dropped_each_time() -> None:
    bare = PromptTooLong("request too large")
    llm = ScriptedLLM(bare, bare, GOOD_REPLY)
    result = await compact_full(
        llm, "claude-x", rounds_conversation(19), cfg=CFG, estimate=words_estimate
    )
    assert result.retries == 2
    assert result.dropped_rounds == 4 + 3  # 20 rounds -> 4, then 16 -> 3
    assert llm.requests[2]["messages"][1]["content"][0]["id"] == "t6"


@pytest.mark.anyio
async def test_after_three_retries_it_fails_with_a_clear_error() -> None:
    too_long = PromptTooLong("prompt is too long")
    llm = ScriptedLLM(too_long, too_long, too_long, too_long, GOOD_REPLY)
    with pytest.raises(CompactionFailed, match=r"still too long .* after 3 retries"):
        await compact_full(
            llm, "claude-x", rounds_conversation(30), cfg=CFG, estimate=words_estimate
        )
    assert len(llm.requests) == 4


@pytest.mark.anyio
async def test_nothing_left_to_drop_fails_clearly() -> None:
    llm = ScriptedLLM(PromptTooLong("too long", actual=900_000, limit=200_000))
    with pytest.raises(CompactionFailed, match="nothing to summarise"):
        await compact_full(
            llm, "claude-x", rounds_conversation(3), cfg=CFG, estimate=words_estimate
        )


@pytest.mark.anyio
async def test_other_model_errors_propagate() -> None:
    llm = ScriptedLLM(RateLimited("slow down", retry_after=3.0))
    with pytest.raises(RateLimited):
        await compact_full(llm, "m", rounds_conversation(2), cfg=CFG, estimate=words_estimate)


def real_conversation(rounds: int) -> list[Msg]:
    msgs = [Msg.of("user", "Please tidy up the logging module.", uuid="u")]
    for i in range(rounds):
        call = {"type": "tool_use", "id": f"toolu_{i}", "name": "Read", "input": {"n": i}}
        out = f"line {i}: " + "the quick brown fox jumps over the lazy dog " * 40
        result = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": out}
        msgs.append(Msg.of("assistant", [text_block(f"Reading part {i}."), call]))
        msgs.append(Msg.of("user", [result]))
    return [
        Msg.of(m.role, m.content, uuid=f"x{i}", tokens=estimate_content(list(m.content)))
        for i, m in enumerate(msgs)
    ]


@pytest.mark.anyio
async def test_against_the_loopback_api_a_real_prompt_too_long_is_recovered() -> None:
    msgs = real_conversation(12)  # about 5,000 tokens
    async with LoopbackAPI(context_limit=3_500, strict_alternation=True) as api:
        api.push(replies.text(GOOD_REPLY))
        llm = open_llm(LLMConfig(base_url=api.url), {"ANTHROPIC_API_KEY": "test"})
        assert not isinstance(llm, Disabled)
        try:
            result = await compact_full(
                llm,
                "claude-opus-4-6",
                msgs,
                cfg=CFG,
                estimate=estimate_content,
            )
        finally:
            await close_llm(llm)
        requests = api.requests
    assert result.level == 3
    assert 1 <= result.retries <= CFG.ptl_max_retries
    assert result.spent.api_calls == len(requests) == result.retries + 1
    assert "build X" in result.summary
    assert all("tools" not in r.body for r in requests)
