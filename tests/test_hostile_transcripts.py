"""Hostile files under the projects tree, against the real daemon process (R-T7, issue 9).

Every input is made here: lines with invalid UTF-8 in each string field and content block of
each entry type, nesting from 10 to 10^6 levels, a 50 MB line, FIFOs (made before and after
start), a directory, a socket and a self-loop symlink named ``*.jsonl``, a transcript the
daemon's uid may not read, files deleted and re-created, a transcript rotated while tailed.
After every step the daemon answers ``status``; each offending file shows up as bad lines (a
line with invalid UTF-8 is read as Claude Code reads it: U+FFFD in place of the bytes) or as
unreadable with its reason; the good sessions beside them are followed (figures compared
with the independent oracle); SIGTERM stops it and it restarts cleanly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from memd_client.errors import RemoteError
from tests.conftest import CORPUS
from tests.daemon_harness import (
    Home,
    call,
    fake_home,
    read_log,
    start_memd,
    stop_memd,
    wait_answering,
    wait_for,
)
from tests.transcript_oracle import load, read_lines
from tests.uid_support import IS_ROOT, NOBODY

pytestmark = pytest.mark.slow

PROJECT = "-home-user-hostile"
GOOD = CORPUS / "spotter" / "short.jsonl"
BAD_BYTES = b"\xff\xfe\xc3("


def _line(entry: dict[str, Any]) -> bytes:
    return json.dumps(entry).encode()


def _entries() -> dict[str, dict[str, Any]]:
    """One valid entry of each type, to spoil one field at a time."""
    envelope = {"parentUuid": None, "cwd": "/w", "sessionId": "s", "timestamp": "t", "slug": "x"}
    text = {"type": "text", "text": "TEXT"}
    return {
        "user": {"type": "user", "uuid": "u", **envelope, "message": {"content": [text]}},
        "user-str": {"type": "user", "uuid": "u", **envelope, "message": {"content": "TEXT"}},
        "result": {
            "type": "user",
            "uuid": "r",
            **envelope,
            "message": {
                "content": [{"type": "tool_result", "tool_use_id": "TOOL", "content": "TEXT"}]
            },
            "toolUseResult": {"stdout": "TEXT"},
        },
        "assistant": {
            "type": "assistant",
            "uuid": "a",
            **envelope,
            "message": {
                "id": "MSG",
                "model": "MODEL",
                "content": [text, {"type": "tool_use", "id": "TOOL", "name": "N", "input": {}}],
            },
        },
        "system": {"type": "system", "uuid": "y", **envelope, "subtype": "SUB", "content": "TEXT"},
        "progress": {"type": "progress", "uuid": "p", **envelope, "data": {"x": "TEXT"}},
        "attachment": {"type": "attachment", "uuid": "t", **envelope, "attachment": "TEXT"},
    }


def spoiled_lines() -> list[bytes]:
    """Each entry type with invalid UTF-8 in one of its strings (every string, in turn)."""
    lines: list[bytes] = []
    for entry in _entries().values():
        raw = _line(entry)
        # Every string value and key of the line: replace its first character by bad bytes.
        for start in range(len(raw)):
            if raw[start : start + 1] == b'"' and raw[start + 1 : start + 2] not in (b'"', b""):
                spoiled = raw[: start + 1] + BAD_BYTES + raw[start + 2 :]
                lines.append(spoiled)
    return lines


def nested_lines() -> tuple[list[bytes], list[bytes]]:
    """(fine, bad): content nested 10 and 100 levels parses; 1,000 and deeper does not."""
    fine: list[bytes] = []
    bad: list[bytes] = []
    for depth in (10, 100, 1_000, 10_000, 100_000, 1_000_000):
        content = b"[" * depth + b"]" * depth
        line = b'{"type":"user","uuid":"d%d","message":{"content":%s}}' % (depth, content)
        skipped = b'{"type":"user","uuid":"k%d","x":%s}' % (depth, content)
        (fine if depth <= 100 else bad).extend([line] if depth > 100 else [line, skipped])
        if depth >= 10_000:
            bad.append(skipped)
    return fine, bad


def session(home: Home, session_id: str) -> dict[str, Any]:
    result: dict[str, Any] = call(home, "session", {"session": session_id})
    return result


def status(home: Home) -> dict[str, Any]:
    result: dict[str, Any] = call(home, "status")
    return result


def unreadable_reason(home: Home, session_id: str) -> str | None:
    try:
        row = session(home, session_id)
    except RemoteError:  # not known yet
        return None
    return row["unreadable"]["reason"] if row["unreadable"] else None


def expected(path: Path) -> tuple[int, int]:
    reading = read_lines(path.read_bytes().splitlines(), sidechain_file=False)
    return reading.message_count, reading.context_tokens


def followed(home: Home, session_id: str, path: Path) -> bool:
    try:
        row = session(home, session_id)
    except RemoteError:  # not known yet
        return False
    return (row["message_count"], row["context_tokens"]) == expected(path) and row[
        "offset"
    ] == path.stat().st_size


def make_socket(path: Path) -> None:
    """A Unix socket at ``path`` (bound from its directory: socket paths are short)."""
    code = (
        "import os, socket, sys; os.chdir(sys.argv[1]); "
        "socket.socket(socket.AF_UNIX).bind(sys.argv[2])"
    )
    subprocess.run([sys.executable, "-c", code, str(path.parent), path.name], check=True)


def test_hostile_files_never_stop_the_daemon(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        project = home.projects / PROJECT
        project.mkdir(parents=True)
        good = project / "good.jsonl"
        good_lines = GOOD.read_bytes().splitlines(keepends=True)
        good.write_bytes(b"".join(good_lines[:20]))
        fine, too_deep = nested_lines()
        spoiled = spoiled_lines()
        hostile = project / "hostile.jsonl"
        hostile.write_bytes(b"\n".join([*spoiled, *fine, *too_deep, b""]))
        with hostile.open("ab") as f:  # 50 MB in one line, then a good line after it
            f.write(b'{"type":"user","uuid":"big","message":{"content":"' + b"x" * 50_000_000)
            f.write(b'"}}\n' + good_lines[0])
        os.mkfifo(project / "fifo-before.jsonl")
        (project / "dir.jsonl").mkdir()
        (project / "loop.jsonl").symlink_to("loop.jsonl")
        make_socket(project / "sock.jsonl")

        proc = start_memd(home)
        try:
            wait_for(lambda: followed(home, "good", good), timeout=30, what="the good session")
            row = wait_for(
                lambda: (r := session(home, "hostile"))["offset"] == hostile.stat().st_size and r,
                timeout=60,
                what="the hostile transcript read to its end",
            )
            # A spoiled line is read as Claude Code reads it (U+FFFD): bad only if that is.
            unreadable = sum(load(line) is None for line in spoiled)
            assert row["bad_lines"] == unreadable + len(too_deep) + 1  # + the 50 MB line
            assert row["unreadable"] is None
            reasons = {
                "fifo-before": "a FIFO, not a regular file",
                "dir": "a directory, not a regular file",
                "loop": "a symbolic link (not followed), not a regular file",
                "sock": "a socket, not a regular file",
            }
            for name, reason in reasons.items():
                got = wait_for(partial(unreadable_reason, home, name), timeout=10, what=name)
                assert got == reason
            ingest = status(home)["ingest"]
            assert ingest["unreadable_count"] == 4
            assert {u["reason"] for u in ingest["unreadable"]} == set(reasons.values())

            # After start: a FIFO appears, the good session grows; nothing blocks.
            os.mkfifo(project / "fifo-after.jsonl")
            with good.open("ab") as f:
                f.write(b"".join(good_lines[20:40]))
            wait_for(lambda: unreadable_reason(home, "fifo-after"), timeout=10, what="new FIFO")
            wait_for(lambda: followed(home, "good", good), timeout=10, what="growth")
            assert status(home)["ingest"]["unreadable_count"] == 5

            # A FIFO replaced by a regular file is read: retried when it changes.
            (project / "fifo-after.jsonl").unlink()
            (project / "fifo-after.jsonl").write_bytes(b"".join(good_lines[:10]))
            wait_for(
                lambda: followed(home, "fifo-after", project / "fifo-after.jsonl"),
                timeout=10,
                what="the FIFO replaced by a transcript",
            )

            # Deleted and re-created with other content; rotated while tailed.
            good.unlink()
            good.write_bytes(b"".join(good_lines[:5]))
            wait_for(lambda: followed(home, "good", good), timeout=10, what="re-created file")
            good.rename(project / "good.jsonl.1")
            good.write_bytes(b"".join(good_lines[:30]))
            wait_for(lambda: followed(home, "good", good), timeout=10, what="rotated file")
            assert status(home)["daemon"]["pid"] == proc.pid
        finally:
            code = stop_memd(proc, timeout=20)
        assert code == 0, read_log(home)

        # A clean restart: the same verdicts, the good session still followed.
        proc = start_memd(home)
        try:
            wait_for(lambda: unreadable_reason(home, "sock"), timeout=10, what="sock again")
            assert unreadable_reason(home, "fifo-before") == "a FIFO, not a regular file"
            saved = session(home, "good")  # what the daemon saved at the stop, not re-read
            assert followed(home, "good", good), (
                {k: saved[k] for k in ("message_count", "context_tokens", "offset")},
                expected(good),
                good.stat().st_size,
                read_log(home)[-3000:],
            )
            assert session(home, "hostile")["bad_lines"] == row["bad_lines"]
        finally:
            assert stop_memd(proc, timeout=20) == 0, read_log(home)


# -- permissions: the daemon without root's power to read anything ---------------------------

NO_DAC = "-dac_override,-dac_read_search"
SETPRIV = shutil.which("setpriv") or "setpriv"
MEMD = [sys.executable, "-m", "memd.daemon.main", "-v"]


def start_memd_without_dac(home: Home) -> subprocess.Popen[bytes]:
    """memd under ``setpriv`` with the capabilities that let root read any file dropped, so
    a file of another uid with mode 0600 is as unreadable to it as to any user."""
    log = (home.root / "memd.log").open("ab")
    proc = subprocess.Popen(
        [SETPRIV, f"--bounding-set={NO_DAC}", f"--inh-caps={NO_DAC}", *MEMD],
        env=home.env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    log.close()
    return proc


@pytest.mark.skipif(not IS_ROOT or shutil.which("setpriv") is None, reason="needs root, setpriv")
def test_a_transcript_the_daemon_may_not_read_is_unreadable_until_fixed(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        project = home.projects / PROJECT
        project.mkdir(parents=True)
        secret = project / "secret.jsonl"
        secret.write_bytes(GOOD.read_bytes())
        os.chown(secret, NOBODY, NOBODY)
        secret.chmod(0o600)  # another uid's private file
        good = project / "good.jsonl"
        good.write_bytes(GOOD.read_bytes())
        proc = start_memd_without_dac(home)
        try:
            wait_answering(home, proc)  # the socket file appears before it listens
            reason = wait_for(lambda: unreadable_reason(home, "secret"), timeout=20, what="EACCES")
            assert reason == "permission denied"
            wait_for(lambda: followed(home, "good", good), timeout=20, what="the good session")
            secret.chmod(0o644)  # fixed: the change (ctime) makes it worth a retry
            wait_for(lambda: followed(home, "secret", secret), timeout=20, what="the retry")
            assert session(home, "secret")["unreadable"] is None
        finally:
            code = stop_memd(proc, timeout=20)
        assert code == 0, read_log(home)


# -- out of inotify watches: the watcher polls, says so, and follows growth -------------------

UNSHARE = shutil.which("unshare")
INOTIFY_LIMIT = "/proc/sys/user/max_inotify_watches"  # per user namespace
IN_USERNS = [UNSHARE or "unshare", "--user", "--map-root-user", "sh", "-c"]


def _userns_works() -> bool:
    if UNSHARE is None:
        return False
    done = subprocess.run(
        [UNSHARE, "--user", "--map-root-user", "sh", "-c", f"echo 1 > {INOTIFY_LIMIT}"],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


WATCHER_SCRIPT = """
import sys, anyio
from pathlib import Path
from memd.config import TranscriptsConfig
from memd.queues import CoalescingQueue
from memd.daemon.watch import WatchedRoot, WatcherStatus, run_watcher

async def main() -> None:
    root = Path(sys.argv[1])
    queue, status, stop = CoalescingQueue(), WatcherStatus(), anyio.Event()
    config = TranscriptsConfig(poll_interval_ms=100)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(lambda task_status: run_watcher(
                [WatchedRoot(root, status=status)], config, queue, stop=stop,
                task_status=task_status))
            while status.mode != "polling":
                await anyio.sleep(0.05)
            (root / "p" / "s.jsonl").write_bytes(b"{}\\n")
            path = await queue.get()
            print(status.mode, status.reason, path.name, flush=True)
            stop.set()

anyio.run(main)
"""


@pytest.mark.skipif(not _userns_works(), reason="needs user namespaces (per-namespace limits)")
def test_out_of_inotify_watches_the_watcher_polls_and_says_so(tmp_path: Path) -> None:
    """In a user namespace of its own the watcher gets no inotify watch, not even for the
    root: it falls back to polling, says why, and still reports a transcript that appears.
    (With one watch, the root's, only the project folders are scanned: test_watch_limit.)"""
    (tmp_path / "p" / "q").mkdir(parents=True)
    script = f'echo 0 > {INOTIFY_LIMIT} && exec "$@"'
    done = subprocess.run(
        [*IN_USERNS, script, "sh", sys.executable, "-c", WATCHER_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    mode, _, rest = done.stdout.strip().partition(" ")
    assert mode == "polling"
    assert "inotify unavailable" in rest and rest.endswith("s.jsonl")
