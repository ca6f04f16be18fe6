"""Codex CLI's rollout lines as memd reads them (``@openai/codex`` 0.169; 0.171 writes the same
lines, checked with an exec, a shell call, resumes and auto-compaction): the JSON shape,
optional everywhere, and the content blocks each history item becomes.

One ``{timestamp, type, payload}`` object per line. Only what memd uses is typed; every other
field is skipped by the decoder without building objects. Tool arguments and outputs are
kept raw and become text: they never nest in memd's content.
"""

from __future__ import annotations

from typing import Final

import msgspec

from memd.sources.common import Tokens, as_json, raw_text, text_block, tool_result, tool_use
from memd.transcript.model import Block

_NOTHING: Final = msgspec.Raw()


class Part(msgspec.Struct, gc=False):
    type: str | None = None
    text: str | None = None


class Item(msgspec.Struct, gc=False):
    """A Responses API item: a message, a tool call or its output, reasoning."""

    type: str | None = None
    role: str | None = None
    content: list[Part] | None = None
    name: str | None = None
    namespace: str | None = None
    arguments: msgspec.Raw = _NOTHING
    input: msgspec.Raw = _NOTHING
    call_id: str | None = None
    output: msgspec.Raw = _NOTHING


class Usage(msgspec.Struct, gc=False):
    input_tokens: Tokens | None = None
    output_tokens: Tokens | None = None


class Info(msgspec.Struct, gc=False):
    last_token_usage: Usage | None = None
    model_context_window: Tokens | None = None


class Payload(Item, gc=False):
    """``payload`` of any line type: an item's fields, and those of ``session_meta``,
    ``turn_context``, ``event_msg`` and ``compacted`` that memd reads."""

    id: str | None = None
    cwd: str | None = None
    source: msgspec.Raw = _NOTHING
    parent_thread_id: str | None = None
    thread_source: str | None = None
    info: Info | None = None
    message: str | None = None
    replacement_history: list[Item] | None = None


class Metadata(msgspec.Struct, gc=False):
    compaction_output: bool | None = None


class Line(msgspec.Struct, gc=False):
    type: str | None = None
    timestamp: str | None = None
    payload: Payload | None = None
    metadata: Metadata | None = None


class _KindPayload(msgspec.Struct, gc=False):
    type: str | None = None


class Kind(msgspec.Struct, gc=False):
    """Just the line's kind: what a line whose other fields do not fit is about."""

    type: str | None = None
    payload: _KindPayload | None = None


line_decoder: Final = msgspec.json.Decoder(Line)
kind_decoder: Final = msgspec.json.Decoder(Kind)

USER_SIDE: Final = frozenset({"function_call_output", "custom_tool_call_output"})
MODEL_SIDE: Final = frozenset({"function_call", "custom_tool_call"})


def blocks_of(item: Item) -> tuple[str, list[Block]] | None:
    """The role and content blocks of a history item, or None for one that is no message
    of the conversation (developer instructions, reasoning, unknown types)."""
    kind = item.type
    if kind == "message":
        if item.role not in ("user", "assistant"):
            return None
        parts = item.content or []
        texts = [text_block(p.text) for p in parts if p.text is not None and p.text != ""]
        return item.role, texts
    if kind in MODEL_SIDE:
        name = item.name or ""
        if item.namespace and not name.startswith(item.namespace):
            name = f"{item.namespace}__{name}"
        arguments = item.arguments if kind == "function_call" else item.input
        return "assistant", [tool_use(item.call_id or "", name, raw_text(arguments))]
    if kind in USER_SIDE:
        return "user", [tool_result(item.call_id or "", output_text(item.output))]
    return None


def output_text(raw: msgspec.Raw) -> str:
    """A tool's output: a string, or the text of a list of ``input_text`` parts."""
    data = bytes(memoryview(raw))
    if data[:1] != b"[":
        return raw_text(raw)
    try:
        parts = msgspec.json.decode(data, type=list[Part])
    except (msgspec.DecodeError, RecursionError):
        return raw_text(raw)
    texts = [p.text for p in parts if p.text]
    return "\n".join(texts) if texts else as_json([])
