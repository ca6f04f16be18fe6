"""The usage ledger: weighting, windows, bounded history and persistence."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.clock import FakeClock
from memd.llm.client import Usage
from memd.llm.ledger import (
    LEDGER_FILE,
    MAX_RAW_RECORDS,
    RETENTION_S,
    Ledger,
    Tokens,
    billed_tokens,
    decode,
    run_ledger_flusher,
)
from memd.llm.windows import DAY_S, HOUR_S, window_frees_at, window_spent

START = 1_700_000_000.0


def usage(inp: int = 0, out: int = 0, write: int = 0, read: int = 0) -> Usage:
    return Usage(inp, out, write, read)


def test_billed_tokens_weights_cache_reads_and_writes() -> None:
    assert billed_tokens(usage(1000, 200, 1000, 1000)) == 1000 + 200 + 1250 + 100
    # fractions round up: a call never counts as cheaper than it was
    assert billed_tokens(usage(write=1)) == 2
    assert billed_tokens(usage(read=1)) == 1
    assert billed_tokens(usage()) == 0


def test_totals_by_kind_and_project(tmp_path: Path) -> None:
    clock = FakeClock(START)
    ledger = Ledger(tmp_path / LEDGER_FILE, clock)
    ledger.record("session_notes", usage(100, 10), project="alpha", session="s1")
    ledger.record("session_notes", usage(50, 5, read=100), project="beta", session="s2")
    ledger.record("dream", usage(1000, 100, write=400), project="alpha")
    stats = ledger.statistics()
    by_kind = {t.name: t.tokens for t in stats.by_kind}
    by_project = {t.name: t.tokens for t in stats.by_project}
    assert by_kind["session_notes"] == Tokens(150, 15, 0, 100, 175, 2)
    assert by_kind["dream"] == Tokens(1000, 100, 400, 0, 1600, 1)
    assert by_project["alpha"].billed == 110 + 1600
    assert by_project["beta"].billed == 65
    assert stats.total.calls == 3
    assert stats.last_hour == stats.total
    assert stats.as_dict()["by_kind"]["dream"]["billed"] == 1600


def test_rolling_windows_follow_the_clock(tmp_path: Path) -> None:
    clock = FakeClock(START)
    ledger = Ledger(tmp_path / LEDGER_FILE, clock)
    ledger.record("memory_extract", usage(1000), project="p")
    clock.advance(HOUR_S - 1)
    ledger.record("memory_extract", usage(10), project="p")
    assert ledger.spent(HOUR_S) == 1010
    clock.advance(1)  # the first call is now exactly one hour old: out of the hour window
    assert ledger.spent(HOUR_S) == 10
    assert ledger.spent(DAY_S) == 1010
    clock.advance(DAY_S)
    stats = ledger.statistics()
    assert stats.last_hour.calls == 0
    assert stats.last_day.calls == 0
    assert stats.total.billed == 1010


def test_window_frees_when_enough_spend_has_left() -> None:
    points = [(0.0, 600), (100.0, 300), (200.0, 300)]
    # 1200 spent in the hour; under a limit of 1000 the first call must leave (at 3600)
    assert window_frees_at(points, 250.0, HOUR_S, 1000) == 3600.0
    # under 500, the first two must leave
    assert window_frees_at(points, 250.0, HOUR_S, 500) == 3700.0
    assert window_frees_at(points, 250.0, HOUR_S, 1201) is None
    assert window_frees_at(points, 250.0, HOUR_S, 0) is None  # unlimited


@given(
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 5_000)), min_size=0, max_size=30),
    st.integers(1, 20_000),
    st.integers(0, 12_000),
)
def test_frees_at_is_the_first_moment_under_the_limit(
    raw: list[tuple[int, int]], limit: int, now: int
) -> None:
    points = [(float(at), billed) for at, billed in raw if at <= now]
    window = 3600.0
    frees = window_frees_at(points, float(now), window, limit)
    if window_spent(points, float(now), window) < limit:
        assert frees is None
        return
    assert frees is not None
    assert frees > now
    assert window_spent(points, frees, window) < limit
    assert window_spent(points, frees - 0.5, window) >= limit


def test_round_trip_through_the_state_dir(tmp_path: Path) -> None:
    clock = FakeClock(START)
    ledger = Ledger.load(tmp_path, clock)
    ledger.record("compact", usage(500, 50, 20, 30), project="p", session="s", model="m")
    clock.advance(3 * HOUR_S)  # old enough to be folded into an hourly bucket on save
    ledger.record("recall", usage(7, 3), project="q", session="t", model="h")
    ledger.save()
    assert [p.name for p in tmp_path.iterdir()] == [LEDGER_FILE]  # no temp files left

    again = Ledger.load(tmp_path, clock)
    assert again.statistics() == ledger.statistics()
    assert [(r.kind, r.session, r.model) for r in again.records()] == [("recall", "t", "h")]
    assert again.spent(DAY_S) == ledger.spent(DAY_S) == 500 + 50 + 25 + 3 + 10


def test_a_corrupt_file_is_moved_aside_and_the_ledger_starts_empty(tmp_path: Path) -> None:
    (tmp_path / LEDGER_FILE).write_text('{"version": 1, "records": [[1, "bogus"')
    ledger = Ledger.load(tmp_path, FakeClock(START))
    assert ledger.statistics().total.calls == 0
    assert (tmp_path / (LEDGER_FILE + ".corrupt")).exists()
    assert not (tmp_path / LEDGER_FILE).exists()


def test_unknown_job_kind_in_the_file_is_refused(tmp_path: Path) -> None:
    clock = FakeClock(START)
    ledger = Ledger.load(tmp_path, clock)
    ledger.record("dream", usage(1), project="p")
    ledger.save()
    data = json.loads((tmp_path / LEDGER_FILE).read_text())
    data["records"][0][1] = "mining"
    (tmp_path / LEDGER_FILE).write_text(json.dumps(data))
    assert Ledger.load(tmp_path, clock).statistics().total.calls == 0


def test_history_stays_bounded_and_totals_survive(tmp_path: Path) -> None:
    clock = FakeClock(START)
    ledger = Ledger(tmp_path / LEDGER_FILE, clock)
    calls = 0
    for _ in range(int(RETENTION_S / HOUR_S) + 48):  # every hour for longer than retention
        for _ in range(5):
            ledger.record("session_notes", usage(100), project="p")
            calls += 1
        clock.advance(HOUR_S)
    ledger.save()
    size = (tmp_path / LEDGER_FILE).stat().st_size
    for _ in range(48):
        for _ in range(5):
            ledger.record("session_notes", usage(100), project="p")
            calls += 1
        clock.advance(HOUR_S)
    ledger.save()
    # retention keeps the number of buckets fixed: the file does not grow with time
    assert (tmp_path / LEDGER_FILE).stat().st_size <= size + 64
    stats = ledger.statistics()
    assert stats.total.calls == calls
    # the calls of the last 23 hours (the 24th is exactly a day old), bucketed or not
    assert stats.last_day.calls == 23 * 5
    assert len(ledger.records()) <= 3 * 5


def test_too_many_recent_records_are_folded(tmp_path: Path) -> None:
    clock = FakeClock(START)
    ledger = Ledger(tmp_path / LEDGER_FILE, clock)
    for _ in range(MAX_RAW_RECORDS + 10):
        ledger.record("recall", usage(1), project="p")
    assert len(ledger.records()) <= MAX_RAW_RECORDS
    assert ledger.spent(HOUR_S) == MAX_RAW_RECORDS + 10


@pytest.mark.anyio
async def test_flusher_writes_on_interval_and_on_shutdown(tmp_path: Path) -> None:
    clock = FakeClock(START)
    ledger = Ledger.load(tmp_path, clock)
    path = tmp_path / LEDGER_FILE
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(run_ledger_flusher, ledger, clock, 2.0)
            ledger.record("dream", usage(1), project="p")
            await clock.wait_for_sleepers()
            assert not path.exists()
            clock.advance(2.0)
            await clock.wait_for_sleepers()
            assert Ledger.load(tmp_path, clock).statistics().total.calls == 1
            ledger.record("dream", usage(1), project="p")
            tg.cancel_scope.cancel()
    assert Ledger.load(tmp_path, clock).statistics().total.calls == 2


# What happens to the ledger between two looks: a call recorded (its age in seconds before
# the look, its billed size), the clock moved (seconds, backwards too), or a compaction.
_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("record"), st.floats(0, 2 * DAY_S), st.integers(1, 400)),
        st.tuples(st.just("tick"), st.floats(-2 * HOUR_S, 2 * HOUR_S), st.just(0)),
        st.tuples(st.just("compact"), st.just(0.0), st.just(0)),
    ),
    max_size=40,
)


@given(steps=_STEPS, limits=st.tuples(st.integers(0, 2_000), st.integers(0, 6_000)))
def test_remembered_windows_are_the_windows_computed_afresh(
    steps: list[tuple[str, float, int]], limits: tuple[int, int]
) -> None:
    """``status`` and every guard decision read the budget and usage figures from a memo kept
    until the ledger changes or a point leaves a window: at every look it must equal what a
    fresh computation over every point says, to the token and the second."""
    from memd.config_llm import BudgetConfig
    from memd.llm.ledger import spend_points, statistics_of
    from memd.llm.windows import budget_status

    clock = FakeClock(START + 3 * DAY_S)
    ledger = Ledger(Path("/nonexistent") / LEDGER_FILE, clock)
    budget = BudgetConfig(tokens_per_hour=limits[0], tokens_per_day=limits[1])
    for what, seconds, billed in steps:
        if what == "record":
            ledger.record("dream", usage(inp=billed), project="p", at=clock.now() - seconds)
        elif what == "tick":
            if seconds >= 0:
                clock.advance(seconds)
            else:  # the wall clock was set back
                clock._wall_origin += seconds
        else:
            ledger.compact()
        now = clock.now()
        state = ledger._state
        assert ledger.budget(budget, now) == budget_status(budget, spend_points(state), now)
        assert ledger.usage() == statistics_of(state, now).as_dict()


def test_a_local_models_calls_cost_nothing_but_their_time_and_count_per_backend(
    tmp_path: Path,
) -> None:
    clock = FakeClock(START)
    ledger = Ledger(tmp_path / "ledger.json", clock)
    ledger.record(
        "session_notes", Usage(1000, 200), project="p", backend="local", priced=False, seconds=12.5
    )
    ledger.record("dream", Usage(1000, 200), project="p", backend="anthropic", seconds=3.0)
    stats = ledger.statistics()
    rows = {t.name: t.tokens for t in stats.by_backend}
    assert rows["local"].billed == 0 and rows["local"].input == 1000 and rows["local"].ms == 12_500
    assert rows["anthropic"].billed == 1200 and rows["anthropic"].ms == 3_000
    assert ledger.spent(HOUR_S) == 1200  # the budget counts what costs money
    ledger.save()
    again = Ledger(ledger.path, clock, decode(json.loads(ledger.path.read_bytes())))
    assert again.statistics().by_backend == stats.by_backend


def test_a_ledger_written_before_backends_is_read(tmp_path: Path) -> None:
    tokens = {
        "input": 5,
        "output": 1,
        "cache_creation": 0,
        "cache_read": 0,
        "billed": 6,
        "calls": 1,
    }
    old = {
        "version": 1,
        "records": [[1.0, "recall", "p", "s", "claude-haiku-4-5", tokens]],
        "buckets": [],
        "totals": [["recall", "p", tokens]],
    }
    state = decode(old)
    assert state.records[0].backend == "" and state.records[0].tokens.ms == 0
    assert state.totals[("recall", "p")].billed == 6
