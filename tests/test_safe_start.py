"""A safe start, through the real ``memd`` process: every refusal is exit 3 and one line.

The runtime dir is checked (owner, mode, not a symlink) before anything is created in it and
the lock file is opened without following symlinks, so a directory or lock file planted by
another local user never makes memd write through it. Cases that need two uids run both
ways: the daemon as root with the other side 65534, and the daemon itself as 65534.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# loaded before a fork, for a child that cannot read the interpreter's files
import memd.daemon.service
import memd.daemon.tempsweep  # noqa: F401
from memd.daemon.main import main
from memd.daemon.pidlock import lock_file_problem
from tests.daemon_harness import fake_home
from tests.uid_support import IS_ROOT, NOBODY, Exited, run_forked

needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root to act as two users")


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A short directory that uid 65534 may traverse (not list)."""
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="memd-s"))
    path.chmod(0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def memd_process(env: dict[str, str]) -> Exited:
    """Run ``python -m memd.daemon.main`` (as this test's uid) until it exits."""
    done = subprocess.run(
        [sys.executable, "-m", "memd.daemon.main"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Exited(done.returncode, done.stderr)


def memd_as(uid: int, env: dict[str, str]) -> Exited:
    """Run memd's entry point in a child process that dropped to ``uid``."""
    return run_forked(lambda: main(["run"]), uid=uid, env=env)


def nobody_env(scratch: Path, runtime: Path) -> dict[str, str]:
    """An environment for a daemon running as 65534: a HOME of its own."""
    home = scratch / "nobody-home"
    home.mkdir(mode=0o700, exist_ok=True)
    os.chown(home, NOBODY, NOBODY)
    keep = ("PATH", "PYTHONPATH", "LANG")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(HOME=str(home), MEMD_RUNTIME_DIR=str(runtime))
    return env


def assert_refused(done: Exited, path: Path, *words: str) -> None:
    lines = done.stderr.splitlines()
    assert done.code == 3, done.stderr
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("memd: ") and str(path) in lines[0], lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    assert "Traceback" not in done.stderr


def run_in(tmp_path: Path, runtime: Path) -> Exited:
    with fake_home(tmp_path, MEMD_RUNTIME_DIR=str(runtime)) as home:
        return memd_process(home.env)


# -- runtime directory ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o755, 0o750, 0o701, 0o777, 0o1777])
def test_a_runtime_dir_open_to_others_is_refused_before_use(
    tmp_path: Path, scratch: Path, mode: int
) -> None:
    runtime = scratch / "run"
    runtime.mkdir()
    runtime.chmod(mode)
    assert_refused(run_in(tmp_path, runtime), runtime, "open to group or others", "chmod 700")
    assert list(runtime.iterdir()) == []  # nothing created in it


def test_a_symlinked_runtime_dir_is_refused(tmp_path: Path, scratch: Path) -> None:
    private = scratch / "private"
    private.mkdir(mode=0o700)
    runtime = scratch / "run"
    runtime.symlink_to(private)
    assert_refused(run_in(tmp_path, runtime), runtime, "is a symlink", "remove it")
    assert list(private.iterdir()) == []


def test_a_runtime_path_that_is_a_file_is_refused(tmp_path: Path, scratch: Path) -> None:
    runtime = scratch / "run"
    runtime.write_bytes(b"precious")
    assert_refused(run_in(tmp_path, runtime), runtime, "is not a directory")
    assert runtime.read_bytes() == b"precious"


def test_a_file_at_the_socket_path_is_refused_and_kept(tmp_path: Path, scratch: Path) -> None:
    runtime = scratch / "run"
    runtime.mkdir(mode=0o700)
    (runtime / "memd.sock").write_bytes(b"precious")
    done = run_in(tmp_path, runtime)
    assert_refused(done, runtime / "memd.sock", "is not a socket", "remove it")
    assert (runtime / "memd.sock").read_bytes() == b"precious"


@needs_root
def test_a_runtime_dir_of_another_user_is_refused_both_ways(tmp_path: Path, scratch: Path) -> None:
    """Daemon root, dir 65534; then daemon 65534, dir root. Either way: exit 3, one line."""
    theirs = scratch / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    assert_refused(run_in(tmp_path, theirs), theirs, f"owned by uid {NOBODY}")
    roots = scratch / "roots"
    roots.mkdir(mode=0o700)
    done = memd_as(NOBODY, nobody_env(scratch, roots))
    assert_refused(done, roots, "owned by uid 0", "MEMD_RUNTIME_DIR")


@pytest.mark.skipif(IS_ROOT, reason="as root, / is the daemon's own directory")
def test_a_runtime_dir_of_another_user_is_refused_without_root(tmp_path: Path) -> None:
    assert_refused(run_in(tmp_path, Path("/")), Path("/"), "owned by uid 0")


# -- the lock file --------------------------------------------------------------------------


def test_a_lock_symlink_in_our_own_dir_is_not_followed(tmp_path: Path, scratch: Path) -> None:
    runtime = scratch / "run"
    runtime.mkdir(mode=0o700)
    target = scratch / "victim.txt"
    target.write_bytes(b"the victim's file\n")
    (runtime / "memd.lock").symlink_to(target)
    assert_refused(run_in(tmp_path, runtime), runtime / "memd.lock", "is a symlink")
    assert target.read_bytes() == b"the victim's file\n"


def test_a_fifo_at_the_lock_path_is_refused_without_blocking(tmp_path: Path, scratch: Path) -> None:
    runtime = scratch / "run"
    runtime.mkdir(mode=0o700)
    os.mkfifo(runtime / "memd.lock")
    assert_refused(run_in(tmp_path, runtime), runtime / "memd.lock", "not a regular file")


@needs_root
def test_a_lock_symlink_planted_by_another_user_leaves_the_target_intact(
    tmp_path: Path, scratch: Path
) -> None:
    """The attack: another uid's world-writable runtime dir with ``memd.lock`` pointing at a
    file of the victim. Both ways round: victim root, then victim 65534."""
    attacker = scratch / "attacker65534"
    attacker.mkdir()
    attacker.chmod(0o777)
    os.chown(attacker, NOBODY, NOBODY)
    target = scratch / "root-file"
    target.write_bytes(b"root's data\n")
    (attacker / "memd.lock").symlink_to(target)
    os.lchown(attacker / "memd.lock", NOBODY, NOBODY)
    assert_refused(run_in(tmp_path, attacker), attacker, f"owned by uid {NOBODY}")
    assert target.read_bytes() == b"root's data\n"

    rooted = scratch / "attacker0"
    rooted.mkdir()
    rooted.chmod(0o777)
    victim_file = scratch / "nobody-file"
    victim_file.write_bytes(b"nobody's data\n")
    os.chown(victim_file, NOBODY, NOBODY)
    (rooted / "memd.lock").symlink_to(victim_file)
    done = memd_as(NOBODY, nobody_env(scratch, rooted))
    assert_refused(done, rooted, "owned by uid 0")
    assert victim_file.read_bytes() == b"nobody's data\n"


@needs_root
def test_the_predictable_tmp_dir_attack(scratch: Path) -> None:
    """No XDG_RUNTIME_DIR: the dir is /tmp/memd-<uid>, which another user can make first."""
    predictable = Path(f"/tmp/memd-{NOBODY}")
    if predictable.exists() or predictable.is_symlink():
        pytest.skip(f"{predictable} exists already")
    victim_file = scratch / "nobody-file"
    victim_file.write_bytes(b"nobody's data\n")
    os.chown(victim_file, NOBODY, NOBODY)
    try:
        predictable.mkdir()
        predictable.chmod(0o777)
        (predictable / "memd.lock").symlink_to(victim_file)
        env = nobody_env(scratch, predictable)
        del env["MEMD_RUNTIME_DIR"]
        done = memd_as(NOBODY, env)
        assert_refused(done, predictable, "owned by uid 0")
        assert victim_file.read_bytes() == b"nobody's data\n"
    finally:
        shutil.rmtree(predictable, ignore_errors=True)


def test_lock_file_decisions() -> None:
    regular = 0o100600
    assert lock_file_problem(regular, 1000, 1, 1000) is None
    assert "regular" in (lock_file_problem(0o010600, 1000, 1, 1000) or "")
    assert "uid 0" in (lock_file_problem(regular, 0, 1, 1000) or "")
    assert "hard links" in (lock_file_problem(regular, 1000, 2, 1000) or "")


# -- leftovers of interrupted writes --------------------------------------------------------


def test_stale_temp_files_of_memd_are_removed_at_start_and_nothing_else(
    tmp_path: Path,
) -> None:
    from tests.daemon_harness import call, start_memd, stop_memd

    with fake_home(tmp_path) as home:
        project = home.projects / "-home-ada-src-app"
        notes = project / "s1" / "session-memory"
        memory = project / "memory"
        team = memory / "team"
        records = home.state_dir / "session-notes"
        for d in (notes, team, records):
            d.mkdir(parents=True)
        stale = [
            home.state_dir / ".sessions.json.memd-abcd1234.tmp",
            home.state_dir / ".sessions.json.k2j4h5g6.tmp",  # the pattern before 'memd-'
            records / ".s1.json.memd-zz_9yx8w.tmp",
            notes / ".summary.md.memd-a1b2c3d4.tmp",
            memory / ".MEMORY.md.memd-qwertyui.tmp",
            team / ".x.md.memd-asdfghjk.tmp",
        ]
        kept = [
            notes / ".summary.md.k2j4h5g6.tmp",  # not memd's pattern outside the state dir
            memory / "notes.tmp",
            memory / ".plan.md.memd-short.tmp",
            project / ".s1.jsonl.memd-abcd1234.tmp",  # not a directory memd writes
            memory / "deep" / "deeper" / ".a.md.memd-abcd1234.tmp",  # beyond the bound
        ]
        for path in stale + kept:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"x")
        outside = tmp_path / "outside.txt"
        outside.write_bytes(b"keep me")
        link = memory / ".link.md.memd-linklink.tmp"
        link.symlink_to(outside)
        proc = start_memd(home)
        try:
            assert call(home, "hello")
            assert [p for p in stale if p.exists()] == []
            assert [p for p in kept if not p.exists()] == []
            assert link.is_symlink() and outside.read_bytes() == b"keep me"
        finally:
            assert stop_memd(proc) == 0
