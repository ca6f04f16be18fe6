"""``status`` kept packed (issue 28): the same bytes while nothing changed, never older than
what the user just did.

Real daemons, real requests and files. Each freshness case asks ``status`` in a loop while
the change is made (so the kept reply is as old as it gets, up to ``MAX_AGE_S``), waits for an
outside sign that the change is made (a reply, a log line, the model server's record), and
then asks once more: that very reply must show it. Without the change counter's bump the
kept reply would still be sent, for up to a second. Every request of a case goes over one
connection, as ``memdctl top`` asks: a connection opened or closed is itself a change
(``ipc.connections_open``), so a ``status`` on a new connection is always built anew and
could not tell a missing bump.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from memd.ipc.status import MAX_AGE_S
from memd.testing.loopback_process import LoopbackProcess
from memd_client.client import Client
from memd_client.protocol import encode_frame, request
from memd_client.status_form import expanded
from tests.daemon_harness import (
    Home,
    call,
    fake_home,
    memdctl,
    start_memd,
    stop_memd,
    wait_for,
)
from tests.disk_support import faulty_disk
from tests.session_support import append_work_turn, write_work_session

pytestmark = pytest.mark.slow

SLUG = "-work-kept"
SID = "cccccccc-0000-4000-8000-000000000003"


def status_bytes(sock: socket.socket) -> bytes:
    """One ``status`` on ``sock`` (always request id 1): the reply's frame as sent."""
    sock.sendall(encode_frame(request(1, "status")))
    head = _exactly(sock, 4)
    return head + _exactly(sock, struct.unpack(">I", head)[0])


def _exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "memd closed the connection"
        data += chunk
    return data


@contextmanager
def daemon(
    tmp_path: Path, *args: str, **env: str
) -> Iterator[tuple[Home, subprocess.Popen[bytes]]]:
    with fake_home(tmp_path, **env) as home:
        proc = start_memd(home, *args)
        try:
            wait_for(lambda: settled(home), timeout=30, what="memd to settle")
            yield home, proc
        finally:
            stop_memd(proc)


def settled(home: Home) -> bool:
    """The model client chosen and nothing queued: the start's own changes are over."""
    s = call(home, "status")
    ingest = s["ingest"]
    return not str(s["llm"]["reason"] or "").startswith("starting") and not (
        ingest["queued"] or ingest["running"]
    )


def transcript(home: Home, session_id: str, turns: int = 2) -> Path:
    return write_work_session(home.projects / SLUG, session_id, turns)


def fresh_after(
    home: Home, change: Callable[[Client], object], done: Callable[[Client], bool]
) -> dict[str, Any]:
    """Keep ``status`` asked (its reply kept and ageing) while ``change`` runs and until
    ``done`` says it is made, each on one connection (given to both); then the next
    ``status`` on it, as ``memdctl status`` reads it."""
    with home.client() as client:
        client.call("status")
        change(client)
        deadline = time.monotonic() + 30
        while not done(client):
            assert time.monotonic() < deadline, "the change was not made"
            client.call("status")
            time.sleep(0.02)
        return dict(expanded(client.call("status")))


def log_has(home: Home, text: str) -> Callable[[Client], bool]:
    path = home.root / "memd.log"
    return lambda _: text in path.read_text(errors="replace")


def nothing(_: Client) -> None:
    """No change but what the files (or the daemon's own timers) make."""


def has_session(session_id: str) -> Callable[[Client], bool]:
    return lambda client: bool(client.call("session", {"session": session_id}))


def test_status_sends_the_same_bytes_while_nothing_changes_and_uptime_after_the_bound(
    tmp_path: Path,
) -> None:
    with daemon(tmp_path) as (home, _), socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(home.socket))
        first = status_bytes(sock)
        for _ in range(5):  # a background change (a flush, a minute's look) may come between
            time.sleep(0.3)  # uptime_s moves by 0.1: a reply built again differs
            again = status_bytes(sock)
            if again == first:
                break
            first = again
        assert again == first, "two status replies with nothing changed differ"
        up = call(home, "status")["daemon"]["uptime_s"]
        time.sleep(MAX_AGE_S + 0.3)
        assert call(home, "status")["daemon"]["uptime_s"] >= up + MAX_AGE_S


def test_the_next_status_shows_a_new_and_a_grown_session(tmp_path: Path) -> None:
    with daemon(tmp_path) as (home, _):
        path = transcript(home, SID)
        rows = fresh_after(home, nothing, has_session(SID))
        (row,) = [r for r in rows["sessions"] if r["session_id"] == SID]
        before = call(home, "session", {"session": SID})
        assert row["context_tokens"] == before["context_tokens"]

        def read(client: Client) -> bool:
            return int(client.call("session", {"session": SID})["lines"]) > int(before["lines"])

        grown = fresh_after(home, lambda _: append_work_turn(path), read)
        (row,) = [r for r in grown["sessions"] if r["session_id"] == SID]
        after = call(home, "session", {"session": SID})
        assert row["context_tokens"] == after["context_tokens"] > before["context_tokens"]


def test_the_next_status_shows_a_remember_and_a_reload(tmp_path: Path) -> None:
    config = tmp_path / "memd.yaml"
    config.write_text("dream:\n  min_sessions: 5\n")
    with daemon(tmp_path, MEMD_CONFIG=str(config)) as (home, proc):
        project = tmp_path / "work" / "kept"  # not a git work tree: the citations say so
        project.mkdir(parents=True)
        said: list[Any] = []
        memory = {"cwd": str(project), "type": "project", "name": "n", "description": "d"}
        remembered = fresh_after(
            home,
            lambda client: said.append(client.call("remember", {**memory, "content": "c"})),
            lambda _: bool(said),
        )
        skipped = remembered["memory"]["citations"]["git_skipped"]
        assert [row["folder"] for row in skipped] == [str(project)]

        config.write_text("dream:\n  min_sessions: 7\n")
        reloaded = fresh_after(
            home, lambda client: said.append(client.call("reload")), lambda _: len(said) == 2
        )
        assert reloaded["dream"]["thresholds"]["min_sessions"] == 7
        assert reloaded["daemon"]["reloads"] == 1

        config.write_text("dream:\n  min_sessions: 9\n")
        hup = fresh_after(
            home,
            lambda _: os.kill(proc.pid, signal.SIGHUP),
            lambda _: _reloads(home) >= 2,
        )
        assert hup["dream"]["thresholds"]["min_sessions"] == 9
        assert hup["daemon"]["reloads"] == 2


def _reloads(home: Home) -> int:
    """How many reloads memd logged (the SIGHUP's is done once its line is there)."""
    return (home.root / "memd.log").read_text(errors="replace").count("configuration reloaded")


def test_the_next_status_shows_a_write_the_disk_refused(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home, faulty_disk(home.state_dir) as disk:
        home.env.update(disk.env)
        proc = start_memd(home, "--set", "daemon.state_flush_s=0.2")
        try:
            wait_for(lambda: settled(home), timeout=30, what="memd to settle")
            path = transcript(home, SID)
            fresh_after(home, nothing, has_session(SID))

            def refuse(_: Client) -> None:
                disk.fault("ENOSPC")
                append_work_turn(path)  # a change to save, which the disk refuses

            status = fresh_after(home, refuse, log_has(home, "cannot write"))
            rows = status["writes"]["paths"]
            assert status["writes"]["failing"] >= 1 and rows[0]["error"] == "ENOSPC", rows
            disk.heal()
        finally:
            stop_memd(proc)


FAILING = json.dumps(
    {"when": {"match": ""}, "reply": {"error": {"status": 400, "message": "bad request"}}}
)


def test_the_next_status_shows_a_background_job_that_failed(tmp_path: Path) -> None:
    with LoopbackProcess() as server:
        server.add_script(FAILING)
        env = {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": server.url}
        with daemon(tmp_path, **env) as (home, _):
            assert call(home, "status")["llm"]["enabled"]
            status = fresh_after(
                home,
                lambda _: transcript(home, SID, turns=3),  # past the notes' first threshold
                log_has(home, f"session notes of {SID} failed"),
            )
            assert status["notes"]["failures"] >= 1
            assert "session_notes" in status["guard"]["kinds"], status["guard"]


def test_the_next_status_shows_the_related_words_read_by_the_first_recall(
    tmp_path: Path,
) -> None:
    """Issue 27's "say in status which stages are on": the lexical ranker's related-words
    table is read at the first recall that ranks (no cost to a daemon that never recalls); the next
    ``status`` says so, with the terms it holds, and ``memdctl status`` prints it."""
    with daemon(tmp_path) as (home, _):
        project = tmp_path / "work" / "kept"
        project.mkdir(parents=True)
        memory = {"cwd": str(project), "type": "user", "name": "rex", "description": "a dog"}
        call(home, "remember", {**memory, "content": "Evan has a dog called Rex"})
        before = expanded(call(home, "status"))["memory"]["recall_stages"]["lexical"]
        assert before["related"] == {"read": False}
        said: list[Any] = []
        query = {"cwd": str(project), "query": "what pet does Evan have"}
        after = fresh_after(
            home, lambda client: said.append(client.call("recall", query)), lambda _: bool(said)
        )
        table = after["memory"]["recall_stages"]["lexical"]["related"]
        assert table["read"] and table["terms"] > 5_000 and table["off_reason"] is None
        shown = memdctl(home, "status")
        assert f"related words for {table['terms']} terms" in shown.stdout, shown.stdout
