"""kill -9 at a step of an archive or of a restore, through the real daemon (issue 36, item 3),
then check that nothing was lost and nothing archived twice.

A daemon's start archives an unused memory (:mod:`tests.archive_support`); a life without a
kill counts its writes (the record's, the move, the index's: :mod:`tests.archive_steps`), then
:func:`archive_trial` kills a daemon just before one of them. At that instant the memory is
whole in exactly one place, the memory dir or the archive. The next start (a plain ``memd``)
finishes what the record says was begun: the memory is archived once, under its name, its line
gone from ``MEMORY.md``, every other file as it was, no temp file left, the record settled.
:func:`restore_trial` does the same for ``memdctl memories --restore``: after the kill and a
start the memory is in one place, its index line there exactly when it is; a restore asked
again ends with it back, once.

Used by ``tests/test_archive_kill.py`` (a sample of the steps) and ``bench/archive_kill.py``
(every step).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from memd.memory.archive import ARCHIVE_FILE, Archive
from tests.archive_support import (
    FRESH,
    KEPT,
    STALE,
    World,
    index_line,
    stale_world,
    tree,
    wait_swept,
)
from tests.daemon_harness import (
    Home,
    fake_home,
    load_stretch,
    memdctl,
    read_log,
    start_memd,
    stop_memd,
    wait_answering,
)

ROOT = Path(__file__).resolve().parent.parent
ONE = dict(list(STALE.items())[:1])  # one unused memory: every step of its move
(MOVED,) = ONE
TEMP_MARK = ".memd-"
Act = Callable[[Home, World], None]


def stepped(home: Home, world: World, labels: Path, at: int | str) -> subprocess.Popen[bytes]:
    """memd under :mod:`tests.archive_steps`, killed before write ``at`` (0: never; or
    ``N:ENOSPC``, ``N:EROFS``: its state disk fails there)."""
    wrapper = [
        sys.executable,
        "-m",
        "tests.archive_steps",
        str(labels),
        str(at),
        str(world.memory.parent),
        str(home.state_dir),
        "--",
        "-v",
    ]
    log = open(home.root / "memd.log", "ab")  # noqa: SIM115 - owned by the process
    proc = subprocess.Popen(wrapper, env=home.env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
    log.close()
    return proc


def killed(proc: subprocess.Popen[bytes], home: Home) -> None:
    code = proc.wait(timeout=120 * load_stretch())
    assert code == -signal.SIGKILL, (code, read_log(home))


def once(world: World, before: dict[str, str]) -> str:
    """Where the moved memory is, whole, in exactly one place: ``memory`` or ``archive``."""
    places = {
        name
        for name, folder in (("memory", world.memory), ("archive", world.archive))
        if tree(folder).get(MOVED) == before[MOVED]
    }
    copies = [p for p in world.memory.parent.rglob("*.md") if p.name.startswith(MOVED[:-3])]
    assert len(places) == 1 and len(copies) == 1, (places, copies)
    return places.pop()


def settled(home: Home, world: World) -> None:
    """No temp file in the project folder or the state dir; the record has no move open."""
    files = [*world.memory.parent.rglob("*"), *home.state_dir.rglob("*")]
    assert not [p for p in files if TEMP_MARK in p.name], files
    record = json.loads((home.state_dir / ARCHIVE_FILE).read_text())
    assert record["moves"] == []


def archived_world(home: Home) -> World:
    """The world with its unused memory archived already (by memd's own code, here)."""
    world = stale_world(home, ONE)
    assert Archive(home.state_dir, lambda: 0.0).archive(world.memory, MOVED) is not None
    return world


def swept(home: Home, world: World) -> None:
    wait_swept(home)


def restore_asked(home: Home, world: World) -> None:
    wait_swept(home)
    memdctl(home, "memories", "--restore", MOVED, str(world.repo), timeout=120)


def count(root: Path, make: Callable[[Home], World], act: Act) -> list[str]:
    """The archive's writes in a life that is not killed (``act``: what it is asked)."""
    with fake_home(root) as home:
        world = make(home)
        labels = root.with_suffix(".labels")
        proc = wait_answering(home, stepped(home, world, labels, 0))
        try:
            act(home, world)
        finally:
            assert stop_memd(proc) == 0, read_log(home)
        return labels.read_text().splitlines()


def archive_steps(root: Path) -> list[str]:
    steps = count(root, lambda home: stale_world(home, ONE), swept)
    assert any(s.startswith("os.rename") and s.endswith(f"/memory/{MOVED}") for s in steps)
    return steps


def restore_steps(root: Path) -> list[str]:
    steps = count(root, archived_world, restore_asked)
    assert any(s.startswith("os.rename") and s.endswith(f"/memory-archive/{MOVED}") for s in steps)
    return steps


def archive_trial(root: Path, at: int) -> None:
    """Kill the start's archive before its write ``at``; start again; check."""
    with fake_home(root) as home:
        world = stale_world(home, ONE)
        before = tree(world.memory)
        killed(stepped(home, world, root.with_suffix(".labels"), at), home)
        once(world, before)
        proc = start_memd(home)
        try:
            wait_swept(home)
            assert once(world, before) == "archive"
            assert set(tree(world.archive)) == {MOVED}
            kept = {r: before[r] for r in {**KEPT, **FRESH}}
            now = tree(world.memory)
            assert {r: now[r] for r in kept} == kept
            assert index_line(MOVED) not in world.index()
            assert all(index_line(r) in world.index() for r in kept if "/" not in r)
            settled(home, world)
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def restore_trial(root: Path, at: int) -> None:
    """Kill ``memories --restore`` before its write ``at``; start again; check; restore."""
    with fake_home(root) as home:
        world = archived_world(home)
        before = {**tree(world.archive), **tree(world.memory)}
        proc = wait_answering(home, stepped(home, world, root.with_suffix(".labels"), at))
        restore_asked(home, world)
        killed(proc, home)
        once(world, before)
        proc = start_memd(home)
        try:
            wait_swept(home)
            place = once(world, before)
            assert (index_line(MOVED) in world.index()) == (place == "memory")
            settled(home, world)
            back = memdctl(home, "memories", "--restore", MOVED, str(world.repo))
            assert (back.returncode == 0) == (place == "archive"), back
            assert once(world, before) == "memory"
            assert world.index().count(index_line(MOVED)) == 1
            settled(home, world)
        finally:
            assert stop_memd(proc) == 0, read_log(home)
