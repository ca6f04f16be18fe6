"""The fake clock wakes sleepers in deadline order, only when told to."""

from __future__ import annotations

import anyio
import pytest

from memd.clock import FakeClock, SystemClock


@pytest.mark.anyio
async def test_advance_wakes_due_sleepers_in_deadline_order() -> None:
    clock = FakeClock(start=1000.0)
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append((name, clock.now()))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sleeper, "late", 30.0)
            tg.start_soon(sleeper, "early", 10.0)
            await clock.wait_for_sleepers(2)
            assert clock.next_deadline() == 1010.0
            clock.advance(5.0)
            await anyio.wait_all_tasks_blocked()
            assert woke == []
            clock.advance(100.0)
    assert [name for name, _ in woke] == ["early", "late"]
    assert clock.now() == 1105.0
    assert clock.monotonic() == 105.0


@pytest.mark.anyio
async def test_advance_to_next_jumps_exactly_to_the_deadline() -> None:
    clock = FakeClock(start=0.0)
    assert not clock.advance_to_next()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(clock.sleep, 42.0)
            await clock.wait_for_sleepers()
            assert clock.advance_to_next()
    assert clock.now() == 42.0
    assert clock.sleepers == 0


@pytest.mark.anyio
async def test_cancelled_sleeper_is_forgotten() -> None:
    clock = FakeClock()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(clock.sleep, 10.0)
            await clock.wait_for_sleepers()
            tg.cancel_scope.cancel()
    assert clock.sleepers == 0
    assert clock.next_deadline() is None


@pytest.mark.anyio
async def test_zero_sleep_returns_without_a_sleeper() -> None:
    clock = FakeClock()
    with anyio.fail_after(5):
        await clock.sleep(0)
        await clock.sleep(-1)
    assert clock.sleepers == 0


def test_clock_does_not_go_backwards() -> None:
    with pytest.raises(ValueError):
        FakeClock().advance(-1)


@pytest.mark.anyio
async def test_system_clock_is_real_time() -> None:
    clock = SystemClock()
    before = clock.monotonic()
    await clock.sleep(0)
    assert clock.monotonic() >= before
    assert clock.now() > 1_600_000_000
