"""The message value every compaction core works on.

A :class:`Msg` is one Anthropic Messages-API message (role + content blocks) together with
what the cores need to know about it but cannot compute purely: the uuid of the transcript
line it ends with (to find ``lastSummarizedMessageId``) and its token estimate (the daemon
passes ``memd.tokens.estimate_content(content)``). Blocks stay plain dicts, the API's own
shape; the cores never mutate them and build new dicts when they change one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Block = dict[str, Any]
Role = Literal["user", "assistant"]
Content = str | list[Block]
TokenEstimator = Callable[[Content], int]
"""Counts the tokens of one message's content; ``memd.tokens.estimate_content`` fits."""


@dataclass(frozen=True)
class Msg:
    """One API message.

    ``uuid`` is the uuid of the message's last transcript line; ``line_uuids`` (optional) all
    of its lines, oldest first. ``api_id`` is the assistant response id (``message.id``) when
    known: consecutive assistant messages sharing one are blocks of a single response and are
    never separated.
    """

    role: Role
    content: tuple[Block, ...]
    uuid: str | None = None
    tokens: int = 0
    api_id: str | None = None
    line_uuids: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        role: Role,
        content: str | Iterable[Block],
        *,
        uuid: str | None = None,
        tokens: int = 0,
        api_id: str | None = None,
        line_uuids: Iterable[str] = (),
    ) -> Msg:
        """Build a message; string content becomes one text block (none if empty)."""
        if isinstance(content, str):
            blocks: tuple[Block, ...] = ({"type": "text", "text": content},) if content else ()
        else:
            blocks = tuple(content)
        return cls(role, blocks, uuid, tokens, api_id, tuple(line_uuids))

    @classmethod
    def from_api(
        cls, message: Mapping[str, Any], *, uuid: str | None = None, tokens: int = 0
    ) -> Msg:
        """Decode an API-format dict (``{"role", "content"[, "id"]}``)."""
        role = message.get("role")
        if role not in ("user", "assistant"):
            raise ValueError(f"not an API message role: {role!r}")
        raw = message.get("content")
        content: str | list[Block]
        if isinstance(raw, str):
            content = raw
        elif isinstance(raw, list):
            content = [dict(b) for b in raw if isinstance(b, Mapping)]
        else:
            content = []
        api_id = message.get("id") if role == "assistant" else None
        return cls.of(
            role,
            content,
            uuid=uuid,
            tokens=tokens,
            api_id=api_id if isinstance(api_id, str) else None,
        )

    def api(self) -> dict[str, Any]:
        """The API-format dict to send."""
        return {"role": self.role, "content": [dict(b) for b in self.content]}

    def with_content(self, content: Iterable[Block], tokens: int | None = None) -> Msg:
        return Msg(
            self.role,
            tuple(content),
            self.uuid,
            self.tokens if tokens is None else tokens,
            self.api_id,
            self.line_uuids,
        )


def to_api(messages: Iterable[Msg]) -> list[dict[str, Any]]:
    """API-format dicts for a whole request."""
    return [m.api() for m in messages]


def block_type(block: Mapping[str, Any]) -> str:
    kind = block.get("type")
    return kind if isinstance(kind, str) else ""


def tool_use_ids(msg: Msg) -> tuple[str, ...]:
    """Ids of the tool calls an assistant message makes, in order."""
    if msg.role != "assistant":
        return ()
    return tuple(
        b["id"] for b in msg.content if block_type(b) == "tool_use" and isinstance(b.get("id"), str)
    )


def tool_result_ids(msg: Msg) -> tuple[str, ...]:
    """Ids of the tool calls a user message answers, in order."""
    if msg.role != "user":
        return ()
    return tuple(
        b["tool_use_id"]
        for b in msg.content
        if block_type(b) == "tool_result" and isinstance(b.get("tool_use_id"), str)
    )


def is_blank_text(block: Mapping[str, Any]) -> bool:
    """A text block the API would refuse: no text, or only whitespace."""
    text = block.get("text")
    return block_type(block) == "text" and (not isinstance(text, str) or not text.strip())


def has_text(msg: Msg) -> bool:
    """Whether the message says something in words (a non-blank top-level text block)."""
    return any(block_type(b) == "text" and not is_blank_text(b) for b in msg.content)


def total_tokens(messages: Iterable[Msg]) -> int:
    return sum(m.tokens for m in messages)


def text_of(content: str | Sequence[Any] | None) -> str:
    """The plain text inside a content value (text blocks only), joined by newlines."""
    if isinstance(content, str):
        return content
    if not content:
        return ""
    parts = [
        b["text"]
        for b in content
        if isinstance(b, Mapping) and block_type(b) == "text" and isinstance(b.get("text"), str)
    ]
    return "\n".join(parts)
