"""Recall ranks every memory of a project, not only the newest 200 (issue 27): the model is
shown the ranker's best (plus the newest few) and the offline answer comes from all of them,
through the index the daemon keeps as files come, change and go."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from memd.clock import FakeClock
from memd.config import Config
from memd.llm.backends import CLAUDE
from memd.llm.client import LLM, Disabled
from memd.memory.rank_index import RecallCache
from memd.memory.recall import MANIFEST_NEWEST, recall
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_replies import When

NEWER = 2_000
OLD = "project_espresso_grinder.md"
QUERY = "which burr setting did we pick for the espresso grinder?"
RECALL_MODEL = CLAUDE["recall"]
# A cold scan of 2,001 files can take seconds on a loaded machine: the model's budget is not
# what these tests are about.
MODEL_CFG = replace(
    Config(), memory=replace(Config().memory, recall_timeout_s=60.0, recall_model_budget_s=60.0)
)


def write(path: Path, description: str, body: str, stamp: float) -> None:
    path.write_text(
        f"---\nname: {path.stem}\ndescription: {description}\ntype: project\n---\n\n{body}\n"
    )
    os.utime(path, (stamp, stamp))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=time.time())


@pytest.fixture
def memory_dir(tmp_path: Path, clock: FakeClock) -> Path:
    """One old memory about the grinder, then 2,000 newer ones about other things."""
    directory = tmp_path / "memory"
    directory.mkdir()
    now = clock.now()
    write(directory / OLD, "Espresso grinder burr setting", "We settled on burr 12.", now - 9e6)
    for n in range(NEWER):
        write(
            directory / f"note_{n:04d}.md",
            f"Deploy checklist item {n} for the billing service",
            "Run the migration, then the smoke tests.",
            now - 8e6 + n,
        )
    return directory


def prompt_of(api: LoopbackAPI) -> str:
    return str(api.requests[0].body["messages"][0]["content"])


@pytest.mark.anyio
@pytest.mark.parametrize("cached", [True, False], ids=["daemon-cache", "no-cache"])
async def test_the_model_is_shown_an_old_memory_that_matches(
    api: LoopbackAPI, llm: LLM, memory_dir: Path, clock: FakeClock, cached: bool
) -> None:
    api.add_rule(When(model=RECALL_MODEL), replies.text(json.dumps([OLD])))
    cache = RecallCache() if cached else None
    result = await recall(
        QUERY, memory_dir=memory_dir, llm=llm, cfg=MODEL_CFG, clock=clock, cache=cache
    )
    prompt = prompt_of(api)
    assert f"] {OLD} (" in prompt
    manifest = [line for line in prompt.splitlines() if line.startswith("- [")]
    assert len(manifest) == Config().memory.scan_max_files  # R-M4's cap still holds for a model
    newest = [f"note_{n:04d}.md" for n in range(NEWER - 1, NEWER - 1 - MANIFEST_NEWEST, -1)]
    assert all(f"] {name} (" in prompt for name in newest)
    assert result.method == "model" and [m.relative for m in result.memories] == [OLD]
    assert result.candidates == NEWER + 1


@pytest.mark.anyio
async def test_the_offline_ranker_finds_an_old_memory_behind_2000_newer(
    memory_dir: Path, clock: FakeClock
) -> None:
    cache = RecallCache()
    for _ in range(2):  # a cold cache, then the kept index
        result = await recall(
            QUERY,
            memory_dir=memory_dir,
            llm=Disabled("test"),
            cfg=Config(),
            clock=clock,
            cache=cache,
        )
        assert result.method == "lexical"
        assert [m.relative for m in result.memories][:1] == [OLD]


@pytest.mark.anyio
async def test_the_kept_index_follows_files_that_change_come_and_go(
    memory_dir: Path, clock: FakeClock
) -> None:
    cache = RecallCache(refresh_s=0.0)
    cfg, llm = Config(), Disabled("test")

    async def found(query: str) -> list[str]:
        result = await recall(
            query, memory_dir=memory_dir, llm=llm, cfg=cfg, clock=clock, cache=cache
        )
        return [m.relative for m in result.memories]

    assert (await found(QUERY))[:1] == [OLD]
    write(
        memory_dir / OLD,
        "Tea kettle temperature",
        "We settled on 80 degrees.",
        clock.now() - 9e6 + 5,
    )
    assert OLD not in await found("burr setting")  # its new text says nothing of burrs
    assert (await found("tea kettle temperature"))[:1] == [OLD]
    write(memory_dir / "moka_pot.md", "Moka pot grind size", "Espresso grinder on 20.", clock.now())
    assert (await found("moka pot grind"))[:1] == ["moka_pot.md"]
    (memory_dir / "moka_pot.md").unlink()
    assert "moka_pot.md" not in await found("moka pot grind")
    already = [str(memory_dir / OLD)]
    result = await recall(
        "tea kettle",
        memory_dir=memory_dir,
        llm=llm,
        cfg=cfg,
        clock=clock,
        cache=cache,
        already_surfaced=already,
    )
    assert OLD not in [m.relative for m in result.memories]


@pytest.mark.anyio
@pytest.mark.parametrize("offline", [False, True], ids=["model", "lexical"])
async def test_the_tool_rule_still_reads_a_warning_in_a_reference_body_through_the_cache(
    api: LoopbackAPI, llm: LLM, tmp_path: Path, clock: FakeClock, offline: bool
) -> None:
    """The cache keeps headers without their body head, except where the tool rule needs it."""
    directory = tmp_path / "memory"
    directory.mkdir()
    for name, body in (
        ("gh_usage.md", "gh pr create --fill"),
        ("gh_merging.md", "Never run gh pr merge --admin."),
    ):
        (directory / name).write_text(
            f"---\nname: {name}\ndescription: gh cli for pull requests\n"
            f"type: reference\n---\n\n{body}\n"
        )
    api.add_rule(When(model=RECALL_MODEL), replies.text('["gh_usage.md", "gh_merging.md"]'))
    cache = RecallCache()
    for _ in range(2):  # the first reads the heads, the second answers from the cache
        result = await recall(
            "gh cli pull requests",
            memory_dir=directory,
            llm=Disabled("test") if offline else llm,
            cfg=MODEL_CFG,
            clock=clock,
            recent_tools=["gh"],
            cache=cache,
        )
        assert [m.relative for m in result.memories] == ["gh_merging.md"]


@pytest.mark.anyio
async def test_a_lexical_answer_leaves_out_memories_sharing_only_an_incidental_word(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Recall goes into every prompt: a memory scoring under MIN_SHARE of the best (here one
    that shares only "redis" with the query) is junk in the agent's context, not an answer."""
    directory = tmp_path / "memory"
    directory.mkdir()
    texts = {
        "strong.md": ("redis eviction policy", "redis eviction is allkeys-lru in production"),
        "also.md": ("redis eviction alerts", "page when redis eviction counts spike"),
        "weak.md": ("cache warmup", "the cache warms slowly after a deploy of redis workers"),
        "other.md": ("frontend build", "unrelated notes on the frontend build"),
    }
    for name, (description, body) in texts.items():
        (directory / name).write_text(
            f"---\nname: {name[:-3]}\ndescription: {description}\ntype: project\n---\n\n{body}\n"
        )
    result = await recall(
        "redis eviction", memory_dir=directory, llm=None, cfg=Config(), clock=clock
    )
    assert result.method == "lexical"
    assert sorted(m.relative for m in result.memories) == ["also.md", "strong.md"]
