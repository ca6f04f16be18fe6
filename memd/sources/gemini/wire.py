"""Gemini CLI's chat lines as memd reads them (``@google/gemini-cli`` 0.61): the JSON shape,
optional everywhere, and the content blocks each message becomes.

A line is a header (``sessionId``, ``kind``), a message record (``id``, ``type``: ``user`` or
``gemini``, ``content``, ``toolCalls``, ``tokens``), ``{"$set": {...}}`` (``messages``: the
whole history) or ``{"$rewindTo": id}``. Tool calls and results become text blocks: after a
compression a call keeps no id while its result does, and a resume's history holds each
result twice, so pairing them as tool blocks would hold the conversation back; as text the
model still reads what was called and what came back.
"""

from __future__ import annotations

from typing import Final

import msgspec

from memd.sources.common import Tokens, as_json, raw_text, text_block
from memd.transcript.model import Block, Outline

_NOTHING: Final = msgspec.Raw()


class FunctionCall(msgspec.Struct, gc=False):
    name: str | None = None
    args: msgspec.Raw = _NOTHING


class FunctionResponse(msgspec.Struct, gc=False):
    name: str | None = None
    response: msgspec.Raw = _NOTHING


class Part(msgspec.Struct, gc=False):
    text: str | None = None
    functionCall: FunctionCall | None = None
    functionResponse: FunctionResponse | None = None


class ToolCall(msgspec.Struct, gc=False):
    name: str | None = None
    args: msgspec.Raw = _NOTHING


class TokenFigures(msgspec.Struct, gc=False):
    input: Tokens | None = None
    output: Tokens | None = None


class Message(msgspec.Struct, gc=False):
    id: str | None = None
    type: str | None = None
    timestamp: str | None = None
    content: str | list[Part] | None = None
    toolCalls: list[ToolCall] | None = None
    tokens: TokenFigures | None = None


class SetFields(msgspec.Struct, gc=False):
    messages: list[msgspec.Raw] | None = None


class Line(Message, gc=False):
    """Any line: a message's fields, a header's, ``$set`` and ``$rewindTo``."""

    sessionId: str | None = None
    kind: str | None = None
    set: SetFields | None = msgspec.field(default=None, name="$set")
    rewind_to: str | None = msgspec.field(default=None, name="$rewindTo")


line_decoder: Final = msgspec.json.Decoder(Line)
message_decoder: Final = msgspec.json.Decoder(Message)
set_decoder: Final = msgspec.json.Decoder(Line)

ROLES: Final = {"user": "user", "gemini": "assistant"}


def blocks_of(message: Message) -> list[Block]:
    """A message's content as text blocks (see the module docstring)."""
    content = message.content
    blocks: list[Block] = []
    if isinstance(content, str):
        if content:
            blocks.append(text_block(content))
    elif content is not None:
        for part in content:
            text = _part_text(part)
            if text:
                blocks.append(text_block(text))
    for call in message.toolCalls or ():
        blocks.append(text_block(f"[called {call.name or '?'}({raw_text(call.args)})]"))
    return blocks


def outline_of(message: Message) -> Outline:
    """The outline of :func:`blocks_of`, without building the blocks (a tool call's or
    result's text is never blank): what reading a line needs."""
    content = message.content
    flags: list[bool] = []
    if isinstance(content, str):
        if content:
            flags.append(not content.isspace())
    elif content is not None:
        for part in content:
            if part.text is not None:
                if part.text:
                    flags.append(not part.text.isspace())
            elif part.functionCall is not None or part.functionResponse is not None:
                flags.append(True)
    flags += [True] * len(message.toolCalls or ())
    key = tuple(flags)
    shared = _OUTLINES.get(key)
    if shared is None:
        shared = tuple((i, "text", None, ok) for i, ok in enumerate(flags))
        if len(_OUTLINES) < _OUTLINES_MAX:
            _OUTLINES[key] = shared
    return shared


_OUTLINES: dict[tuple[bool, ...], Outline] = {}
_OUTLINES_MAX: Final = 1024


def _part_text(part: Part) -> str:
    if part.text is not None:
        return part.text
    if part.functionCall is not None:
        call = part.functionCall
        return f"[called {call.name or '?'}({raw_text(call.args)})]"
    if part.functionResponse is not None:
        answer = part.functionResponse
        return f"[{answer.name or '?'} returned: {raw_text(answer.response)}]"
    return ""


def is_turn_end(message: Message, outline: Outline) -> bool:
    """A model message with words and no tool call: the model's answer ends the turn."""
    return message.type == "gemini" and not message.toolCalls and any(r[3] for r in outline)


def snapshot(messages: list[Message]) -> str | None:
    """The id of the state snapshot a compressed ``$set`` history opens with, or None."""
    for m in messages[:3]:
        if isinstance(m.content, list) and any(
            p.text is not None and p.text.startswith("<state_snapshot>") for p in m.content
        ):
            return m.id
    return None


__all__ = ["ROLES", "as_json", "blocks_of", "is_turn_end", "snapshot"]
