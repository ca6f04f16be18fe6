"""Following a live session, real daemon: what an appended line waits for on its way to a
reply (issue 28: follow latency). ``bench/follow.py`` measures the latency; these tests
check what sets it, with no timed assertion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.daemon_harness import call, fake_home, start_memd, stop_memd, wait_for

pytestmark = pytest.mark.slow

PROJECT = "-home-user-follow"


def _entry(kind: str, uuid: str, parent: str | None, **fields: object) -> bytes:
    entry = {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "live", **fields}
    return json.dumps(entry).encode() + b"\n"


def _answered_session() -> bytes:
    """A prompt and its response with usage: its context figure needs no estimate."""
    usage = {"input_tokens": 10, "output_tokens": 5}
    return _entry("user", "u1", None, message={"role": "user", "content": "hi"}) + _entry(
        "assistant",
        "a1",
        "u1",
        message={"id": "m1", "role": "assistant", "content": "hello", "usage": usage},
    )


def _mapped(pid: int, name: str) -> bool:
    return name in Path(f"/proc/{pid}/maps").read_text()


def test_the_tokenizer_loads_once_a_session_is_read_not_at_its_first_append(
    tmp_path: Path,
) -> None:
    """A daemon started with no session used to load the tokenizer (~200 ms) in the ingest of
    the first line a session appended after its response (the first line whose tokens are
    estimated): that append waited for it. Now the first session read starts the load."""
    with fake_home(tmp_path) as home:
        home.projects.mkdir(parents=True)
        proc = start_memd(home)
        try:
            assert not _mapped(proc.pid, "_tiktoken")  # no session: nothing to estimate
            folder = home.projects / PROJECT
            folder.mkdir()
            (folder / "live.jsonl").write_bytes(_answered_session())
            wait_for(
                lambda: call(home, "status")["ingest"]["parsed"] == 1,
                timeout=20.0,
                what="the session to be read",
            )
            state = call(home, "session", {"session": "live"})
            assert state["context_from_usage"] and not state["context_estimated_tail"]
            wait_for(
                lambda: _mapped(proc.pid, "_tiktoken"),
                timeout=20.0,
                what="the tokenizer to load before the session appends anything",
            )
        finally:
            stop_memd(proc)
