"""``status``'s session rows: brief, packed once per published state, never stale."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import msgpack
import pytest

from memd.ipc.status_rows import KEPT_ROWS, StatusRows, brief_row
from memd.state import SessionState
from tests.daemon_harness import call, fake_home, start_memd, stop_memd, wait_for

THRESHOLD = 167_000


def _state(i: int, **fields: Any) -> SessionState:
    return SessionState(f"s{i}", "-home-u-p", f"/t/s{i}.jsonl", mtime=1.8e9 + i, **fields)


def _rows(
    kept: StatusRows, states: list[SessionState], threshold: int = THRESHOLD
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = msgpack.unpackb(bytes(kept.packed(states, threshold)), raw=False)
    return rows


def test_a_row_is_what_brief_row_says_and_follows_each_new_state() -> None:
    kept = StatusRows()
    states = [_state(i, parsed=True, message_count=i) for i in range(12)]
    assert _rows(kept, states) == [brief_row(s, THRESHOLD) for s in states]
    grown = dataclasses.replace(states[3], message_count=99, bad_lines=2, context_stale=True)
    states[3] = grown  # the registry publishes a new state: the row says so at once
    assert _rows(kept, states)[3] == {
        **brief_row(grown, THRESHOLD),
        "message_count": 99,
        "bad_lines": 2,
        "context_stale": True,
    }
    assert _rows(kept, states[:2], THRESHOLD + 1) == [
        brief_row(s, THRESHOLD + 1) for s in states[:2]
    ]


def test_the_kept_rows_are_bounded_and_unencodable_reasons_are_escaped() -> None:
    kept = StatusRows()
    for start in range(0, 3 * KEPT_ROWS, 100):
        states = [_state(i) for i in range(start, start + 100)]
        assert len(_rows(kept, states)) == 100
        assert len(kept._packed) <= KEPT_ROWS
    odd = _state(0, unreadable={"reason": "cannot open /t/\udcff.jsonl", "since": 1.8e9})
    (row,) = _rows(kept, [odd])
    assert row["unreadable"]["reason"] == "cannot open /t/\\xff.jsonl"


def test_a_brief_row_leaves_out_only_marks_that_are_not_set() -> None:
    plain = brief_row(_state(1, parsed=True), THRESHOLD)
    assert not {"bad_lines", "context_stale", "unreadable"} & set(plain)
    marked = brief_row(
        _state(1, bad_lines=3, context_stale=True, unreadable={"reason": "gone", "since": 1.8e9}),
        THRESHOLD,
    )
    assert marked["bad_lines"] == 3 and marked["context_stale"] is True
    assert marked["unreadable"] == {"reason": "gone", "since": "2027-01-15T08:00:00+00:00"}


def _line(uuid: str, parent: str | None, text: str, role: str = "user") -> bytes:
    entry = {"type": role, "uuid": uuid, "parentUuid": parent, "sessionId": "fresh"}
    message: dict[str, Any] = {"id": uuid, "role": role, "content": text}
    if role == "assistant":
        message["usage"] = {"input_tokens": 5000, "output_tokens": 7}
    return json.dumps({**entry, "message": message}).encode() + b"\n"


@pytest.mark.slow
def test_status_rows_change_as_soon_as_their_session_does(tmp_path: Path) -> None:
    """Real daemon: status asked again and again (its rows kept packed) shows each change
    of a session, and the marks of a problem when one comes."""
    with fake_home(tmp_path) as home:
        folder = home.projects / "-home-user-rows"
        folder.mkdir(parents=True)
        path = folder / "fresh.jsonl"
        path.write_bytes(_line("u1", None, "one"))
        proc = start_memd(home)
        try:

            def row() -> dict[str, Any]:
                rows = call(home, "status")["sessions"]
                assert len(rows) <= 1
                return rows[0] if rows else {"parsed": False}

            first = wait_for(lambda: (r := row())["parsed"] and r, timeout=20.0, what="read")
            assert first["message_count"] == 1 and "bad_lines" not in first
            assert row() == first  # asked again: the same row
            with path.open("ab") as file:
                file.write(_line("a1", "u1", "two", "assistant") + b"{not json\n")
            grown = wait_for(
                lambda: (r := row())["message_count"] == 2 and r, timeout=20.0, what="the growth"
            )
            assert grown["bad_lines"] == 1 and grown["context_tokens"] > first["context_tokens"]
            sessions = {r["session_id"]: r for r in call(home, "sessions")}
            assert grown == {k: sessions["fresh"][k] for k in grown}
        finally:
            stop_memd(proc)
