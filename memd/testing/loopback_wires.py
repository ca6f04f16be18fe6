"""The other wires the loopback server speaks (issue 34): OpenAI's Chat Completions, its
Responses API (Codex CLI's: :mod:`.loopback_responses`) and Gemini's ``generateContent``,
mapped onto the Messages API that :class:`~.loopback.LoopbackAPI`
scripts, checks and bills (pure: no I/O).

A request on another wire is read into a Messages body (:func:`messages_from_chat`,
:func:`messages_from_gemini`), answered by the same pipeline (faults, validation with
:mod:`.api_rules` — so a request whose tool calls and results do not pair is refused as the
real server would — context limit, rules, queue), and the answer written back in that wire's
shape: a completion or its server-sent chunks, a ``GenerateContentResponse`` or its
``alt=sse`` events, and errors in each API's own shape (:class:`WireError`).

``stop_reason="cut_stream"`` on a scripted reply is a fault: a streamed answer stops after
its content without saying how it finished (no ``finish_reason``, no ``[DONE]``), as when a
server dies mid-answer.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from memd.testing import loopback_responses as responses
from memd.testing.loopback_http import Events, Streamed
from memd.testing.loopback_replies import ApiError, Message, Reply

Wire = Literal["messages", "chat", "responses", "gemini"]
CUT = "cut_stream"
_ids = itertools.count(1)

GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


MODEL_LISTS = ("/v1/models", "/v1beta/models")


def model_list(path: str, models: Sequence[str]) -> dict[str, Any]:
    """``GET /v1/models`` (OpenAI's shape) or ``GET /v1beta/models`` (Gemini's)."""
    if path.startswith("/v1beta"):
        return {"models": [{"name": f"models/{m}", "displayName": m} for m in models]}
    return {
        "object": "list",
        "data": [{"id": m, "object": "model", "owned_by": "loopback"} for m in models],
    }


def as_messages(wire: Wire, path: str, body: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The Messages path and body a request on ``wire`` stands for."""
    if wire == "chat":
        return "/v1/messages", messages_from_chat(body)
    if wire == "responses":
        return "/v1/messages", responses.messages_from_responses(body)
    counting = path.endswith(":countTokens")
    translated = messages_from_gemini(path, body)
    return ("/v1/messages/count_tokens" if counting else "/v1/messages"), translated


def on_wire(wire: Wire | None, path: str, reply: Reply, payload: Any) -> tuple[Reply, Any]:
    """A Messages-shaped answer (as the pipeline made it) in ``wire``'s shape."""
    if wire in (None, "messages"):
        return reply, payload
    if isinstance(reply, ApiError):
        return as_wire_error(reply, wire), None
    if not isinstance(reply, Message):
        return reply, payload
    if path.endswith(":countTokens"):
        return reply, {"totalTokens": payload.get("input_tokens", 0)}
    streamed = isinstance(payload, Streamed)
    message = payload.message if isinstance(payload, Streamed) else payload
    if wire == "chat":
        return (
            (reply, Events(chat_chunks(message), tail="[DONE]"))
            if streamed
            else (reply, chat_completion(message))
        )
    if wire == "responses":
        return (
            (reply, Events(responses.response_events(message)))
            if streamed
            else (reply, responses.response_object(message))
        )
    return (reply, Events(gemini_events(message))) if streamed else (reply, gemini_answer(message))


def wire_of(path: str) -> Wire | None:
    """Which wire a model request's path is on (None: not a model request)."""
    if path.rstrip("/").endswith("/chat/completions"):
        return "chat"
    if responses.is_responses(path):
        return "responses"
    if path.startswith(("/v1beta/models/", "/v1/models/")) and ":" in path:
        return "gemini"
    if path in ("/v1/messages", "/v1/messages/count_tokens"):
        return "messages"
    return None


@dataclass(frozen=True)
class WireError(ApiError):
    """An error answer in another API's shape (same status and headers)."""

    wire: Wire = "chat"

    def body(self, request_id: str) -> dict[str, Any]:
        if self.wire == "gemini":
            status = GEMINI_STATUS.get(
                self.status, "INTERNAL" if self.status >= 500 else "FAILED_PRECONDITION"
            )
            error: dict[str, Any] = {"code": self.status, "message": self.message, "status": status}
            delay = dict(self.headers).get("retry-after")
            if delay is not None:
                error["details"] = [
                    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{delay}s"}
                ]
            return {"error": error}
        code = self.error_code or (
            "context_length_exceeded" if "context length" in self.message else None
        )
        kind = {429: "rate_limit_exceeded", 401: "invalid_request_error"}.get(
            self.status, self.error_type
        )
        return {"error": {"message": self.message, "type": kind, "param": None, "code": code}}


def as_wire_error(error: ApiError, wire: Wire) -> ApiError:
    """``error`` in ``wire``'s shape; a prompt-too-long in that server's own words."""
    if wire == "messages":
        return error
    message = error.message
    figures = re.match(r"prompt is too long: (\d+) tokens > (\d+) maximum", message)
    if figures is not None:
        actual, limit = figures.groups()
        message = (
            f"The input token count ({actual}) exceeds the maximum number of tokens "
            f"allowed ({limit})."
            if wire == "gemini"
            else f"This model's maximum context length is {limit} tokens. However, your "
            f"messages resulted in {actual} tokens. Please reduce the length of the messages."
        )
    return WireError(
        error.status,
        error.error_type,
        message,
        error.headers,
        error.delay_s,
        error.error_code,
        wire,
    )


# ---------------------------------------------------------------------------------------------
# Chat Completions


def messages_from_chat(body: Mapping[str, Any]) -> dict[str, Any]:
    """A Chat Completions request as the Messages request it stands for."""
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    for m in body.get("messages") or ():
        role, content = m.get("role"), m.get("content")
        text = content if isinstance(content, str) else _chat_text(content)
        if role in ("system", "developer"):
            system.append(text)
        elif role == "tool":
            result = {"type": "tool_result", "tool_use_id": m.get("tool_call_id"), "content": text}
            _append(messages, "user", [result])
        elif role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            for call in m.get("tool_calls") or ():
                function = call.get("function") or {}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.get("id"),
                        "name": function.get("name"),
                        "input": _arguments(function.get("arguments")),
                    }
                )
            _append(messages, "assistant", blocks)
        else:
            _append(messages, "user", [{"type": "text", "text": text}])
    out: dict[str, Any] = {
        "model": body.get("model"),
        "messages": messages,
        "max_tokens": body.get("max_completion_tokens") or body.get("max_tokens") or 4096,
    }
    if system:
        out["system"] = "\n\n".join(system)
    if body.get("tools"):
        out["tools"] = [
            {
                "name": (t.get("function") or {}).get("name"),
                "description": (t.get("function") or {}).get("description", ""),
                "input_schema": (t.get("function") or {}).get("parameters") or {"type": "object"},
            }
            for t in body["tools"]
        ]
    if body.get("stream"):
        out["stream"] = True
    return out


def _chat_text(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))


_arguments = responses.arguments_of  # shared by every wire that names calls by JSON text
_append = responses.append_blocks


def chat_completion(message: Mapping[str, Any]) -> dict[str, Any]:
    """A Messages answer as a whole ``chat.completion``."""
    text, calls = _split(message.get("content") or ())
    reply: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        reply["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": _args_text(c)},
            }
            for c in calls
        ]
    return {
        "id": f"chatcmpl-loop{next(_ids)}",
        "object": "chat.completion",
        "created": 0,
        "model": message.get("model"),
        "choices": [{"index": 0, "message": reply, "finish_reason": _finish(message, calls)}],
        "usage": _chat_usage(message.get("usage") or {}),
    }


def chat_chunks(message: Mapping[str, Any]) -> tuple[tuple[str | None, dict[str, Any]], ...]:
    """The same answer as the ``chat.completion.chunk`` events of a stream (with usage, as
    ``stream_options.include_usage`` asks); a ``cut_stream`` reply stops before its end."""
    ident, model = f"chatcmpl-loop{next(_ids)}", message.get("model")

    def chunk(
        delta: dict[str, Any], finish: str | None = None, **extra: Any
    ) -> tuple[None, dict[str, Any]]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        base = {"id": ident, "object": "chat.completion.chunk", "created": 0, "model": model}
        return None, {**base, "choices": [choice] if delta is not None else [], **extra}

    text, calls = _split(message.get("content") or ())
    events = [chunk({"role": "assistant", "content": ""})]
    half = len(text) // 2
    for piece in (text[:half], text[half:]):
        if piece:
            events.append(chunk({"content": piece}))
    for index, call in enumerate(calls):
        head = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["name"], "arguments": ""},
        }
        events.append(chunk({"tool_calls": [head]}))
        events.append(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": _args_text(call)}}]})
        )
    if message.get("stop_reason") == CUT:
        return tuple(events)
    events.append(chunk({}, _finish(message, calls)))
    _, last = chunk({})
    events.append((None, {**last, "choices": [], "usage": _chat_usage(message.get("usage") or {})}))
    return tuple(events)


def _split(content: Sequence[Mapping[str, Any]]) -> tuple[str, list[Mapping[str, Any]]]:
    text = "".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
    return text, [b for b in content if b.get("type") == "tool_use"]


def _args_text(call: Mapping[str, Any]) -> str:
    value = call.get("input")
    return value if isinstance(value, str) else json.dumps(value)


def _finish(message: Mapping[str, Any], calls: Sequence[Any]) -> str:
    if message.get("stop_reason") == "max_tokens":
        return "length"
    return "tool_calls" if calls else "stop"


def prompt_output(usage: Mapping[str, Any]) -> tuple[int, int, int]:
    """A Messages usage as (prompt tokens, of which cached, output tokens)."""
    cached = int(usage.get("cache_read_input_tokens") or 0)
    written = int(usage.get("cache_creation_input_tokens") or 0)
    prompt = int(usage.get("input_tokens") or 0) + written + cached
    return prompt, cached, int(usage.get("output_tokens") or 0)


def _chat_usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    prompt, cached, output = prompt_output(usage)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt + output,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


# ---------------------------------------------------------------------------------------------
# Gemini generateContent


def messages_from_gemini(path: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """A ``generateContent`` request (``/v1beta/models/<model>:<method>``) as a Messages one."""
    model = path.split("/models/", 1)[1].rsplit(":", 1)[0]
    messages: list[dict[str, Any]] = []
    called: dict[str, list[str]] = {}  # function name -> ids of its calls not answered yet
    for content in body.get("contents") or ():
        role = "assistant" if content.get("role") == "model" else "user"
        blocks = [_gemini_block(p, called) for p in content.get("parts") or ()]
        _append(messages, role, [b for b in blocks if b is not None])
    out: dict[str, Any] = {"model": model, "messages": messages}
    config = body.get("generationConfig") or {}
    out["max_tokens"] = config.get("maxOutputTokens") or 8192
    system = body.get("systemInstruction") or {}
    text = "\n".join(str(p.get("text", "")) for p in system.get("parts") or ())
    if text:
        out["system"] = text
    declarations = [d for t in body.get("tools") or () for d in t.get("functionDeclarations") or ()]
    if declarations:
        out["tools"] = [
            {
                "name": d.get("name"),
                "description": d.get("description", ""),
                "input_schema": d.get("parametersJsonSchema")
                or d.get("parameters")
                or {"type": "object"},
            }
            for d in declarations
        ]
    if path.endswith(":streamGenerateContent"):
        out["stream"] = True
    return out


def _gemini_block(part: Mapping[str, Any], called: dict[str, list[str]]) -> dict[str, Any] | None:
    if "text" in part and not part.get("thought"):
        return {"type": "text", "text": part["text"]} if part["text"] else None
    if "functionCall" in part:
        call = part["functionCall"]
        ident = call.get("id") or f"gcall_{next(_ids)}"
        called.setdefault(str(call.get("name")), []).append(ident)
        return {
            "type": "tool_use",
            "id": ident,
            "name": call.get("name"),
            "input": call.get("args") or {},
        }
    if "functionResponse" in part:
        answer = part["functionResponse"]
        pending = called.get(str(answer.get("name"))) or [""]
        ident = answer.get("id") or pending[0]
        if ident in pending:
            pending.remove(ident)
        response = answer.get("response")
        text = json.dumps(response) if not isinstance(response, str) else response
        return {"type": "tool_result", "tool_use_id": ident, "content": text}
    return None


def gemini_answer(message: Mapping[str, Any]) -> dict[str, Any]:
    """A Messages answer as one ``GenerateContentResponse``."""
    parts: list[dict[str, Any]] = []
    for block in message.get("content") or ():
        if block.get("type") == "text" and block.get("text"):
            parts.append({"text": block["text"]})
        elif block.get("type") == "tool_use":
            args = block.get("input")
            parts.append(
                {
                    "functionCall": {
                        "id": block.get("id"),
                        "name": block.get("name"),
                        "args": args if isinstance(args, dict) else {"raw": args},
                    }
                }
            )
    prompt, cached, output = prompt_output(message.get("usage") or {})
    finish = "MAX_TOKENS" if message.get("stop_reason") == "max_tokens" else "STOP"
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": prompt,
            "candidatesTokenCount": output,
            "totalTokenCount": prompt + output,
            "cachedContentTokenCount": cached,
        },
        "modelVersion": str(message.get("model") or "loopback"),
        "responseId": f"gresp-loop{next(_ids)}",
    }


def gemini_events(message: Mapping[str, Any]) -> tuple[tuple[str | None, dict[str, Any]], ...]:
    """The same answer as ``alt=sse`` events: the parts first, then the finish and usage; a
    ``cut_stream`` reply stops before its last event."""
    whole = gemini_answer(message)
    candidate = whole["candidates"][0]
    first = {
        "candidates": [{**candidate, "finishReason": None}],
        "modelVersion": whole["modelVersion"],
    }
    last = {
        "candidates": [
            {
                "content": {"role": "model", "parts": []},
                "finishReason": candidate["finishReason"],
                "index": 0,
            }
        ],
        "usageMetadata": whole["usageMetadata"],
        "modelVersion": whole["modelVersion"],
    }
    if message.get("stop_reason") == CUT:
        return ((None, first),)
    return ((None, first), (None, last))
