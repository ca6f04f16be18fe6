"""``status``'s session rows: brief, in columns, packed once per published state, never
stale; and ``memd_client.status_form`` giving them back as maps."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.ipc.status import reasons_said_once
from memd.ipc.status_rows import COLUMNS, KEPT_ROWS, StatusRows, brief_row
from memd.state import SessionState
from memd_client.protocol import SAME_AS_LLM
from memd_client.status_form import expanded, rows_as_maps
from tests.daemon_harness import call, fake_home, memdctl, start_memd, stop_memd, wait_for

THRESHOLD = 167_000


def _state(i: int, **fields: Any) -> SessionState:
    return SessionState(f"s{i}", "-home-u-p", f"/t/s{i}.jsonl", mtime=1.8e9 + i, **fields)


def _section(
    kept: StatusRows, states: list[SessionState], threshold: int = THRESHOLD
) -> dict[str, Any]:
    section: dict[str, Any] = msgpack.unpackb(bytes(kept.packed(states, threshold)), raw=False)
    return section


def _rows(
    kept: StatusRows, states: list[SessionState], threshold: int = THRESHOLD
) -> list[dict[str, Any]]:
    return rows_as_maps(_section(kept, states, threshold))


def _as_map(s: SessionState, threshold: int = THRESHOLD) -> dict[str, Any]:
    """The row as ``status`` listed it before it came in columns (what memdctl reads)."""
    row = brief_row(s)
    marks = row[len(COLUMNS)] if len(row) > len(COLUMNS) else {}
    return {**dict(zip(COLUMNS, row, strict=False)), "compact_threshold": threshold, **marks}


def test_a_row_is_what_brief_row_says_and_follows_each_new_state() -> None:
    kept = StatusRows()
    states = [_state(i, parsed=True, message_count=i) for i in range(12)]
    section = _section(kept, states)
    assert section["columns"] == list(COLUMNS) and section["compact_threshold"] == THRESHOLD
    assert section["rows"] == [brief_row(s) for s in states]
    assert _rows(kept, states)[0] == {
        "session_id": "s0",
        "agent": "claude_code",
        "project": "-home-u-p",
        "parsed": True,
        "message_count": 0,
        "context_tokens": 0,
        "compact_threshold": THRESHOLD,
        "last_activity": "2027-01-15T08:00:00+00:00",
    }
    grown = dataclasses.replace(states[3], message_count=99, bad_lines=2, context_stale=True)
    states[3] = grown  # the registry publishes a new state: the row says so at once
    assert _rows(kept, states)[3] == {
        **_as_map(grown),
        "message_count": 99,
        "bad_lines": 2,
        "context_stale": True,
    }
    assert _rows(kept, states[:2], THRESHOLD + 1) == [_as_map(s, THRESHOLD + 1) for s in states[:2]]


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
    assert len(brief_row(_state(1, parsed=True))) == len(COLUMNS)  # no marks: no map
    marked = _as_map(
        _state(1, bad_lines=3, context_stale=True, unreadable={"reason": "gone", "since": 1.8e9})
    )
    assert marked["bad_lines"] == 3 and marked["context_stale"] is True
    assert marked["unreadable"] == {"reason": "gone", "since": "2027-01-15T08:00:00+00:00"}


def test_a_row_shows_a_window_other_than_the_configs_and_follows_its_change() -> None:
    """Issue 38: a session's own window is a mark of its row, packed again when it changes
    with the state unchanged (a reload of the config, a table read anew)."""
    kept, state, other = StatusRows(), _state(1, parsed=True), _state(2, parsed=True)
    million = {
        "compact_threshold": 967_000,
        "context_window": 1_000_000,
        "window_source": "transcript: claude-opus-5-5: 1M natively",
    }
    marks: dict[str, Any] = {"s1": million}

    def window_of(s: SessionState) -> dict[str, Any] | None:
        return marks.get(s.session_id)

    def rows() -> list[dict[str, Any]]:
        section = msgpack.unpackb(bytes(kept.packed([state, other], THRESHOLD, window_of)))
        return rows_as_maps(section)

    mine, theirs = rows()
    assert {k: mine[k] for k in million} == million  # its own threshold, not the config's
    assert theirs["compact_threshold"] == THRESHOLD and "window_source" not in theirs
    marks["s1"] = {**million, "context_window": 200_000, "compact_threshold": 167_000}
    mine, _ = rows()
    assert (mine["context_window"], mine["compact_threshold"]) == (200_000, 167_000)


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
                rows = expanded(call(home, "status"))["sessions"]
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


def test_the_model_reason_is_sent_once_and_written_back_where_it_applies() -> None:
    reason = "disabled: no API key: set ANTHROPIC_API_KEY"
    full: dict[str, Any] = {
        "llm": {"enabled": False, "reason": reason},
        "notes": {"enabled": False, "reason": reason},
        "memory": {
            "disabled_reason": reason,
            "recall_stages": {"model": {"on": False, "off_reason": reason}},
        },
    }
    sent = reasons_said_once(copy.deepcopy(full))
    assert sent["llm"] == full["llm"]
    assert sent["notes"]["reason"] == sent["memory"]["disabled_reason"] == SAME_AS_LLM
    assert sent["memory"]["recall_stages"]["model"]["off_reason"] == SAME_AS_LLM
    assert expanded(sent) == full
    other = copy.deepcopy(full)
    other["notes"]["reason"] = "session_notes.enabled is false"  # a reason of its own stays
    assert reasons_said_once(copy.deepcopy(other))["notes"]["reason"] == other["notes"]["reason"]
    on: dict[str, Any] = {"llm": {"enabled": True, "reason": None}, "notes": {"reason": ""}}
    assert reasons_said_once(copy.deepcopy(on)) == on == expanded(on)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)


@given(
    st.dictionaries(st.sampled_from(["llm", "notes", "memory", "sessions", "daemon"]), json_values)
    | json_values
)
def test_expanded_reads_any_reply_without_raising(reply: Any) -> None:
    """An older or newer daemon's reply, or a broken one: passed through or read, never a
    crash of ``memdctl status``."""
    out = expanded(reply)
    if isinstance(reply, dict) and not isinstance(reply.get("sessions"), dict):
        assert out.get("sessions") == reply.get("sessions")  # rows as maps already: as sent


@pytest.mark.slow
def test_memdctl_status_json_reads_as_before_from_the_smaller_reply(tmp_path: Path) -> None:
    """Real daemon with no API key: the reply says the reason once and lists rows in
    columns; ``memdctl status --json`` has the reason in every section and rows as maps."""
    with fake_home(tmp_path) as home:
        folder = home.projects / "-home-user-rows"
        folder.mkdir(parents=True)
        (folder / "fresh.jsonl").write_bytes(_line("u1", None, "one") + b"{not json\n")
        proc = start_memd(home)
        try:
            wait_for(
                lambda: (
                    "no API key" in str(call(home, "status")["llm"]["reason"])
                    and call(home, "status")["ingest"]["parsed"] == 1
                ),
                timeout=30,
                what="the model off and the session read",
            )
            sent = call(home, "status")
            assert sent["memory"]["disabled_reason"] == SAME_AS_LLM
            assert sent["sessions"]["columns"] == list(COLUMNS)
            shown = json.loads(memdctl(home, "status", "--json").stdout)
            reason = sent["llm"]["reason"]
            assert shown["notes"]["reason"] == shown["memory"]["disabled_reason"] == reason
            assert shown["memory"]["recall_stages"]["model"]["off_reason"] == reason
            (row,) = shown["sessions"]
            assert row["session_id"] == "fresh" and row["bad_lines"] == 1
            assert row["compact_threshold"] == sent["sessions"]["compact_threshold"]
            text = memdctl(home, "status").stdout
            assert f"model off ({reason})" in text and "fresh" in text
        finally:
            stop_memd(proc)
