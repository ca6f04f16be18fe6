"""Config wiring is behaviour: each value that becomes seconds, lines, bytes or a count is
tested here through the service that uses it, on both sides of its boundary, with a value
unlike the default and unlike its neighbours (so a key handed another key's value, or a unit
off by 60, fails). Real lock files, memory dirs and transcripts; the model is the loopback
server."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from memd.config import Config, DreamConfig, MemoryConfig
from memd.dream import lock
from memd.dream.history import dream_restore
from memd.dream.lock import LOCK_NAME
from memd.dream.service import DreamService
from memd.llm.backends import CLAUDE
from memd.llm.client import LLM, Disabled
from memd.memory.recall import recall
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_replies import When
from tests.dream_support import make_service
from tests.test_dream_service import NOTE, prepare
from tests.test_memory_service import World

pytestmark = pytest.mark.anyio

HOUR = 3600.0


def _with(**sections: Any) -> Config:
    return dataclasses.replace(Config(), **sections)


def _old_process() -> int:
    """A live process that started long before any lock these tests write: PID 1."""
    started = lock.process_start_ns(1)
    if started is not None and started > time.time_ns() - 300 * 10**9:
        pytest.skip("PID 1 started under 5 minutes ago: no process old enough to hold a lock")
    return 1


def _age_lock(memory: Path, body: bytes, age_s: float) -> None:
    path = memory / LOCK_NAME
    path.write_bytes(body)
    then = time.time() - age_s
    os.utime(path, (then, then))


async def _run(service: DreamService) -> dict[str, Any]:
    """A forced check; the run it started, once over (``None`` when none started)."""
    with anyio.fail_after(30):
        answer = await service.check(cwd=None, project="proj", force=True)
        if answer["started"]:
            running = service.find_dir(Path(answer["memory_dir"])).running
            if running is not None:
                await running.done.wait()
    return answer


# -- dream.lock_stale_minutes ------------------------------------------------------------------


@pytest.mark.parametrize(("age_s", "taken"), [(50.0, False), (70.0, True)])
async def test_the_dream_takes_over_a_live_holders_lock_after_lock_stale_minutes(
    tmp_path: Path, api: LoopbackAPI, llm: LLM, age_s: float, taken: bool
) -> None:
    memory = prepare(tmp_path)
    holder = _old_process()
    _age_lock(memory, str(holder).encode(), age_s)
    api.push(replies.text("Nothing to merge."))
    service = make_service(tmp_path, llm, _with(dream=DreamConfig(lock_stale_minutes=1)))
    async with anyio.create_task_group() as tg:
        await tg.start(service.run)
        answer = await _run(service)
        tg.cancel_scope.cancel()
    if taken:
        assert answer["started"], answer
        assert (memory / LOCK_NAME).read_text() == str(os.getpid())  # completed: ours now
    else:
        assert answer["verdict"]["gate"] == "lock", answer
        assert f"held by live pid {holder}" in answer["verdict"]["reason"]
        assert (memory / LOCK_NAME).read_text() == str(holder)


@pytest.mark.parametrize(("age_s", "taken"), [(50.0, False), (70.0, True)])
async def test_a_restore_takes_over_a_live_holders_lock_after_lock_stale_minutes(
    tmp_path: Path, api: LoopbackAPI, llm: LLM, age_s: float, taken: bool
) -> None:
    memory = prepare(tmp_path)
    api.push(
        replies.tool_use(
            "Edit", {"file_path": "n.md", "old_string": "yesterday", "new_string": "on 2026-11-21"}
        ),
        replies.text("Dated it."),
    )
    service = make_service(tmp_path, llm, _with(dream=DreamConfig(lock_stale_minutes=1)))
    async with anyio.create_task_group() as tg:
        await tg.start(service.run)
        assert (await _run(service))["started"]
        assert (memory / "n.md").read_text() != NOTE
        holder = _old_process()
        _age_lock(memory, str(holder).encode(), age_s)
        if taken:
            done = await dream_restore(service, memory, None)
            assert done["state"] == "restored", done
            assert (memory / "n.md").read_text() == NOTE
        else:
            with pytest.raises(ValueError, match=f"held by live pid {holder}"):
                await dream_restore(service, memory, None)
            assert (memory / LOCK_NAME).read_text() == str(holder)
        tg.cancel_scope.cancel()


# -- memory.index_max_lines and memory.index_max_bytes in the dream's wipe guard ---------------


@pytest.mark.parametrize(
    ("memory_cfg", "index", "kept"),
    [
        (MemoryConfig(index_max_lines=3), "- a\n- b\n- c\n", True),
        (MemoryConfig(index_max_lines=3), "- a\n- b\n- c\n- d\n", False),
        (MemoryConfig(index_max_bytes=60), "- " + "x" * 57 + "\n", True),
        (MemoryConfig(index_max_bytes=60), "- " + "x" * 58 + "\n", False),
    ],
    ids=["3-lines-of-3", "4-lines-of-3", "60-bytes-of-60", "61-bytes-of-60"],
)
async def test_the_dream_keeps_an_index_within_its_line_and_byte_limits(
    tmp_path: Path, api: LoopbackAPI, llm: LLM, memory_cfg: MemoryConfig, index: str, kept: bool
) -> None:
    memory = prepare(tmp_path)  # MEMORY.md: one line, 16 bytes
    api.push(
        replies.tool_use("Write", {"file_path": "MEMORY.md", "content": index}),
        replies.text("Rewrote the index."),
    )
    service = make_service(tmp_path, llm, _with(memory=memory_cfg))
    async with anyio.create_task_group() as tg:
        await tg.start(service.run)
        await _run(service)
        tg.cancel_scope.cancel()
    run = service.row(memory)["last_runs"][0]
    if kept:
        assert run["state"] == "completed", run
        assert (memory / "MEMORY.md").read_text() == index
    else:
        assert run["state"] == "failed" and "MEMORY.md grew to" in run["reason"], run
        assert (memory / "MEMORY.md").read_text() == "- [n](n.md) — d\n"


# -- dream.min_sessions, dream.min_hours, dream.scan_throttle_minutes: the gates ----------------


def _project(tmp_path: Path, sessions: int, lock_age_s: float) -> Path:
    memory = tmp_path / "projects" / "proj" / "memory"
    memory.mkdir(parents=True)
    (memory / "MEMORY.md").write_text("- [n](n.md) — d\n")
    (memory / "n.md").write_text(NOTE)
    _age_lock(memory, b"", lock_age_s)
    for n in range(sessions):
        (memory.parent / f"s{n}.jsonl").write_text("{}\n")
    return memory


async def _gates(
    tmp_path: Path,
    llm: LLM,
    config: Config,
    sessions: int,
    lock_age_s: float,
    scanned_ago_s: float | None = None,
) -> Any:
    """An automatic gate check (as at a turn end) and the run it started, if any."""
    memory = _project(tmp_path, sessions, lock_age_s)
    service = make_service(tmp_path, llm, config)
    if scanned_ago_s is not None:
        service.find_dir(memory).last_scan_at = time.time() - scanned_ago_s
    async with anyio.create_task_group() as tg:
        await tg.start(service.run)
        with anyio.fail_after(30):
            verdict, record = await service._check(
                service.find_dir(memory), force=False, trigger="", auto=True
            )
            running = service.find_dir(memory).running
            if running is not None:
                await running.done.wait()
        tg.cancel_scope.cancel()
    return verdict, record


@pytest.mark.parametrize(("sessions", "dreams"), [(4, False), (5, True)])
async def test_five_sessions_open_the_session_gate_four_do_not(
    tmp_path: Path, api: LoopbackAPI, llm: LLM, sessions: int, dreams: bool
) -> None:
    api.push(replies.text("Nothing to merge."))
    verdict, record = await _gates(tmp_path, llm, Config(), sessions, 2 * 86400)
    if dreams:
        assert record is not None and len(record.sessions) == 5, verdict
    else:
        assert record is None and verdict.gate == "sessions", verdict
        assert verdict.reason.startswith("sessions: 4 of 5 since ")


@pytest.mark.parametrize(("sessions", "dreams"), [(2, False), (3, True)])
async def test_min_sessions_is_the_session_gate(
    tmp_path: Path, api: LoopbackAPI, llm: LLM, sessions: int, dreams: bool
) -> None:
    api.push(replies.text("Nothing to merge."))
    config = _with(dream=DreamConfig(min_sessions=3))
    verdict, record = await _gates(tmp_path, llm, config, sessions, 2 * 86400)
    assert (record is not None) == dreams, verdict


@pytest.mark.parametrize(("hours", "dreams"), [(2.9, False), (3.1, True)])
async def test_min_hours_is_the_time_gate(
    tmp_path: Path, api: LoopbackAPI, llm: LLM, hours: float, dreams: bool
) -> None:
    api.push(replies.text("Nothing to merge."))
    config = _with(dream=DreamConfig(min_hours=3))
    verdict, record = await _gates(tmp_path, llm, config, 6, hours * HOUR)
    if dreams:
        assert record is not None, verdict
    else:
        assert record is None and verdict.reason == "time: 2.9 h of 3 h", verdict


@pytest.mark.parametrize(("minutes", "scans"), [(6.5, False), (7.5, True)])
async def test_scan_throttle_minutes_spaces_the_session_scans(
    tmp_path: Path, llm: LLM, minutes: float, scans: bool
) -> None:
    config = _with(dream=DreamConfig(scan_throttle_minutes=7))
    verdict, record = await _gates(tmp_path, llm, config, 4, 2 * 86400, scanned_ago_s=minutes * 60)
    assert record is None
    if scans:
        assert verdict.gate == "sessions", verdict  # counted: 4 of 5
    else:
        assert verdict.gate == "throttle" and "waits 7 min" in verdict.reason, verdict


# -- memory.frontmatter_lines and memory.scan_max_files: the memory scan -----------------------

ALPHA = "---\nname: alpha\ndescription: postgres alpha\ntype: feedback\n---\n\nbody\n"
# ``description`` on line 7: read with frontmatter_lines=7, not with 6
BETA = "---\nname: beta\nx1: 1\nx2: 2\nx3: 3\nx4: 4\ndescription: postgres zebra\n---\n\nb\n"


def _memories(world: World, names: list[str]) -> None:
    """Topic files, the first in ``names`` the newest."""
    world.memory.mkdir(parents=True, exist_ok=True)
    for age, name in enumerate(names):
        path = world.memory / name
        path.write_text(BETA if name == "beta.md" else ALPHA.replace("alpha", name[:-3]))
        then = time.time() - 60 * (age + 1)
        os.utime(path, (then, then))


@pytest.mark.parametrize(("lines", "seen"), [(6, False), (7, True)])
async def test_frontmatter_lines_is_how_far_memories_and_recall_read(
    tmp_path: Path, lines: int, seen: bool
) -> None:
    config = _with(memory=MemoryConfig(frontmatter_lines=lines, extract_beside_claude_code=True))
    world = World(tmp_path, Disabled("no API key"), config=config)
    _memories(world, ["beta.md", "alpha.md"])
    rows = (await world.service.memories(cwd=str(world.cwd)))["memories"]
    descriptions = {r["relative"]: r["description"] for r in rows}
    assert descriptions == {
        "alpha.md": "postgres alpha",
        "beta.md": "postgres zebra" if seen else None,
    }
    # Recall finds beta by its description only when the scan reads that far.
    found = await world.service.recall("zebra", str(world.cwd), "s1")  # the cached scan
    assert [m.relative for m in found.memories] == (["beta.md"] if seen else []), found
    plain = await recall("zebra", memory_dir=world.memory, llm=None, cfg=config, clock=world.clock)
    assert [m.relative for m in plain.memories] == (["beta.md"] if seen else [])


@pytest.mark.parametrize("most", [2, 3])
async def test_scan_max_files_is_how_many_memories_are_listed_and_a_model_is_shown(
    tmp_path: Path, api: LoopbackAPI, llm: LLM, most: int
) -> None:
    """R-M4's cap is on what a listing and a model's manifest hold; the offline ranker
    considers every memory (issue 27)."""
    memory = dataclasses.replace(
        MemoryConfig(scan_max_files=most, extract_beside_claude_code=True),
        recall_timeout_s=60.0,
        recall_model_budget_s=60.0,
    )
    config = _with(memory=memory)
    world = World(tmp_path, Disabled("no API key"), config=config)
    names = ["m1.md", "m2.md", "m3.md", "m4.md"]  # newest first
    _memories(world, names)
    rows = (await world.service.memories(cwd=str(world.cwd)))["memories"]
    assert [r["relative"] for r in rows] == names[:most]
    plain = await recall(
        "postgres", memory_dir=world.memory, llm=None, cfg=config, clock=world.clock
    )
    assert plain.candidates == len(names)
    api.add_rule(When(model=CLAUDE["recall"]), replies.text('["m1.md"]'))
    await recall("postgres", memory_dir=world.memory, llm=llm, cfg=config, clock=world.clock)
    prompt = str(api.requests[0].body["messages"][0]["content"])
    assert len([line for line in prompt.splitlines() if line.startswith("- [")]) == most


@pytest.mark.parametrize("most", [1, 2])
async def test_recall_max_is_how_many_memories_a_recall_returns(tmp_path: Path, most: int) -> None:
    config = _with(memory=MemoryConfig(recall_max=most, extract_beside_claude_code=True))
    world = World(tmp_path, Disabled("no API key"), config=config)
    _memories(world, ["m1.md", "m2.md", "m3.md"])
    found = await world.service.recall("postgres", str(world.cwd), "s1")
    assert len(found.memories) == most, found


# -- dream.snapshots_kept and llm.max_output_tokens ---------------------------------------------


@pytest.mark.parametrize("kept", [1, 2])
async def test_snapshots_kept_is_how_many_dream_snapshots_stay(
    tmp_path: Path, api: LoopbackAPI, llm: LLM, kept: int
) -> None:
    memory = prepare(tmp_path)
    api.push(*(replies.text("Nothing to merge.") for _ in range(3)))
    config = _with(dream=DreamConfig(snapshots_kept=kept))
    service = make_service(tmp_path, llm, config)
    async with anyio.create_task_group() as tg:
        await tg.start(service.run)
        for _ in range(3):
            assert (await _run(service))["started"]
        tg.cancel_scope.cancel()
    runs = service.store.runs(memory.parent.name)  # newest first
    assert [r.state for r in runs] == ["completed"] * 3
    with_snapshot = [
        (service.store.run_dir(r.project, r.run_id) / "snapshot").is_dir() for r in runs
    ]
    assert with_snapshot == [True] * kept + [False] * (3 - kept)


async def test_the_dream_asks_for_llm_max_output_tokens(
    tmp_path: Path, api: LoopbackAPI, llm: LLM
) -> None:
    prepare(tmp_path)
    api.push(replies.text("Nothing to merge."))
    config = _with(llm=dataclasses.replace(Config().llm, max_output_tokens=1234))
    service = make_service(tmp_path, llm, config)
    async with anyio.create_task_group() as tg:
        await tg.start(service.run)
        assert (await _run(service))["started"]
        tg.cancel_scope.cancel()
    assert [r.body["max_tokens"] for r in api.requests] == [1234]


# -- memory.extraction_max_turns: the extraction agent's turn limit ----------------------------


@pytest.mark.parametrize("turns", [2, 3])
async def test_extraction_max_turns_is_the_extraction_agents_turn_limit(
    tmp_path: Path, api: LoopbackAPI, llm: LLM, turns: int
) -> None:
    api.add_rule(When(), replies.tool_use("Read", {"file_path": "MEMORY.md"}))  # never done
    memory = MemoryConfig(
        extraction_max_turns=turns, extract_beside_claude_code=True, beside_wait_s=0
    )
    config = _with(memory=memory)
    world = World(tmp_path, llm, config=config)
    world.memory.mkdir(parents=True)
    (world.memory / "MEMORY.md").write_text("- [n](n.md) — d\n")
    builder = world.session()
    builder.user("Please never mock the database in integration tests.")
    builder.assistant("Understood, I will use the real test database.")
    async with anyio.create_task_group() as tg:
        await tg.start(world.service.run)
        assert await world.service.on_turn_end(world.state())
        with anyio.fail_after(30):
            await world.service.wait_idle()
        tg.cancel_scope.cancel()
    assert len(api.requests) == turns
