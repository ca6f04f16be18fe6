"""kill -9 inside an archive or a restore of the real daemon loses nothing and archives nothing
twice (issue 36, item 3): a sample of the steps, :mod:`tests.archive_kill` says how;
``bench/archive_kill.py`` runs every step."""

from __future__ import annotations

from pathlib import Path

import pytest

from memd.memory.archive import ARCHIVE_FILE
from tests import archive_steps
from tests.archive_kill import MOVED, archive_trial, restore_steps, restore_trial
from tests.archive_kill import archive_steps as count_archive

pytestmark = pytest.mark.slow


def test_the_wrapper_knows_the_record_by_its_name() -> None:
    assert archive_steps.ARCHIVE_FILE == ARCHIVE_FILE


def chosen(steps: list[str], moved_from: str) -> list[int]:
    """The steps where a kill matters most: with the move written down and not made, and
    made with the index not yet rewritten (every step: ``bench/archive_kill.py``)."""
    move = next(
        i for i, s in enumerate(steps, 1) if s.startswith("os.rename") and s.endswith(moved_from)
    )
    return [move, move + 1]


@pytest.mark.timeout(600)
def test_kill_9_at_the_steps_of_an_archive(tmp_path: Path) -> None:
    steps = count_archive(tmp_path / "count")
    for at in chosen(steps, f"/memory/{MOVED}"):
        archive_trial(tmp_path / f"at{at}", at)


@pytest.mark.timeout(600)
def test_kill_9_at_the_steps_of_a_restore(tmp_path: Path) -> None:
    steps = restore_steps(tmp_path / "count")
    for at in chosen(steps, f"/memory-archive/{MOVED}"):
        restore_trial(tmp_path / f"at{at}", at)
