"""kill -9 at random points with notes and memory extractions running (a reduced count; the
full loop is ``python3 bench/kill_loop.py``, figures in BENCHMARKS.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kill_loop_support import run_kill_loop

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)  # ten lives of the daemon, each up to its model client
def test_kill_9_at_random_points_loses_and_tears_nothing(tmp_path: Path) -> None:
    report = run_kill_loop(tmp_path, kills=10, seed=9)
    assert report.kills == 10
    assert report.runs_in_flight_at_kill > 0  # some kills landed inside notes runs
