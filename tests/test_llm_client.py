"""The LLM seam: opening, replies as plain data, and every SDK failure mapped into memd.errors.

Failures are real error answers of the loopback server read by the real SDK (no patching),
plus one test through the SDK's other seam, ``httpx2.MockTransport``.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import anthropic
import anyio
import httpx2
import pytest

from memd.config_llm import LLMConfig
from memd.errors import (
    AuthenticationFailed,
    BadRequest,
    LLMError,
    Overloaded,
    PromptTooLong,
    QuotaExceeded,
    RateLimited,
    Unavailable,
)
from memd.llm.anthropic_api import AnthropicLLM
from memd.llm.backends import open_llm
from memd.llm.client import (
    Disabled,
    LLMReply,
    Usage,
    close_llm,
    stop_llm,
)
from memd.llm.errors_map import classify_status, parse_prompt_too_long, parse_retry_after
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI

USER_HI = [{"role": "user", "content": "hi"}]
SECRET = "sk-ant-test-do-not-leak-0123456789"


@asynccontextmanager
async def connected(
    *, key: str = "test", timeout_s: float = 30.0, **server: Any
) -> AsyncIterator[tuple[LoopbackAPI, AnthropicLLM]]:
    async with LoopbackAPI(**server) as api:
        llm = open_llm(
            LLMConfig(timeout_s=timeout_s),
            {"ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": key},
        )
        assert isinstance(llm, AnthropicLLM)
        try:
            yield api, llm
        finally:
            await close_llm(llm)


async def call(llm: AnthropicLLM, **overrides: Any) -> LLMReply:
    params: dict[str, Any] = {
        "model": "claude-test",
        "system": "Be brief.",
        "messages": USER_HI,
        "max_tokens": 100,
        **overrides,
    }
    with anyio.fail_after(30):
        return await llm.create_message(**params)


async def failure(llm: AnthropicLLM, **overrides: Any) -> LLMError:
    with pytest.raises(LLMError) as caught:
        await call(llm, **overrides)
    return caught.value


# -- opening ------------------------------------------------------------------------------------


@pytest.mark.parametrize("env", [{}, {"ANTHROPIC_API_KEY": ""}, {"ANTHROPIC_API_KEY": "  "}])
def test_no_api_key_disables_models_with_a_reason(env: dict[str, str]) -> None:
    opened = open_llm(LLMConfig(), env)
    assert isinstance(opened, Disabled)
    assert opened.reason.startswith("no API key") and "ANTHROPIC_API_KEY" in opened.reason


def test_disabled_reason_names_the_configured_variable() -> None:
    opened = open_llm(LLMConfig(api_key_env="MY_KEY"), {"ANTHROPIC_API_KEY": "ignored"})
    assert isinstance(opened, Disabled) and "MY_KEY" in opened.reason


WITHOUT_GOOGLE = """
import sys
from importlib.machinery import PathFinder

class Uninstalled(PathFinder):
    \"\"\"The path finder, blind to the google namespace, as if google-auth (which
    anthropic[vertex] and google-genai pull in) were not installed.\"\"\"

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "google" or name.startswith("google."):
            return None
        return super().find_spec(name, path, target)

sys.meta_path[:] = [Uninstalled if f is PathFinder else f for f in sys.meta_path]
from memd.config_llm import LLMConfig
from memd.llm.backends import open_llm

opened = open_llm(LLMConfig(provider="vertex"), {"CLOUD_ML_REGION": "us-east5"})
print(type(opened).__name__, getattr(opened, "reason", ""), "google.auth" in sys.modules)
"""


def test_vertex_without_its_package_is_disabled_naming_the_install() -> None:
    """Run where google-auth cannot be found (a fresh interpreter whose path finder does not
    see it): Vertex is disabled with the install that fixes it."""
    ran = subprocess.run(
        [sys.executable, "-c", WITHOUT_GOOGLE], capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    kind, said = ran.stdout.strip().split(" ", 1)
    assert kind == "Disabled" and "pip install 'anthropic[vertex]'" in said, ran.stdout
    assert said.endswith("False")  # nothing of google was imported


@pytest.mark.anyio
async def test_vertex_opens_where_its_package_is() -> None:
    """Here google-auth is installed (the test above hides it): Vertex opens."""
    opened = open_llm(LLMConfig(provider="vertex"), {"CLOUD_ML_REGION": "us-east5"})
    assert isinstance(opened, AnthropicLLM), opened
    await close_llm(opened)


@pytest.mark.anyio
async def test_bedrock_opens_with_a_bedrock_api_key_and_region() -> None:
    env = {"AWS_BEARER_TOKEN_BEDROCK": "bedrock-key", "AWS_REGION": "us-east-1"}
    opened = open_llm(LLMConfig(provider="bedrock"), env)
    assert isinstance(opened, AnthropicLLM)
    assert "bedrock-runtime.us-east-1" in repr(opened)
    await close_llm(opened)


@pytest.mark.anyio
async def test_config_base_url_wins_over_the_environment() -> None:
    config = LLMConfig(base_url="http://127.0.0.1:9")
    opened = open_llm(config, {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "http://x.invalid"})
    assert isinstance(opened, AnthropicLLM) and "127.0.0.1:9" in repr(opened)
    await close_llm(opened)


# -- replies ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_reply_is_plain_data_that_replays_as_history() -> None:
    async with connected() as (api, llm):
        api.push(replies.tool_use("Read", {"file_path": "/x"}, preamble="Looking."))
        tools = [{"name": "Read", "description": "read", "input_schema": {"type": "object"}}]
        first = await call(llm, tools=tools)
        assert first.stop_reason == "tool_use" and first.text == "Looking."
        (use,) = first.tool_uses
        assert set(use) == {"type", "id", "name", "input"}
        history = [
            *USER_HI,
            {"role": "assistant", "content": first.content},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "data"}],
            },
        ]
        second = await call(llm, messages=history, tools=tools)
        assert second.text == "OK."
        assert api.requests[1].body["messages"][1]["content"] == first.content
        assert api.requests[1].body["system"] == "Be brief."
        await call(llm, system="")
        assert "system" not in api.requests[2].body  # an empty system prompt is left out


@pytest.mark.anyio
async def test_usage_reports_cache_writes_and_reads() -> None:
    system = [{"type": "text", "text": "Rules. " * 800, "cache_control": {"type": "ephemeral"}}]
    async with connected() as (_api, llm):
        first = await call(llm, system=system)
        second = await call(llm, system=system)
    assert (
        first.usage.cache_creation_input_tokens > 1_024 and first.usage.cache_read_input_tokens == 0
    )
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    total = first.usage + second.usage
    assert total.prompt_tokens == first.usage.prompt_tokens + second.usage.prompt_tokens
    assert total.total_tokens == total.prompt_tokens + total.output_tokens


@pytest.mark.anyio
async def test_deprecated_model_logs_once_and_raises_no_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with connected() as (_api, llm):
        with caplog.at_level(logging.WARNING, logger="memd.llm.client"):
            await call(llm, model="claude-sonnet-4-5")
            await call(llm, model="claude-sonnet-4-5")
    assert [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()] == [
        "model claude-sonnet-4-5 is deprecated (end of life November 30th, 2026): "
        "name a newer one in llm.models"
    ]


# -- failures through the real SDK --------------------------------------------------------------


FAULTS: dict[str, tuple[replies.Reply, type[LLMError]]] = {
    "overloaded 529": (replies.overloaded(), Overloaded),
    "server error 500": (replies.server_error(500), Unavailable),
    "unavailable 503": (replies.server_error(503), Unavailable),
    "rate limited 429": (replies.rate_limited(), RateLimited),
    "bad key 401": (replies.api_error(401, "invalid x-api-key"), AuthenticationFailed),
    "forbidden 403": (replies.api_error(403), AuthenticationFailed),
    "billing 402": (replies.api_error(402, "Billing problem"), QuotaExceeded),
    "credit too low 400": (replies.credit_too_low(), QuotaExceeded),
    "spend limit 429 code": (
        replies.api_error(429, "limit", error_code="contract_spend_limit_reached"),
        QuotaExceeded,
    ),
    "usage limits 400": (
        replies.api_error(400, "You have reached your specified API usage limits."),
        QuotaExceeded,
    ),
    "model not found 404": (replies.api_error(404, "model: nope"), BadRequest),
    "request too large 413": (
        replies.api_error(413, "Request exceeds the maximum size"),
        PromptTooLong,
    ),
    "dropped connection": (replies.Drop(), Unavailable),
}


@pytest.mark.anyio
@pytest.mark.parametrize("name", FAULTS)
async def test_api_failures_map_to_memd_errors(name: str) -> None:
    fault, expected = FAULTS[name]
    async with connected() as (api, llm):
        api.inject(fault)
        error = await failure(llm)
        assert type(error) is expected
        assert (await call(llm)).text == "OK."  # the client is still usable afterwards


@pytest.mark.anyio
async def test_retryable_flags_follow_the_failure() -> None:
    async with connected() as (api, llm):
        api.fail_next(status=529)
        api.inject(replies.credit_too_low())
        assert (await failure(llm)).retryable
        assert not (await failure(llm)).retryable


@pytest.mark.anyio
async def test_prompt_too_long_carries_the_figures() -> None:
    async with connected(context_limit=100) as (_api, llm):
        error = await failure(llm, messages=[{"role": "user", "content": "many words " * 200}])
    assert isinstance(error, PromptTooLong)
    assert error.limit == 100 and error.actual is not None and error.actual > 400
    assert error.gap == error.actual - 100


@pytest.mark.anyio
async def test_rate_limit_carries_retry_after_seconds() -> None:
    async with connected() as (api, llm):
        api.fail_next(status=429, retry_after=7)
        error = await failure(llm)
    assert isinstance(error, RateLimited) and error.retry_after == 7.0


@pytest.mark.anyio
async def test_rate_limit_retry_after_as_http_date() -> None:
    when = datetime.fromtimestamp(datetime.now(UTC).timestamp() + 120, UTC)
    async with connected() as (api, llm):
        api.inject(
            replies.api_error(429, headers={"retry-after": format_datetime(when, usegmt=True)})
        )
        error = await failure(llm)
    assert isinstance(error, RateLimited) and error.retry_after is not None
    assert 100 < error.retry_after <= 121


@pytest.mark.anyio
async def test_invalid_request_is_a_bad_request_naming_the_problem() -> None:
    async with connected() as (_api, llm):
        error = await failure(llm, messages=[{"role": "assistant", "content": "x"}])
    assert isinstance(error, BadRequest) and "first message" in str(error)


@pytest.mark.anyio
async def test_the_api_key_never_appears_in_errors() -> None:
    async with connected(key=SECRET, api_key="the-right-key") as (_api, llm):
        error = await failure(llm)
        assert isinstance(error, AuthenticationFailed)
        assert SECRET not in str(error) and SECRET not in repr(error)
        assert SECRET not in repr(llm)


@pytest.mark.anyio
async def test_a_call_slower_than_its_timeout_is_unavailable() -> None:
    async with connected() as (api, llm):
        api.hold()
        error = await failure(llm, timeout=0.2)
        api.release()
        assert isinstance(error, Unavailable) and "0.2" in str(error)
        assert (await call(llm)).text == "OK."


@pytest.mark.anyio
async def test_stop_ends_the_calls_in_flight_and_refuses_new_ones() -> None:
    """The daemon's stop: a call the API does not answer ends at once, not at its timeout
    (120 s by default; the stop waited its whole grace period for such calls)."""
    async with connected(timeout_s=600.0) as (api, llm):
        api.hold()
        errors: list[LLMError] = []
        async with anyio.create_task_group() as tg:

            async def waiting() -> None:
                errors.append(await failure(llm))

            tg.start_soon(waiting)
            tg.start_soon(waiting)
            await anyio.to_thread.run_sync(api.wait_held, 2)
            stop_llm(llm, "memd is stopping")
        assert [str(e) for e in errors] == ["memd is stopping"] * 2
        assert all(isinstance(e, Unavailable) for e in errors)
        assert str(await failure(llm)) == "memd is stopping"  # refused: the API still holds
        api.release()


@pytest.mark.anyio
async def test_nothing_listening_is_unavailable() -> None:
    async with LoopbackAPI() as api:
        url = api.url  # closed on exit: the port is free again
    llm = open_llm(LLMConfig(), {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "k"})
    assert isinstance(llm, AnthropicLLM)
    try:
        error = await failure(llm)
    finally:
        await close_llm(llm)
    assert isinstance(error, Unavailable) and error.retryable


# -- the MockTransport seam ---------------------------------------------------------------------


def mock_llm(handler: Callable[[httpx2.Request], httpx2.Response]) -> AnthropicLLM:
    client = anthropic.AsyncAnthropic(
        api_key="k",
        base_url="http://mock.invalid",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )
    return AnthropicLLM(client, timeout_s=5)


@pytest.mark.anyio
async def test_mock_transport_seam_reads_replies_and_errors() -> None:
    answers = iter(
        [
            httpx2.Response(
                200,
                json={
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-test",
                    "content": [{"type": "text", "text": "mocked", "citations": None}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": 3, "output_tokens": 1},
                },
            ),
            httpx2.Response(
                529,
                json={
                    "type": "error",
                    "error": {"type": "overloaded_error", "message": "Overloaded"},
                },
            ),
        ]
    )
    llm = mock_llm(lambda request: next(answers))
    try:
        reply = await call(llm)
        error = await failure(llm)
    finally:
        await close_llm(llm)
    assert replace(reply, seconds=0.0) == LLMReply(
        "msg_1",
        "claude-test",
        [{"type": "text", "text": "mocked"}],
        "end_turn",
        Usage(3, 1, 0, 0),
        backend="anthropic",
    )
    assert isinstance(error, Overloaded)


@pytest.mark.anyio
async def test_mock_transport_connection_error_is_unavailable() -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    llm = mock_llm(refuse)
    try:
        error = await failure(llm)
    finally:
        await close_llm(llm)
    assert isinstance(error, Unavailable) and "ConnectError" in str(error)


# -- the pure classification --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "figures"),
    [
        ("prompt is too long: 210000 tokens > 200000 maximum", (210_000, 200_000)),
        ("Prompt is too long: 1,234 tokens > 1,000 maximum", (1_234, 1_000)),
        (
            "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, "
            "decrease input length or `max_tokens` and try again",
            (209_573, 200_000),
        ),
        ("Input is too long for requested model.", (None, None)),
        ("messages: text content blocks must be non-empty", None),
    ],
)
def test_prompt_too_long_messages_are_parsed(
    message: str, figures: tuple[int | None, int | None] | None
) -> None:
    assert parse_prompt_too_long(message) == figures


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "30"}, 30.0),
        ({"Retry-After": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "Thu, 01 Jan 1970 00:01:40 GMT"}, 60.0),  # now = 40
        ({"retry-after": "Thu, 01 Jan 1970 00:00:10 GMT"}, 0.0),  # already past
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-3"}, None),
        ({}, None),
    ],
)
def test_retry_after_is_parsed(headers: dict[str, str], seconds: float | None) -> None:
    assert parse_retry_after(headers, now=40.0) == seconds


@pytest.mark.parametrize(
    ("status", "error_type", "message", "expected"),
    [
        (400, "invalid_request_error", "prompt is too long: 5 tokens > 4 maximum", PromptTooLong),
        (400, "invalid_request_error", "max_tokens: Field required", BadRequest),
        (408, "timeout_error", "Request timed out", Unavailable),
        (429, "rate_limit_error", "usage of this organization is limited", RateLimited),
        (500, "overloaded_error", "Overloaded", Overloaded),
        (502, None, "", Unavailable),
        (422, None, "", BadRequest),
    ],
)
def test_status_classification(
    status: int, error_type: str | None, message: str, expected: type[LLMError]
) -> None:
    error = classify_status(
        status, error_type=error_type, error_code=None, message=message, retry_after=None
    )
    assert type(error) is expected
    assert str(status) in str(error) or isinstance(error, PromptTooLong)


def test_importing_the_client_or_the_loopback_server_does_not_import_the_sdk() -> None:
    code = (
        "import sys, memd.llm.client, memd.testing.loopback, memd.testing.loopback_process; "
        "sys.exit('anthropic' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
