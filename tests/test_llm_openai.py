"""The openai backend: the real ``openai`` SDK against the loopback server's Chat Completions
wire (streamed and whole), tool calls both ways, and every failure mapped at its one seam."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from memd.config import BackendConfig, LLMConfig
from memd.errors import (
    AuthenticationFailed,
    LLMError,
    PromptTooLong,
    QuotaExceeded,
    RateLimited,
    Unavailable,
    Unreachable,
)
from memd.llm.backends import open_llm
from memd.llm.client import Backend, Disabled, LLMReply
from memd.llm.openai_api import OpenAILLM
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI

EDIT = {"name": "Edit", "description": "edit a file", "input_schema": {"type": "object"}}


@pytest.fixture(params=[True, False], ids=["stream", "whole"])
async def openai_llm(request: pytest.FixtureRequest, api: LoopbackAPI) -> AsyncIterator[OpenAILLM]:
    config = LLMConfig(
        provider="openai", base_url=api.url + "/v1", openai=BackendConfig(stream=request.param)
    )
    llm = open_llm(config, {})
    assert isinstance(llm, OpenAILLM)
    yield llm
    await llm.aclose()


async def ask(llm: Backend, **overrides: Any) -> LLMReply:
    params: dict[str, Any] = {
        "model": "qwen2.5-coder:7b",
        "system": "You keep notes.",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 200,
    }
    params.update(overrides)
    with anyio.fail_after(20):
        return await llm.create_message(**params)


async def failure(llm: Backend, **overrides: Any) -> LLMError:
    with pytest.raises(LLMError) as info:
        await ask(llm, **overrides)
    return info.value


@pytest.mark.anyio
async def test_a_tool_loop_round_trips_through_chat_completions(
    openai_llm: OpenAILLM, api: LoopbackAPI
) -> None:
    api.push(replies.tool_use("Edit", {"file_path": "/n.md", "old_string": "a", "new_string": "b"}))
    first = await ask(openai_llm, tools=[EDIT])
    assert first.stop_reason == "tool_use" and first.backend == "openai" and not first.priced
    (use,) = first.tool_uses
    assert use["input"] == {"file_path": "/n.md", "old_string": "a", "new_string": "b"}
    result = {"type": "tool_result", "tool_use_id": use["id"], "content": "ok", "is_error": True}
    history = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [result, {"type": "text", "text": "go on"}]},
    ]
    api.push(replies.text("Done."))
    second = await ask(openai_llm, messages=history, tools=[EDIT])
    assert second.text == "Done." and second.stop_reason == "end_turn"
    sent = api.requests[-1].body  # what the SDK put on the wire: a tool message after the call
    roles = [m["role"] for m in sent["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "user"]
    assert sent["messages"][3] == {
        "role": "tool",
        "tool_call_id": use["id"],
        "content": "Error: ok",
    }
    assert second.usage.input_tokens > 0 and second.seconds > 0


@pytest.mark.anyio
async def test_arguments_that_are_not_a_json_object_reach_the_runner_as_text(
    openai_llm: OpenAILLM, api: LoopbackAPI
) -> None:
    api.push(replies.Message(({"type": "tool_use", "id": "c1", "name": "Edit", "input": "{oops"},)))
    reply = await ask(openai_llm, tools=[EDIT])
    assert reply.tool_uses[0]["input"] == "{oops"


@pytest.mark.anyio
async def test_an_answer_cut_at_its_limit_says_so(openai_llm: OpenAILLM, api: LoopbackAPI) -> None:
    api.push(replies.text("word " * 400))
    reply = await ask(openai_llm, max_tokens=20)
    assert reply.stop_reason == "max_tokens" and reply.cut_short


@pytest.mark.anyio
async def test_failures_map_to_memds_classes(openai_llm: OpenAILLM, api: LoopbackAPI) -> None:
    api.fail_next(status=429, retry_after=7)
    limited = await failure(openai_llm)
    assert isinstance(limited, RateLimited) and limited.retry_after == 7
    api.inject(
        replies.api_error(429, "You exceeded your current quota", error_code="insufficient_quota")
    )
    assert isinstance(await failure(openai_llm), QuotaExceeded)
    api.fail_next(status=500)
    assert isinstance(await failure(openai_llm), Unavailable)
    api.fail_next(status=401)
    assert isinstance(await failure(openai_llm), AuthenticationFailed)
    api.context_limit = 40
    too_long = await failure(openai_llm, messages=[{"role": "user", "content": "many " * 300}])
    assert isinstance(too_long, PromptTooLong) and too_long.gap is not None and too_long.gap > 200


@pytest.mark.anyio
async def test_a_stream_cut_mid_answer_is_unavailable_not_a_half_answer(api: LoopbackAPI) -> None:
    llm = open_llm(LLMConfig(provider="openai", base_url=api.url + "/v1"), {})
    assert isinstance(llm, OpenAILLM)
    api.push(replies.text("half of the notes", stop_reason="cut_stream"))
    error = await failure(llm)
    assert isinstance(error, Unavailable) and "stream ended" in str(error)
    api.drop_next()
    assert isinstance(await failure(llm), Unavailable)
    await llm.aclose()


@pytest.mark.anyio
async def test_a_hung_server_ends_at_the_deadline_and_a_stop_ends_it_at_once(
    api: LoopbackAPI,
) -> None:
    llm = open_llm(LLMConfig(provider="openai", base_url=api.url + "/v1"), {})
    assert isinstance(llm, OpenAILLM)
    api.hold()
    try:
        slow = await failure(llm, timeout=0.5)
        assert isinstance(slow, Unavailable) and "0.5 s" in str(slow)
        async with anyio.create_task_group() as tg:
            errors: list[LLMError] = []

            async def call() -> None:
                errors.append(await failure(llm))

            tg.start_soon(call)
            await anyio.to_thread.run_sync(api.wait_held, 2)
            llm.stop("memd is stopping")
        assert isinstance(errors[0], Unavailable) and "stopping" in str(errors[0])
    finally:
        api.release()
        await llm.aclose()


@pytest.mark.anyio
async def test_a_server_nobody_listens_on_is_unreachable_and_named() -> None:
    llm = open_llm(LLMConfig(provider="openai", base_url="http://127.0.0.1:9/v1"), {})
    assert isinstance(llm, OpenAILLM)
    error = await failure(llm)
    assert isinstance(error, Unreachable) and "127.0.0.1:9" in str(error)
    assert llm.facts().unreachable_since is not None
    await llm.aclose()


def test_a_remote_server_without_a_key_is_disabled_naming_the_variable() -> None:
    off = open_llm(LLMConfig(provider="openai", base_url="https://openrouter.ai/api/v1"), {})
    assert isinstance(off, Disabled) and "OPENAI_API_KEY" in off.reason
    named = open_llm(LLMConfig(provider="openai", api_key_env="ROUTER_KEY"), {})
    assert isinstance(named, Disabled) and "ROUTER_KEY" in named.reason
