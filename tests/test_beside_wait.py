"""Extraction beside Claude Code's own auto memory (issue 36, item 4), in this process: a turn
waits for Claude Code's memory, judged on the memory dir (what anyone but memd added or
changed there after the turn end), for at most the wait or until the session ends; the jobs
skip the turn it took, covering its messages."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.clock import FakeClock
from memd.memory.beside_wait import BesideWaits, Snapshot, snapshot, written_since
from memd.memory.location import Location
from memd.state import SessionState

pytestmark = pytest.mark.anyio

identities = st.tuples(st.integers(1, 9), st.integers(0, 9), st.integers(0, 9))
snapshots = st.dictionaries(st.sampled_from(["a.md", "b.md", "c/d.md", "e.md"]), identities)


@given(snapshots, snapshots, st.dictionaries(st.sampled_from(["a.md", "e.md"]), st.integers(0, 9)))
def test_written_since_is_what_changed_and_memd_did_not_leave(
    before: Snapshot, after: Snapshot, ours: dict[str, int]
) -> None:
    found = written_since(before, after, ours)
    assert found == sorted(found)
    for relative, identity in after.items():
        changed = before.get(relative) != identity
        memd_left_it = ours.get(relative) == identity[2]
        assert (relative in found) == (changed and not memd_left_it), relative
    assert set(found) <= set(after)  # a file gone is no write


def test_a_snapshot_notes_topic_files_and_passes_links_over(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    (memory / "deep").mkdir(parents=True)
    (memory / "a.md").write_text("a")
    (memory / "deep" / "b.md").write_text("b")
    (memory / "MEMORY.md").write_text("- [a](a.md)\n")
    (memory / "link.md").symlink_to(memory / "a.md")
    assert set(snapshot(memory)) == {"a.md", "deep/b.md"}
    assert snapshot(tmp_path / "absent") == {}


class Queued:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []
        self.event = anyio.Event()

    async def __call__(
        self, where: Location, state: SessionState, cwd: str, taken: str | None
    ) -> None:
        self.calls.append((state.session_id, taken))
        self.event.set()


def waits_for(
    memory: Path, ours: Mapping[str, int] | None = None
) -> tuple[BesideWaits, FakeClock, Queued, Location, SessionState]:
    clock, queued = FakeClock(), Queued()
    waits = BesideWaits(clock, lambda: 60.0, queued, lambda _: dict(ours or {}))
    where = Location(memory, (str(memory),), None)
    return waits, clock, queued, where, SessionState("s1", "-p", "/t/s1.jsonl", cwd="/p")


async def test_a_memory_claude_code_writes_after_the_turn_takes_it(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    (memory / "old.md").write_text("old")
    waits, clock, queued, where, state = waits_for(memory)
    async with anyio.create_task_group() as tg:
        tg.start_soon(waits.run)
        await waits.begin(where, state, "/p")
        await clock.wait_for_sleepers()
        assert queued.calls == [] and waits.waiting == 1  # waits for Claude Code's memory
        (memory / "deploy.md").write_text("Deploy with make ship.")  # Claude Code's write
        clock.advance(60.0)
        await queued.event.wait()
        tg.cancel_scope.cancel()
    ((session, taken),) = queued.calls
    assert session == "s1" and taken is not None and "deploy.md" in taken


async def test_a_turn_nothing_wrote_after_is_extracted_once_the_session_ends(
    tmp_path: Path,
) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    (memory / "ours.md").write_text("memd's")
    waits, clock, queued, where, state = waits_for(memory)
    async with anyio.create_task_group() as tg:
        tg.start_soon(waits.run)
        await waits.begin(where, state, "/p")
        await clock.wait_for_sleepers()
        waits.ended("s1")  # SessionEnd: nothing more comes from Claude Code, no need to wait
        await queued.event.wait()
        tg.cancel_scope.cancel()
    assert queued.calls == [("s1", None)] and clock.monotonic() == 0.0


async def test_memds_own_writes_are_not_claude_codes(tmp_path: Path) -> None:
    """A file memd's extraction of another session wrote meanwhile, as memd left it."""
    memory = tmp_path / "memory"
    memory.mkdir()
    ours: dict[str, int] = {}
    waits, clock, queued, where, state = waits_for(memory, ours)
    async with anyio.create_task_group() as tg:
        tg.start_soon(waits.run)
        await waits.begin(where, state, "/p")
        await clock.wait_for_sleepers()
        (memory / "from_memd.md").write_text("written by memd's extraction of another session")
        ours["from_memd.md"] = os.stat(memory / "from_memd.md").st_mtime_ns
        waits.ended("s1")
        await queued.event.wait()
        tg.cancel_scope.cancel()
    assert queued.calls == [("s1", None)]


async def test_a_session_that_ended_first_is_judged_at_once(tmp_path: Path) -> None:
    """Its SessionEnd came before its last turn end was read: no wait at all."""
    memory = tmp_path / "memory"
    memory.mkdir()
    waits, _clock, queued, where, state = waits_for(memory)
    waits.ended("s1")
    async with anyio.create_task_group() as tg:
        tg.start_soon(waits.run)
        await waits.begin(where, state, "/p")
        await queued.event.wait()
        tg.cancel_scope.cancel()
    assert queued.calls == [("s1", None)]
