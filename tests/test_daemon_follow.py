"""Following a live session, real daemon: what an appended line waits for on its way to a
reply (issue 28: follow latency). ``bench/follow.py`` measures the latency; these tests
check what sets it, with no timed assertion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.daemon_harness import Home, call, fake_home, start_memd, stop_memd, wait_for

pytestmark = pytest.mark.slow

PROJECT = "-home-user-follow"


def _entry(
    kind: str, uuid: str, parent: str | None, session: str = "live", **fields: object
) -> bytes:
    entry = {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": session, **fields}
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


def _bulk_session(name: str, lines: int) -> bytes:
    """A long session of big prompts (~4 KiB a line) and a response whose usage says its
    context is small (not a session the start-up warmer rebuilds first)."""
    text = "lorem ipsum dolor " * 230
    prompts = [
        _entry(
            "user", f"{name}-{i}", f"{name}-{i - 1}" if i else None, name, message={"content": text}
        )
        for i in range(lines)
    ]
    usage = {"input_tokens": 1000, "output_tokens": 5}
    answer = {"id": f"{name}-m", "role": "assistant", "content": "ok", "usage": usage}
    last = f"{name}-{lines - 1}"
    return b"".join(prompts) + _entry("assistant", f"{name}-a", last, name, message=answer)


def _offsets(home: Home) -> dict[str, tuple[int, int]]:
    """Each session's offset read and its file's size; (0, -1) for one not read yet."""
    rows = call(home, "sessions")
    return {r["session_id"]: (r["offset"], r["size"] if r["parsed"] else -1) for r in rows}


def test_an_append_to_a_live_session_does_not_wait_behind_two_rebuilds(tmp_path: Path) -> None:
    """Rebuilding a conversation that is not in memory (after a restart, or evicted) is one
    step of ingest, however big the file. With two sessions rebuilding, both ingest workers
    were busy and a live session's append waited for one of them to finish; the third
    worker, which takes only changes that need no rebuild, reads it meanwhile."""
    with fake_home(tmp_path) as home:
        folder = home.projects / PROJECT
        folder.mkdir(parents=True)
        big = {name: folder / f"{name}.jsonl" for name in ("big-1", "big-2")}
        for name, path in big.items():
            path.write_bytes(_bulk_session(name, 15_000))
        live = folder / "live.jsonl"
        live.write_bytes(_answered_session())
        proc = start_memd(home)

        def read() -> bool:
            return all(o == s for o, s in _offsets(home).values())

        try:
            wait_for(lambda: len(_offsets(home)) == 3 and read(), timeout=120.0, what="all read")
        finally:
            stop_memd(proc)
        proc = start_memd(home)  # known from the state, none of them in memory
        try:
            with live.open("ab") as file:  # the live session is read again, and stays
                file.write(_entry("user", "u2", "a1", message={"content": "next"}))
            size = live.stat().st_size
            wait_for(
                lambda: _offsets(home)["live"][0] == size,
                timeout=60.0,
                what="the live session to be read again",
            )
            for name, path in big.items():
                with path.open("ab") as file:
                    more = _entry("user", f"{name}-x", f"{name}-a", name, message={"content": "+"})
                    file.write(more)
            wait_for(
                lambda: call(home, "status")["ingest"]["running"] >= 2,
                timeout=20.0,
                what="both rebuilds to start",
            )
            with live.open("ab") as file:
                file.write(_entry("user", "u3", "u2", message={"content": "and more"}))
            size = live.stat().st_size
            offsets = wait_for(
                lambda: (o := _offsets(home))["live"][0] == size and o,
                timeout=60.0,
                what="the live append to be read",
            )
            unread = [offsets[n][0] < path.stat().st_size for n, path in big.items()]
            assert unread == [True, True], offsets  # both rebuilds still under way
        finally:
            stop_memd(proc)
