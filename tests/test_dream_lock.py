"""The consolidation lock (R-D2): Claude Code's protocol, races, takeover, hostile paths."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.dream import lock
from memd.dream.lock import Acquired, Busy, Free, LockState, decide, parse_pid
from memd.testing.lock_race import race

HOUR = 3600.0


def test_parse_pid_reads_like_parseint() -> None:
    assert parse_pid(b"1234") == 1234
    assert parse_pid(b"  42\n") == 42
    assert parse_pid(b"77abc") == 77
    assert parse_pid(b"") is None
    assert parse_pid(b"abc") is None
    assert parse_pid(b"0") is None
    assert parse_pid(b"-5") is None
    assert parse_pid(b"\xff\xfe") is None
    assert parse_pid(b"99999999999999999999") is None


@given(st.binary(max_size=200))
def test_parse_pid_never_raises(body: bytes) -> None:
    pid = parse_pid(body)
    assert pid is None or 0 < pid < 2**31


@given(
    mtime=st.one_of(st.none(), st.integers(0, 2 * 10**18)),
    pid=st.one_of(st.none(), st.integers(1, 2**31 - 1)),
    alive=st.booleans(),
    running=st.booleans(),
)
def test_decide_matches_the_protocol(
    mtime: int | None, pid: int | None, alive: bool, running: bool
) -> None:
    now = 10**18
    verdict = decide(
        LockState(mtime, pid),
        now_ns=now,
        stale_s=HOUR,
        own_pid=4242,
        running_here=running,
        alive=lambda _pid, _mtime: alive,
    )
    fresh = mtime is not None and (now - mtime) / 1e9 < HOUR
    if not fresh or pid is None:
        assert isinstance(verdict, Free)
    elif pid == 4242:
        assert isinstance(verdict, Busy if running else Free)
    else:
        assert isinstance(verdict, Busy if alive else Free)


def _lock_written(memory: Path, body: bytes, mtime_ns: int) -> Path:
    """A new ``memory`` folder whose lock file holds ``body``, last written at ``mtime_ns``."""
    memory.mkdir(parents=True)
    path = memory / lock.LOCK_NAME
    path.write_bytes(body)
    os.utime(path, ns=(mtime_ns, mtime_ns))
    return path


def test_acquire_without_a_file_returns_prior_zero_and_rollback_deletes(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    got = lock.acquire(memory, stale_s=HOUR)
    assert got == Acquired(0)
    assert (memory / lock.LOCK_NAME).read_bytes() == str(os.getpid()).encode()
    assert lock.roll_back(memory, got.prior_mtime_ns)
    assert not (memory / lock.LOCK_NAME).exists()


def test_rollback_restores_the_prior_mtime_exactly(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    prior = 1_700_000_000_123_456_789
    path = _lock_written(memory, b"", prior)
    got = lock.acquire(memory, stale_s=HOUR)
    assert isinstance(got, Acquired)
    assert os.stat(path).st_mtime_ns != prior
    assert lock.roll_back(memory, got.prior_mtime_ns)
    assert os.stat(path).st_mtime_ns == got.prior_mtime_ns == prior
    assert path.read_bytes() == b""


def test_success_moves_the_mtime_to_completion(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    got = lock.acquire(memory, stale_s=HOUR)
    assert isinstance(got, Acquired)
    old = time.time() - 500
    os.utime(memory / lock.LOCK_NAME, (old, old))
    before = time.time()
    assert lock.mark_consolidated(memory)
    assert os.stat(memory / lock.LOCK_NAME).st_mtime >= before - 1


def test_success_leaves_a_lock_taken_over_meanwhile_alone(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    assert isinstance(lock.acquire(memory, stale_s=HOUR), Acquired)
    path = memory / lock.LOCK_NAME
    path.write_text("999999")  # another process took it over (we ran past the stale age)
    os.utime(path, ns=(5_000_000_000, 5_000_000_000))
    assert not lock.mark_consolidated(memory)
    assert not lock.roll_back(memory, 0)
    assert path.read_text() == "999999" and os.stat(path).st_mtime_ns == 5_000_000_000


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_a_live_foreign_pid_is_busy_and_survives_rollback(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    holder = _sleeper()  # a live process that is not memd, as Claude Code would leave it
    try:
        (memory / lock.LOCK_NAME).write_text(str(holder.pid))
        got = lock.acquire(memory, stale_s=HOUR)
        assert isinstance(got, Busy) and got.pid == holder.pid
        assert not lock.roll_back(memory, 0)  # never touches someone else's lock
        assert (memory / lock.LOCK_NAME).read_text() == str(holder.pid)
    finally:
        holder.kill()
        holder.wait()
    assert isinstance(lock.acquire(memory, stale_s=HOUR), Acquired)  # dead now: taken over


def test_a_recycled_pid_does_not_hold_the_lock(tmp_path: Path) -> None:
    """The lock's PID is alive, but that process started after the lock was written: the
    holder is dead and its PID went to another process. Taken over at once, not after the
    stale age."""
    memory = tmp_path / "memory"
    holder = _sleeper()
    try:
        then = time.time_ns() - 600 * 10**9  # ten minutes ago, before the holder existed
        path = _lock_written(memory, str(holder.pid).encode(), then)
        got = lock.acquire(memory, stale_s=HOUR)
        assert isinstance(got, Acquired), got
        assert path.read_text() == str(os.getpid())
    finally:
        holder.kill()
        holder.wait()


def test_process_start_times_come_from_proc() -> None:
    before = time.time_ns()
    holder = _sleeper()
    try:
        started = lock.process_start_ns(holder.pid)
        assert started is not None
        assert before - lock.START_SLACK_NS <= started <= time.time_ns() + lock.START_SLACK_NS
        assert lock.holder_alive(holder.pid, time.time_ns())
        assert not lock.holder_alive(holder.pid, before - 60 * 10**9)
    finally:
        holder.kill()
        holder.wait()
    assert not lock.holder_alive(holder.pid, time.time_ns())
    assert lock.process_start_ns(999_999_999) is None


def test_a_zombie_holder_does_not_hold_the_lock(tmp_path: Path) -> None:
    """A holder that exited but was not reaped yet keeps its PID: it is dead all the same."""
    memory = tmp_path / "memory"
    memory.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        (memory / lock.LOCK_NAME).write_text(str(holder.pid))
        deadline = time.monotonic() + 30
        while (seen := lock._proc_stat(holder.pid)) is not None and seen[0] != b"Z":
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.01)
        assert seen is not None  # a zombie now
        assert lock.pid_alive(holder.pid)  # the PID is still there (not reaped)
        got = lock.acquire(memory, stale_s=HOUR)
        assert isinstance(got, Acquired), got
    finally:
        holder.wait()


def test_an_intent_that_cannot_be_recorded_leaves_the_lock_alone(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    prior = 1_700_000_000_123_456_789
    path = _lock_written(memory, b"", prior)
    seen: list[int] = []

    def refuse(prior_ns: int) -> None:
        seen.append(prior_ns)
        raise OSError(28, "No space left on device")

    got = lock.acquire(memory, stale_s=HOUR, before_write=refuse)
    assert isinstance(got, lock.Unrecorded) and "state disk refused" in got.reason
    assert seen == [prior]
    assert path.read_bytes() == b"" and os.stat(path).st_mtime_ns == prior


def test_stale_and_dead_and_unreadable_locks_are_taken_over(tmp_path: Path) -> None:
    holder = _sleeper()
    try:
        for name, body, age in (
            ("stale", str(holder.pid).encode(), 2 * HOUR),
            ("dead", b"999999999", 0.0),
            ("garbage", b"\xff\x00 not a pid", 0.0),
            ("empty", b"", 0.0),
        ):
            memory = tmp_path / name / "memory"
            then = time.time_ns() - int(age * 1e9)
            _lock_written(memory, body, then)
            got = lock.acquire(memory, stale_s=HOUR)
            assert isinstance(got, Acquired), name
            assert got.prior_mtime_ns == pytest.approx(then, abs=1e7)
    finally:
        holder.kill()
        holder.wait()


def test_our_own_pid_is_busy_only_while_we_run_a_dream_there(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    (memory / lock.LOCK_NAME).write_text(str(os.getpid()))
    assert isinstance(lock.acquire(memory, stale_s=HOUR, running_here=True), Busy)
    assert isinstance(lock.acquire(memory, stale_s=HOUR, running_here=False), Acquired)


@pytest.mark.parametrize("kind", ["fifo", "dir", "symlink", "huge", "dangling"])
def test_hostile_lock_paths_never_hang_or_crash(tmp_path: Path, kind: str) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    path = memory / lock.LOCK_NAME
    target = tmp_path / "elsewhere"
    target.write_text("1")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "symlink":
        path.symlink_to(target)
    elif kind == "dangling":
        path.symlink_to(tmp_path / "nothing")
    else:
        with open(path, "wb") as f:
            f.truncate(3 * 1024**3)  # sparse: a 3 GB "lock"
    got = lock.acquire(memory, stale_s=HOUR)
    if kind == "huge":
        assert isinstance(got, Acquired)  # a body that is no PID: taken over
        assert path.read_bytes() == str(os.getpid()).encode()
    else:
        assert isinstance(got, Busy) and got.reason
        assert target.read_text() == "1"  # never written through a link
    assert lock.stat_mtime(path) is None or kind == "huge"


def test_side_flock_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    os.mkfifo(memory / lock.FLOCK_NAME)
    got = lock.acquire(memory, stale_s=HOUR)
    assert isinstance(got, Busy) and "not a regular file" in got.reason


def test_racing_processes_have_exactly_one_winner_per_round(tmp_path: Path) -> None:
    result = race(tmp_path, rounds=24, procs=4)
    assert result.winners == (1,) * 24
