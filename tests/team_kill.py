"""kill -9 at every step of a team sync, then check that nothing was lost or duplicated.

A world of two homes and a bare remote is made once, with work on both sides that a sync of
bob's must push, take, remove, merge by lines and keep both versions of. Each trial copies the
world, runs bob's sync in a child process that kills itself with SIGKILL at one step (a step
is a git call, a file write here, the flush or the record's save; ``before`` it, ``after`` it,
or ``during`` a git call: the process dies while git runs, and git, in a session of its own,
may finish or not), then lets bob, alice and bob sync to the end and checks:

* every memory's last version is in both homes and on the remote (nothing lost);
* no home holds one text twice, and the one conflict left one copy (nothing duplicated);
* both homes and the remote hold the same files.

Used by ``tests/test_team_kill.py`` (a sample of the steps) and ``bench/team_kill.py`` (all).
Run as ``python -m tests.team_kill child <world> <step> <when>`` for the child.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.team_support import Home, bodies, homes, memory, remote_files

WHEN = ("before", "after", "during")
FINAL = {
    "alice's new fact",
    "bob's new fact",
    "shared, edited by alice",
    "kept by bob, edited",
    "conflict: alice's version",
    "conflict: bob's version",
}


def make_world(root: Path) -> None:
    """Two homes in sync, then changed on both sides (see the module docstring)."""
    _, (alice, bob) = homes(root, "alice", "bob")
    alice.write("shared.md", memory("shared", "shared"))
    alice.write("kept.md", memory("kept", "kept by bob"))
    alice.write("gone.md", memory("gone", "removed by alice"))
    alice.write("both.md", memory("both", "conflict: base"))
    alice.write("MEMORY.md", "# Team\n\n- [Shared](shared.md)\n")
    assert alice.sync().ok
    assert bob.sync().ok
    alice.write("shared.md", memory("shared", "shared, edited by alice"))
    alice.remove("gone.md")
    alice.write("both.md", memory("both", "conflict: alice's version"))
    alice.write("a.md", memory("a", "alice's new fact"))
    alice.write("MEMORY.md", "# Team\n\n- [Shared](shared.md)\n- [A](a.md)\n")
    alice.remove("kept.md")
    assert alice.sync().ok
    bob.write("kept.md", memory("kept", "kept by bob, edited"))  # an edit beats a removal
    bob.write("both.md", memory("both", "conflict: bob's version"))
    bob.write("b.md", memory("b", "bob's new fact"))
    bob.write("MEMORY.md", "# Team\n\n- [Shared](shared.md)\n- [B](b.md)\n")


def people(world: Path) -> tuple[Home, Home]:
    url = str(world / "remote.git")
    return Home(world / "alice", "alice", url), Home(world / "bob", "bob", url)


def count_steps(template: Path, scratch: Path) -> int:
    """How many steps bob's sync takes in the template world (run without a kill)."""
    world = _copy(template, scratch / "count")
    done = _child(world, 10**6, "before")
    assert done.returncode == 0, done.stderr.decode()
    return int(done.stdout.decode().split()[-1])


def trial(template: Path, scratch: Path, step: int, when: str) -> str | None:
    """Kill bob's sync at ``step`` (``when``), converge, and say what is wrong (``None``:
    nothing is)."""
    world = _copy(template, scratch / f"{step}-{when}")
    done = _child(world, step, when)
    if done.returncode != -signal.SIGKILL:
        return f"the child was not killed at step {step} ({done.returncode}): {done.stderr!r}"
    alice, bob = people(world)
    for home in (bob, alice, bob, alice):
        outcome = home.sync()
        if not outcome.ok:
            return f"{home.name}'s sync after the kill failed: {outcome.message}"
    problem = _check(alice, bob)
    shutil.rmtree(world, ignore_errors=True)
    return problem


def _check(alice: Home, bob: Home) -> str | None:
    a, b = alice.files(), bob.files()
    if a != b:
        return f"the homes differ: {sorted(a)} vs {sorted(b)}"
    indexes = {p: t for p, t in a.items() if p.endswith("MEMORY.md")}
    memories = {p: t for p, t in a.items() if p not in indexes}
    found = [t.split("\n---\n", 1)[-1].strip() for t in memories.values()]
    if set(found) != FINAL:
        return f"lost or extra: {sorted(FINAL ^ set(found))}"
    if len(found) != len(set(found)):
        return f"a text twice: {sorted(found)}"
    if indexes.get("MEMORY.md", "").count("- [") != 3:
        return f"the index lost or doubled a line: {indexes!r}"
    remote = {p: d.decode() for p, d in remote_files(alice.url).items()}
    if remote != a:
        return "the remote differs from the homes"
    return None if bodies(memories) == FINAL else "bodies differ"


def _copy(template: Path, world: Path) -> Path:
    shutil.rmtree(world, ignore_errors=True)
    shutil.copytree(template, world, symlinks=True)
    return world


def _child(world: Path, step: int, when: str) -> subprocess.CompletedProcess[bytes]:
    root = Path(__file__).resolve().parent.parent
    argv = [sys.executable, "-m", "tests.team_kill", "child", str(world), str(step), when]
    return subprocess.run(argv, cwd=root, capture_output=True, timeout=120, check=False)


# -- the child --------------------------------------------------------------------------------


def _run_child(world: Path, kill_at: int, when: str) -> None:
    import memd.confined.area as area_module
    import memd.git as git_module
    import memd.team.local as local_module
    import memd.team.record as record_module
    import memd.team.store as store_module
    import memd.team.sync as sync_module

    steps = [0]

    def counted(function: Callable[..., Any], *, git: bool = False) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            steps[0] += 1
            here = steps[0] == kill_at
            if here and when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            if here and when == "during" and git:
                threading.Timer(0.005, os.kill, (os.getpid(), signal.SIGKILL)).start()
            result = function(*args, **kwargs)
            if here:
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        return run

    patches = (
        (store_module, "run_bounded", counted(git_module.run_bounded, git=True)),
        (sync_module, "write", counted(local_module.write)),
        (sync_module, "save", counted(record_module.save)),
        (area_module.Area, "flush", counted(area_module.Area.flush)),
    )
    for owner, name, replacement in patches:
        setattr(owner, name, replacement)
    _, bob = people(world)
    outcome = bob.sync()
    assert outcome.ok, outcome.message
    print("steps", steps[0])


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "child":
        _run_child(Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit("usage: python -m tests.team_kill child WORLD STEP WHEN")
