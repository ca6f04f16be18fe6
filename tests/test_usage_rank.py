"""What a memory's use does to its rank (issue 36, item 3): the weight (pure, bounded,
monotone), the step after the lexical ranker, and recall itself with a record's counts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.clock import FakeClock
from memd.config import Config, MemoryConfig
from memd.llm.client import Disabled
from memd.memory.recall import recall
from memd.memory.usage_rank import MAX_WEIGHT, MIN_WEIGHT, reweighed, usage_weight

COUNTS = st.integers(min_value=0, max_value=10_000)


@given(used=COUNTS, ignored=COUNTS)
def test_the_weight_stays_within_its_bounds(used: int, ignored: int) -> None:
    assert MIN_WEIGHT <= usage_weight(used, ignored) <= MAX_WEIGHT


@given(used=COUNTS, ignored=COUNTS)
def test_more_uses_never_lower_and_more_ignored_injections_never_raise(
    used: int, ignored: int
) -> None:
    weight = usage_weight(used, ignored)
    assert usage_weight(used + 1, ignored) >= weight - 1e-12
    assert usage_weight(used, ignored + 1) <= weight + 1e-12


def test_what_the_weight_says() -> None:
    assert usage_weight(0, 0) == usage_weight(0, 1) == 1.0  # one ignored injection says little
    assert usage_weight(1, 0) > 1.0 and usage_weight(3, 0) == MAX_WEIGHT
    assert usage_weight(0, 2) < 1.0 and usage_weight(0, 50) == MIN_WEIGHT
    assert usage_weight(2, 4) == pytest.approx(1 + (MAX_WEIGHT - 1) * 2 / 3 * 2 / 6)
    assert usage_weight(-3, -3) == 1.0


def test_the_step_reorders_near_scores_and_keeps_the_ranker_order_otherwise() -> None:
    ranked = [("a", 1.0), ("b", 0.95), ("c", 0.9), ("d", 0.3)]
    counts = {"a": (0, 6), "c": (3, 0), "d": (3, 0)}
    again = reweighed(ranked, str, lambda names: {n: counts[n] for n in names if n in counts})
    assert [h for h, _ in again] == ["c", "b", "a", "d"]  # d, used, stays below: 0.375 < 0.5
    assert reweighed(ranked, str, lambda names: {}) == ranked


def memories(folder: Path) -> None:
    """Two memories the query matches alike, and one it does not."""
    folder.mkdir(parents=True)
    for name, body in (
        ("deploy_a.md", "Deploys of the api go out with make ship."),
        ("deploy_b.md", "Deploys of the web go out with make ship."),
        ("coffee.md", "The coffee machine is on the second floor."),
    ):
        text = f"---\nname: {name[:-3]}\ndescription: deploys\ntype: project\n---\n\n{body}\n"
        (folder / name).write_text(text)


async def recalled(folder: Path, counts: dict[str, tuple[int, int]] | None) -> list[str]:
    result = await recall(
        "how do deploys go out?",
        memory_dir=folder,
        llm=Disabled("no key"),
        cfg=Config(memory=MemoryConfig(recall_max=2)),
        clock=FakeClock(start=time.time()),
        usage=None
        if counts is None
        else lambda names: {n: counts[n] for n in names if n in counts},
    )
    return [m.relative for m in result.memories]


@pytest.mark.anyio
async def test_recall_prefers_the_memory_that_was_used(tmp_path: Path) -> None:
    memories(tmp_path / "memory")
    plain = await recalled(tmp_path / "memory", None)
    assert sorted(plain) == ["deploy_a.md", "deploy_b.md"]
    second = plain[1]
    assert (await recalled(tmp_path / "memory", {second: (2, 0)}))[0] == second
    first = plain[0]
    ignored = await recalled(tmp_path / "memory", {first: (0, 5)})
    assert ignored[0] == second and first in ignored  # lowered, not dropped
