"""memd's request as a Gemini ``generateContent`` call and its answer back (pure: no SDK).

Messages-shaped requests (:mod:`memd.llm.client`) become ``contents`` of ``user``/``model``
turns whose parts are ``text``, ``function_call`` and ``function_response`` (a result names
its function, found from the call it answers); the system prompt becomes
``system_instruction``; tools become one ``function_declarations`` tool with the input
schema as ``parameters_json_schema``; automatic function calling is off (memd runs its own
tools). The answer (the SDK's response dumped to plain data, snake_case) becomes an
:class:`~memd.llm.client.LLMReply`; a call's ``thought_signature`` rides along in its block
so the next turn can send it back, as Gemini asks.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memd.llm.client import LLMReply, Usage

SIGNATURE = "gemini_thought_signature"  # the key a tool_use block carries it under
FINISH = {"STOP": "end_turn", "MAX_TOKENS": "max_tokens"}
_ids = itertools.count(1)


def gemini_request(
    *,
    system: str | Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
    max_tokens: int,
    tools: Sequence[Mapping[str, Any]] | None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``(contents, config)`` for ``generate_content``."""
    names: dict[str, str] = {}  # tool_use id -> function name
    contents = []
    for message in messages:
        parts = _parts(message.get("content"), names)
        if parts:
            role = "model" if message.get("role") == "assistant" else "user"
            contents.append({"role": role, "parts": parts})
    config: dict[str, Any] = {
        "max_output_tokens": max_tokens,
        "automatic_function_calling": {"disable": True},
    }
    system_text = system if isinstance(system, str) else _texts(system)
    if system_text:
        config["system_instruction"] = system_text
    if tools:
        config["tools"] = [
            {
                "function_declarations": [
                    {
                        "name": t["name"],
                        "description": t.get("description", ""),
                        "parameters_json_schema": t.get("input_schema") or {"type": "object"},
                    }
                    for t in tools
                ]
            }
        ]
    return contents, config


def _texts(blocks: Sequence[Mapping[str, Any]] | Any) -> str:
    if isinstance(blocks, str):
        return blocks
    out = []
    for block in blocks or ():
        if block.get("type") == "text" and block.get("text"):
            out.append(str(block["text"]))
        elif block.get("type") in ("image", "document"):
            out.append(f"[{block['type']}]")
    return "\n\n".join(out)


def _parts(content: Any, names: dict[str, str]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for block in content or ():
        kind = block.get("type")
        if kind == "tool_use":
            names[str(block.get("id"))] = str(block.get("name"))
            args = block.get("input")
            call = {
                "id": block.get("id"),
                "name": block.get("name"),
                "args": args if isinstance(args, dict) else {"input": args},
            }
            part: dict[str, Any] = {"function_call": call}
            if block.get(SIGNATURE):
                part["thought_signature"] = block[SIGNATURE]
            parts.append(part)
        elif kind == "tool_result":
            ident = str(block.get("tool_use_id"))
            text = _texts(block.get("content") or "")
            key = "error" if block.get("is_error") else "output"
            answer = {"id": ident, "name": names.get(ident, "tool"), "response": {key: text}}
            parts.append({"function_response": answer})
        else:
            text = _texts([block])
            if text:
                parts.append({"text": text})
    return parts


def usage_of(raw: Any) -> Usage:
    """``usage_metadata`` as memd's usage: cached prompt tokens are cache reads, thinking is
    output."""
    if not isinstance(raw, Mapping):
        return Usage()
    prompt = _count(raw.get("prompt_token_count")) + _count(raw.get("tool_use_prompt_token_count"))
    cached = min(_count(raw.get("cached_content_token_count")), prompt)
    output = _count(raw.get("candidates_token_count")) + _count(raw.get("thoughts_token_count"))
    return Usage(prompt - cached, output, 0, cached)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@dataclass
class GeminiAnswer:
    """A response put together from one ``generate_content`` answer or a stream's chunks."""

    id: str = ""
    model: str = ""
    blocks: list[dict[str, Any]] = field(default_factory=list)
    finish: str | None = None
    usage: Usage = field(default_factory=Usage)

    def add(self, raw: Any) -> None:
        raw = _map(raw)
        self.id = self.id or _text(raw.get("response_id"))
        self.model = self.model or _text(raw.get("model_version"))
        if isinstance(raw.get("usage_metadata"), Mapping):
            self.usage = usage_of(raw["usage_metadata"])
        first = _map((_list(raw.get("candidates")) or [{}])[0])
        for part in map(_map, _list(_map(first.get("content")).get("parts"))):
            self._part(part)
        if first.get("finish_reason"):
            self.finish = _text(first["finish_reason"]) or "STOP"

    def _part(self, part: Mapping[str, Any]) -> None:
        call = part.get("function_call")
        if isinstance(call, Mapping):
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": _text(call.get("id")) or f"gcall_memd{next(_ids)}",
                "name": _text(call.get("name")),
                "input": call.get("args") if isinstance(call.get("args"), dict) else {},
            }
            if part.get("thought_signature"):
                block[SIGNATURE] = part["thought_signature"]
            self.blocks.append(block)
        elif isinstance(part.get("text"), str) and not part.get("thought"):
            if self.blocks and self.blocks[-1]["type"] == "text":
                self.blocks[-1]["text"] += part["text"]
            elif part["text"]:
                self.blocks.append({"type": "text", "text": part["text"]})

    @property
    def complete(self) -> bool:
        return self.finish is not None

    def reply(self, backend: str, seconds: float, priced: bool) -> LLMReply:
        calls = any(b["type"] == "tool_use" for b in self.blocks)
        stop = "tool_use" if calls else FINISH.get(self.finish or "STOP", "end_turn")
        if self.finish == "MAX_TOKENS":
            stop = "max_tokens"
        return LLMReply(
            self.id, self.model, self.blocks, stop, self.usage, backend, seconds, priced
        )


def retry_delay(details: Any) -> float | None:
    """The ``google.rpc.RetryInfo`` delay of an error body (``"37s"``), if it carries one."""
    error = _map(_map(details).get("error", details))
    for item in map(_map, _list(error.get("details"))):
        delay = item.get("retryDelay")
        if isinstance(delay, str) and delay.endswith("s"):
            try:
                seconds = float(delay[:-1])
            except ValueError:
                return None
            return seconds if 0 <= seconds < 86_400 else None
    return None


def _map(value: Any) -> Mapping[str, Any]:
    """``value`` if it is an object, else an empty one (a server's answer is hostile)."""
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def error_text(details: Any) -> str:
    """What the API said, from an error body (never more than a few hundred characters)."""
    inner = _map(_map(details).get("error", details))
    if isinstance(inner.get("message"), str):
        return str(inner["message"])[:500]
    try:
        return json.dumps(details)[:300] if details is not None else ""
    except (TypeError, ValueError):
        return ""
