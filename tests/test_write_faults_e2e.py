"""The real daemon on a disk that fills up, turns read-only or runs out of descriptors
(issue 23, "a failed write is a state"): it keeps serving from memory, ``status``,
``memdctl status`` and ``memdctl doctor`` name the path, the error and since when, and once
the disk is back the state lands on disk by itself, without a restart.

The disk is a real tmpfs (as root) or a shim below memd's write functions otherwise
(:mod:`tests.disk_support`); descriptors run out through the daemon's own RLIMIT_NOFILE.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from memd.memory.paths import memory_dir
from memd.state import load_sessions
from memd_client.client import Client
from memd_client.errors import MemdClientError, RemoteError
from tests.daemon_harness import (
    Home,
    call,
    fake_home,
    memdctl,
    read_log,
    start_memd,
    stop_memd,
    wait_for,
)
from tests.disk_support import faulty_disk
from tests.session_support import append_work_turn, write_work_session

pytestmark = pytest.mark.slow

SLUG = "-work-project"
FIRST = "aaaaaaaa-0000-4000-8000-000000000001"
SECOND = "bbbbbbbb-0000-4000-8000-000000000002"
FAST_FLUSH = ("--set", "daemon.state_flush_s=0.2")


def transcript(home: Home, session_id: str, turns: int = 2) -> Path:
    return write_work_session(home.projects / SLUG, session_id, turns)


def on_disk(home: Home, path: Path) -> int | None:
    """The offset sessions.json holds for ``path`` now (None: not there)."""
    state = load_sessions(home.state_dir / "sessions.json").get(str(path))
    return state.offset if state is not None else None


def failing(status: dict[str, Any], name: str) -> dict[str, Any] | None:
    rows = status.get("writes", {}).get("paths", [])
    return next((r for r in rows if r["path"].endswith("/" + name)), None)


@pytest.mark.parametrize("kind", ["ENOSPC", "EROFS"])
def test_a_state_write_the_disk_refuses_leaves_memd_serving_until_it_recovers(
    tmp_path: Path, kind: str
) -> None:
    with fake_home(tmp_path) as home, faulty_disk(home.state_dir) as disk:
        home.env.update(disk.env)
        proc = start_memd(home, *FAST_FLUSH)
        first = transcript(home, FIRST)
        wait_for(lambda: on_disk(home, first) == first.stat().st_size, timeout=20, what="A")

        disk.fault(kind)
        append_work_turn(first)  # A grows and B starts while the disk refuses
        second = transcript(home, SECOND, turns=3)

        def refused() -> dict[str, Any] | None:
            return failing(call(home, "status"), "sessions.json")

        row = wait_for(refused, timeout=20, what=f"status to name sessions.json ({kind})")
        assert row["error"] == kind
        assert row["since"] and row["next_retry"] and row["retried_by"] == "memd"
        assert row["attempts"] >= 1 and row["kept_bytes"] > 0

        # Serving from memory: hello, status, the new session in full.
        assert call(home, "hello")["version"]
        assert call(home, "session", {"session": SECOND})["session_id"] == SECOND
        assert proc.poll() is None

        text = memdctl(home, "status")
        assert text.returncode == 0, text.stderr
        assert "sessions.json" in text.stdout and kind in text.stdout, text.stdout
        as_json = json.loads(memdctl(home, "status", "--json").stdout)
        assert failing(as_json, "sessions.json") is not None
        doctor = memdctl(home, "doctor", "--json")
        assert doctor.returncode != 0
        writes = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "writes")
        assert writes["verdict"] == "fail"
        assert "sessions.json" in writes["detail"] and kind in writes["detail"]
        assert writes["fix"]
        assert on_disk(home, second) is None  # the disk really took nothing

        disk.heal()
        wait_for(
            lambda: not call(home, "status")["writes"]["failing"],
            timeout=60,
            what="the write to recover by itself",
        )
        assert call(home, "status")["daemon"]["pid"] == proc.pid  # no restart
        assert on_disk(home, second) == second.stat().st_size  # memory landed on disk
        assert on_disk(home, first) == first.stat().st_size
        assert stop_memd(proc) == 0, read_log(home)


def test_memd_stopping_while_the_disk_is_full_exits_cleanly_and_says_what_is_lost(
    tmp_path: Path,
) -> None:
    with fake_home(tmp_path) as home, faulty_disk(home.state_dir) as disk:
        home.env.update(disk.env)
        proc = start_memd(home, *FAST_FLUSH)
        disk.fault("ENOSPC")
        transcript(home, SECOND)
        wait_for(
            lambda: failing(call(home, "status"), "sessions.json"),
            timeout=20,
            what="the failed write",
        )
        assert stop_memd(proc) == 0
        log = read_log(home)
        assert "Traceback" not in log, log
        assert "could not write" in log and "sessions.json" in log, log


def test_a_full_log_disk_is_named_in_status_and_clears_by_itself(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    with fake_home(tmp_path) as home, faulty_disk(logs) as disk:
        if not disk.real:
            pytest.skip("needs a real filesystem under the open log file (run as root)")
        proc = start_memd(home, log=logs / "memd.log")
        disk.fault("ENOSPC")

        def refused() -> dict[str, Any] | None:
            call(home, "reload")  # logs a line; the log's last page fills, then it fails
            return failing(call(home, "status"), "memd.log")

        row = wait_for(refused, timeout=20, what="the log's failed write")
        assert row["error"] == "ENOSPC" and row["retried_by"] == "the next log line"
        disk.heal()
        call(home, "reload")  # the next line gets through
        wait_for(
            lambda: failing(call(home, "status"), "memd.log") is None,
            timeout=20,
            what="the log to be written again",
        )
        assert proc.poll() is None
        stop_memd(proc)


def test_a_memory_the_disk_refuses_is_answered_unavailable_and_named(tmp_path: Path) -> None:
    """``remember`` (the MCP tool's method) into a read-only memory dir: a reply that names
    the file and the error, the path in ``status`` until a later write of it works."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    params = {"cwd": str(repo), "type": "project", "name": "n", "description": "d"}
    with fake_home(tmp_path) as home, faulty_disk(memory_dir(home.projects, repo)) as disk:
        home.env.update(disk.env)
        proc = start_memd(home)
        disk.fault("EROFS")
        with pytest.raises(RemoteError) as refused:
            call(home, "remember", {**params, "content": "the parser is in parse.py"})
        assert refused.value.code == "unavailable"
        assert "Read-only file system" in str(refused.value)
        rows = call(home, "status")["writes"]["paths"]
        assert any(r["error"] == "EROFS" and r["retried_by"] == "its job" for r in rows), rows
        disk.heal()
        written = call(home, "remember", {**params, "content": "the parser is in parse.py"})
        assert Path(written["path"]).read_text().count("parse.py") == 1
        assert not call(home, "status")["writes"]["failing"]
        assert stop_memd(proc) == 0


def _hello_or_refused(home: Home) -> None:
    with contextlib.suppress(MemdClientError):
        call(home, "hello")


def _lowest_free_fd(pid: int) -> int:
    used = {int(name) for name in os.listdir(f"/proc/{pid}/fd")}
    return next(n for n in range(len(used) + 1) if n not in used)


def test_running_out_of_descriptors_keeps_memd_serving_and_accepting(tmp_path: Path) -> None:
    """``ulimit -n 64``: memd starts and serves. Then no descriptor is left at all (its soft
    limit lowered to the lowest free one): the state write fails with EMFILE and is shown,
    the accept loop lives on (a client that connects meanwhile is answered), and the state
    lands on disk once descriptors are back."""
    limit = 64
    with fake_home(tmp_path) as home:
        proc = start_memd(
            home,
            "--set",
            "daemon.state_flush_s=3",
            prefix=("prlimit", f"--nofile={limit}:{limit}", "--"),
        )
        held = Client(home.socket, timeout=30.0)  # connected before the descriptors run out
        assert held.call("status")["daemon"]["pid"] == proc.pid
        path = transcript(home, FIRST)
        wait_for(lambda: on_disk(home, path) == path.stat().st_size, timeout=20, what="A")

        append_work_turn(path)
        grown = path.stat().st_size

        def read_by_memd() -> bool:
            rows = held.call("sessions")
            return any(r["session_id"] == FIRST and r["offset"] == grown for r in rows)

        wait_for(read_by_memd, timeout=20, what="the growth to be read")
        # Before the flush (3 s after the change): no descriptor is left.
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (_lowest_free_fd(proc.pid), limit))
        try:
            row = wait_for(
                lambda: failing(held.call("status"), "sessions.json"),
                timeout=30,
                what="status to name the EMFILE",
            )
            assert row["error"] == "EMFILE"
            # A client connecting now meets the accept loop out of descriptors (how it is
            # answered, or closed to make room, is the IPC tests' business): it ends.
            late = threading.Thread(target=_hello_or_refused, args=(home,))
            late.start()
            time.sleep(1.0)
            assert proc.poll() is None
        finally:
            resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (limit, limit))
        late.join(timeout=30)
        assert not late.is_alive()
        held.close()  # it may have been closed to make room: new connections from here on
        assert call(home, "hello")["version"]  # the accept loop lives on
        wait_for(
            lambda: not call(home, "status")["writes"]["failing"],
            timeout=60,
            what="the state write to recover",
        )
        assert on_disk(home, path) == grown
        assert call(home, "status")["daemon"]["pid"] == proc.pid
        assert stop_memd(proc) == 0
