"""Shared fixtures. Tests run on asyncio through anyio's pytest plugin."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
TRANSCRIPTS = SHARED / "data" / "transcripts"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def all_transcripts() -> list[Path]:
    """Every real transcript in the shared corpus, main and sub-agent files."""
    return sorted(TRANSCRIPTS.rglob("*.jsonl"))


def main_transcripts() -> list[Path]:
    """Main-conversation transcripts only (not ``subagents/`` files)."""
    return [p for p in all_transcripts() if "subagents" not in p.parts]
