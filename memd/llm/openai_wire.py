"""memd's request in the Chat Completions API's shape and its answer back (pure: no SDK).

memd's jobs speak the Messages API's shape (:mod:`memd.llm.client`); an OpenAI-compatible
server (OpenAI, Ollama, vLLM, llama.cpp's server, LM Studio, OpenRouter) speaks Chat
Completions. :func:`chat_request` maps one to the other — the system prompt becomes the first
message, ``tool_use`` blocks become ``tool_calls``, each ``tool_result`` a ``tool`` message
right after its call, images and documents a placeholder, cache marks dropped — and
:func:`reply_from_chat` / :class:`StreamedAnswer` map a completion (whole, or as the chunks
of a stream) back to an :class:`~memd.llm.client.LLMReply`.

A tool call whose arguments are not a JSON object keeps them as the raw string: the runner
answers it with an error the model can read, as for any malformed call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memd.llm.client import LLMReply, Usage

FINISH_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
MAX_TOOL_CALLS = 64  # a stream that announces more is not followed further


def chat_request(
    *,
    model: str,
    system: str | Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
    max_tokens: int,
    tools: Sequence[Mapping[str, Any]] | None,
    limit_name: str = "max_tokens",
) -> dict[str, Any]:
    """The Chat Completions parameters for a Messages-shaped request."""
    out: list[dict[str, Any]] = []
    system_text = _text_of(system)
    if system_text:
        out.append({"role": "system", "content": system_text})
    for message in messages:
        out.extend(_chat_messages(message))
    params: dict[str, Any] = {"model": model, "messages": out, limit_name: max_tokens}
    if tools:
        params["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t.get("description", ""),
                    "parameters": t.get("input_schema") or {"type": "object"},
                },
            }
            for t in tools
        ]
    return params


def _text_of(content: str | Sequence[Mapping[str, Any]] | Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or ():
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind in ("image", "document"):
            parts.append(f"[{kind}]")
    return "\n\n".join(p for p in parts if p)


def _chat_messages(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    role, content = message.get("role"), message.get("content")
    if role == "assistant":
        return [_assistant(content)]
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    out: list[dict[str, Any]] = []
    rest: list[Mapping[str, Any]] = []
    for block in content or ():
        if block.get("type") == "tool_result":
            text = _text_of(block.get("content") or "")
            if block.get("is_error"):
                text = f"Error: {text}"
            out.append({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text})
        else:
            rest.append(block)
    text = _text_of(rest)
    if text or not out:
        out.append({"role": "user", "content": text})
    return out


def _assistant(content: Any) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    calls = [
        {
            "id": block.get("id"),
            "type": "function",
            "function": {
                "name": block.get("name"),
                "arguments": _arguments(block.get("input")),
            },
        }
        for block in content or ()
        if block.get("type") == "tool_use"
    ]
    message: dict[str, Any] = {"role": "assistant", "content": _text_of(content) or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value if value is not None else {})


def tool_input(arguments: str) -> dict[str, Any] | str:
    """A call's arguments as the tool's input: the object, else the raw text."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except (ValueError, RecursionError):
        return arguments
    return value if isinstance(value, dict) else arguments


def usage_of(raw: Any) -> Usage:
    """Chat Completions usage as memd's: cached prompt tokens are cache reads."""
    if not isinstance(raw, Mapping):
        return Usage()
    prompt = _count(raw.get("prompt_tokens"))
    details = raw.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
    cached = min(cached, prompt)
    return Usage(prompt - cached, _count(raw.get("completion_tokens")), 0, cached)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def content_blocks(text: str, calls: Sequence[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """Reply blocks from the answer's text and its ``(id, name, arguments)`` calls."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for number, (call_id, name, arguments) in enumerate(calls):
        blocks.append(
            {
                "type": "tool_use",
                "id": call_id or f"call_memd{number}",
                "name": name,
                "input": tool_input(arguments),
            }
        )
    return blocks


def _map(value: Any) -> Mapping[str, Any]:
    """``value`` if it is an object, else an empty one: a server's answer is hostile, and a
    field of the wrong kind reads as absent."""
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def reply_from_chat(raw: Any, backend: str, seconds: float, priced: bool) -> LLMReply:
    """An :class:`LLMReply` from a whole ``chat.completion`` (decoded to plain data)."""
    raw = _map(raw)
    choice = _map((_list(raw.get("choices")) or [{}])[0])
    message = _map(choice.get("message"))
    calls = [
        (
            _text(c.get("id")),
            _text(_map(c.get("function")).get("name")),
            _text(_map(c.get("function")).get("arguments")),
        )
        for c in map(_map, _list(message.get("tool_calls"))[:MAX_TOOL_CALLS])
    ]
    finish = _text(choice.get("finish_reason")) or "stop"
    return LLMReply(
        id=_text(raw.get("id")),
        model=_text(raw.get("model")),
        content=content_blocks(_text(message.get("content")), calls),
        stop_reason=FINISH_REASONS.get(finish, "end_turn"),
        usage=usage_of(raw.get("usage")),
        backend=backend,
        seconds=seconds,
        priced=priced,
    )


@dataclass
class StreamedAnswer:
    """A streamed completion put together chunk by chunk (:meth:`add`, then :meth:`reply`)."""

    id: str = ""
    model: str = ""
    text: list[str] = field(default_factory=list)
    calls: dict[int, list[str]] = field(default_factory=dict)  # index -> [id, name, arguments]
    finish: str | None = None
    usage: Usage = field(default_factory=Usage)

    def add(self, chunk: Any) -> None:
        chunk = _map(chunk)
        self.id = self.id or _text(chunk.get("id"))
        self.model = self.model or _text(chunk.get("model"))
        if isinstance(chunk.get("usage"), Mapping):
            self.usage = usage_of(chunk["usage"])
        for choice in map(_map, _list(chunk.get("choices"))):
            if choice.get("index", 0) != 0:
                continue
            delta = _map(choice.get("delta"))
            self.text.append(_text(delta.get("content")))
            for call in map(_map, _list(delta.get("tool_calls"))):
                self._call(call)
            if choice.get("finish_reason"):
                self.finish = _text(choice["finish_reason"]) or "stop"

    def _call(self, call: Mapping[str, Any]) -> None:
        index = call.get("index", len(self.calls))
        if not isinstance(index, int) or not 0 <= index < MAX_TOOL_CALLS:
            return
        slot = self.calls.setdefault(index, ["", "", ""])
        function = _map(call.get("function"))
        slot[0] = slot[0] or _text(call.get("id"))
        slot[1] = slot[1] or _text(function.get("name"))
        slot[2] += _text(function.get("arguments"))

    @property
    def complete(self) -> bool:
        """The server said how the answer ended (a cut stream never does)."""
        return self.finish is not None

    def reply(self, backend: str, seconds: float, priced: bool) -> LLMReply:
        calls = [(c[0], c[1], c[2]) for _, c in sorted(self.calls.items())]
        return LLMReply(
            id=self.id,
            model=self.model,
            content=content_blocks("".join(self.text), calls),
            stop_reason=FINISH_REASONS.get(self.finish or "stop", "end_turn"),
            usage=self.usage,
            backend=backend,
            seconds=seconds,
            priced=priced,
        )
