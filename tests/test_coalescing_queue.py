"""The ingest queue: marks coalesce, and a wait for "read since now" ends even while a key
keeps being marked (a transcript being written during the start-up scan)."""

from __future__ import annotations

import anyio
import pytest

from memd.daemon.queues import CoalescingQueue

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
