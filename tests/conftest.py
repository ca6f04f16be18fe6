"""Shared fixtures. Tests run on asyncio through anyio's pytest plugin."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from memd.config import LLMConfig
from memd.llm.client import LLM, Disabled, close_llm, open_llm
from memd.testing.loopback import LoopbackAPI

# One Hypothesis profile for every @given, loaded before any test module is imported so each
# @settings(...) in the suite inherits it: no deadline and no "too slow" or "too large" health
# checks, which fail on a loaded 2-core machine or a cold .hypothesis cache while finding
# nothing. Example counts stay as each test sets them.
settings.register_profile(
    "memd",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile("memd")


def _find_shared() -> Path:
    """The shared data dir: ``shared/`` beside the checkout or any folder above it (a git
    worktree under ``wt/<name>`` sits one level deeper than the main checkout)."""
    here = Path(__file__).resolve()
    for folder in here.parents[1:]:
        if (folder / "shared" / "data" / "transcripts").is_dir():
            return folder / "shared"
    return here.parents[2] / "shared"


SHARED = _find_shared()
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
