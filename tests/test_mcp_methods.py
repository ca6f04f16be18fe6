"""The daemon's ``remember`` method against a held memory dir: it waits for the holder
(extraction or dream), then writes; a holder that stays past the wait gets a busy answer and
nothing is written."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from memd.config import load_config
from memd.daemon.service import Daemon
from memd.ipc import mcp_methods as methods_module
from memd.ipc.mcp_methods import mcp_methods
from memd.ipc.server import InvalidParams
from memd.memory.paths import memory_dir

pytestmark = pytest.mark.anyio


async def make_daemon(tmp_path: Path) -> Daemon:
    env = {"HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    daemon = Daemon.load(load_config(env=env), env=env)
    await daemon.build_features()
    return daemon


PARAMS = {"type": "project", "name": "n", "description": "d", "content": "c"}


async def test_remember_waits_for_the_dirs_holder(tmp_path: Path) -> None:
    daemon = await make_daemon(tmp_path)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    key = str(memory_dir(daemon.loaded.paths.projects_root, repo))
    remember = mcp_methods(daemon)["remember"]
    result: dict[str, object] = {}
    held = anyio.Event()
    release = anyio.Event()

    async def hold() -> None:
        async with daemon.exclusion.hold(key, "memory extraction"):
            held.set()
            await release.wait()

    async def write() -> None:
        result.update(await remember({**PARAMS, "cwd": str(repo)}))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            await held.wait()
            tg.start_soon(write)
            await anyio.wait_all_tasks_blocked()
            assert not result and not await anyio.Path(key).exists()
            release.set()
    assert result["created"] is True and await anyio.Path(key, "project_n.md").is_file()


async def test_remember_gives_up_on_a_long_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(methods_module, "HOLD_WAIT_S", 0.05)
    daemon = await make_daemon(tmp_path)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    key = str(memory_dir(daemon.loaded.paths.projects_root, repo))
    remember = mcp_methods(daemon)["remember"]
    held, release = anyio.Event(), anyio.Event()

    async def hold() -> None:
        async with daemon.exclusion.hold(key, "dream"):
            held.set()
            await release.wait()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            await held.wait()
            with pytest.raises(InvalidParams, match="dream is changing"):
                await remember({**PARAMS, "cwd": str(repo)})
            release.set()
    assert not await anyio.Path(key).exists()
