"""Claude Code's line types (issue 25): each one 2.1.331 writes is read or skipped by name, a
type memd does not know is counted per type, and the request records 2.1.331 added (the
~38 KB ``api-request-shape``, prompt snapshots) change no figure."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.sources.claude_code import ClaudeReader
from memd.sources.claude_code.entry_types import KNOWN
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_replies import When
from memd.transcript.conversation import MAX_UNKNOWN_CHARS, MAX_UNKNOWN_NAMES, OTHER_TYPES
from tests.claude_cli import ClaudeCLI
from tests.conftest import CORPUS, all_transcripts, sweep
from tests.daemon_harness import (
    call,
    fake_home,
    memdctl,
    read_log,
    start_memd,
    stop_memd,
    wait_for,
)
from tests.test_daemon_e2e import session_row
from tests.transcript_oracle import read_lines

NEW = CORPUS / "claude-code-2.1.331" / "f7dce3d6-f41d-4e48-922a-2def94740327.jsonl"
REQUEST_RECORDS = ("api-request-shape", "api-request-blob", "api-request")


def read(path: Path, lines: list[bytes]) -> ClaudeReader:
    reader = ClaudeReader(str(path), os.stat(path).st_ino)
    offsets, at = [], 0
    for line in lines:
        offsets.append(at)
        at += len(line) + 1
    assert reader.feed(zip(offsets, lines, strict=True)) == 0
    return reader


def test_every_line_type_claude_code_2_1_331_wrote_is_known() -> None:
    lines = NEW.read_bytes().splitlines()
    kinds = Counter(json.loads(line)["type"] for line in lines)
    assert {"api-request-shape", "atis-latch", "cost-state", "tools-used"} <= set(kinds)
    attachments = {json.loads(line).get("attachment", {}).get("type") for line in lines}
    assert {"prompt_snapshot", "instructions"} <= attachments
    assert set(kinds) <= KNOWN
    assert read(NEW, lines).conversation.unknown_types == {}


def test_request_records_and_prompt_snapshots_change_no_figure(tmp_path: Path) -> None:
    """The request shape (system prompt and tools) repeats what is no conversation content:
    the figures with and without those lines are the same, and the oracle's."""
    lines = NEW.read_bytes().splitlines()
    shape = max(lines, key=len)
    assert b'"prompt_snapshot"' in shape and len(shape) > 50_000  # the biggest line
    assert any(b'"api-request-shape"' in line and len(line) > 30_000 for line in lines)
    whole = read(NEW, lines).conversation
    bare = [line for line in lines if json.loads(line)["type"] not in REQUEST_RECORDS]
    stripped = tmp_path / NEW.name
    stripped.write_bytes(b"\n".join(bare) + b"\n")
    without = read(stripped, bare).conversation
    expected = read_lines(lines, sidechain_file=False)
    assert whole.context().tokens == without.context().tokens == expected.context_tokens
    assert whole.context().estimated_tail == 0  # the last response's usage is the figure
    assert whole.api_messages() == without.api_messages()
    assert [m["role"] for m in whole.api_messages()] == expected.roles
    assert len(expected.roles) == 14  # five prompts, a Read call and an Agent call answered


def test_lines_of_unknown_types_are_counted_per_type(tmp_path: Path) -> None:
    lines = NEW.read_bytes().splitlines()
    made_up = [
        b'{"type":"hologram-state","sessionId":"x"}',
        b'{"type":"hologram-state","sessionId":"y"}',
        b'{"type":"turn-ledger","uuid":"u1","parentUuid":null}',
        b'{"sessionId":"no type at all"}',
    ]
    mixed = lines[:20] + made_up + lines[20:]
    path = tmp_path / NEW.name
    path.write_bytes(b"\n".join(mixed) + b"\n")
    conversation = read(path, mixed).conversation
    assert conversation.unknown_types == {"hologram-state": 2, "turn-ledger": 1, "(no type)": 1}
    # The known lines read as before: the unknown ones change no figure.
    assert conversation.api_messages() == read(NEW, lines).conversation.api_messages()


@given(st.lists(st.text(min_size=1, max_size=200), min_size=1, max_size=60))
def test_unknown_type_names_are_bounded_whatever_a_file_holds(names: list[str]) -> None:
    reader = ClaudeReader(str(NEW), 0)
    lines = [json.dumps({"type": name}).encode() for name in names]
    assert reader.feed(enumerate(lines)) == 0
    counts = reader.conversation.unknown_types
    assert sum(counts.values()) == sum(1 for name in names if name not in KNOWN)
    assert len(counts) <= MAX_UNKNOWN_NAMES + 1
    assert all(len(name) <= MAX_UNKNOWN_CHARS for name in counts)
    if len({n[:MAX_UNKNOWN_CHARS] for n in names if n not in KNOWN}) > MAX_UNKNOWN_NAMES:
        assert OTHER_TYPES in counts


def test_session_and_status_show_unknown_types_and_survive_a_restart(tmp_path: Path) -> None:
    """The next format change shows in ``session`` (per type) and ``status`` (the lines and
    the newest names), also after a restart, and in memdctl's words."""
    lines = NEW.read_bytes().splitlines()
    mixed = [*lines[:20], b'{"type":"hologram-state"}', b'{"type":"hologram-state"}', *lines[20:]]
    with fake_home(tmp_path) as home:
        project = home.projects / "-home-user-proj"
        project.mkdir(parents=True)
        (project / "new.jsonl").write_bytes(b"\n".join(mixed) + b"\n")
        (project / "old.jsonl").write_bytes(NEW.read_bytes())
        proc = start_memd(home)
        try:
            wait_for(lambda: session_row(home, "new") is not None, timeout=20, what="ingest")
            for _ in range(2):
                detail = call(home, "session", {"session": "new"})
                assert detail["unknown_types"] == {"hologram-state": 2}
                assert detail["message_count"] == 14 and detail["bad_lines"] == 0
                assert call(home, "session", {"session": "old"})["unknown_types"] == {}
                ingest = call(home, "status")["ingest"]
                assert ingest["unknown_types"] == {"lines": 2, "recent": ["hologram-state"]}
                assert stop_memd(proc) == 0, read_log(home)
                proc = start_memd(home)
            shown = memdctl(home, "status")
            assert "2 lines of unknown types (newest: hologram-state)" in shown.stdout
            assert "hologram-state x2" in memdctl(home, "session", "new").stdout
        finally:
            assert stop_memd(proc) == 0, read_log(home)


@pytest.mark.parametrize("path", sweep(all_transcripts()))
def test_every_corpus_line_is_of_a_type_claude_code_is_known_to_write(path: Path) -> None:
    lines = path.read_bytes().splitlines()
    reader = read(path, lines)
    reader.conversation.sidechain = "subagents" in path.parts
    assert reader.conversation.unknown_types == {}


def test_the_real_cli_writes_no_type_memd_does_not_know(
    claude_cli_each: ClaudeCLI, claude_api: LoopbackAPI, tmp_path: Path
) -> None:
    """Each pinned Claude Code, with a tool call and a resume, read by the real daemon: no
    unknown type, and the figures of the independent reading."""
    with fake_home(tmp_path) as home:
        project = home.root / "proj"
        project.mkdir()
        (project / "notes.txt").write_text("the canary is ten minutes\n")
        notes = {"file_path": str(project / "notes.txt")}
        claude_api.add_rule(When(match="read the notes"), replies.tool_use("Read", notes), times=1)
        env = claude_cli_each.env(home.env, claude_api.url)
        proc = start_memd(home)
        try:
            done = claude_cli_each.run(["-p", "hello"], cwd=project, env=env)
            assert done.returncode == 0, done.stderr
            (transcript,) = home.projects.glob("*/*.jsonl")
            args = ["-p", "--resume", transcript.stem, "please read the notes file"]
            done = claude_cli_each.run(args, cwd=project, env=env)
            assert done.returncode == 0, done.stderr
            expected = read_lines(transcript.read_bytes().splitlines(), sidechain_file=False)
            assert expected.message_count == 6  # two prompts, the call and its result

            def read_whole() -> dict[str, Any] | None:
                row = call(home, "session", {"session": transcript.stem})
                return row if row["offset"] == transcript.stat().st_size else None

            row = wait_for(read_whole, timeout=20, what="ingest")
            assert row["unknown_types"] == {} and row["bad_lines"] == 0
            assert row["message_count"] == expected.message_count
            assert row["context_tokens"] == expected.context_tokens
        finally:
            assert stop_memd(proc) == 0, read_log(home)
