"""The transcript entries memd uses, as typed values (FORMAT.md §3).

Only conversation entries (``user``, ``assistant``, ``system``, ``progress``, ``attachment``)
become values; bookkeeping lines are dropped by the parser. Each entry keeps just the fields
memd reads.

An entry holds the structure of its ``message.content``, not the content itself: one
:data:`BlockRef` per content block (its position, type, tool id, and whether the Messages API
takes it in this role), plus where its line sits in the file (``at``, ``size``). The content
is read back from the line when a job needs it (:mod:`memd.transcript.content`). The parser
has already checked the whole line (valid UTF-8, no lone surrogates, bounded nesting), so
reading it back cannot fail on its bytes; only a file changed under us can.

Entries are immutable and carry no references to the line they came from, so a long-lived
conversation holds only what it needs.
"""

from __future__ import annotations

from typing import Any, Final, TypeAlias

import msgspec

SYNTHETIC_MODEL: Final = "<synthetic>"
COMPACT_BOUNDARY: Final = "compact_boundary"
TURN_END: Final = "turn_end"  # what readers of other agents' formats write for a turn end
TURN_END_SUBTYPES: Final = frozenset({"turn_duration", "stop_hook_summary", TURN_END})

Block: TypeAlias = dict[str, Any]
Content: TypeAlias = tuple[Block, ...]

BlockRef: TypeAlias = tuple[int, str, str | None, bool]
"""One content block's outline: its index among the line's content blocks, its ``type``, its
tool id (``id`` of a tool_use, ``tool_use_id`` of a tool_result; else None), and whether the
Messages API accepts it in the entry's role (non-blank text, a well-formed tool call…)."""
Outline: TypeAlias = tuple[BlockRef, ...]


class Usage(msgspec.Struct, frozen=True, gc=False):
    """Token figures of one API response, as the transcript line repeats them: what memd
    needs of them (kept per assistant line, so kept small)."""

    prompt_tokens: int = 0  # the request's context: uncached + cache writes + cache reads
    output_tokens: int = 0


class _Envelope(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    uuid: str
    parent_uuid: str | None = None
    at: int = -1  # the line's byte offset in its file (-1: not known)
    size: int = 0  # the line's length in bytes, without its newline
    is_sidechain: bool = False
    timestamp: str | None = None
    cwd: str | None = None
    session_id: str | None = None
    slug: str | None = None  # the session's readable name; also names its plan file


class UserEntry(_Envelope, frozen=True, kw_only=True, gc=False):
    """A ``user`` line: a prompt, tool results, injected (meta) text or a compaction summary."""

    blocks: Outline = ()
    is_meta: bool = False
    is_compact_summary: bool = False

    @property
    def tool_result_ids(self) -> tuple[str, ...]:
        """The tool_use ids this line answers."""
        return tuple(
            [ref[2] for ref in self.blocks if ref[1] == "tool_result" and ref[2] is not None]
        )


class AssistantEntry(_Envelope, frozen=True, kw_only=True, gc=False):
    """One line of an API response; the lines of one response share ``message_id``."""

    message_id: str
    model: str | None = None  # the model that answered (``message.model``)
    # The model Claude Code asked for, as its user named it (``requestedModel``: the long-
    # context form ``claude-sonnet-4-6[1m]`` kept, which ``model`` drops; 2.1.331 and later).
    requested_model: str | None = None
    blocks: Outline = ()
    usage: Usage | None = None

    @property
    def tool_use_ids(self) -> tuple[str, ...]:
        """The ids of the tool calls in this line."""
        return tuple([ref[2] for ref in self.blocks if ref[1] == "tool_use" and ref[2] is not None])

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
    # The context the compaction left, as Claude Code counts it (system prompt and tools
    # included; compactMetadata.postTokens, 2.1.332): None when it does not say.
    post_tokens: int | None = None

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
