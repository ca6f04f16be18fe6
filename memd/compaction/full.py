"""Levels 2 and 3 (R-C3, R-C4): summarise the conversation with one model call.

The pure parts build the request (media replaced by placeholders, no tools) and read the reply
(the private ``<analysis>`` is dropped, the ``<summary>`` kept). :func:`compact_full` runs the
call and, when the prompt itself is too long, the level-3 retry that
:func:`memd.compaction.retry.plan_retry` plans.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, assert_never

from memd.compaction import prompts
from memd.compaction.api_form import repair
from memd.compaction.boundaries import CompactBoundary
from memd.compaction.message import Block, Msg, TokenEstimator, block_type, to_api, total_tokens
from memd.compaction.retry import GiveUp, Retry, plan_retry
from memd.compaction.threshold import Trigger
from memd.config import CompactionConfig
from memd.errors import CompactionFailed, PromptTooLong
from memd.llm.client import LLM, TokenCounts

DEFAULT_SUMMARY_MAX_TOKENS = 20_000


@dataclass(frozen=True)
class SummaryRequest:
    system: str
    messages: list[dict[str, Any]]
    max_tokens: int


def build_summary_request(
    msgs: Sequence[Msg],
    *,
    custom_instructions: str | None = None,
    max_tokens: int = DEFAULT_SUMMARY_MAX_TOKENS,
) -> SummaryRequest:
    """The summary request: the conversation without media, then the instructions."""
    instructions = prompts.SUMMARY_INSTRUCTIONS
    if custom_instructions and custom_instructions.strip():
        instructions += f"\n\n{prompts.CUSTOM_INSTRUCTIONS_HEADER}\n{custom_instructions.strip()}"
    history = [m.with_content(for_summary(m.content)) for m in msgs]
    final = repair([*history, Msg.of("user", instructions)], close_pending=True)
    return SummaryRequest(prompts.SUMMARY_SYSTEM, to_api(final), max_tokens)


def for_summary(blocks: Sequence[Block]) -> list[Block]:
    """Blocks as the summariser sees them.

    Images and documents become ``[image]`` / ``[document]`` (inside tool results too);
    thinking is dropped (its signature binds it to the model that wrote it, and the summary
    is about what was said and done); blocks keep only the fields the API defines.
    """
    out: list[Block] = []
    for b in blocks:
        kind = block_type(b)
        if kind in ("thinking", "redacted_thinking"):
            continue
        if kind == "text":
            out.append({"type": "text", "text": b.get("text", "")})
        elif kind == "tool_use":
            out.append({k: b[k] for k in ("type", "id", "name", "input") if k in b})
        elif kind == "tool_result":
            out.append(_result_for_summary(b))
        else:
            out.append(_placeholder(kind))
    return out


def _result_for_summary(block: Mapping[str, Any]) -> Block:
    result: Block = {"type": "tool_result", "tool_use_id": block.get("tool_use_id")}
    content = block.get("content")
    if isinstance(content, list):
        inner = for_summary([b for b in content if isinstance(b, dict)])
        kept = [b for b in inner if block_type(b) == "text" and b["text"].strip()]
        if kept:
            result["content"] = kept
    elif isinstance(content, str) and content:
        result["content"] = content
    if block.get("is_error") is True:
        result["is_error"] = True
    return result


def _placeholder(kind: str) -> Block:
    if kind == "image":
        return {"type": "text", "text": prompts.IMAGE_PLACEHOLDER}
    if kind == "document":
        return {"type": "text", "text": prompts.DOCUMENT_PLACEHOLDER}
    return {"type": "text", "text": f"[{kind or 'unknown'} block]"}


_ANALYSIS = re.compile(r"<analysis>.*?(?:</analysis>|\Z)", re.DOTALL)
_SUMMARY = re.compile(r"<summary>(.*?)(?:</summary>|\Z)", re.DOTALL)


def extract_summary(reply_text: str) -> str:
    """The summary from the model's reply, without the analysis scratchpad.

    Uses the ``<summary>`` contents, or everything outside ``<analysis>`` when the model left
    the tags out. Raises :class:`CompactionFailed` when nothing remains.
    """
    without_analysis = _ANALYSIS.sub("", reply_text)
    found = _SUMMARY.search(without_analysis)
    summary = found.group(1) if found else without_analysis
    summary = re.sub(r"\n{3,}", "\n\n", summary).strip()
    if not summary:
        raise CompactionFailed("the model's reply contained no summary")
    return summary


def reply_text(content: Sequence[Mapping[str, Any]]) -> str:
    return "".join(
        b["text"] for b in content if block_type(b) == "text" and isinstance(b.get("text"), str)
    )


def summary_message_text(summary: str, trigger: Trigger, transcript_path: str | None) -> str:
    """The user message that replaces the whole conversation after a full compaction."""
    parts = [prompts.SUMMARY_PREAMBLE, summary]
    if transcript_path:
        parts.append(prompts.transcript_pointer(transcript_path))
    if trigger == "auto":
        parts.append(prompts.CONTINUE_INSTRUCTION)
    return "\n\n".join(parts)


@dataclass(frozen=True)
class Spent:
    """What the compaction cost: API calls made (failed ones included) and tokens billed."""

    api_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def add(self, usage: TokenCounts | None) -> Spent:
        if usage is None:
            return Spent(self.api_calls + 1, *self._tokens())
        return Spent(
            self.api_calls + 1,
            self.input_tokens + usage.input_tokens,
            self.output_tokens + usage.output_tokens,
            self.cache_creation_input_tokens + usage.cache_creation_input_tokens,
            self.cache_read_input_tokens + usage.cache_read_input_tokens,
        )

    def _tokens(self) -> tuple[int, int, int, int]:
        return (
            self.input_tokens,
            self.output_tokens,
            self.cache_creation_input_tokens,
            self.cache_read_input_tokens,
        )


@dataclass(frozen=True)
class FullResult:
    """A finished full compaction; ``level`` is 3 when rounds had to be dropped to fit."""

    messages: tuple[Msg, ...]
    summary: str
    boundary: CompactBoundary
    tokens_before: int
    tokens_after: int
    spent: Spent
    retries: int
    dropped_rounds: int

    @property
    def level(self) -> int:
        return 3 if self.retries else 2


async def compact_full(
    llm: LLM,
    model: str,
    msgs: Sequence[Msg],
    *,
    cfg: CompactionConfig,
    estimate: TokenEstimator,
    trigger: Trigger = "auto",
    custom_instructions: str | None = None,
    max_tokens: int = DEFAULT_SUMMARY_MAX_TOKENS,
    call_timeout: float | None = None,
    transcript_path: str | None = None,
) -> FullResult:
    """Summarise ``msgs``; on prompt-too-long drop the oldest rounds and retry (level 3).

    Raises :class:`CompactionFailed` after ``cfg.ptl_max_retries`` retries or when nothing is
    left to drop; other :class:`memd.errors.LLMError` propagate unchanged.
    """
    current: tuple[Msg, ...] = tuple(msgs)
    spent, retries, dropped = Spent(), 0, 0
    while True:
        request = build_summary_request(
            current, custom_instructions=custom_instructions, max_tokens=max_tokens
        )
        try:
            reply = await llm.create_message(
                model=model,
                system=request.system,
                messages=request.messages,
                max_tokens=request.max_tokens,
                timeout=call_timeout,
            )
        except PromptTooLong as exc:
            spent = spent.add(None)
            current, n = _next_attempt(current, exc, retries, cfg)
            retries, dropped = retries + 1, dropped + n
            continue
        spent = spent.add(reply.usage)
        break
    summary = extract_summary(reply_text(reply.content))
    text = summary_message_text(summary, trigger, transcript_path)
    result = Msg.of("user", text, tokens=estimate(text))
    before = total_tokens(msgs)
    last_uuid = msgs[-1].uuid if msgs else None
    boundary = CompactBoundary(trigger, before, 3 if retries else 2, last_uuid)
    return FullResult((result,), summary, boundary, before, result.tokens, spent, retries, dropped)


def _next_attempt(
    current: tuple[Msg, ...], exc: PromptTooLong, retries: int, cfg: CompactionConfig
) -> tuple[tuple[Msg, ...], int]:
    if retries >= cfg.ptl_max_retries:
        raise CompactionFailed(
            f"the conversation is still too long to summarise after {retries} retries "
            "that dropped its oldest rounds"
        ) from exc
    plan = plan_retry(current, exc.gap, cfg)
    match plan:
        case Retry():
            return plan.messages, plan.dropped_rounds
        case GiveUp():
            raise CompactionFailed(
                f"the conversation is too long to summarise: {plan.reason}"
            ) from exc
        case _:
            assert_never(plan)
