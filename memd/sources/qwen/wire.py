"""Qwen Code's session lines as memd reads them (``@qwen-code/qwen-code`` 0.24.4, seen with the
real CLI: ``FORMAT.md`` beside this module): the JSON shape, optional everywhere, and the
content blocks each record becomes.

One record per line: ``{uuid, parentUuid, sessionId, timestamp, type, cwd, ...}`` with
``type`` ``user``, ``assistant``, ``tool_result`` or ``system`` (``subtype`` names which). A
message is Gemini's ``Content``: ``{role, parts}``, each part a ``text`` (``thought: true``:
the model's reasoning, not conversation), a ``functionCall`` ``{id, name, args}`` or a
``functionResponse`` ``{id, name, response}``. A call and its result that carry an id become
``tool_use`` and ``tool_result`` blocks; without one, text. Arguments and results stay raw
and become text: nothing nests in memd's content. Only what memd uses is typed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from memd.sources.common import Tokens, raw_text, text_block, tool_result, tool_use
from memd.transcript.model import Block

_NOTHING: Final = msgspec.Raw()
# What Qwen wraps a UserPromptSubmit hook's context in, as the last part of the prompt's
# record (its hooks doc: "a complete tagged context in the final part after at least one
# other part"): memd's own injection, not what the user said.
HOOK_OPEN: Final = "<qwen:user-prompt-submit-context>"
HOOK_CLOSE: Final = "</qwen:user-prompt-submit-context>"
COMPRESSION: Final = "chat_compression"


class FunctionCall(msgspec.Struct, gc=False):
    id: str | None = None
    name: str | None = None
    args: msgspec.Raw = _NOTHING


class FunctionResponse(msgspec.Struct, gc=False):
    id: str | None = None
    name: str | None = None
    response: msgspec.Raw = _NOTHING


class Part(msgspec.Struct, gc=False):
    text: str | None = None
    thought: bool | None = None
    functionCall: FunctionCall | None = None
    functionResponse: FunctionResponse | None = None


class Message(msgspec.Struct, gc=False):
    role: str | None = None
    parts: list[Part] | None = None


class UsageMetadata(msgspec.Struct, gc=False):
    promptTokenCount: Tokens | None = None
    candidatesTokenCount: Tokens | None = None


class CompressionInfo(msgspec.Struct, gc=False):
    triggerReason: str | None = None  # "manual" for /compress, else Qwen's own reasons


class SystemPayload(msgspec.Struct, gc=False):
    """What memd reads of a system record's payload: a compression's new history."""

    compressedHistory: list[Message] | None = None
    info: CompressionInfo | None = None


class Envelope(msgspec.Struct, gc=False):
    """What every record says of its place: enough to keep a record memd does not read as
    a link of the chain."""

    uuid: str | None = None
    parentUuid: str | None = None
    type: str | None = None
    subtype: str | None = None


class Record(Envelope, gc=False):
    sessionId: str | None = None
    isSidechain: bool | None = None  # a sub-agent's record (they have files of their own)
    timestamp: str | None = None
    cwd: str | None = None
    model: str | None = None
    message: Message | None = None
    usageMetadata: UsageMetadata | None = None
    systemPayload: SystemPayload | None = None


record_decoder: Final = msgspec.json.Decoder(Record)
envelope_decoder: Final = msgspec.json.Decoder(Envelope)


def blocks_of(content: Message | None, role: str) -> list[Block]:
    """A message's parts as content blocks (see the module docstring); a user message's
    trailing hook context is left out."""
    parts = list(content.parts or ()) if content is not None else []
    if role == "user" and len(parts) > 1 and is_hook_context(parts[-1]):
        parts.pop()
    blocks: list[Block] = []
    for part in parts:
        block = _block(part)
        if block is not None:
            blocks.append(block)
    return blocks


def is_hook_context(part: Part) -> bool:
    """Whether a part is a UserPromptSubmit hook's context as Qwen wraps it."""
    text = (part.text or "").strip()
    return text.startswith(HOOK_OPEN) and text.endswith(HOOK_CLOSE)


def _block(part: Part) -> Block | None:
    if part.thought is True:
        return None
    if part.text is not None:
        return text_block(part.text) if part.text else None
    call = part.functionCall
    if call is not None:
        arguments = raw_text(call.args)
        if call.id and call.name:
            return tool_use(call.id, call.name, arguments)
        return text_block(f"[called {call.name or '?'}({arguments})]")
    answer = part.functionResponse
    if answer is not None:
        output = raw_text(answer.response)
        if answer.id:
            return tool_result(answer.id, output)
        return text_block(f"[{answer.name or '?'} returned: {output}]")
    return None


def role_of(kind: str | None, content: Message | None) -> str | None:
    """The common role of a record (``user`` or ``assistant``), None for one that is not a
    message: a compressed history's entries say it by their ``role``."""
    if kind in ("user", "tool_result"):
        return "user"
    if kind == "assistant":
        return "assistant"
    if kind is None and content is not None:
        return {"user": "user", "model": "assistant"}.get(content.role or "")
    return None


def is_answer(blocks: Sequence[Block]) -> bool:
    """A model message with words and no tool call: the answer that ends the turn."""
    return not any(b["type"] == "tool_use" for b in blocks) and any(
        b["type"] == "text" and str(b.get("text", "")).strip() for b in blocks
    )
