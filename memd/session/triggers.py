"""When a session's notes are extracted (R-S3). Pure.

The daemon checks whenever a transcript grows. Before the first extraction, the notes are
started once the context reaches ``init_tokens``. After it, an update needs the context to
have grown by ``update_tokens`` since the last extraction — always — and then either
``tool_calls_between_updates`` tool calls since then, or a natural pause (the last assistant
turn called no tool).

Growth is measured against a *baseline*: the context size at the last extraction. When the
session is compacted its context shrinks below the baseline; :func:`rebase` moves the
baseline down to the new size so growth counts from there instead of waiting for the
context to climb back past its old size.
"""

from __future__ import annotations

from dataclasses import dataclass

from memd.config import SessionNotesConfig


@dataclass(frozen=True)
class TriggerInput:
    """What the decision looks at, taken from the session's figures and extraction record."""

    context_tokens: int
    tokens_at_last_extraction: int | None  # None: never extracted
    tool_calls_since: int  # tool calls since the last extraction (all of them before the first)
    last_turn_has_tool_calls: bool

    @property
    def extracted_before(self) -> bool:
        return self.tokens_at_last_extraction is not None


@dataclass(frozen=True)
class Go:
    reason: str


@dataclass(frozen=True)
class Skip:
    reason: str


Decision = Go | Skip


@dataclass(frozen=True)
class NextTrigger:
    """For status: the context size at which the next check can pass, and what else it needs."""

    at_tokens: int
    condition: str


def decide(snapshot: TriggerInput, config: SessionNotesConfig) -> Decision:
    """Go with the rule that fired, or Skip saying which condition is not met."""
    if snapshot.tokens_at_last_extraction is None:
        if snapshot.context_tokens >= config.init_tokens:
            return Go(f"init: context {snapshot.context_tokens} >= {config.init_tokens} tokens")
        return Skip(f"init: context {snapshot.context_tokens} < {config.init_tokens} tokens")
    grown = snapshot.context_tokens - snapshot.tokens_at_last_extraction
    if grown < config.update_tokens:
        return Skip(f"update: grown {grown} < {config.update_tokens} tokens since last extraction")
    if snapshot.tool_calls_since >= config.tool_calls_between_updates:
        return Go(
            f"update: grown {grown} tokens and {snapshot.tool_calls_since} tool calls "
            "since last extraction"
        )
    if not snapshot.last_turn_has_tool_calls:
        return Go(f"update: grown {grown} tokens and the last turn called no tool")
    return Skip(
        f"update: only {snapshot.tool_calls_since} of {config.tool_calls_between_updates} tool "
        "calls and the last turn is still calling tools"
    )


def next_trigger(snapshot: TriggerInput, config: SessionNotesConfig) -> NextTrigger:
    """Where the next extraction can happen, for ``memdctl status``."""
    if snapshot.tokens_at_last_extraction is None:
        return NextTrigger(config.init_tokens, "context reaches the init threshold")
    at = snapshot.tokens_at_last_extraction + config.update_tokens
    return NextTrigger(
        at,
        f"and {config.tool_calls_between_updates} tool calls since the last extraction "
        "or a turn without tool calls",
    )


def rebase(tokens_at_last_extraction: int | None, context_tokens: int) -> int | None:
    """The growth baseline after the context shrank (a compaction); unchanged otherwise."""
    if tokens_at_last_extraction is None:
        return None
    return min(tokens_at_last_extraction, context_tokens)
