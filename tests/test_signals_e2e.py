"""Signals at any time (issue 23): the real ``memd`` process, real signals sent at many
instants of its start. SIGHUP in the first second and a half of a start killed memd (3 of 10);
SIGINT printed a traceback; a stop took the whole grace period, and more."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memd.daemon.signals import STOP_DEADLINE_S
from memd.testing.loopback_process import LoopbackProcess
from memd_client.errors import MemdClientError
from tests.daemon_harness import Home, call, fake_home, load_stretch, wait_for

pytestmark = pytest.mark.slow

# Seconds after memd's handlers are in place: start-up (config, lock, state, the loop, the
# server, READY) and what follows it (the features loading, the SDK import, the first scan).
DELAYS = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8, 1.5)
SIGHUP_BIT = 1 << (signal.SIGHUP - 1)


def caught(pid: int) -> int:
    """The process's caught-signals mask (``SigCgt`` in ``/proc/<pid>/status``), 0 if gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    line = next((x for x in status.splitlines() if x.startswith("SigCgt:")), "SigCgt: 0")
    return int(line.split()[1], 16)


def spawn(home: Home, log: Path) -> subprocess.Popen[bytes]:
    """memd at its default verbosity (what a user's log shows), its stderr in ``log``."""
    with log.open("ab") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "memd.daemon.main"],
            env=home.env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


def handlers_in(home: Home, proc: subprocess.Popen[bytes]) -> bool:
    """Wait until memd catches SIGHUP; whether that came before it made its runtime dir (the
    first thing it creates): handlers in place before anything else starts."""
    runtime = home.runtime / "memd"
    deadline = time.monotonic() + 20 * load_stretch()
    while time.monotonic() < deadline:
        made = runtime.exists()  # looked at first: a mask seen after it proves the order
        if caught(proc.pid) & SIGHUP_BIT:
            return not made
        assert proc.poll() is None, f"memd exited with {proc.returncode} while starting"
    raise AssertionError("memd never caught SIGHUP")


def reloads(home: Home, proc: subprocess.Popen[bytes]) -> int | None:
    """How many reloads ``status`` counts; None while memd does not answer yet."""
    assert proc.poll() is None, f"memd exited with {proc.returncode}"
    try:
        count: int = call(home, "status")["daemon"]["reloads"]
    except MemdClientError:
        return None
    return count


@pytest.fixture
def model() -> Iterator[LoopbackProcess]:
    """A loopback Messages API: with a key, the SDK loads during the instants aimed at."""
    with LoopbackProcess() as api:
        yield api


@pytest.mark.parametrize("delay", DELAYS)
def test_sighup_at_any_instant_of_a_start_reloads(
    tmp_path: Path, model: LoopbackProcess, delay: float
) -> None:
    with fake_home(tmp_path, ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=model.url) as home:
        log = tmp_path / "memd.log"
        proc = spawn(home, log)
        try:
            assert handlers_in(home, proc), "memd made its runtime dir before catching SIGHUP"
            time.sleep(delay)
            proc.send_signal(signal.SIGHUP)
            wait_for(lambda: reloads(home, proc) == 1, timeout=20, what="memd, reloaded once")
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=STOP_DEADLINE_S * 2) == 0, log.read_text()


# Loaded by the interpreter's own start (site), before memd: an audit hook that, once the
# ``memd`` package is imported (memd's first instruction follows), sends the process a signal
# at each import its main thread starts (from the first argv[2] of them, at most argv[3]),
# except the handlers' own module's: hundreds of instants, the earliest in the first
# milliseconds of memd's code, where no delay can aim. Each is written to stderr.
EVERY_IMPORT = """
import _thread, os, sys
main, armed, counted = _thread.get_ident(), [False], [0]
signum, first, most = (int(x) for x in os.environ["MEMD_TEST_SIGNAL_AT_IMPORTS"].split(","))
def hook(event, args):
    if event != "import" or _thread.get_ident() != main:
        return
    name = args[0]
    if name == "memd":
        armed[0] = True
    elif armed[0] and name not in ("memd.daemon.signals", "signal"):
        counted[0] += 1
        if first <= counted[0] < first + most:
            sys.stderr.write(f"signal {signum} at the import of {name}\\n")
            os.kill(os.getpid(), signum)
sys.addaudithook(hook)
"""


def signalled_at_imports(
    home: Home, tmp_path: Path, signum: int, first: int = 1, most: int = 1_000_000
) -> subprocess.Popen[bytes]:
    """memd started with :data:`EVERY_IMPORT` in its interpreter (its log: ``memd.log``)."""
    hooks = tmp_path / "site-hook"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(EVERY_IMPORT)
    home.env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(hooks), os.environ.get("PYTHONPATH")])
    )
    home.env["MEMD_TEST_SIGNAL_AT_IMPORTS"] = f"{signum},{first},{most}"
    return spawn(home, tmp_path / "memd.log")


def test_sighup_at_every_import_of_a_start_from_its_first_instruction_reloads(
    tmp_path: Path,
) -> None:
    """Handled from memd's first instruction: a SIGHUP at every import the start makes (in
    the main thread), the first of them right after the ``memd`` package, leaves memd
    serving, reloaded. The handlers went in only once ``main()`` ran, after its module's
    imports: a SIGHUP then ended memd."""
    with fake_home(tmp_path) as home:
        proc = signalled_at_imports(home, tmp_path, signal.SIGHUP)
        log = tmp_path / "memd.log"
        try:
            wait_for(lambda: (reloads(home, proc) or 0) >= 1, timeout=20, what="a reload")
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=STOP_DEADLINE_S * 2)
        text = log.read_text()
        assert code == 0, text
        sent = [x for x in text.splitlines() if x.startswith("signal ")]
        assert len(sent) >= 100, text  # the start imports hundreds of modules
        assert "Traceback" not in text, text


@pytest.mark.parametrize("first", [1, 2, 5, 20, 60])
def test_a_stop_at_an_import_of_the_first_instants_is_one_line_and_exit_0(
    tmp_path: Path, first: int
) -> None:
    with fake_home(tmp_path) as home:
        proc = signalled_at_imports(home, tmp_path, signal.SIGTERM, first, 1)
        try:
            code = proc.wait(timeout=STOP_DEADLINE_S * load_stretch())
        finally:
            proc.kill()
        text = (tmp_path / "memd.log").read_text()
        assert code == 0, text
        assert [x for x in text.splitlines() if "stopped" in x] == [
            "memd: stopped on SIGTERM while starting"
        ], text


@pytest.mark.parametrize(
    ("delay", "signum"),
    [(d, (signal.SIGTERM, signal.SIGINT)[n % 2]) for n, d in enumerate(DELAYS)],
    ids=[f"{('TERM', 'INT')[n % 2]}-{d}" for n, d in enumerate(DELAYS)],
)
def test_a_stop_at_any_instant_of_a_start_is_one_line_and_exit_0(
    tmp_path: Path, model: LoopbackProcess, delay: float, signum: int
) -> None:
    with fake_home(tmp_path, ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=model.url) as home:
        log = tmp_path / "memd.log"
        proc = spawn(home, log)
        try:
            handlers_in(home, proc)
            time.sleep(delay)
            proc.send_signal(signum)
            code = proc.wait(timeout=STOP_DEADLINE_S * load_stretch())
        finally:
            proc.kill()
        text = log.read_text()
        assert code == 0, text
        assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
        name = signal.Signals(signum).name
        assert [x for x in text.splitlines() if "stopped" in x] == [
            x for x in text.splitlines() if f"stopped on {name}" in x
        ]
        assert len([x for x in text.splitlines() if "stopped" in x]) == 1, text
        assert not (home.runtime / "memd" / "memd.sock").exists()


def test_a_stuck_process_still_ends_at_the_deadline_with_one_line(tmp_path: Path) -> None:
    """Whatever is stuck (here the main thread, in a loop that never looks at the stop),
    the first SIGTERM ends the process at the deadline: exit 0, one line."""
    program = textwrap.dedent(
        """
        import logging, sys, time
        from memd.daemon.signals import Signals
        logging.basicConfig(level=logging.INFO)
        signals = Signals()
        signals.install()
        signals.enter_loop()
        print("ready", flush=True)
        while True:
            time.sleep(0.01)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", program],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGINT)  # a second one changes nothing (either may come first)
    _, err = proc.communicate(timeout=STOP_DEADLINE_S * 3)
    took = time.monotonic() - started
    lines = err.decode().splitlines()
    assert proc.returncode == 0
    assert took >= STOP_DEADLINE_S - 0.5  # it waited for the stop that never came
    assert len(lines) == 1 and re.search(r"SIG(TERM|INT) 10 s ago.*exiting now", lines[0])
