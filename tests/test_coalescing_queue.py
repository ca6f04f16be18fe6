"""The ingest queue: marks coalesce, and a wait for "read since now" ends even while a key
keeps being marked (a transcript being written during the start-up scan)."""

from __future__ import annotations

import anyio
import pytest

from memd.queues import CoalescingQueue

pytestmark = pytest.mark.anyio


async def worker(queue: CoalescingQueue[str], runs: list[str], keep_marking: set[str]) -> None:
    """Take keys one by one; a key in ``keep_marking`` is marked again during each run."""
    while True:
        key = await queue.get()
        if key in keep_marking:
            queue.mark_nowait(key)
        await anyio.sleep(0.001)
        runs.append(key)
        queue.done(key)


async def test_a_key_marked_on_every_run_does_not_hold_the_wait() -> None:
    queue: CoalescingQueue[str] = CoalescingQueue()
    for key in ("busy", "quiet"):
        queue.mark_nowait(key)
    runs: list[str] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker, queue, runs, {"busy"})
            await queue.wait_runs(["busy", "quiet"])
            assert {"busy", "quiet"} <= set(runs)
            assert queue.is_queued("busy") or queue.is_running("busy")  # still being written
            tg.cancel_scope.cancel()


async def test_a_run_that_started_before_the_wait_does_not_count() -> None:
    queue: CoalescingQueue[str] = CoalescingQueue()
    queue.mark_nowait("a")
    assert await queue.get() == "a"  # its run started before the new mark
    queue.mark_nowait("a")
    ended = anyio.Event()

    async def wait() -> None:
        await queue.wait_runs(["a"])
        ended.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            queue.done("a")  # the old run ends: what the mark asked for is not read yet
            await anyio.wait_all_tasks_blocked()
            assert not ended.is_set()
            assert await queue.get() == "a"
            queue.done("a")
            await ended.wait()


async def test_keys_not_queued_need_no_wait_and_nothing_is_left_behind() -> None:
    queue: CoalescingQueue[str] = CoalescingQueue()
    with anyio.fail_after(1):
        await queue.wait_runs(["never-marked"])
        await queue.wait_runs([])
    queue.mark_nowait("x")
    with anyio.move_on_after(0.01):
        await queue.wait_runs(["x"])  # cancelled: its waiter goes too
    assert await queue.get() == "x"
    queue.done("x")
    assert queue.statistics().queued == queue.statistics().running == 0


async def test_the_now_lane_goes_first_and_bulk_work_stays_in_the_later_lane() -> None:
    """A file with more to read (marked ``later``) waits behind a change to any other file,
    and a change reported to it meanwhile does not bring it back to the front."""
    queue: CoalescingQueue[str] = CoalescingQueue()
    queue.mark_nowait("big-1", later=True)
    queue.mark_nowait("big-2")
    queue.mark_nowait("big-2", later=True)  # its turn left more: to the back of ``later``
    queue.mark_nowait("big-1")  # it grew meanwhile: it keeps its place
    queue.mark_nowait("live")
    assert queue.statistics().queued == 3
    with anyio.fail_after(5):
        assert await queue.get(now_only=True) == "live"
        assert await queue.get() == "big-1"
        assert await queue.get() == "big-2"
        queue.mark_nowait("big-1", later=True)
        with anyio.move_on_after(0.05):
            await queue.get(now_only=True)  # the live worker never takes bulk work
            raise AssertionError("a now_only get took a key of the later lane")
        queue.done("big-1")
        assert await queue.get() == "big-1"


async def test_a_deferred_key_is_not_a_run_for_waiters() -> None:
    """The live worker hands back a file that needs a rebuild: whoever waits for that file's
    run still waits for the run that reads it."""
    queue: CoalescingQueue[str] = CoalescingQueue()
    queue.mark_nowait("evicted")
    ended = anyio.Event()

    async def wait() -> None:
        await queue.wait_runs(["evicted"])
        ended.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            assert await queue.get(now_only=True) == "evicted"
            queue.defer("evicted")
            await anyio.wait_all_tasks_blocked()
            assert not ended.is_set() and queue.is_queued("evicted")
            assert await queue.get() == "evicted"
            queue.done("evicted")
            await ended.wait()


async def test_every_waiting_worker_wakes_for_work() -> None:
    """Each getter made an event of its own and only the newest was ever set: of the two
    ingest workers waiting on an idle queue, one never took a key again."""
    queue: CoalescingQueue[str] = CoalescingQueue()
    taken: list[str] = []

    async def take() -> None:
        taken.append(await queue.get())

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(take)
            tg.start_soon(take)
            await anyio.wait_all_tasks_blocked()
            queue.mark_nowait("a")
            queue.mark_nowait("b")
    assert sorted(taken) == ["a", "b"]
    assert queue.statistics().running == 2
