"""The dream service in-process: the real SDK client against the loopback server, real lock
files and memory dirs. Model failures, turn limits and shutdown each undo the run and roll the
lock back; a second check while a run is going is refused by the lock gate."""

from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from memd.config import Config, DreamConfig, PrivacyConfig
from memd.dream.lock import LOCK_NAME
from memd.dream.service import DreamService
from memd.llm.client import LLM
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from tests.dream_support import make_service

pytestmark = pytest.mark.anyio

NOTE = "---\nname: n\ndescription: d\ntype: user\n---\nseen yesterday\n"
PRIOR_NS = 1_700_000_000_987_654_321


def prepare(tmp_path: Path) -> Path:
    memory = tmp_path / "projects" / "proj" / "memory"
    memory.mkdir(parents=True)
    (memory / "MEMORY.md").write_text("- [n](n.md) — d\n")
    (memory / "n.md").write_text(NOTE)
    lock = memory / LOCK_NAME
    lock.write_text("")
    os.utime(lock, ns=(PRIOR_NS, PRIOR_NS))
    return memory


def edit() -> replies.Message:
    return replies.tool_use(
        "Edit", {"file_path": "n.md", "old_string": "yesterday", "new_string": "on 2026-11-21"}
    )


async def forced_run(service: DreamService) -> dict[str, object]:
    with anyio.fail_after(30):
        answer = await service.check(cwd=None, project="proj", force=True)
        started = answer["started"]
        assert started, answer
        memory = Path(answer["memory_dir"])
        running = service.find_dir(memory).running
        if running is not None:
            await running.done.wait()
        last = service.row(memory)["last_runs"][0]
    assert isinstance(last, dict)
    return last


def assert_untouched(memory: Path) -> None:
    assert (memory / "n.md").read_text() == NOTE
    assert os.stat(memory / LOCK_NAME).st_mtime_ns == PRIOR_NS
    assert (memory / LOCK_NAME).read_bytes() == b""


async def test_a_model_error_undoes_the_run_and_reaches_the_cost_guard(
    tmp_path: Path, api: LoopbackAPI, llm: LLM
) -> None:
    memory = prepare(tmp_path)
    api.push(edit(), replies.api_error(400, "bad request"))
    service = make_service(tmp_path, llm)
    async with anyio.create_task_group() as tg:
        await tg.start(service.run)
        run = await forced_run(service)
        tg.cancel_scope.cancel()
    assert run["state"] == "failed" and "model call failed" in str(run["reason"])
    assert_untouched(memory)
    kinds = service._guard.statistics().as_dict()["kinds"]
    assert kinds["dream"]["total_failures"] == 1
    assert [p["subject"] for p in kinds["dream"]["parked"]] == [str(memory)]
    # An automatic check does not retry what cannot succeed; --force (the manual trigger) does.
    assert (service._disabled(str(memory), auto=True) or "").startswith("cost guard: ")


async def test_the_turn_limit_undoes_the_run(tmp_path: Path, api: LoopbackAPI, llm: LLM) -> None:
    memory = prepare(tmp_path)
    api.push(edit())
    cfg = dataclasses.replace(Config(), dream=DreamConfig(max_turns=1))
    service = make_service(tmp_path, llm, cfg)
    async with anyio.create_task_group() as tg:
        await tg.start(service.run)
        run = await forced_run(service)
        tg.cancel_scope.cancel()
    assert run["state"] == "failed" and "did not finish in 1 turns" in str(run["reason"])
    assert run["files"] == ["n.md"]
    assert_untouched(memory)


async def test_shutdown_mid_run_undoes_it_and_a_second_check_meets_the_lock(
    tmp_path: Path, api: LoopbackAPI, llm: LLM
) -> None:
    memory = prepare(tmp_path)
    second, finish = threading.Event(), threading.Event()
    calls: list[int] = []

    def handler(body: dict[str, Any]) -> replies.Reply | None:
        calls.append(1)
        if len(calls) == 1:
            return edit()
        second.set()  # the second model call waits until the test lets it go
        finish.wait(30)
        return replies.text("done")

    api.set_handler(handler)
    service = make_service(tmp_path, llm)
    async with anyio.create_task_group() as tg:
        await tg.start(service.run)
        with anyio.fail_after(30):
            await service.check(cwd=None, project="proj", force=True)
            found = service.find_dir(memory)
            assert await anyio.to_thread.run_sync(second.wait, 20)
            assert (memory / "n.md").read_text() != NOTE
            again = await service.check(cwd=None, project="proj", force=True)
            assert again["verdict"]["gate"] == "lock" and not again["started"]
            assert "this daemon" in again["verdict"]["reason"]
        tg.cancel_scope.cancel()  # the daemon stops in the middle of the run
    finish.set()
    assert_untouched(memory)
    assert found.history[0].state == "interrupted"


async def test_the_time_gate_never_counts_the_run_going_on(
    tmp_path: Path, api: LoopbackAPI, llm: LLM
) -> None:
    """While a dream runs, the lock's mtime is its start; the time gate counts the last run
    that finished (the prior mtime), and the lock gate says why no second run starts."""
    memory = prepare(tmp_path)
    for n in range(5):
        (memory.parent / f"s{n}.jsonl").write_text("{}\n")
    started, finish = threading.Event(), threading.Event()

    def handler(body: dict[str, Any]) -> replies.Reply | None:
        started.set()
        finish.wait(30)
        return replies.text("done")

    api.set_handler(handler)
    cfg = dataclasses.replace(Config(), dream=DreamConfig(scan_throttle_minutes=0))
    service = make_service(tmp_path, llm, cfg)
    async with anyio.create_task_group() as tg:
        await tg.start(service.run)
        try:
            with anyio.fail_after(30):
                await service.check(cwd=None, project="proj", force=True)
                assert await anyio.to_thread.run_sync(started.wait, 20)
                assert os.stat(memory / LOCK_NAME).st_mtime_ns != PRIOR_NS  # taken: now
                plain = await service.check(cwd=None, project="proj", force=False)
            assert plain["verdict"]["gate"] == "lock", plain
            assert "this daemon is consolidating" in plain["verdict"]["reason"]
        finally:
            finish.set()
            tg.cancel_scope.cancel()


async def test_a_project_named_by_folder_keeps_its_opt_out(tmp_path: Path) -> None:
    """``privacy.ignore_projects`` matches the folder name as memory's reads do: no dream is
    started there by name, as none is by a session's cwd."""
    prepare(tmp_path)
    cfg = dataclasses.replace(Config(), privacy=PrivacyConfig(ignore_projects=("proj",)))
    service = make_service(tmp_path, object(), cfg)
    async with anyio.create_task_group() as tg:
        await tg.start(service.run)
        with pytest.raises(ValueError, match="opted out"):
            await service.check(cwd=None, project="proj", force=True)
        assert service.row(tmp_path / "projects" / "proj" / "memory")["last_runs"] == []
        tg.cancel_scope.cancel()
