"""No head-of-line blocking (issue 23): a huge transcript beside a live session, real daemon.

A sparse file of a few GiB with no newline (what a crashed writer or a hostile user leaves)
made the one ingest worker read it whole, from its start, on every change: the live session's
next append waited 29-45 s behind a 20 GB one. Now a turn of ingest is bounded and the
incomplete line is scanned once, so the append shows in ``session`` at once. The bound here is
loose (a guard, not a measurement: ``bench/ingest_fairness.py`` measures it).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.daemon_harness import (
    Home,
    call,
    fake_home,
    load_stretch,
    read_log,
    start_memd,
    stop_memd,
    wait_for,
)

pytestmark = pytest.mark.slow

PROJECT = "-home-user-fair"
BIG_BYTES = 4 * 1024**3  # read whole, this took ~10 s on the project's machines
VISIBLE_WITHIN_S = 5.0


def _line(uuid: str, parent: str | None, text: str) -> bytes:
    entry = {
        "type": "user",
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": "live",
        "message": {"role": "user", "content": text},
    }
    return json.dumps(entry).encode() + b"\n"


def _offset(home: Home, session: str) -> int:
    return int(call(home, "session", {"session": session})["offset"])


def _known(home: Home, session: str) -> bool:
    """The registry has the session (its ingest has begun)."""
    return any(r["session_id"] == session for r in call(home, "sessions", {}))


def test_a_huge_growing_line_elsewhere_does_not_delay_a_live_append(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        folder = home.projects / PROJECT
        folder.mkdir(parents=True)
        live = folder / "live.jsonl"
        live.write_bytes(_line("u1", None, "first"))
        proc = start_memd(home)
        stop = threading.Event()
        try:
            wait_for(
                lambda: _offset(home, "live") == live.stat().st_size,
                timeout=20.0,
                what="the live session to be read",
            )
            big = folder / "big.jsonl"
            with big.open("wb") as file:
                file.write(b'{"type": "user", "uuid": "big", "message": {"content": "')
                file.truncate(BIG_BYTES)
            grower = threading.Thread(target=_grow, args=(big, stop), daemon=True)
            grower.start()
            wait_for(lambda: _known(home, "big"), timeout=20.0, what="the big file's ingest")

            with live.open("ab") as file:
                file.write(_line("u2", "u1", "second"))
            appended = time.monotonic()
            size = live.stat().st_size
            while _offset(home, "live") != size:
                waited = time.monotonic() - appended
                assert waited < VISIBLE_WITHIN_S * load_stretch(), (
                    f"the live append was not visible after {waited:.1f} s beside a "
                    f"{BIG_BYTES // 1024**3} GiB line being written"
                )
                time.sleep(0.02)
            stop.set()
            grower.join()
            assert call(home, "session", {"session": "live"})["lines"] == 2
            assert call(home, "status")["ingest"]["sessions"] == 2
        finally:
            stop.set()
            assert stop_memd(proc) == 0, read_log(home)


def _grow(path: Path, stop: threading.Event) -> None:
    """Append to the huge line (never a newline) every 100 ms: each is a change to ingest."""
    while not stop.wait(0.1):
        with path.open("ab") as file:
            file.write(b"x" * 100)
