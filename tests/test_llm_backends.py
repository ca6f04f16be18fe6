"""The openai and gemini backends: the real ``openai`` and ``google-genai`` SDKs against the
loopback server's Chat Completions and generateContent wires (streamed and whole), tool calls
both ways, and every failure mapped at each room's one seam to the same classes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from memd.config_llm import BackendConfig, LLMConfig
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
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI

EDIT = {"name": "Edit", "description": "edit a file", "input_schema": {"type": "object"}}


KEYS = {"GEMINI_API_KEY": "test"}


def opened(api: LoopbackAPI, name: str, *, stream: bool = True) -> Backend:
    settings = BackendConfig(stream=stream)
    if name == "openai":
        config = LLMConfig(provider="openai", base_url=api.url + "/v1", openai=settings)
    else:
        config = LLMConfig(provider="gemini", base_url=api.url, gemini=settings)
    llm = open_llm(config, KEYS)
    assert isinstance(llm, Backend)
    return llm


@pytest.fixture(
    params=[("openai", True), ("openai", False), ("gemini", True), ("gemini", False)],
    ids=["openai-stream", "openai-whole", "gemini-stream", "gemini-whole"],
)
async def backend(request: pytest.FixtureRequest, api: LoopbackAPI) -> AsyncIterator[Backend]:
    name, stream = request.param
    llm = opened(api, name, stream=stream)
    yield llm
    await llm.aclose()


@pytest.fixture(params=["openai", "gemini"])
async def streamed(request: pytest.FixtureRequest, api: LoopbackAPI) -> AsyncIterator[Backend]:
    llm = opened(api, request.param)
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
async def test_a_tool_loop_round_trips_through_each_wire(
    backend: Backend, api: LoopbackAPI
) -> None:
    api.push(replies.tool_use("Edit", {"file_path": "/n.md", "old_string": "a", "new_string": "b"}))
    first = await ask(backend, tools=[EDIT])
    assert first.stop_reason == "tool_use" and first.backend == backend.facts().name
    (use,) = first.tool_uses
    assert use["input"] == {"file_path": "/n.md", "old_string": "a", "new_string": "b"}
    result = {"type": "tool_result", "tool_use_id": use["id"], "content": "ok", "is_error": True}
    history = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [result, {"type": "text", "text": "go on"}]},
    ]
    api.push(replies.text("Done."))
    second = await ask(backend, messages=history, tools=[EDIT])
    assert second.text == "Done." and second.stop_reason == "end_turn"
    # The server checked that the result answers the call (as the real API does) before
    # answering, and the SDK sent the result after the call:
    sent = api.requests[-1].body
    if backend.facts().name == "openai":
        roles = [m["role"] for m in sent["messages"]]
        assert roles == ["system", "user", "assistant", "tool", "user"]
        tool = {"role": "tool", "tool_call_id": use["id"], "content": "Error: ok"}
        assert sent["messages"][3] == tool
    else:
        answer = sent["contents"][2]["parts"][0]["functionResponse"]
        assert (answer["name"], answer["response"]) == ("Edit", {"error": "ok"})
    assert second.usage.input_tokens > 0 and second.seconds > 0


@pytest.mark.anyio
async def test_arguments_that_are_not_a_json_object_reach_the_runner_as_text(
    api: LoopbackAPI,
) -> None:
    llm = opened(api, "openai")
    api.push(replies.Message(({"type": "tool_use", "id": "c1", "name": "Edit", "input": "{oops"},)))
    reply = await ask(llm, tools=[EDIT])
    assert reply.tool_uses[0]["input"] == "{oops"
    await llm.aclose()


@pytest.mark.anyio
async def test_an_answer_cut_at_its_limit_says_so(backend: Backend, api: LoopbackAPI) -> None:
    api.push(replies.text("word " * 400))
    reply = await ask(backend, max_tokens=20)
    assert reply.stop_reason == "max_tokens" and reply.cut_short


@pytest.mark.anyio
async def test_failures_map_to_memds_classes(backend: Backend, api: LoopbackAPI) -> None:
    api.fail_next(status=429, retry_after=7)
    limited = await failure(backend)
    assert isinstance(limited, RateLimited) and limited.retry_after == 7
    if backend.facts().name == "openai":  # OpenAI's quota answer is a 429 of its own
        quota = "You exceeded your current quota"
        api.inject(replies.api_error(429, quota, error_code="insufficient_quota"))
        assert isinstance(await failure(backend), QuotaExceeded)
    api.fail_next(status=500)
    assert isinstance(await failure(backend), Unavailable)
    api.fail_next(status=401)
    assert isinstance(await failure(backend), AuthenticationFailed)
    api.context_limit = 40
    too_long = await failure(backend, messages=[{"role": "user", "content": "many " * 300}])
    assert isinstance(too_long, PromptTooLong) and too_long.gap is not None and too_long.gap > 200


@pytest.mark.anyio
async def test_a_stream_cut_mid_answer_is_unavailable_not_a_half_answer(
    streamed: Backend, api: LoopbackAPI
) -> None:
    llm = streamed
    api.push(replies.text("half of the notes", stop_reason="cut_stream"))
    error = await failure(llm)
    assert isinstance(error, Unavailable) and "stream ended" in str(error)
    api.drop_next()
    assert isinstance(await failure(llm), Unavailable)


@pytest.mark.anyio
async def test_a_hung_server_ends_at_the_deadline_and_a_stop_ends_it_at_once(
    streamed: Backend, api: LoopbackAPI
) -> None:
    llm = streamed
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


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["openai", "gemini"])
async def test_a_server_nobody_listens_on_is_unreachable_and_named(name: str) -> None:
    config = LLMConfig(provider=name, base_url="http://127.0.0.1:9/v1")  # type: ignore[arg-type]
    llm = open_llm(config, KEYS)
    assert isinstance(llm, Backend)
    error = await failure(llm)
    assert isinstance(error, Unreachable) and "127.0.0.1:9" in str(error)
    assert llm.facts().unreachable_since is not None
    await llm.aclose()


def test_a_remote_server_without_a_key_is_disabled_naming_the_variable() -> None:
    off = open_llm(LLMConfig(provider="openai", base_url="https://openrouter.ai/api/v1"), {})
    assert isinstance(off, Disabled) and "OPENAI_API_KEY" in off.reason
    named = open_llm(LLMConfig(provider="openai", api_key_env="ROUTER_KEY"), {})
    assert isinstance(named, Disabled) and "ROUTER_KEY" in named.reason


def test_gemini_without_its_key_is_disabled_naming_the_variable() -> None:
    off = open_llm(LLMConfig(provider="gemini"), {"OPENAI_API_KEY": "x"})
    assert isinstance(off, Disabled) and "GEMINI_API_KEY" in off.reason


@pytest.mark.anyio
async def test_the_doctors_probe_spends_no_tokens(backend: Backend, api: LoopbackAPI) -> None:
    said = await backend.probe(model="loopback-model", timeout=10)
    assert api.url.removeprefix("http://") in said
    assert api.totals().output_tokens == 0
