"""What a server sends is hostile (issue 34): the rooms' decoders of an answer read any JSON
whatever its shape, a field of the wrong kind as absent, and never raise."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from memd.llm.gemini_wire import GeminiAnswer, error_text, retry_delay
from memd.llm.gemini_wire import usage_of as gemini_usage
from memd.llm.openai_wire import StreamedAnswer, reply_from_chat, tool_input
from memd.llm.openai_wire import usage_of as chat_usage

KEYS = [
    "choices",
    "delta",
    "tool_calls",
    "function",
    "index",
    "content",
    "usage",
    "message",
    "finish_reason",
    "id",
    "name",
    "arguments",
    "candidates",
    "parts",
    "function_call",
    "text",
    "usage_metadata",
    "args",
    "error",
    "details",
    "retryDelay",
    "prompt_tokens",
    "prompt_token_count",
    "cached_content_token_count",
    "prompt_tokens_details",
]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)
    ),
    max_leaves=14,
)


@given(st.lists(JSON, max_size=4))
@settings(max_examples=1500, deadline=None)
def test_no_answer_or_stream_of_chunks_makes_a_decoder_raise(chunks: list[Any]) -> None:
    streamed, gemini = StreamedAnswer(), GeminiAnswer()
    for chunk in chunks:
        streamed.add(chunk)
        gemini.add(chunk)
        reply_from_chat(chunk, "openai", 0.0, True)
        chat_usage(chunk)
        gemini_usage(chunk)
        retry_delay(chunk)
        error_text(chunk)
    for reply in (streamed.reply("openai", 0.0, True), gemini.reply("gemini", 0.0, True)):
        assert all(b["type"] in ("text", "tool_use") for b in reply.content)
        assert reply.usage.input_tokens >= 0 and reply.usage.output_tokens >= 0


@given(st.text(max_size=50))
def test_a_calls_arguments_are_an_object_or_the_text_as_it_came(arguments: str) -> None:
    value = tool_input(arguments)
    assert isinstance(value, dict) or value == arguments


def test_a_stream_is_put_together_across_chunks() -> None:
    answer = StreamedAnswer()
    for chunk in (
        {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"content": "Hel"}}]},
        {"choices": [{"index": 0, "delta": {"content": "lo"}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "t1",
                                "function": {"name": "Edit", "arguments": '{"a": '},
                            }
                        ]
                    },
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]},
                    "finish_reason": "tool_calls",
                }
            ]
        },
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 10,
                "completion_tokens": 3,
                "prompt_tokens_details": {"cached_tokens": 4},
            },
        },
    ):
        answer.add(chunk)
    reply = answer.reply("local", 1.0, False)
    assert reply.text == "Hello" and reply.stop_reason == "tool_use"
    assert reply.tool_uses == [{"type": "tool_use", "id": "t1", "name": "Edit", "input": {"a": 1}}]
    assert (reply.usage.input_tokens, reply.usage.cache_read_input_tokens) == (6, 4)
