"""What is seen of a conversation from outside its ingest (R-T5).

:class:`ContextFigure` and :class:`Boundary` are the figures a
:class:`~memd.transcript.conversation.Conversation` publishes; :class:`ConversationView` is
an immutable snapshot of it that readers on other threads may keep, and
:class:`ConversationReader` what memory extraction needs of either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from memd.transcript.messages import ApiMessage


@dataclass(frozen=True)
class ContextFigure:
    """Tokens in the model's context (R-T5).

    ``tokens = from_usage + estimated_tail``: the last real response's API usage (prompt +
    its output) plus an estimate of what was added after it. ``stale`` when a compaction
    happened and no response has reported a size since; ``tokens`` is then an estimate of
    what follows the boundary.
    """

    tokens: int
    from_usage: int
    estimated_tail: int
    stale: bool


@dataclass(frozen=True)
class Boundary:
    """A ``compact_boundary`` seen in the transcript, with the context just before it."""

    uuid: str
    trigger: str | None
    pre_tokens: int | None  # Claude Code's own figure, from compactMetadata
    timestamp: str | None
    logical_parent_uuid: str | None
    context_before: ContextFigure


class ConversationReader(Protocol):
    """What memory extraction reads of a session: the live conversation or a
    :class:`ConversationView` snapshot of it."""

    @property
    def cwd(self) -> str | None: ...
    @property
    def last_uuid(self) -> str | None: ...
    @property
    def last_assistant_has_tool_calls(self) -> bool: ...
    def messages(self) -> list[ApiMessage]: ...


@dataclass(frozen=True)
class ConversationView:
    """An immutable snapshot of what readers outside the ingest need: safe to keep and to
    read on any thread while the live conversation goes on growing."""

    snapshot: tuple[ApiMessage, ...]
    cwd: str | None
    last_uuid: str | None
    last_assistant_has_tool_calls: bool

    def messages(self) -> list[ApiMessage]:
        return list(self.snapshot)
