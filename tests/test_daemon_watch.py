"""The watcher on a real file tree: every transcript that appears is marked, including those
written into a project folder before inotify had a watch on it."""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from memd.config import TranscriptsConfig
from memd.daemon.watch import READS_PER_STEP, WatchedRoot, run_watcher, transcripts_below
from memd.queues import CoalescingQueue

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def one_session_watched(
    tmp_path: Path, config: TranscriptsConfig
) -> AsyncIterator[tuple[Path, CoalescingQueue[Path]]]:
    """A project folder with one transcript under a running watcher; the transcript and the
    queue the watcher marks; the watcher stopped at the end."""
    folder = tmp_path / "-project"
    folder.mkdir()
    transcript = folder / "s.jsonl"
    transcript.write_bytes(b'{"type":"user"}\n')
    queue: CoalescingQueue[Path] = CoalescingQueue()
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        await tg.start(
            functools.partial(run_watcher, stop=stop), [WatchedRoot(tmp_path)], config, queue
        )
        yield transcript, queue
        stop.set()
        tg.cancel_scope.cancel()


async def drain(queue: CoalescingQueue[Path], want: set[Path]) -> set[Path]:
    seen: set[Path] = set()
    with anyio.fail_after(20):
        while not want <= seen:
            seen.add(await queue.get())
    return seen


async def test_transcripts_in_a_brand_new_project_folder_are_marked(tmp_path: Path) -> None:
    queue: CoalescingQueue[Path] = CoalescingQueue()
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        await tg.start(
            functools.partial(run_watcher, stop=stop),
            [WatchedRoot(tmp_path)],
            TranscriptsConfig(),
            queue,
        )
        want: set[Path] = set()
        for i in range(20):
            # mkdir then write at once: the file exists before the folder is watched.
            folder = tmp_path / f"-project-{i}"
            folder.mkdir()
            main = folder / f"s{i}.jsonl"
            main.write_bytes(b'{"type":"user"}\n')
            sub = folder / f"s{i}" / "subagents"
            sub.mkdir(parents=True)
            (sub / "agent-1.jsonl").write_bytes(b"{}\n")
            want |= {main, sub / "agent-1.jsonl"}
        await drain(queue, want)
        stop.set()
        tg.cancel_scope.cancel()


def test_transcripts_below_skips_links_and_bounds_depth(tmp_path: Path) -> None:
    (tmp_path / "a" / "b" / "c" / "d").mkdir(parents=True)
    (tmp_path / "a" / "x.jsonl").write_bytes(b"")
    (tmp_path / "a" / "b" / "c" / "y.jsonl").write_bytes(b"")
    (tmp_path / "a" / "b" / "c" / "d" / "too-deep.jsonl").write_bytes(b"")
    (tmp_path / "a" / "loop").symlink_to(tmp_path / "a")
    os.mkfifo(tmp_path / "a" / "fifo")
    found = transcripts_below(str(tmp_path / "a"))
    assert sorted(p.name for p in found) == ["x.jsonl", "y.jsonl"]
    assert transcripts_below(str(tmp_path / "a" / "x.jsonl")) == []  # a file, not a folder
    assert transcripts_below(str(tmp_path / "gone")) == []


async def test_cancelling_the_watcher_ends_it_at_once(tmp_path: Path) -> None:
    """The watchfiles thread waits with no timeout (no idle wake-ups): cancelling the
    watcher without its stop event (a failing sibling, a test's teardown) must still end
    it within a few steps, not hang on the thread."""
    queue: CoalescingQueue[Path] = CoalescingQueue()
    config = TranscriptsConfig()
    for _ in range(3):
        with anyio.fail_after(3):
            async with anyio.create_task_group() as tg:
                await tg.start(
                    functools.partial(run_watcher, stop=anyio.Event()),
                    [WatchedRoot(tmp_path)],
                    config,
                    queue,
                )
                (tmp_path / "-p").mkdir(exist_ok=True)
                await anyio.sleep(0.2)  # the thread is inside its wait
                tg.cancel_scope.cancel()


async def test_a_lone_append_is_marked_without_waiting_for_the_step(tmp_path: Path) -> None:
    """The first event of a quiet period is marked at once: ``watch_step_ms`` gathers what
    follows a read, it is not a delay before it (follow latency, issue 28). With a step of ten
    minutes, the append must still be marked well within the test's deadline."""
    step = TranscriptsConfig(watch_step_ms=600_000)
    async with one_session_watched(tmp_path, step) as (transcript, queue):
        with transcript.open("ab") as out:
            out.write(b'{"type":"assistant"}\n')
        assert await drain(queue, {transcript}) == {transcript}


async def test_appends_that_follow_one_another_are_each_marked_at_once(tmp_path: Path) -> None:
    """After a read the watcher slept ``watch_step_ms`` whatever came: with other sessions
    growing, an append waited up to a step (50 ms) to be read. Now only a storm (more reads
    in a step than ``READS_PER_STEP``) is gathered: with a step of ten minutes, each of a few
    appends in a row is still marked within the test's deadline, and the one after them
    waits for the step."""
    step = TranscriptsConfig(watch_step_ms=600_000)
    async with one_session_watched(tmp_path, step) as (transcript, queue):
        for _ in range(READS_PER_STEP):
            with transcript.open("ab") as out:
                out.write(b'{"type":"assistant"}\n')
            with anyio.fail_after(20):
                assert await queue.get() == transcript
            queue.done(transcript)
        with transcript.open("ab") as out:  # a storm: the rest of the step is gathered
            out.write(b'{"type":"assistant"}\n')
        with anyio.move_on_after(0.5):
            await queue.get()
            raise AssertionError("a read past READS_PER_STEP in one step was not gathered")
