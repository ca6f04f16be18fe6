"""The pipeline verdict in status (R-B8) is a pure function of queue, progress and pauses."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memd.health import pipeline_state

STALL = 1800.0


def test_idle_when_nothing_is_pending() -> None:
    state = pipeline_state(
        pending=0,
        last_progress_at=None,
        started_at=0,
        paused_until=None,
        now=1e6,
        stall_after_s=STALL,
    )
    assert state == "idle"


def test_stalled_only_after_the_stall_window() -> None:
    kw = {"pending": 2, "started_at": 0.0, "paused_until": None, "stall_after_s": STALL}
    assert pipeline_state(last_progress_at=1000.0, now=1000.0 + STALL, **kw) == "working"  # type: ignore[arg-type]
    assert pipeline_state(last_progress_at=1000.0, now=1001.0 + STALL, **kw) == "stalled"  # type: ignore[arg-type]
    # No progress yet: counted from the daemon's start.
    assert pipeline_state(last_progress_at=None, now=STALL + 1, **kw) == "stalled"  # type: ignore[arg-type]


def test_a_budget_pause_is_not_a_stall() -> None:
    state = pipeline_state(
        pending=3,
        last_progress_at=0.0,
        started_at=0.0,
        paused_until=5e6,
        now=1e6,
        stall_after_s=STALL,
    )
    assert state == "paused"


@given(
    st.integers(0, 50),
    st.one_of(st.none(), st.floats(0, 1e6)),
    st.floats(0, 2e6),
    st.one_of(st.none(), st.floats(0, 3e6)),
)
def test_never_stalled_without_pending_work_or_inside_the_window(
    pending: int, progress: float | None, now: float, paused: float | None
) -> None:
    state = pipeline_state(
        pending=pending,
        last_progress_at=progress,
        started_at=0.0,
        paused_until=paused,
        now=now,
        stall_after_s=STALL,
    )
    if pending == 0:
        assert state == "idle"
    if state == "stalled":
        assert now - (progress if progress is not None else 0.0) > STALL
