"""The consolidation lock (R-D2), byte-compatible with Claude Code's ``.consolidate-lock``.

The file ``<memory dir>/.consolidate-lock`` has two jobs: its mtime is "last consolidated
at", and its body is the decimal PID of the process consolidating now. Claude Code and memd
follow the same protocol, so the two never consolidate one directory at once:

* acquire: a lock younger than the stale age whose holder is alive is held (:class:`Busy`);
  otherwise (no file, dead holder, unreadable body, stale) write our PID, read it back, and
  succeed only if the body is still ours (:class:`Acquired` with the prior mtime, 0 for no
  file). The caller records its intent (``before_write``) before the PID is written, so a
  kill at any instant leaves a run record the next start undoes, lock included;
* success: the mtime becomes the completion time (:func:`mark_consolidated`);
* failure or abort: :func:`roll_back` — prior 0 deletes the file, else the body is emptied
  and the prior mtime restored exactly (nanoseconds, to the filesystem's resolution).

Write-then-verify alone cannot exclude two writers that interleave exactly, so memd processes
also hold an ``flock`` on a side file (``.consolidate-lock.flock``) across check, write and
verify. This daemon's own PID in the body counts as held only while this daemon really runs a
dream there (``running_here``): a PID left by a finished or killed run of ours is not a holder.

The holder is the process that wrote the body, and it was alive when the lock's mtime was set
(acquire, completion): a process with that PID that started later is another one, given the
PID after the holder died, and does not hold the lock (:func:`holder_alive`; Linux's
``/proc`` gives start times, elsewhere the PID alone decides).

The decision is the pure :func:`decide`; the rest is I/O that trusts no byte on disk: files
are opened with ``O_NOFOLLOW | O_NONBLOCK``, only regular files are read, at most
:data:`MAX_BODY_BYTES` of them, so a FIFO, a directory, a link or a huge file at the lock path
cannot hang or crash the caller (it is reported as :class:`Busy` with a reason).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from memd.writes import reporting

LOCK_NAME = ".consolidate-lock"
FLOCK_NAME = ".consolidate-lock.flock"
# memd's temp files of the lock: named as memd.atomic's are, so a start sweeps a kill's leftover
TEMP_PREFIX = f"{LOCK_NAME}.memd-"
_TEMP = re.compile(re.escape(TEMP_PREFIX) + r"[a-z0-9_]{8}\.tmp")
MAX_BODY_BYTES = 64
FLOCK_WAIT_S = 2.0
_PID = re.compile(rb"^[+]?(\d{1,10})")
_OPEN_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# A process start time read from /proc is the boot time (whole seconds) plus clock ticks: it
# may be up to a second off either way, so a start within this much after the lock's mtime
# still counts as the writer's.
START_SLACK_NS = 2_000_000_000


@dataclass(frozen=True)
class LockState:
    """What the lock path held: ``mtime_ns`` ``None`` for no file; ``pid`` ``None`` for a body
    that is no PID; ``problem`` for a path that is not a regular file (never usable)."""

    mtime_ns: int | None
    pid: int | None
    problem: str | None = None


@dataclass(frozen=True)
class Acquired:
    prior_mtime_ns: int  # 0: there was no lock file

    @property
    def prior_mtime(self) -> float:
        return self.prior_mtime_ns / 1e9


@dataclass(frozen=True)
class Busy:
    pid: int | None
    age_s: float | None
    reason: str


@dataclass(frozen=True)
class Unrecorded:
    """The lock was free, but the caller's record of the run could not be written first
    (memd's state disk refused it): the lock is left as it was and nothing starts. Not a
    holder: ``status`` shows it as a state-disk problem, not as the lock held."""

    reason: str


@dataclass(frozen=True)
class Free:
    """The lock may be taken; ``why`` says on what grounds (for the log)."""

    why: str


# ---------------------------------------------------------------------------------------------
# Pure


def parse_pid(body: bytes) -> int | None:
    """The PID in a lock body, read as Claude Code's ``parseInt(raw.trim(), 10)`` does
    (leading digits after whitespace); ``None`` for anything else or a PID of 0."""
    match = _PID.match(body.strip())
    if match is None:
        return None
    pid = int(match.group(1))
    return pid if 0 < pid < 2**31 else None


def decide(
    state: LockState,
    *,
    now_ns: int,
    stale_s: float,
    own_pid: int,
    running_here: bool,
    alive: Callable[[int, int], bool],
) -> Free | Busy:
    """May the lock be taken? ``alive(pid, mtime_ns)`` is asked only about a fresh lock's
    foreign PID (:func:`holder_alive`)."""
    if state.problem is not None:
        return Busy(None, None, state.problem)
    if state.mtime_ns is None:
        return Free("no lock file")
    age = (now_ns - state.mtime_ns) / 1e9
    if age >= stale_s:
        return Free(f"stale: {age:.0f} s old")
    if state.pid is None:
        return Free("the body holds no PID")
    if state.pid == own_pid:
        if running_here:
            return Busy(own_pid, age, f"this daemon is consolidating there (pid {own_pid})")
        return Free("our own PID from a run that is over")
    if alive(state.pid, state.mtime_ns):
        return Busy(state.pid, age, f"held by live pid {state.pid} for {age:.0f} s")
    return Free(f"pid {state.pid} is not running (or is another process now)")


def pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` exists (``EPERM``: it exists, owned by someone else)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, OSError):
        return False
    return True


def holder_alive(pid: int, mtime_ns: int) -> bool:
    """Whether the process that wrote ``pid`` into a lock last set at ``mtime_ns`` still
    runs: ``pid`` is alive (a zombie is not), and started no later than that (with
    :data:`START_SLACK_NS`)."""
    if not pid_alive(pid):
        return False
    seen = _proc_stat(pid)
    if seen is None:
        return True  # no /proc: the PID alone decides
    state, started = seen
    return state not in (b"Z", b"X") and started <= mtime_ns + START_SLACK_NS


def process_start_ns(pid: int) -> int | None:
    """When ``pid`` started (wall clock, ns) from ``/proc``; ``None`` if unknown."""
    seen = _proc_stat(pid)
    return None if seen is None else seen[1]


def _proc_stat(pid: int) -> tuple[bytes, int] | None:
    """``pid``'s state letter and start time (wall clock, ns) from ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat_line = f.read(4096)
        with open("/proc/stat", "rb") as f:
            boot = next(line for line in f if line.startswith(b"btime "))
        fields = stat_line[stat_line.rindex(b")") + 1 :].split()  # the name may hold ") "
        per_s = os.sysconf("SC_CLK_TCK")
        started = int(boot.split()[1]) * 1_000_000_000 + int(fields[19]) * 1_000_000_000 // per_s
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return fields[0], started


# ---------------------------------------------------------------------------------------------
# I/O


def lock_path(memory_dir: Path) -> Path:
    return memory_dir / LOCK_NAME


def read_state(path: Path) -> LockState:
    """Stat and read the lock path; never blocks, never raises for what is there."""
    try:
        fd = os.open(path, _OPEN_READ)
    except FileNotFoundError:
        return LockState(None, None)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return LockState(None, None, f"{path} is a symbolic link, not a lock file")
        return LockState(None, None, f"cannot open {path}: {exc.strerror}")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return LockState(st.st_mtime_ns, None, f"{path} is not a regular file")
        body = os.read(fd, MAX_BODY_BYTES)
    except OSError as exc:
        return LockState(None, None, f"cannot read {path}: {exc.strerror}")
    finally:
        os.close(fd)
    return LockState(st.st_mtime_ns, parse_pid(body))


def stat_mtime(path: Path) -> float | None:
    """The lock's mtime (one ``lstat``; the time gate's only I/O), ``None`` if absent or not
    a regular file."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_mtime if stat.S_ISREG(st.st_mode) else None


@contextlib.contextmanager
def open_flock(memory_dir: Path, *, wait_s: float = FLOCK_WAIT_S) -> Iterator[str | None]:
    """Hold the side-file ``flock``; yields ``None`` when held, else why it could not be."""
    path = memory_dir / FLOCK_NAME
    try:
        fd = os.open(
            path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600
        )
    except OSError as exc:
        yield f"cannot open {path}: {exc.strerror}"
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            yield f"{path} is not a regular file"
            return
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield "another memd process is taking the lock"
                    return
                time.sleep(0.002)
        yield None
    finally:
        os.close(fd)  # releases the flock


def acquire(
    memory_dir: Path,
    *,
    stale_s: float,
    own_pid: int | None = None,
    running_here: bool = False,
    alive: Callable[[int, int], bool] = holder_alive,
    before_write: Callable[[int], None] | None = None,
) -> Acquired | Busy | Unrecorded:
    """Try to take the lock (blocking; run it in a worker thread). ``before_write(prior)``
    runs once the lock may be taken, before our PID is written (the caller records its
    intent there); an ``OSError`` from it leaves the lock as it was (:class:`Unrecorded`)."""
    pid = os.getpid() if own_pid is None else own_pid
    memory_dir.mkdir(parents=True, exist_ok=True)
    path = lock_path(memory_dir)
    with open_flock(memory_dir) as trouble:
        if trouble is not None:
            return Busy(None, None, trouble)
        state = read_state(path)
        verdict = decide(
            state,
            now_ns=time.time_ns(),
            stale_s=stale_s,
            own_pid=pid,
            running_here=running_here,
            alive=alive,
        )
        if isinstance(verdict, Busy):
            return verdict
        if before_write is not None:
            try:
                before_write(state.mtime_ns or 0)
            except OSError as exc:
                return Unrecorded(
                    f"memd's state disk refused the run's record ({exc}); nothing changed"
                )
        try:
            _write_body(path, str(pid).encode())
        except OSError as exc:
            return Busy(None, None, f"cannot write {path}: {exc.strerror}")
        check = read_state(path)
        if check.problem is not None or check.pid != pid:
            return Busy(check.pid, 0.0, "another process wrote the lock at the same moment")
        return Acquired(state.mtime_ns or 0)


def mark_consolidated(memory_dir: Path, *, own_pid: int | None = None) -> bool:
    """Success: the lock's mtime becomes now (its body keeps our PID, as Claude Code's does).
    A lock another process took over meanwhile is left alone; False then."""
    path = lock_path(memory_dir)
    state = read_state(path)
    if state.problem is not None or state.pid != (os.getpid() if own_pid is None else own_pid):
        return False
    os.utime(path, follow_symlinks=False)
    return True


def roll_back(memory_dir: Path, prior_mtime_ns: int, *, own_pid: int | None = None) -> bool:
    """Undo an acquire: prior 0 deletes the file, else empty the body and restore the prior
    mtime exactly. Leaves a lock alone that another process holds now; False then."""
    pid = os.getpid() if own_pid is None else own_pid
    path = lock_path(memory_dir)
    state = read_state(path)
    if state.problem is not None or state.mtime_ns is None:
        return False
    if state.pid is not None and state.pid != pid:
        return False
    if prior_mtime_ns == 0:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return True
    _write_body(path, b"")
    os.utime(path, ns=(prior_mtime_ns, prior_mtime_ns), follow_symlinks=False)
    return True


def _write_body(path: Path, body: bytes) -> None:
    """Replace the lock file with ``body`` by a rename: a reader (Claude Code's check) sees
    the old body or the new one, never the empty file a truncating write shows for a moment.
    The rename replaces the name itself, so it never writes through a link."""
    with reporting(path):
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TEMP_PREFIX, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(body)
                os.fchmod(handle.fileno(), 0o644)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):  # gone, or the disk turned read-only
                os.unlink(tmp)
            raise


def sweep_temps(memory_dir: Path) -> int:
    """Remove the temp files of memd's lock writes a kill left in ``memory_dir``; how many.
    Only regular files named as :data:`TEMP_PREFIX` makes them (never Claude Code's)."""
    removed = 0
    try:
        names = os.listdir(memory_dir)
    except OSError:
        return 0
    for name in names:
        if not _TEMP.fullmatch(name):
            continue
        with contextlib.suppress(OSError):
            if stat.S_ISREG(os.lstat(memory_dir / name).st_mode):
                os.unlink(memory_dir / name)
                removed += 1
    return removed
