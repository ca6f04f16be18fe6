"""A recalled memory for renderer tests: every field given a plain default."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from memd.memory.recall import RecalledMemory

PLAIN = RecalledMemory(
    path="/m/memory.md",
    relative="memory.md",
    name="memory",
    type=None,
    description="",
    content="",
    content_truncated=False,
    mtime="2026-01-01T00:00:00Z",
    mtime_ms=1_767_225_600_000,
    age="today",
    age_days=0,
    warning="",
)


def recalled(**fields: Any) -> RecalledMemory:
    """:data:`PLAIN` with ``fields`` in place of its own."""
    return replace(PLAIN, **fields)
