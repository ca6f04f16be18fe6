"""Numbers are bounded at the door (issue 23), against the real daemon process.

A transcript entry whose ``usage`` had ``input_tokens: 18446744073709551616`` (2^64) was
taken as a figure; from then on ``status``, ``sessions`` and ``session`` answered ``internal``
for everyone (msgpack cannot encode it) until the file was removed and memd restarted. Here
every integer field of every entry type Claude Code writes gets any value from -2^70 to 2^70
(the bounds themselves often): the three methods keep answering, and a line whose figure
memd reads is out of range is counted as bad, never taken.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memd.config import MAX_NUMBER
from tests.daemon_harness import Home, call, fake_home, read_log, start_memd, stop_memd, wait_for

pytestmark = pytest.mark.slow

PROJECT = "-home-user-numbers"
ENVELOPE = {"parentUuid": None, "sessionId": "s", "cwd": "/w", "timestamp": "2026-01-01T00:00:00Z"}

# Each entry type as Claude Code writes it, with the paths of its integer fields. Those the
# parser reads (a token count) make the line bad when out of range; the rest it never decodes.
TEMPLATES: dict[str, tuple[dict[str, Any], list[str], list[str]]] = {
    "user": (
        {"type": "user", "message": {"role": "user", "content": "hello"}},
        [],
        ["message.content"],
    ),
    "tool_result": (
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
            },
            "toolUseResult": {"durationMs": 1, "numFiles": 1, "totalTokens": 1},
        },
        [],
        ["toolUseResult.durationMs", "toolUseResult.numFiles", "toolUseResult.totalTokens"],
    ),
    "assistant": (
        {
            "type": "assistant",
            "message": {
                "id": "msg",
                "role": "assistant",
                "model": "claude-x",
                "content": [{"type": "text", "text": "hi"}],
                "usage": {
                    "input_tokens": 1,
                    "output_tokens": 1,
                    "cache_creation_input_tokens": 1,
                    "cache_read_input_tokens": 1,
                    "cache_creation": {"ephemeral_5m_input_tokens": 1},
                    "server_tool_use": {"web_search_requests": 0},
                },
            },
        },
        [
            "message.usage.input_tokens",
            "message.usage.output_tokens",
            "message.usage.cache_creation_input_tokens",
            "message.usage.cache_read_input_tokens",
        ],
        [
            "message.usage.cache_creation.ephemeral_5m_input_tokens",
            "message.usage.server_tool_use.web_search_requests",
        ],
    ),
    "compact_boundary": (
        {
            "type": "system",
            "subtype": "compact_boundary",
            "content": "Conversation compacted",
            "compactMetadata": {"trigger": "auto", "preTokens": 1},
        },
        ["compactMetadata.preTokens"],
        [],
    ),
    "turn_duration": (
        {"type": "system", "subtype": "turn_duration", "durationMs": 1},
        [],
        ["durationMs"],
    ),
    "progress": (
        {"type": "progress", "data": {"type": "bash_progress", "elapsedTimeSeconds": 1}},
        [],
        ["data.elapsedTimeSeconds"],
    ),
    "attachment": (
        {"type": "attachment", "attachment": {"type": "file", "lineCount": 1}},
        [],
        ["attachment.lineCount"],
    ),
}

EDGES = [-(2**70), -(2**64), -(2**63) - 1, -(2**63), -1, 0, MAX_NUMBER, MAX_NUMBER + 1]
EDGES += [2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70]
numbers = st.one_of(st.sampled_from(EDGES), st.integers(min_value=-(2**70), max_value=2**70))


def _set(entry: dict[str, Any], path: str, value: int) -> None:
    *parents, last = path.split(".")
    node = entry
    for key in parents:
        node = node[key]
    node[last] = value


def build(values: dict[tuple[str, str], int]) -> tuple[bytes, int]:
    """A transcript of every entry type, with ``values[(kind, path)]`` at those fields; and
    how many of its lines carry a figure memd reads that is out of range."""
    lines: list[bytes] = []
    bad = 0
    parent = None
    for index, (kind, (template, read, _)) in enumerate(TEMPLATES.items()):
        entry: dict[str, Any] = json.loads(json.dumps(template))
        entry.update(ENVELOPE, uuid=f"{kind}-{index}", parentUuid=parent)
        out_of_range = False
        for (where, path), value in values.items():
            if where == kind:
                _set(entry, path, value)
                out_of_range |= path in read and not 0 <= value <= MAX_NUMBER
        bad += out_of_range
        parent = entry["uuid"]
        lines.append(json.dumps(entry).encode() + b"\n")
    return b"".join(lines), bad


FIELDS = [(kind, path) for kind, (_, read, unread) in TEMPLATES.items() for path in read + unread]
transcripts = st.dictionaries(st.sampled_from(FIELDS), numbers).map(build)
THE_REPORT = build({("assistant", "message.usage.input_tokens"): 2**64})  # as in issue 23


def _caught_up(home: Home, session: str, size: int) -> dict[str, Any] | None:
    row = call(home, "session", {"session": session})
    return row if row["offset"] == size else None


def test_any_integer_in_any_entry_keeps_status_sessions_and_session_answering(
    tmp_path: Path,
) -> None:
    with fake_home(tmp_path) as home:
        folder = home.projects / PROJECT
        folder.mkdir(parents=True)
        proc = start_memd(home)
        names = (f"n{i:04d}" for i in itertools.count())
        try:

            @settings(deadline=None, max_examples=100, database=None)
            @given(transcript=transcripts)
            @example(transcript=THE_REPORT)
            def check(transcript: tuple[bytes, int]) -> None:
                data, bad = transcript
                session = next(names)
                (folder / f"{session}.jsonl").write_bytes(data)
                row = wait_for(
                    lambda: _caught_up(home, session, len(data)),
                    timeout=20.0,
                    what=f"session {session} to be read",
                )
                status = call(home, "status")
                assert status["ingest"]["sessions"] >= 1
                rows = call(home, "sessions", {"limit": 5})
                assert session in [r["session_id"] for r in rows]
                assert row["bad_lines"] == bad
                assert row["lines"] == len(TEMPLATES)
                assert 0 <= row["context_tokens"] <= 3 * MAX_NUMBER

            check()
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_hostile_figures_in_the_saved_state_are_dropped_and_the_transcript_read_again(
    tmp_path: Path,
) -> None:
    """The state file is read like any file: a figure no reply can carry (2^70 tokens) drops
    that session's saved state, not the daemon's answers, and the transcript is read again."""
    data, _ = build({})
    with fake_home(tmp_path) as home:
        folder = home.projects / PROJECT
        folder.mkdir(parents=True)
        saved: dict[str, dict[str, Any]] = {}
        for name, figure in (("good", 3), ("tokens", 2**70), ("negative", -1), ("nan", "NaN")):
            path = folder / f"{name}.jsonl"
            path.write_bytes(data)
            saved[str(path)] = {
                "session_id": name,
                "project": PROJECT,
                "path": str(path),
                "offset": len(data),
                "size": len(data),
                "inode": path.stat().st_ino,
                "parsed": True,
                "lines": 7,
                "context_tokens": figure if name != "nan" else 3,
                "mtime": float("nan") if name == "nan" else path.stat().st_mtime,
            }
        home.state_dir.mkdir(parents=True)
        state = json.dumps({"version": 1, "sessions": saved}).replace('"NaN"', "NaN")
        (home.state_dir / "sessions.json").write_text(state)
        proc = start_memd(home)
        try:
            wait_for(
                lambda: call(home, "status")["ingest"]["sessions"] == 4,
                timeout=20.0,
                what="the dropped sessions to be found again",
            )
            rows = {r["session_id"]: r for r in call(home, "sessions")}
            assert rows["good"]["context_tokens"] == 3  # kept as saved: not read again
            for name in ("tokens", "negative", "nan"):
                row = call(home, "session", {"session": name})
                assert row["offset"] == len(data) and row["lines"] == len(TEMPLATES)
                assert 0 <= row["context_tokens"] < 10**6
        finally:
            assert stop_memd(proc) == 0, read_log(home)
