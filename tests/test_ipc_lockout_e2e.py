"""No client can lock the others out, through the real daemon: a thousand idle connections
held open by another process leave ``memdctl status`` and the hook working, and an idle
connection is closed after ``ipc.idle_timeout_s``."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memd_client import hook as hook_module
from memd_client import protocol as p
from memd_client.hook import DEFAULT_TIMEOUT_S
from memd_client.hooks_install import hook_command
from tests.daemon_harness import (
    call,
    fake_home,
    load_stretch,
    memdctl,
    read_log,
    start_memd,
    stop_memd,
)
from tests.test_memory_e2e import context_of, hook, write_memories

pytestmark = pytest.mark.slow

HOLDER = """
import resource, socket, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
want = int(sys.argv[2]) + 64
if soft != resource.RLIM_INFINITY and soft < want:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
held = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    held.append(s)
print(len(held), flush=True)
sys.stdin.readline()
"""


def test_a_thousand_idle_connections_lock_nobody_out(tmp_path: Path) -> None:
    cwd = tmp_path / "work" / "proj"
    cwd.mkdir(parents=True)
    with fake_home(tmp_path, CLAUDE_CODE_DISABLE_AUTO_MEMORY="1") as home:
        write_memories(home, cwd, age_days=3)
        proc = start_memd(home)
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(home.socket), "1000"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "1000\n"
            began = time.monotonic()
            status = memdctl(home, "status")
            took = time.monotonic() - began
            assert status.returncode == 0, status.stdout + status.stderr
            # (its ipc line may count the holder's own connections turned away busy)
            assert "busy" not in status.stderr, status.stderr
            clients = next(x for x in status.stdout.splitlines() if x.startswith("clients"))
            assert "of 256 connections" in clients and "closed to make room" in clients
            assert took < 10 * load_stretch()  # a guard against a hang, not a measurement
            event = {
                "session_id": "sess-1",
                "cwd": str(cwd),
                "transcript_path": "/nonexistent",
                "hook_event_name": "SessionStart",
                "source": "startup",
            }
            done = hook(home, event, f"{sys.executable} -m memd_client.hook")
            assert "Run the test suite with scripts/check" in context_of(done, "SessionStart")
            assert not (home.socket.parent / "hook-failed-open").exists()
            report = json.loads(memdctl(home, "status", "--json").stdout)["ipc"]
            assert report["max_connections"] == 256
            assert report["evicted"] >= 1000 - 256
            assert report["busy"] == 0
        finally:
            holder.communicate("\n", timeout=30)
            assert stop_memd(proc) == 0, read_log(home)


# Holds argv[2] connections that each have a frame under way: one byte sent at first, then
# ("trickle") one more every 2 s; any the daemon closes is opened again, with its byte, at the
# next tick. Says "held" once each has its byte in, and goes on until its stdin closes.
SLOW_HOLDER = """
import resource, select, socket, sys, time
path, count, trickle = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "trickle"
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if soft != resource.RLIM_INFINITY and soft < count + 64:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(count + 64, hard), hard))
def opened():
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.send(b"\\x00")
    return s
held = [opened() for _ in range(count)]
print("held", flush=True)
while not select.select([sys.stdin], [], [], 2.0)[0]:
    for k, s in enumerate(held):
        try:
            gone = select.select([s], [], [], 0)[0] and not s.recv(4096)
            if not gone and select.select([s], [], [], 0)[0]:
                gone = True  # memd wrote a notice: it is closing this one
            if not gone and trickle:
                s.send(b"\\x00")
        except OSError:
            gone = True
        if gone:
            s.close()
            try:
                held[k] = opened()
            except OSError:
                held[k] = socket.socket(socket.AF_UNIX)
"""


@pytest.mark.parametrize("pace", ["once", "trickle"])
def test_slow_connections_hold_no_one_out(tmp_path: Path, pace: str) -> None:
    """300 connections that each send one byte of a frame (once, or one every 2 s, opened
    again when memd closes them) hold no one out: ``memdctl status`` answers, and so does
    the Codex prompt hook, with its recall, within its own deadline."""
    cwd = tmp_path / "work" / "proj"
    cwd.mkdir(parents=True)
    with fake_home(tmp_path) as home:
        write_memories(home, cwd, age_days=3)
        proc = start_memd(home)
        holder = subprocess.Popen(
            [sys.executable, "-c", SLOW_HOLDER, str(home.socket), "300", pace],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            status = memdctl(home, "status")
            assert status.returncode == 0, status.stdout + status.stderr
            # (its ipc line may count the holder's own connections turned away busy)
            assert "busy" not in status.stderr, status.stderr
            codex = hook_command(sys.executable, hook_module.__file__, "codex")
            budget = int(DEFAULT_TIMEOUT_S * 1000 * load_stretch())
            home.env["MEMD_HOOK_TIMEOUT_MS"] = str(budget)
            for k in range(3):  # three sessions: a memory is recalled once per session
                prompt = {
                    "session_id": f"01a216fd-ce35-7623-8170-643697eba0d{k}",
                    "transcript_path": str(tmp_path / f"rollout-2026-11-26T08-34-2{k}.jsonl"),
                    "cwd": str(cwd),
                    "hook_event_name": "UserPromptSubmit",
                    "prompt": "how should I run the test suite before committing?",
                    "turn_id": "t1",
                }
                recalled = context_of(hook(home, prompt, codex), "UserPromptSubmit")
                assert "feedback_tests.md" in recalled
            assert not (home.socket.parent / "hook-failed-open").exists()
            report = json.loads(memdctl(home, "status", "--json").stdout)["ipc"]
            assert report["evicted"] >= 1
            # The trickling holder opens a connection again each time memd closes one: on a
            # busy machine one of those may find the slots full and be refused, which is memd
            # holding the attacker out (memdctl and the hooks above were answered, not busy).
            assert report["busy"] == 0 or pace == "trickle", report
        finally:
            holder.communicate("\n", timeout=30)
            assert stop_memd(proc) == 0, read_log(home)


def test_an_idle_connection_is_closed_after_the_configured_deadline(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        proc = start_memd(home, "--set", "ipc.idle_timeout_s=2")
        try:
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(str(home.socket))
            decoder = p.FrameDecoder(1 << 20)
            for rid in range(3):  # requests less than the deadline apart keep it open
                sock.sendall(p.encode_frame(p.request(rid, "hello", {})))
                assert next_frame(sock, decoder)["id"] == rid
                time.sleep(0.5)
            sent = time.monotonic()
            sock.settimeout(30 * load_stretch())
            notice = next_frame(sock, decoder)
            idle = time.monotonic() - sent
            assert notice["id"] is None and notice["error"]["code"] == p.TIMEOUT
            assert "no request for 2s (ipc.idle_timeout_s)" in notice["error"]["message"]
            assert sock.recv(1) == b""
            assert idle >= 1.0  # not closed before its deadline
            sock.close()
            assert call(home, "status")["ipc"]["idle_closed"] == 1
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def next_frame(sock: socket.socket, decoder: p.FrameDecoder) -> dict[str, Any]:
    while (frame := decoder.next_frame()) is None:
        data = sock.recv(65536)
        assert data, "memd closed the connection instead of answering"
        decoder.receive_data(data)
    return frame
