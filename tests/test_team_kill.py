"""kill -9 inside a team sync loses nothing and duplicates nothing (a sample of the steps;
``bench/team_kill.py`` runs every step, before, after and during)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.team_kill import count_steps, make_world, trial

SAMPLE = 6


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("team-kill") / "world"
    make_world(root)
    return root


def test_the_world_converges_without_a_kill(template: Path, tmp_path: Path) -> None:
    assert count_steps(template, tmp_path) > 10


@pytest.mark.slow
def test_a_kill_at_sampled_steps_loses_and_duplicates_nothing(
    template: Path, tmp_path: Path
) -> None:
    steps = count_steps(template, tmp_path)
    chooser = random.Random(37)
    chosen = {(steps, "before"), (steps - 1, "after"), (1, "during")}
    while len(chosen) < SAMPLE:
        chosen.add((chooser.randint(1, steps), chooser.choice(("before", "after", "during"))))
    problems = {f"{s} {w}": trial(template, tmp_path, s, w) for s, w in sorted(chosen)}
    assert {k: v for k, v in problems.items() if v is not None} == {}
