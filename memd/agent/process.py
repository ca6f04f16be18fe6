"""Running a pipeline of argument vectors without a shell, bounded in output and time.

Each process starts in a session (and process group) of its own, with stdin closed for the
first one and ``subprocess`` pipes between them. When the time limit passes, or the output
reaches its cap, every group is killed with SIGKILL, so programs they started die too. The
caller decides what may run (:mod:`memd.agent.shell`); this module only runs it.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream, Process

_REAP_GRACE_S = 5.0
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class ShellLimits:
    """Bounds for one shell command (the lead may move these into the config tree)."""

    timeout_s: float = 10.0
    max_output_bytes: int = 64 * 1024
    max_stderr_bytes: int = 8 * 1024
    # The private copy of the areas a command runs over (memd.agent.mirror), per call.
    copy_max_files: int = 5000
    copy_max_bytes: int = 32 * 1024 * 1024


@dataclass(frozen=True)
class ShellOutcome:
    """What a command produced. ``exit_code`` is ``None`` when memd killed it."""

    exit_code: int | None
    stdout: str
    stderr: str
    output_cut: bool
    timed_out: bool
    limits: ShellLimits

    @property
    def failed(self) -> bool:
        return self.timed_out or (self.exit_code is not None and self.exit_code != 0)

    def render(self) -> str:
        """The text the model sees: output, cut marker, stderr, and how it ended."""
        parts = [self.stdout.rstrip("\n")] if self.stdout else []
        if self.output_cut:
            parts.append(
                f"[output cut at {self.limits.max_output_bytes} bytes; narrow the command, "
                "e.g. with head, grep or a more specific path]"
            )
        if self.stderr.strip():
            parts.append("[stderr]\n" + self.stderr.rstrip("\n"))
        if self.timed_out:
            parts.append(
                f"[killed: the command ran longer than its limit of {self.limits.timeout_s:g} s]"
            )
        elif self.exit_code is not None and self.exit_code != 0:
            parts.append(f"[exit code {self.exit_code}]")
        return "\n".join(parts) if parts else "(no output)"


def shell_environment(cwd: Path) -> dict[str, str]:
    """The whole environment a command gets, built from nothing (an allow-list).

    Nothing is inherited from the daemon (no API key, no value from memd's env file, no
    ``LD_PRELOAD``, ``GREP_OPTIONS``, ``MAGIC``, ``RIPGREP_CONFIG_PATH``, ``LESSOPEN`` …).
    ``HOME``, every XDG directory and ``TMPDIR`` are :func:`sandbox_home`: an empty directory
    outside every area an agent may write, so no program finds a dotfile the agent wrote
    (``~/.magic``, ``~/.gitconfig``, ``~/.config/…``). Git gets more in
    :func:`memd.agent.vcs.git_environment`; without a repository of the area's own it does not
    run at all. ``cwd`` is kept in the signature for callers; the environment does not depend
    on it.
    """
    home = str(sandbox_home())
    return {
        "PATH": SAFE_PATH,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": home,
        "XDG_CONFIG_HOME": home,
        "XDG_DATA_HOME": home,
        "XDG_CACHE_HOME": home,
        "XDG_STATE_HOME": home,
        "XDG_CONFIG_DIRS": home,
        "XDG_RUNTIME_DIR": home,
        "TMPDIR": home,
        "TERM": "dumb",
        "PAGER": "cat",
        "GIT_PAGER": "cat",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CEILING_DIRECTORIES": str(cwd.parent),
    }


def sandbox_home() -> Path:
    """An empty, read-only directory memd owns, used as every program's home (blocking).

    Made once per process under the temp dir with a random name, and checked on every use
    (a real directory, ours, mode 0555, empty); if anything changed it, a new one is made.
    """
    current = _HOME[0] if _HOME else None
    if current is not None and _is_empty_home(current):
        return current
    made = Path(tempfile.mkdtemp(prefix="memd-sandbox-home-"))
    made.chmod(0o555)
    _HOME[:] = [made]
    return made


_HOME: list[Path] = []


def _is_empty_home(path: Path) -> bool:
    try:
        st = os.lstat(path)
        empty = not os.listdir(path)
    except OSError:
        return False
    owned = stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
    return owned and stat.S_IMODE(st.st_mode) == 0o555 and empty


class _Sink:
    """Collects up to ``cap`` bytes and remembers whether more arrived."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.cut = False

    def add(self, chunk: bytes) -> bool:
        """Keep what fits; return False once the cap has been exceeded."""
        room = self.cap - len(self.data)
        self.data += chunk[: max(room, 0)]
        if len(chunk) > room:
            self.cut = True
        return not self.cut

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


async def run_pipeline(
    argvs: Sequence[Sequence[str]],
    *,
    cwd: Path,
    env: Mapping[str, str],
    limits: ShellLimits,
) -> ShellOutcome:
    """Run ``argvs[0] | argvs[1] | …`` in ``cwd`` and collect the last one's output.

    A command that cannot start (its arguments are past the OS limit, say) is an outcome
    with exit code 126 and the reason, like a shell's, never an exception."""
    async with AsyncExitStack() as stack:
        try:
            procs = await _spawn_all(argvs, cwd=cwd, env=env, stack=stack)
        except OSError as exc:  # E2BIG (arguments past the OS limit), ENOENT, EACCES …
            why = f"the command could not start: {exc.strerror or exc}"
            return ShellOutcome(126, "", why, False, False, limits)
        try:
            return await _collect(procs, limits)
        finally:
            kill_groups(procs)


async def _spawn_all(
    argvs: Sequence[Sequence[str]],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stack: AsyncExitStack,
) -> list[Process]:
    procs: list[Process] = []
    stdin = subprocess.DEVNULL
    try:
        for index, argv in enumerate(argvs):
            last = index == len(argvs) - 1
            read_end, write_end = (-1, subprocess.PIPE) if last else os.pipe()
            try:
                proc = await anyio.open_process(
                    list(argv),
                    stdin=stdin,
                    stdout=write_end,
                    stderr=subprocess.PIPE,
                    cwd=cwd,
                    env=env,
                    start_new_session=True,
                )
            except BaseException:
                if not last:
                    os.close(read_end)
                raise
            finally:
                if not last:
                    os.close(write_end)
                if stdin >= 0:
                    os.close(stdin)
            stack.push_async_callback(proc.aclose)
            procs.append(proc)
            stdin = read_end
    except BaseException:
        kill_groups(procs)
        raise
    return procs


async def _collect(procs: list[Process], limits: ShellLimits) -> ShellOutcome:
    out = _Sink(limits.max_output_bytes)
    err = _Sink(limits.max_stderr_bytes)
    with anyio.move_on_after(limits.timeout_s) as scope:
        async with anyio.create_task_group() as tg:
            stdout = procs[-1].stdout
            assert stdout is not None
            tg.start_soon(_drain, stdout, out, lambda: kill_groups(procs))
            for proc in procs:
                assert proc.stderr is not None
                tg.start_soon(_drain, proc.stderr, err, None)
        for proc in procs:
            await proc.wait()
    killed = scope.cancelled_caught or out.cut
    if scope.cancelled_caught:
        kill_groups(procs)
        with anyio.move_on_after(_REAP_GRACE_S, shield=True):
            for proc in procs:
                await proc.wait()
    return ShellOutcome(
        exit_code=None if killed else procs[-1].returncode,
        stdout=out.text(),
        stderr=err.text(),
        output_cut=out.cut,
        timed_out=scope.cancelled_caught,
        limits=limits,
    )


async def _drain(
    stream: ByteReceiveStream, sink: _Sink, on_full: Callable[[], None] | None
) -> None:
    async for chunk in stream:
        if not sink.add(chunk) and on_full is not None:
            on_full()
            return


def kill_groups(procs: Sequence[Process]) -> None:
    """SIGKILL the process group of every process not yet reaped.

    A reaped process is skipped: its id may already belong to someone else.
    """
    for proc in procs:
        if proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
