"""Bring a message list into the form the Messages API accepts.

The rules enforced (the ones a cut, a merge or a transcript oddity can break):

- the list starts with a user message and roles alternate;
- no message is empty and no text block is blank;
- tool calls live in assistant messages, tool results and media in user messages;
- the message after an assistant message with tool calls is a user message that answers every
  one of them, results first; a result answers a call in the message right before it.

:func:`repair` returns a valid list unchanged (the same ``Msg`` objects), so cores can apply it
to their output unconditionally. A tool call left unanswered by the last message is kept as is
unless ``close_pending`` asks for a placeholder answer: a client about to run that tool will
append the real result itself, but a request that ends there (the summary request) must close it.
"""

from __future__ import annotations

from collections.abc import Sequence

from memd.compaction.message import (
    Block,
    Msg,
    block_type,
    is_blank_text,
    tool_use_ids,
)
from memd.compaction.prompts import MISSING_RESULT, OMITTED_START

_MAX_PASSES = 4  # a second pass removes messages the first emptied; a third finds nothing
_USER_ONLY = frozenset({"tool_result", "image", "document"})
_ASSISTANT_ONLY = frozenset({"tool_use", "server_tool_use", "thinking", "redacted_thinking"})


def repair(messages: Sequence[Msg], *, close_pending: bool = False) -> list[Msg]:
    """Return ``messages`` fixed up for the API; valid input comes back unchanged."""
    msgs = list(messages)
    for _ in range(_MAX_PASSES):
        fixed = _pair_results(_merge_runs(_drop_blank(msgs)), close_pending)
        if _same(fixed, msgs):
            break
        msgs = fixed
    else:  # pragma: no cover - each pass can only undo what the one before it created
        raise AssertionError("repair did not settle")
    if msgs and msgs[0].role == "assistant":
        msgs.insert(0, Msg.of("user", OMITTED_START))
    return msgs


def _same(a: list[Msg], b: list[Msg]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _allowed(role: str, block: Block) -> bool:
    kind = block_type(block)
    if is_blank_text(block):
        return False
    if role == "user":
        return kind not in _ASSISTANT_ONLY
    return kind not in _USER_ONLY


def _drop_blank(msgs: list[Msg]) -> list[Msg]:
    out: list[Msg] = []
    for m in msgs:
        if all(_allowed(m.role, b) for b in m.content):
            kept = m
        else:
            kept = m.with_content(b for b in m.content if _allowed(m.role, b))
        if kept.content:
            out.append(kept)
    return out


def _merge_runs(msgs: list[Msg]) -> list[Msg]:
    out: list[Msg] = []
    for m in msgs:
        if out and out[-1].role == m.role:
            prev = out[-1]
            out[-1] = Msg(
                m.role,
                prev.content + m.content,
                m.uuid,
                prev.tokens + m.tokens,
                m.api_id,
                prev.line_uuids + m.line_uuids,
            )
        else:
            out.append(m)
    return out


def _pair_results(msgs: list[Msg], close_pending: bool) -> list[Msg]:
    out: list[Msg] = []
    for i, m in enumerate(msgs):
        if m.role == "user":
            prev = out[-1] if out else None
            calls = tool_use_ids(prev) if prev is not None else ()
            out.append(_answer(m, calls))
            continue
        out.append(m)
        calls = tool_use_ids(m)
        is_last = i + 1 == len(msgs)
        if calls and (not is_last or close_pending) and (is_last or msgs[i + 1].role != "user"):
            out.append(_answer(Msg.of("user", ()), calls))
    return out


def _answer(user: Msg, calls: tuple[str, ...]) -> Msg:
    """``user`` rewritten to answer exactly ``calls``, results first."""
    wanted = set(calls)
    results: list[Block] = []
    others: list[Block] = []
    seen: set[str] = set()
    for b in user.content:
        if block_type(b) != "tool_result":
            others.append(b)
            continue
        ident = b.get("tool_use_id")
        if isinstance(ident, str) and ident in wanted and ident not in seen:
            seen.add(ident)
            results.append(b)
    results.extend(_missing_result(c) for c in calls if c not in seen)
    content = (*results, *others)
    if len(content) == len(user.content) and all(
        x is y for x, y in zip(content, user.content, strict=True)
    ):
        return user
    return user.with_content(content)


def _missing_result(call_id: str) -> Block:
    return {
        "type": "tool_result",
        "tool_use_id": call_id,
        "content": MISSING_RESULT,
        "is_error": True,
    }
