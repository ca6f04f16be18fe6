"""The context size of a conversation's active chain (R-T5), a pure function of its entries:
what the model last reported of the prompt and its output, plus an estimate of the lines
since. :class:`memd.transcript.conversation.Conversation` caches it until the next entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from memd.transcript.model import AssistantEntry, Entry, SystemEntry
from memd.transcript.view import ContextFigure


def measure(
    chain: tuple[Entry, ...], estimate_all: Callable[[Iterable[Entry]], int]
) -> ContextFigure:
    """The context size of ``chain`` (R-T5): the last real response's usage (its prompt and
    output tokens) plus an estimate of what came after it, ``estimate_all`` counting the
    entries given; with no response, an estimate of everything (stale after a boundary, and
    at least the context the boundary says it left)."""
    last = last_response(chain)
    if last is None:
        tail = estimate_all(chain)
        root = chain[0] if chain else None
        stale = type(root) is SystemEntry and root.is_compact_boundary
        if stale and type(root) is SystemEntry and root.post_tokens:
            # Claude Code's own count of what its compaction left counts the system prompt
            # and the tools, which an estimate of the lines cannot: never below it.
            tail = max(tail, root.post_tokens)
        return ContextFigure(tail, 0, tail, stale)
    lines = [
        e for e in chain if type(e) is AssistantEntry and e.message_id == last and not e.synthetic
    ]
    usage = lines[-1].usage
    prompt = usage.prompt_tokens if usage is not None else 0
    output = max((e.usage.output_tokens for e in lines if e.usage is not None), default=0)
    first = next(i for i, entry in enumerate(chain) if entry is lines[0])
    tail = estimate_all(
        e for e in chain[first + 1 :] if not (type(e) is AssistantEntry and e.message_id == last)
    )
    return ContextFigure(prompt + output + tail, prompt + output, tail, False)


def last_response(chain: tuple[Entry, ...]) -> str | None:
    """``message.id`` of the last real (non-synthetic) response on the chain."""
    for entry in reversed(chain):
        if type(entry) is AssistantEntry and not entry.synthetic:
            return entry.message_id
    return None
