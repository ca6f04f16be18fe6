"""What an extraction run is sent: the cost-aware input (issue 4 part 5). Pure.

Two strategies:

``full``
    What Claude Code does: a fork of the whole conversation as API messages, then one user
    message with the instruction. The request grows with the session; caching helps only
    while the prefix stays byte-identical and warm.

``delta`` (default)
    The current notes plus only the messages the notes have not seen yet — those after the
    *cursor*, the last message the previous run covered — with ``overlap_messages`` before
    it for continuity, rendered as one compact text transcript in a single user message.
    Thinking is left out, tool inputs and results are cut to a sane size, and a backlog
    larger than ``chunk_tokens`` is split into chunks that are run one after the other, each
    on the notes the previous one left. ``bench/extraction_cost.py`` measures the two.

Everything that leaves the machine goes through :mod:`memd.privacy` first (R-B4):
``<private>`` spans and likely secrets are removed from every string, images and documents
become placeholders.

Each chunk says which message it covers up to (``covered_uuid``) and whether it is safe to
make that the compaction anchor ``lastSummarizedMessageId`` (R-S7): only when no tool call in
the covered range is still waiting for its result.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from memd.compaction.api_form import repair
from memd.compaction.message import Msg
from memd.privacy import scrub_content, scrub_text
from memd.transcript.messages import ApiMessage

Strategy = Literal["delta", "full"]
Estimator = Callable[[str], int]

# Per-block cuts. The delta transcript is for note-taking: a tool result's head and tail say
# what happened; the full fork keeps far more, as a fork of the real context would.
DELTA_TEXT_CHARS = 12_000
DELTA_TOOL_INPUT_CHARS = 1_000
DELTA_TOOL_RESULT_CHARS = 2_000
OVERLAP_BLOCK_CHARS = 400  # the overlap only reminds the model where the new part starts
FULL_TOOL_RESULT_CHARS = 32_000
FULL_TEXT_CHARS = 64_000
CUT_MARK = "\n[… {n} characters left out …]\n"


@dataclass(frozen=True)
class Chunk:
    """A run's worth of messages: ``context`` were seen before (overlap), ``new`` were not."""

    context: tuple[ApiMessage, ...]
    new: tuple[ApiMessage, ...]
    covered_uuid: str | None  # the last line of the last new message
    anchor_safe: bool  # covered_uuid may become lastSummarizedMessageId


@dataclass(frozen=True)
class Request:
    """The messages of one extraction run (the runner adds system prompt and tools)."""

    messages: tuple[dict[str, Any], ...]


# ---------------------------------------------------------------------------------------------
# Choosing the messages


def start_after(messages: Sequence[ApiMessage], cursor: str | None) -> int:
    """Index of the first message the notes have not seen.

    A cursor that is no longer in the conversation (compacted away) means all of it is new.
    A cursor in the middle of a message (more lines joined it since) leaves that message new.
    """
    if cursor is None:
        return 0
    for index in range(len(messages) - 1, -1, -1):
        uuids = messages[index].uuids
        if cursor in uuids:
            return index + 1 if uuids[-1] == cursor else index
    return 0


def anchor_safe(messages: Sequence[ApiMessage]) -> bool:
    """The last assistant turn of ``messages`` has no tool call still waiting (R-S7)."""
    if not messages:
        return False
    last = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "assistant"), -1
    )
    if last < 0:
        return True
    called = {
        b["id"]
        for b in messages[last].content
        if b.get("type") == "tool_use" and isinstance(b.get("id"), str)
    }
    answered = {
        b.get("tool_use_id")
        for m in messages[last + 1 :]
        for b in m.content
        if b.get("type") == "tool_result"
    }
    return called <= answered


def plan_delta(
    messages: Sequence[ApiMessage],
    cursor: str | None,
    *,
    overlap: int,
    chunk_tokens: int,
    estimate: Estimator,
) -> tuple[Chunk, ...]:
    """The chunks of the delta strategy, oldest first; empty when nothing is new."""
    start = start_after(messages, cursor)
    chunks: list[Chunk] = []
    while start < len(messages):
        end = _chunk_end(messages, start, chunk_tokens, estimate)
        context = tuple(messages[max(0, start - overlap) : start])
        new = tuple(messages[start:end])
        chunks.append(Chunk(context, new, new[-1].last_uuid, anchor_safe(messages[:end])))
        start = end
    return tuple(chunks)


def _chunk_end(
    messages: Sequence[ApiMessage], start: int, chunk_tokens: int, estimate: Estimator
) -> int:
    """End (exclusive) of the chunk from ``start``: within budget, at a clean point if any."""
    total = 0
    end = start
    clean: int | None = None
    while end < len(messages):
        size = estimate(render_message(messages[end]))
        if end > start and total + size > chunk_tokens:
            break
        total += size
        end += 1
        if anchor_safe(messages[start:end]):
            clean = end
    if end < len(messages) and clean is not None:
        return clean
    return end


def fork_tokens(message: ApiMessage, estimate: Estimator) -> int:
    """A message's size as the full strategy sends it (its blocks, nearly as they are)."""
    return estimate(json.dumps(list(message.content), ensure_ascii=False, default=str))


def chunk_tokens(chunk: Chunk, strategy: Strategy, estimate: Estimator) -> int:
    """The estimated size of a chunk's conversation as the strategy sends it."""
    match strategy:
        case "delta":
            return estimate(render_transcript(chunk))
        case "full":
            return sum(fork_tokens(m, estimate) for m in chunk.new)


def plan_full(messages: Sequence[ApiMessage]) -> Chunk:
    """The single chunk of the full strategy: the whole conversation is new every time."""
    last = messages[-1].last_uuid if messages else None
    return Chunk((), tuple(messages), last, anchor_safe(messages))


# ---------------------------------------------------------------------------------------------
# Rendering


def cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, keeping its head and tail."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return text[:head] + CUT_MARK.format(n=len(text) - limit) + text[len(text) - tail :]


def _clean(text: str, limit: int, secrets: bool) -> str:
    # Scrub before cutting: a cut through a secret could leave a piece no pattern recognizes.
    return cut(scrub_text(text, secrets=secrets), limit)


def render_block(block: dict[str, Any], *, secrets: bool = True, brief: bool = False) -> str:
    """One content block as transcript text ("" for blocks the notes do not need).

    ``brief`` cuts every block to :data:`OVERLAP_BLOCK_CHARS` (for the overlap).
    """
    match block.get("type"):
        case "text":
            limit = OVERLAP_BLOCK_CHARS if brief else DELTA_TEXT_CHARS
            return _clean(str(block.get("text", "")), limit, secrets)
        case "tool_use" | "server_tool_use":
            args = json.dumps(block.get("input", {}), ensure_ascii=False, sort_keys=True)
            name = block.get("name", "?")
            limit = OVERLAP_BLOCK_CHARS if brief else DELTA_TOOL_INPUT_CHARS
            return f"[tool call {name}] {_clean(args, limit, secrets)}"
        case "tool_result":
            label = "tool error" if block.get("is_error") else "tool result"
            inner = _result_text(block.get("content"))
            limit = OVERLAP_BLOCK_CHARS if brief else DELTA_TOOL_RESULT_CHARS
            return f"[{label}] {_clean(inner, limit, secrets)}"
        case "image":
            return "[image]"
        case "document":
            return "[document]"
        case _:
            return ""  # thinking and anything unknown: not worth the tokens


def _result_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for item in content:
        if isinstance(item, dict):
            kind = item.get("type")
            parts.append(
                f"[{kind}]" if kind in ("image", "document") else str(item.get("text", ""))
            )
    return "\n".join(p for p in parts if p)


def render_message(message: ApiMessage, *, secrets: bool = True, brief: bool = False) -> str:
    body = "\n".join(
        text
        for block in message.content
        if (text := render_block(block, secrets=secrets, brief=brief))
    )
    return f"### {message.role}\n{body}\n" if body else ""


def render_transcript(chunk: Chunk, *, secrets: bool = True) -> str:
    """The chunk as one text: the overlap marked as already covered, then the new part."""
    parts = ["<conversation>"]
    if chunk.context:
        parts.append("[Earlier messages, already covered by the notes; shown for continuity]")
        parts.extend(render_message(m, secrets=secrets, brief=True) for m in chunk.context)
        parts.append("[New since the last update of the notes]")
    parts.extend(render_message(m, secrets=secrets) for m in chunk.new)
    parts.append("</conversation>")
    return "\n".join(p for p in parts if p)


def delta_request(chunk: Chunk, instruction: str, *, secrets: bool = True) -> Request:
    """One user message: the transcript of the chunk, then the instruction."""
    content = [
        {"type": "text", "text": render_transcript(chunk, secrets=secrets)},
        {"type": "text", "text": scrub_text(instruction, secrets=secrets)},
    ]
    return Request(({"role": "user", "content": content},))


def full_request(chunk: Chunk, instruction: str, *, secrets: bool = True) -> Request:
    """The conversation as API messages (made valid and scrubbed), then the instruction."""
    msgs = [
        Msg(m.role, tuple(_fork_block(b, secrets) for b in m.content), m.last_uuid)
        for m in chunk.new
    ]
    repaired = repair(msgs, close_pending=True)
    out: list[dict[str, Any]] = [{"role": m.role, "content": list(m.content)} for m in repaired]
    prompt = {"type": "text", "text": scrub_text(instruction, secrets=secrets)}
    if out and out[-1]["role"] == "user":
        out[-1] = {"role": "user", "content": [*out[-1]["content"], prompt]}
    else:
        out.append({"role": "user", "content": [prompt]})
    return Request(tuple(out))


def _fork_block(block: dict[str, Any], secrets: bool) -> dict[str, Any]:
    match block.get("type"):
        case "thinking" | "redacted_thinking":
            # A scrubbed thinking block fails its signature check; the notes do not need it.
            return {"type": "text", "text": ""}
        case "image":
            return {"type": "text", "text": "[image]"}
        case "document":
            return {"type": "text", "text": "[document]"}
        case "text":
            return {
                "type": "text",
                "text": _clean(str(block.get("text", "")), FULL_TEXT_CHARS, secrets),
            }
        case "tool_result":
            scrubbed = dict(scrub_content(block, secrets=secrets))
            inner = _result_text(scrubbed.get("content"))
            scrubbed["content"] = cut(inner, FULL_TOOL_RESULT_CHARS) or "(no output)"
            return scrubbed
        case _:
            return dict(scrub_content(block, secrets=secrets))
