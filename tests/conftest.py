"""Shared fixtures. Tests run on asyncio through anyio's pytest plugin."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from memd.config import LLMConfig
from memd.llm.client import LLM, Disabled, close_llm, open_llm
from memd.testing.loopback import LoopbackAPI

SHARED = Path(__file__).resolve().parents[2] / "shared"
TRANSCRIPTS = SHARED / "data" / "transcripts"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def api() -> Iterator[LoopbackAPI]:
    """A loopback Messages-API server for one test (modules override it to script it)."""
    with LoopbackAPI() as server:
        yield server


@pytest.fixture
async def llm(api: LoopbackAPI) -> AsyncIterator[LLM]:
    """The real SDK client pointed at ``api``."""
    opened = open_llm(LLMConfig(base_url=api.url, timeout_s=30.0), {"ANTHROPIC_API_KEY": "test"})
    assert not isinstance(opened, Disabled)
    yield opened
    await close_llm(opened)


def all_transcripts() -> list[Path]:
    """Every real transcript in the shared corpus, main and sub-agent files."""
    return sorted(TRANSCRIPTS.rglob("*.jsonl"))


def main_transcripts() -> list[Path]:
    """Main-conversation transcripts only (not ``subagents/`` files)."""
    return [p for p in all_transcripts() if "subagents" not in p.parts]
