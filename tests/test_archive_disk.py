"""A full or read-only state disk during an archive loses nothing (issue 36, item 3), through
the real daemon: its state dir on a disk that fails on demand (a real tmpfs as root, else a
shim: :mod:`tests.disk_support`), made to fail just before the archive writes its record of a
move (then nothing moves, and ``status`` says why), or just before it records the move done
(the memory is archived once; ``status`` names the record as unsaved). Once the disk is back,
the next sweep (a reload) settles it: the memory archived once, the record saved.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memd.memory.archive import ARCHIVE_FILE
from memd.memory.paths import memory_dir
from tests.archive_kill import MOVED, ONE, archive_steps, once, settled, stepped
from tests.archive_support import archive_status, index_line, stale_world, tree, wait_swept
from tests.daemon_harness import (
    call,
    fake_home,
    memdctl,
    read_log,
    start_memd,
    stop_memd,
    wait_answering,
    wait_for,
)
from tests.disk_support import can_mount, faulty_disk

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def steps(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return archive_steps(tmp_path_factory.mktemp("archive-disk") / "count")


def state_write(steps: list[str], when: str) -> int:
    """The step that opens the record's temp file: the first (the move written down) or the
    last such (the move recorded done)."""
    opens = [i for i, s in enumerate(steps, 1) if s.startswith("open") and ARCHIVE_FILE in s]
    return opens[0] if when == "record" else opens[-1]


@pytest.mark.parametrize(("kind", "when"), [("ENOSPC", "record"), ("EROFS", "done")])
def test_a_state_disk_that_refuses_during_an_archive_loses_nothing(
    tmp_path: Path, steps: list[str], kind: str, when: str
) -> None:
    with fake_home(tmp_path) as home, faulty_disk(home.state_dir) as disk:
        home.env.update(disk.env)
        world = stale_world(home, ONE)
        before = tree(world.memory)
        at = f"{state_write(steps, when)}:{kind}"
        proc = wait_answering(home, stepped(home, world, tmp_path / "labels", at))
        try:
            status = wait_swept(home)
            assert status["last_error"] and kind in _errno_names(status["last_error"]), status
            if when == "record":
                assert tree(world.memory) == before and not tree(world.archive)
            else:
                assert once(world, before) == "archive" and status["archived"] == 1
                assert index_line(MOVED) not in world.index()
            writes = call(home, "status")["writes"]["paths"]
            assert any(r["path"].endswith("/" + ARCHIVE_FILE) for r in writes), writes

            disk.heal()
            assert memdctl(home, "reload").returncode == 0, read_log(home)
            healed = wait_swept(home, after=status["sweeps"])
            assert healed["last_error"] is None and healed["unfinished"] == 0, healed
            assert once(world, before) == "archive"
            assert index_line(MOVED) not in world.index()
            settled(home, world)
            record: dict[str, Any] = json.loads((home.state_dir / ARCHIVE_FILE).read_text())
            assert list(record["kept"][str(world.memory)]) == [MOVED]
            wait_for(lambda: not _failing(home), timeout=30, what="the write rows to clear")
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def _failing(home: Any) -> bool:
    return bool(call(home, "status")["writes"].get("failing"))


def _errno_names(text: str) -> str:
    return text.replace("No space left on device", "ENOSPC").replace(
        "Read-only file system", "EROFS"
    )


@pytest.mark.skipif(
    not can_mount(),
    reason="needs root and a tmpfs: a rename beneath a descriptor is below the shim",
)
def test_a_read_only_memory_disk_shows_in_status_and_the_move_is_retried(tmp_path: Path) -> None:
    """The project folder itself read-only: the move written down cannot be made; ``status``
    says so and the record keeps it; once the disk is back the next sweep makes it, once."""
    with fake_home(tmp_path) as home:
        project = memory_dir(home.projects, home.root / "work" / "repo").parent
        with faulty_disk(project) as disk:
            world = stale_world(home, ONE)
            assert world.memory.parent == project
            before = tree(world.memory)
            disk.fault("EROFS")
            proc = start_memd(home)
            try:
                status = wait_for(
                    lambda: _failed(home), timeout=60, what="the sweep to meet the read-only disk"
                )
                assert "Read-only file system" in status["last_error"], status
                assert status["unfinished"] == 1, status  # kept, to be made later
                assert tree(world.memory) == before and not world.archive.exists()
                writes = call(home, "status")["writes"]["paths"]
                assert any(str(world.archive) in r["path"] for r in writes), writes

                disk.heal()
                assert memdctl(home, "reload").returncode == 0, read_log(home)
                healed = wait_swept(home, after=status["sweeps"])
                assert healed["last_error"] is None and healed["archived"] == 1, healed
                assert once(world, before) == "archive"
                assert index_line(MOVED) not in world.index()
                settled(home, world)
            finally:
                assert stop_memd(proc) == 0, read_log(home)


def _failed(home: Any) -> dict[str, Any] | None:
    archive = archive_status(home)
    return archive if archive.get("sweeps") and archive.get("last_error") else None
