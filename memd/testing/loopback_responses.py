"""OpenAI's Responses API on the loopback server (``POST /v1/responses``, what Codex CLI
speaks), mapped onto the Messages pipeline that :class:`~.loopback.LoopbackAPI` scripts,
checks and bills, as :mod:`.loopback_wires` does for Chat Completions and Gemini (pure: no
I/O).

A request's ``instructions`` and its ``developer``/``system`` messages are the system prompt;
``user`` and ``assistant`` messages their turns; a ``function_call`` item is a ``tool_use``
and its ``function_call_output`` the ``tool_result``; ``function`` tools are tools (Codex's
freeform ones, ``apply_patch`` and code mode's ``exec``, come and go as a ``custom_tool_call``:
a ``tool_use`` whose input is ``{"__freeform__": text}``). The answer goes back as the events Codex
reads (``response.created``, one ``response.output_item.done`` per message or call,
``response.completed`` with usage), or ``response.incomplete`` when it stopped at its output
limit; a ``cut_stream`` reply ends before either, as a server dying mid-answer would.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any

CUT = "cut_stream"
FREEFORM = "__freeform__"  # a tool_use input that is a custom tool's text
_ids = itertools.count(1)


def is_responses(path: str) -> bool:
    return path.rstrip("/").endswith("/responses")


def messages_from_responses(body: Mapping[str, Any]) -> dict[str, Any]:
    """A Responses request as the Messages request it stands for."""
    system: list[str] = []
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        system.append(body["instructions"])
    messages: list[dict[str, Any]] = []
    for item in body.get("input") or ():
        if not isinstance(item, Mapping):
            continue
        kind, role = item.get("type", "message"), item.get("role")
        if kind == "message" and role in ("developer", "system"):
            system.append(_text(item.get("content")))
        elif kind == "message" and role in ("user", "assistant"):
            text = _text(item.get("content"))
            if text:
                append_blocks(messages, str(role), [{"type": "text", "text": text}])
        elif kind in ("function_call", "custom_tool_call"):
            given = item.get("arguments") if kind == "function_call" else None
            use = {
                "type": "tool_use",
                "id": item.get("call_id"),
                "name": item.get("name"),
                "input": arguments_of(given)
                if given is not None
                else {FREEFORM: item.get("input")},
            }
            append_blocks(messages, "assistant", [use])
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            text = output if isinstance(output, str) else json.dumps(output)
            result = {"type": "tool_result", "tool_use_id": item.get("call_id"), "content": text}
            append_blocks(messages, "user", [result])
    out: dict[str, Any] = {
        "model": body.get("model"),
        "messages": messages,
        "max_tokens": body.get("max_output_tokens") or 8192,
    }
    if system:
        out["system"] = "\n\n".join(s for s in system if s)
    tools = [t for t in body.get("tools") or () if isinstance(t, Mapping)]
    functions = [t for t in tools if t.get("type") == "function" and t.get("name")]
    if functions:
        out["tools"] = [
            {
                "name": t["name"],
                "description": t.get("description") or "",
                "input_schema": t.get("parameters") or {"type": "object"},
            }
            for t in functions
        ]
    if body.get("stream"):
        out["stream"] = True
    return out


def arguments_of(raw: Any) -> Any:
    """A call's JSON arguments as an object (anything else kept, as the model sent it)."""
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {"__unparsed__": raw}
    return value if isinstance(value, dict) else {"__unparsed__": raw}


def append_blocks(messages: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """``blocks`` as the next turn of ``role`` (joined to the last one when it is ``role``'s)."""
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": role, "content": blocks})


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else ()
    return "\n".join(str(p.get("text", "")) for p in parts if isinstance(p, Mapping))


def response_items(message: Mapping[str, Any], ident: str) -> list[dict[str, Any]]:
    """A Messages answer's blocks as Responses output items."""
    items: list[dict[str, Any]] = []
    text = "".join(str(b.get("text", "")) for b in message.get("content") or () if _is(b, "text"))
    if text:
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "id": f"msg_{ident}",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    for number, block in enumerate(b for b in message.get("content") or () if _is(b, "tool_use")):
        args = block.get("input")
        call = {"id": f"fc_{ident}_{number}", "status": "completed", "call_id": block.get("id")}
        if isinstance(args, Mapping) and set(args) == {FREEFORM}:
            call.update(type="custom_tool_call", name=block.get("name"), input=args[FREEFORM])
        else:
            arguments = args if isinstance(args, str) else json.dumps(args)
            call.update(type="function_call", name=block.get("name"), arguments=arguments)
        items.append(call)
    return items


def _is(block: Any, kind: str) -> bool:
    return isinstance(block, Mapping) and block.get("type") == kind


def responses_usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    cached = int(usage.get("cache_read_input_tokens") or 0)
    prompt = (
        int(usage.get("input_tokens") or 0)
        + int(usage.get("cache_creation_input_tokens") or 0)
        + cached
    )
    output = int(usage.get("output_tokens") or 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + output,
    }


def response_object(message: Mapping[str, Any]) -> dict[str, Any]:
    """The whole ``response`` object of a non-streamed answer."""
    ident = f"resp_loop{next(_ids)}"
    limited = message.get("stop_reason") == "max_tokens"
    out: dict[str, Any] = {
        "id": ident,
        "object": "response",
        "model": message.get("model"),
        "status": "incomplete" if limited else "completed",
        "output": response_items(message, ident),
        "usage": responses_usage(message.get("usage") or {}),
    }
    if limited:
        out["incomplete_details"] = {"reason": "max_output_tokens"}
    return out


def response_events(message: Mapping[str, Any]) -> tuple[tuple[str | None, dict[str, Any]], ...]:
    """The same answer as the Responses API's server-sent events."""
    whole = response_object(message)
    head = {k: v for k, v in whole.items() if k not in ("output", "usage")}
    events: list[tuple[str | None, dict[str, Any]]] = [
        ("response.created", {"type": "response.created", "response": {**head, "output": []}})
    ]
    for index, item in enumerate(whole["output"]):
        done = {"type": "response.output_item.done", "output_index": index, "item": item}
        events.append(("response.output_item.done", done))
    if message.get("stop_reason") == CUT:
        return tuple(events)
    end = "response.incomplete" if whole["status"] == "incomplete" else "response.completed"
    events.append((end, {"type": end, "response": whole}))
    return tuple(events)
