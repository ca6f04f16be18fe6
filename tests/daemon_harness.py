"""Run the real ``memd`` as a subprocess in a throwaway home, for end-to-end tests."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from memd_client.client import Client
from memd_client.errors import MemdClientError
from memd_client.names import escape_name

T = TypeVar("T")


@dataclass
class Home:
    """A fake user: HOME, a short runtime dir for the socket, and the env to run memd in."""

    root: Path
    runtime: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def projects(self) -> Path:
        return self.root / ".claude" / "projects"

    @property
    def socket(self) -> Path:
        return self.runtime / "memd" / "memd.sock"

    @property
    def state_dir(self) -> Path:
        return self.root / ".local" / "state" / "memd"

    def client(self, timeout: float = 5.0) -> Client:
        """A client whose reply deadline stretches with the machine's load (a guard)."""
        return Client(self.socket, timeout=timeout * load_stretch())


@contextmanager
def fake_home(tmp_path: Path, **extra_env: str) -> Iterator[Home]:
    # AF_UNIX paths are limited to ~107 bytes, and pytest's tmp_path can be long.
    runtime = Path(tempfile.mkdtemp(prefix="memd-", dir="/tmp"))
    # No model key of the machine's reaches a test's daemon (each backend's own variables).
    model = ("ANTHROPIC_", "OPENAI_", "GEMINI_", "GOOGLE_API_KEY", "GOOGLE_GEMINI_")
    env = {k: v for k, v in os.environ.items() if not k.startswith((*model, "MEMD_", "XDG_"))}
    env.pop("CLAUDE_CONFIG_DIR", None)
    env.pop("NOTIFY_SOCKET", None)
    env.update(HOME=str(tmp_path), XDG_RUNTIME_DIR=str(runtime), PYTHONUNBUFFERED="1")
    env.update(extra_env)
    try:
        yield Home(tmp_path, runtime, env)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


# Every daemon start_memd started: tests/conftest.py kills what a test left running (a test
# that failed between a start and its stop left a daemon for the rest of the run, and after).
STARTED: list[subprocess.Popen[bytes]] = []


def start_memd(
    home: Home, *args: str, log: Path | None = None, prefix: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """Start memd (after ``prefix``, a command that ends by running the rest: ``unshare``,
    ``setpriv``) and wait until it answers ``hello``."""
    stderr = open(log or home.root / "memd.log", "ab")  # noqa: SIM115 - owned by the process
    proc = subprocess.Popen(
        [*prefix, sys.executable, "-m", "memd.daemon.main", "-v", *args],
        env=home.env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    stderr.close()
    STARTED.append(proc)
    return wait_answering(home, proc)


def wait_answering(home: Home, proc: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
    """Wait until ``proc`` answers ``hello`` (its socket file appears before it listens)."""

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"memd exited with {proc.returncode}: {read_log(home)}")
        try:
            with home.client(timeout=1.0) as c:
                c.call("hello")
            return True
        except MemdClientError:
            return False

    wait_for(ready, timeout=20.0, what="memd to answer hello")
    return proc


def wait_features(home: Home) -> dict[str, Any]:
    """Wait until the daemon in ``home`` has loaded its features; its ``status`` (which
    answers once they are: it waits for them). ``hello`` answers before: a hook sent between
    the two waits for the load, which on a busy machine outlasts the hook's own budget (3 s),
    and the hook then fails open, as it should."""

    def loaded() -> dict[str, Any] | None:
        try:
            with home.client(timeout=10.0) as c:
                answer: dict[str, Any] = c.call("status")
                return answer
        except MemdClientError:
            return None

    return wait_for(loaded, timeout=60.0, what="memd to load its features")


def stop_memd(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=timeout)


def read_log(home: Home) -> str:
    path = home.root / "memd.log"
    return path.read_text(errors="replace")[-4000:] if path.exists() else ""


MAX_LOAD_STRETCH = 4.0


def load_stretch() -> float:
    """How much a deadline on another process stretches on a loaded machine: the 1-minute load
    average per core, between 1 and :data:`MAX_LOAD_STRETCH`. These deadlines are guards
    against a hang, not measurements: a daemon importing the SDK (1.5 s idle) took over 20 s
    with a load of 15 on 2 cores, failing tests that had found nothing."""
    try:
        per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        return 1.0
    return min(max(1.0, per_core), MAX_LOAD_STRETCH)


def wait_for(check: Callable[[], T | bool | None], *, timeout: float, what: str) -> T:
    """Poll an external process's observable state until ``check`` is truthy, for at most
    ``timeout`` seconds times :func:`load_stretch`."""
    limit = timeout * load_stretch()
    deadline = time.monotonic() + limit
    while True:
        value = check()
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit:.0f}s waiting for {what}")
        time.sleep(0.01)


def call(home: Home, method: str, params: dict[str, Any] | None = None) -> Any:
    with home.client() as c:
        return c.call(method, params or {})


def session_ids(home: Home, *transcripts: Path | bytes, timeout: float = 30) -> list[str]:
    """The ids memd shows (``memdctl sessions``) for the sessions written to ``transcripts``,
    found as a user finds them: by the file, never by a name the test assumes memd gives it
    (a Gemini chat is its ``sessionId``, not its file's name). Waits only for memd to list the
    files, which takes a watcher's event, not a model call; says what memd lists if it never
    does."""
    wanted = [escape_name(os.fsdecode(t)) for t in transcripts]
    listed: dict[str, str] = {}

    def every_file() -> list[str] | None:
        listed.clear()
        listed.update((r["path"], r["session_id"]) for r in call(home, "sessions", {}))
        return [listed[p] for p in wanted] if all(p in listed for p in wanted) else None

    try:
        return wait_for(every_file, timeout=timeout, what="memd to list the sessions' files")
    except AssertionError as exc:
        missing = [p for p in wanted if p not in listed]
        raise AssertionError(f"{exc}: not listed {missing}; memd lists {listed}") from None


def claude_hook(
    home: Home, cwd: Path, event: str, *, timeout: float = 60, **fields: Any
) -> subprocess.CompletedProcess[bytes]:
    """Run the real hook client as Claude Code runs it for ``event`` of a session in ``cwd``
    (``fields`` join the event's JSON: ``prompt``, ``source``…); its exit, stdout, stderr."""
    payload = {
        "session_id": "claude-1",
        "cwd": str(cwd),
        "transcript_path": "/nonexistent",
        "hook_event_name": event,
        **fields,
    }
    return subprocess.run(
        [sys.executable, "-m", "memd_client.hook"],
        input=json.dumps(payload).encode(),
        env=home.env,
        capture_output=True,
        timeout=timeout,
    )


def memdctl(
    home: Home, *args: str, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the real ``memdctl`` against the daemon in ``home`` (from ``cwd``)."""
    return run_memdctl(home.env, *args, cwd=cwd, timeout=timeout)


def run_memdctl(
    env: dict[str, str], *args: str, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the real ``memdctl`` under ``env``: its exit code, stdout and stderr as text (a
    failure is the test's to assert)."""
    return subprocess.run(
        [sys.executable, "-m", "memd_client.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
