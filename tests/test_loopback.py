"""The loopback Messages-API server: answers, validation, accounting, cache, faults, records."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from memd.config_llm import LLMConfig
from memd.llm.backends import open_llm
from memd.llm.client import LLM, Disabled, close_llm
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_billing import PromptCache, segments
from memd.testing.loopback_process import LoopbackProcess
from memd.testing.loopback_replies import ScriptError, When, parse_script

HEADERS = {"x-api-key": "test", "anthropic-version": "2023-06-01"}
LONG_SYSTEM = "You keep careful working notes for a coding session. " * 200  # ~2k tokens


def request(text: str = "hello", **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-test",
        "max_tokens": 200,
        "messages": [{"role": "user", "content": text}],
        **extra,
    }


def cached_system(text: str = LONG_SYSTEM) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]


@pytest.fixture
def http() -> Iterator[httpx2.Client]:
    with httpx2.Client(trust_env=False, timeout=10) as client:
        yield client


def post(
    http: httpx2.Client, api: LoopbackAPI, body: Any, path: str = "/v1/messages"
) -> httpx2.Response:
    return http.post(api.url + path, json=body, headers=HEADERS)


def test_default_answer_is_a_short_text_with_usage(api: LoopbackAPI, http: httpx2.Client) -> None:
    answer = post(http, api, request()).json()
    assert answer["type"] == "message" and answer["role"] == "assistant"
    assert answer["content"] == [{"type": "text", "text": "OK."}]
    assert answer["stop_reason"] == "end_turn"
    assert answer["usage"]["input_tokens"] > 0 and answer["usage"]["output_tokens"] > 0


def test_queued_replies_answer_in_order_then_default(api: LoopbackAPI, http: httpx2.Client) -> None:
    api.reply_tool_use("Read", {"file_path": "/etc/hosts"}, preamble="Let me look.")
    api.reply_text("first")
    answers = [post(http, api, request()).json() for _ in range(3)]
    assert answers[0]["stop_reason"] == "tool_use"
    assert answers[0]["content"][0] == {"type": "text", "text": "Let me look."}
    call = answers[0]["content"][1]
    assert call["type"] == "tool_use" and call["input"] == {"file_path": "/etc/hosts"}
    assert call["id"].startswith("toolu_")
    assert [a["content"][0]["text"] for a in answers[1:]] == ["first", "OK."]


def test_handler_answers_before_rules_and_queue_and_may_pass(
    api: LoopbackAPI, http: httpx2.Client
) -> None:
    api.reply_text("from the queue")
    api.add_rule(When(match="rule"), replies.text("from the rule"))
    api.set_handler(lambda body: replies.text("handled") if "handle" in str(body) else None)
    texts = [
        post(http, api, request(t)).json()["content"][0]["text"] for t in ("handle", "rule", "x")
    ]
    assert texts == ["handled", "from the rule", "from the queue"]


def test_rules_fill_placeholders_from_the_prompt_and_respect_times(
    api: LoopbackAPI, http: httpx2.Client
) -> None:
    edit = {"name": "Edit", "description": "edit", "input_schema": {"type": "object"}}
    script = parse_script(
        '{"when": {"tool": "Edit", "turn": "first", "match": "notes at (?P<path>\\\\S+)"},'
        ' "reply": {"tool_use": {"name": "Edit", "input": {"file_path": "{path}"}}}, "times": 1}\n'
    )
    api.load_script(script)
    first = post(http, api, request("update the notes at /tmp/n.md now", tools=[edit])).json()
    assert first["content"][0]["input"] == {"file_path": "/tmp/n.md"}
    again = post(http, api, request("update the notes at /tmp/n.md now", tools=[edit])).json()
    assert again["content"][0]["type"] == "text"  # times=1 used up
    no_tool = post(http, api, request("update the notes at /tmp/n.md now")).json()
    assert no_tool["content"][0]["type"] == "text"


def test_rule_turn_after_tool_matches_only_tool_results(
    api: LoopbackAPI, http: httpx2.Client
) -> None:
    api.add_rule(When(turn="after_tool"), replies.text("Done."))
    first = post(http, api, request()).json()
    assert first["content"][0]["text"] == "OK."
    body = request()
    body["messages"] += [
        {"role": "assistant", "content": [replies.tool_use("Read", {}).content[0]]},
    ]
    use_id = body["messages"][1]["content"][0]["id"]
    body["messages"].append(
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use_id, "content": "x"}],
        }
    )
    assert post(http, api, body).json()["content"][0]["text"] == "Done."


def test_invalid_requests_get_the_api_error_shape(api: LoopbackAPI, http: httpx2.Client) -> None:
    response = post(http, api, {"model": "m", "messages": []})
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["request_id"].startswith("req_")
    assert error["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in error["error"]["message"] and "messages" in error["error"]["message"]
    assert response.headers["request-id"] == error["request_id"]


def test_missing_key_and_version_headers_are_refused(api: LoopbackAPI, http: httpx2.Client) -> None:
    no_key = http.post(api.url + "/v1/messages", json=request(), headers={"anthropic-version": "1"})
    assert no_key.status_code == 401
    assert no_key.json()["error"]["type"] == "authentication_error"
    no_version = http.post(api.url + "/v1/messages", json=request(), headers={"x-api-key": "k"})
    assert no_version.status_code == 400 and "anthropic-version" in no_version.text


def test_context_limit_gives_the_api_prompt_too_long_message(http: httpx2.Client) -> None:
    with LoopbackAPI(context_limit=50) as api:
        response = post(http, api, request("word " * 100))
        assert response.status_code == 400
        message = response.json()["error"]["message"]
        match = re.fullmatch(r"prompt is too long: (\d+) tokens > 50 maximum", message)
        assert match and int(match[1]) > 100
        assert post(http, api, request("short")).status_code == 200


def test_count_tokens_endpoint_counts_the_prompt(api: LoopbackAPI, http: httpx2.Client) -> None:
    small = request("hi")
    big = request("hi " * 500)
    del small["max_tokens"], big["max_tokens"]
    counts = [
        post(http, api, b, "/v1/messages/count_tokens").json()["input_tokens"] for b in (small, big)
    ]
    assert 0 < counts[0] < 20 and counts[1] > 500


def test_text_is_cut_at_max_tokens(api: LoopbackAPI, http: httpx2.Client) -> None:
    api.reply_text("one two three four five six seven eight nine ten " * 10)
    answer = post(http, api, request(max_tokens=5)).json()
    assert answer["stop_reason"] == "max_tokens"
    assert answer["usage"]["output_tokens"] == 5
    assert answer["content"][0]["text"].startswith("one two")


def test_second_call_with_same_prefix_reads_the_cache(
    api: LoopbackAPI, http: httpx2.Client
) -> None:
    first = post(http, api, request("question one", system=cached_system())).json()["usage"]
    second = post(http, api, request("question two", system=cached_system())).json()["usage"]
    assert first["cache_read_input_tokens"] == 0
    assert first["cache_creation_input_tokens"] > 1_024
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert second["cache_creation_input_tokens"] == 0
    assert second["input_tokens"] < 20  # only the new question is uncached
    totals = api.totals()
    assert totals.messages == 2
    assert totals.cache_read_input_tokens == second["cache_read_input_tokens"]
    assert totals.usage.prompt_tokens == sum(
        u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"]
        for u in (first, second)
    )


def test_a_cache_write_is_billed_under_the_lifetime_asked_for(
    api: LoopbackAPI, http: httpx2.Client
) -> None:
    """As the API does, and as Claude Code 2.1.332 reads it: its idle compaction waits for
    a cache written for an hour (``cache_creation.ephemeral_1h_input_tokens``)."""
    hour = [{**cached_system()[0], "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    written = post(http, api, request("one", system=hour)).json()["usage"]
    assert written["cache_creation"]["ephemeral_1h_input_tokens"] > 1_024
    assert written["cache_creation"]["ephemeral_5m_input_tokens"] == 0
    other = cached_system("Other rules. " * 400)
    default = post(http, api, request("two", system=other)).json()["usage"]["cache_creation"]
    assert default["ephemeral_5m_input_tokens"] > 1_024
    assert default["ephemeral_1h_input_tokens"] == 0


def test_a_changed_prefix_or_a_short_one_is_not_read_from_cache(
    api: LoopbackAPI, http: httpx2.Client
) -> None:
    post(http, api, request(system=cached_system()))
    changed = post(http, api, request(system=cached_system("Other rules. " * 400))).json()
    assert changed["usage"]["cache_read_input_tokens"] == 0
    short = [post(http, api, request(system=cached_system("tiny"))).json() for _ in range(2)]
    assert all(s["usage"]["cache_creation_input_tokens"] == 0 for s in short)
    assert all(s["usage"]["cache_read_input_tokens"] == 0 for s in short)


def test_growing_conversation_reads_the_previous_breakpoint_and_writes_the_new_part() -> None:
    cache = PromptCache(min_tokens=0)
    history: list[dict[str, Any]] = [{"role": "user", "content": "start " * 50}]

    def turn(text: str) -> Any:
        history.append({"role": "assistant", "content": f"answer to {text}"})
        history.append(
            {
                "role": "user",
                "content": [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}],
            }
        )
        return cache.bill("m", segments({"messages": history}))

    first, second = turn("one"), turn("two")
    assert first.cache_read_input_tokens == 0 and first.input_tokens == 0
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.cache_creation_input_tokens > 0
    assert (
        second.prompt_tokens == second.cache_read_input_tokens + second.cache_creation_input_tokens
    )


def test_cache_entries_expire_after_their_ttl() -> None:
    now = [0.0]
    cache = PromptCache(min_tokens=0, clock=lambda: now[0])
    parts = segments(request(system=cached_system("rules")))
    cache.bill("m", parts)
    now[0] = 299.0
    assert cache.bill("m", parts).cache_read_input_tokens > 0  # a read refreshes the entry
    now[0] = 598.0
    assert cache.bill("m", parts).cache_read_input_tokens > 0
    now[0] = 1_000.0
    assert cache.bill("m", parts).cache_read_input_tokens == 0
    assert cache.bill("other-model", parts).cache_read_input_tokens == 0


def test_fail_next_answers_errors_then_recovers(api: LoopbackAPI, http: httpx2.Client) -> None:
    api.fail_next(2, status=429, retry_after=3)
    first, second, third = (post(http, api, request()) for _ in range(3))
    assert first.status_code == second.status_code == 429
    assert first.headers["retry-after"] == "3"
    assert first.json()["error"]["type"] == "rate_limit_error"
    assert third.status_code == 200
    assert [r.status for r in api.requests] == [429, 429, 200]
    assert api.totals().requests == 3 and api.totals().messages == 1


def test_dropped_connection_has_no_answer(api: LoopbackAPI, http: httpx2.Client) -> None:
    api.drop_next()
    with pytest.raises(httpx2.TransportError):
        post(http, api, request())
    assert api.requests[0].status == 0
    assert post(http, api, request()).status_code == 200


def test_close_cuts_a_delayed_answer_short() -> None:
    api = LoopbackAPI().start()
    api.delay_next(seconds=600)
    api.hold()  # park the request first, so close() surely meets it in flight
    outcome: list[object] = []

    def call() -> None:
        with httpx2.Client(trust_env=False, timeout=60) as client:
            try:
                outcome.append(
                    client.post(api.url + "/v1/messages", json=request(), headers=HEADERS)
                )
            except httpx2.TransportError as exc:
                outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    api.wait_held(1)
    closer = threading.Thread(target=api.close)
    closer.start()
    closer.join(timeout=30)
    caller.join(timeout=30)
    assert not closer.is_alive() and not caller.is_alive()
    assert len(outcome) == 1


def test_hold_parks_requests_until_release(api: LoopbackAPI) -> None:
    def call() -> None:
        with httpx2.Client(trust_env=False, timeout=30) as client:
            client.post(api.url + "/v1/messages", json=request(), headers=HEADERS)

    api.hold()
    callers = [threading.Thread(target=call) for _ in range(2)]
    for caller in callers:
        caller.start()
    api.wait_held(2)
    assert api.requests == []
    api.release()
    assert len(api.wait_requests(2)) == 2
    for caller in callers:
        caller.join(timeout=30)


def test_every_request_is_recorded_with_body_headers_and_usage(
    api: LoopbackAPI, http: httpx2.Client
) -> None:
    post(http, api, request("remember me"))
    post(http, api, {"model": "m"})
    good, bad = api.requests
    assert good.body["messages"][0]["content"] == "remember me"
    assert good.headers["x-api-key"] == "test" and good.path == "/v1/messages"
    assert good.usage is not None and good.usage.output_tokens > 0
    assert good.response["content"][0]["text"] == "OK."
    assert bad.status == 400 and bad.usage is None and bad.index == 1
    assert good.received_at <= bad.received_at


def test_reset_forgets_records_and_queue(api: LoopbackAPI, http: httpx2.Client) -> None:
    api.reply_text("queued")
    post(http, api, request(system=cached_system()))
    api.reply_text("never sent")
    api.reset()
    assert api.requests == [] and api.totals().requests == 0
    answer = post(http, api, request(system=cached_system())).json()
    assert answer["content"][0]["text"] == "OK."
    assert answer["usage"]["cache_read_input_tokens"] == 0


@pytest.mark.anyio
async def test_async_context_manager_serves_the_real_sdk() -> None:
    async with LoopbackAPI() as api:
        api.reply_text("hello from loopback")
        llm = open_llm(LLMConfig(), {"ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "test"})
        assert not isinstance(llm, Disabled)
        try:
            reply = await ask(llm)
        finally:
            await close_llm(llm)
    assert reply == "hello from loopback"


async def ask(llm: LLM) -> str:
    with anyio.fail_after(30):
        reply = await llm.create_message(
            model="claude-test",
            system="",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=50,
        )
    return reply.text


def test_script_errors_name_the_line() -> None:
    with pytest.raises(ScriptError, match=r"script:2:"):
        parse_script('{"reply": {"text": "ok"}}\n{"reply": {"nothing": 1}}\n')
    with pytest.raises(ScriptError, match=r"script:1:.*turn"):
        parse_script('{"when": {"turn": "later"}, "reply": {"text": "x"}}')
    with pytest.raises(ScriptError, match=r"script:1:"):
        parse_script('{"when": {"match": "("}, "reply": {"text": "x"}}')


def test_script_reply_forms() -> None:
    script = parse_script(
        "# comments and blank lines are skipped\n\n"
        '{"reply": {"error": {"status": 429, "retry_after": 5}}}\n'
        '{"reply": {"error": {"status": 429, "code": "contract_spend_limit_reached"}}}\n'
        '{"reply": {"drop": true, "delay_s": 0.5}}\n'
        '{"reply": {"tool_uses": [{"name": "A"}, {"name": "B", "input": {"x": 1}}],'
        ' "text": "two"}}\n'
    )
    limited, spent, dropped, calls = script.queue
    assert isinstance(limited, replies.ApiError) and ("retry-after", "5") in limited.headers
    assert isinstance(spent, replies.ApiError)
    assert spent.body("r")["error"]["details"] == {"error_code": "contract_spend_limit_reached"}
    assert dropped == replies.Drop(delay_s=0.5)
    assert isinstance(calls, replies.Message) and calls.stop_reason == "tool_use"
    assert [b.get("name") for b in calls.content] == [None, "A", "B"]


@pytest.mark.slow
def test_standalone_process_serves_a_script(tmp_path: Path) -> None:
    script = tmp_path / "script.jsonl"
    script.write_text('{"reply": {"text": "scripted"}}\n', encoding="utf-8")
    with LoopbackProcess(script=script) as proc, httpx2.Client(trust_env=False, timeout=10) as http:
        first = http.post(proc.url + "/v1/messages", json=request(), headers=HEADERS).json()
        proc.add_script('{"when": {"match": "ping"}, "reply": {"text": "pong"}}')
        second = http.post(proc.url + "/v1/messages", json=request("ping"), headers=HEADERS).json()
        seen = proc.requests()
        totals = proc.totals()
    assert first["content"][0]["text"] == "scripted"
    assert second["content"][0]["text"] == "pong"
    assert [r["body"]["messages"][0]["content"] for r in seen] == ["hello", "ping"]
    assert "x-api-key" not in seen[0]["headers"]
    assert totals["messages"] == 2 and totals["output_tokens"] > 0
    assert json.dumps(seen)  # plain JSON all the way down


def _post(url: str, body: dict[str, Any], beta: str = "") -> tuple[int, str, bytes]:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    if beta:
        headers["anthropic-beta"] = beta
    conn.request("POST", "/v1/messages?beta=true", json.dumps(body), headers)
    answer = conn.getresponse()
    data = answer.read()
    conn.close()
    return answer.status, answer.getheader("content-type") or "", data


def test_the_real_client_profile_streams_and_accepts_system_messages() -> None:
    body = {
        "model": "m",
        "max_tokens": 50,
        "stream": True,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "SessionStart hook additional context: x"},
        ],
    }
    with LoopbackAPI() as strict:
        status, _, data = _post(strict.url, body)
        assert status == 400 and b"messages.1.role" in data
    with LoopbackAPI(profile="real_client", default_text="OK from stub") as real:
        status, kind, data = _post(real.url, body)
        assert status == 200 and kind == "text/event-stream"
        events = [line[7:] for line in data.decode().splitlines() if line.startswith("event: ")]
        assert events[0] == "message_start" and events[-1] == "message_stop"
        assert "content_block_delta" in events and "OK from stub" in data.decode()
        assert real.requests[0].response["content"] == [{"type": "text", "text": "OK from stub"}]
        status, _, data = _post(real.url, {**body, "messages": [{"role": "system", "content": ""}]})
        assert status == 400


def test_the_real_client_profile_takes_tool_changes_under_their_beta() -> None:
    """Claude Code 2.1.332 adds a tool mid-conversation (a system message of
    ``tool_addition`` blocks) under the ``mid-conversation-tool-changes`` beta; refused with
    a 400 it retried four times before dropping the beta, seconds of every resumed turn."""
    added = {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "AskUser"}}
    removed = {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "Bash"}}
    defined = {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": {}}}
    beta = "claude-code-20250219,mid-conversation-tool-changes-2026-07-01"
    with LoopbackAPI(profile="real_client", default_text="OK") as real:

        def sent(blocks: list[dict[str, Any]], beta: str) -> tuple[int, bytes]:
            system = {"role": "system", "content": blocks}
            body = {"model": "m", "max_tokens": 50, "stream": True}
            messages = [{"role": "user", "content": "hi"}, system]
            status, _, data = _post(real.url, {**body, "messages": messages}, beta)
            return status, data

        assert sent([added, removed], beta)[0] == 200
        status, data = sent([added], "claude-code-20250219")
        assert status == 400 and b"messages.1.0: only text blocks" in data
        status, data = sent([defined], beta)
        assert status == 400 and b"messages.1.0.tool.definition" in data
        status, data = sent([{"type": "tool_removal", "tool": {}}], beta)
        assert status == 400 and b"messages.1.0.tool" in data


def test_the_real_client_profile_takes_a_settings_change_with_no_text() -> None:
    """Claude Code 2.1.331 sends ``{"role": "system", "content": [], "output_config": …}``
    (an effort change) when it resumes a compacted session; an empty system message without
    one is still refused."""
    change = {"role": "system", "content": [], "output_config": {"effort": "medium"}}
    body = {"model": "m", "max_tokens": 50, "stream": True}
    with LoopbackAPI(profile="real_client", default_text="OK") as real:
        status, _, _ = _post(
            real.url, {**body, "messages": [{"role": "user", "content": "hi"}, change]}
        )
        assert status == 200
        empty = {"role": "system", "content": []}
        status, _, data = _post(
            real.url, {**body, "messages": [{"role": "user", "content": "hi"}, empty]}
        )
        assert status == 400 and b"messages.1.content" in data
