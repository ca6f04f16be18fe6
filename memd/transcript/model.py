"""The transcript entries memd uses, as typed values (FORMAT.md §3).

Only conversation entries (``user``, ``assistant``, ``system``, ``progress``, ``attachment``)
become values; bookkeeping lines are dropped by the parser. Each entry keeps just the fields
memd reads. ``message.content`` is decoded and validated once, by the parser (valid UTF-8, no
lone surrogates, bounded nesting), into a tuple of content blocks (plain dicts; a string
content becomes one text block), so nothing downstream can fail on the bytes of a line.

Entries are immutable and carry no references to the line they came from, so a long-lived
conversation holds only what it needs.
"""

from __future__ import annotations

from typing import Any, Final, TypeAlias

import msgspec

SYNTHETIC_MODEL: Final = "<synthetic>"
COMPACT_BOUNDARY: Final = "compact_boundary"
TURN_END_SUBTYPES: Final = frozenset({"turn_duration", "stop_hook_summary"})

Block: TypeAlias = dict[str, Any]
Content: TypeAlias = tuple[Block, ...]


class Usage(msgspec.Struct, frozen=True, gc=False):
    """Token figures of one API response, as the transcript line repeats them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        """The size of the request's context: uncached + cache writes + cache reads."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


class _Envelope(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    uuid: str
    parent_uuid: str | None = None
    is_sidechain: bool = False
    timestamp: str | None = None
    cwd: str | None = None
    session_id: str | None = None
    slug: str | None = None  # the session's readable name; also names its plan file


class UserEntry(_Envelope, frozen=True, kw_only=True, gc=False):
    """A ``user`` line: a prompt, tool results, injected (meta) text or a compaction summary."""

    content: Content = ()
    is_meta: bool = False
    is_compact_summary: bool = False
    tool_result_ids: tuple[str, ...] = ()  # tool_use ids this line answers


class AssistantEntry(_Envelope, frozen=True, kw_only=True, gc=False):
    """One line of an API response; the lines of one response share ``message_id``."""

    message_id: str
    model: str | None = None
    content: Content = ()
    usage: Usage | None = None
    tool_use_ids: tuple[str, ...] = ()

    @property
    def synthetic(self) -> bool:
        """Written by Claude Code itself (API errors, interrupts), not by the model."""
        return self.model == SYNTHETIC_MODEL


class SystemEntry(_Envelope, frozen=True, kw_only=True, gc=False):
    """A ``system`` line; ``compact_boundary`` ones start a new context."""

    subtype: str | None = None
    logical_parent_uuid: str | None = None
    compact_trigger: str | None = None
    pre_tokens: int | None = None

    @property
    def is_compact_boundary(self) -> bool:
        return self.subtype == COMPACT_BOUNDARY

    @property
    def is_turn_end(self) -> bool:
        return self.subtype in TURN_END_SUBTYPES


class ProgressEntry(_Envelope, frozen=True, kw_only=True, gc=False):
    """Hook, shell and sub-agent progress: a link in the parent chain, never context."""


class AttachmentEntry(_Envelope, frozen=True, kw_only=True, gc=False):
    """Injected context in newer Claude Code versions; a link in the parent chain."""


Entry = UserEntry | AssistantEntry | SystemEntry | ProgressEntry | AttachmentEntry
