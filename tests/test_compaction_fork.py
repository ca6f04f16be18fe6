"""``compact --fork`` (issue 25): a level-1 compaction written as a new Claude Code session.

Read back by memd's own reading of transcripts (the one Claude Code's is compared with in
tests/transcript_oracle.py), the new file is one chain from a compact boundary: the notes
once, then exactly the messages level 1 keeps, every tool call answered; the old file is
untouched. The real CLI resuming a fork is in tests/test_claude_code_compact.py.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memd.compaction.forked_session import ForkExists, ForkPlan, plan_fork, write_new_session
from memd.compaction.message import Msg
from memd.compaction.service import messages_of
from memd.compaction.strategy import NotesInput
from memd.config import CompactionConfig
from memd.session.template import DEFAULT_TEMPLATE
from memd.sources.claude_code.fork import ClaudeFork
from memd.sources.common import json_line as encode_line
from memd.transcript.conversation import Conversation
from tests.compaction_support import api_problems, conversations, says_something
from tests.conftest import CORPUS as TRANSCRIPTS
from tests.daemon_harness import call, fake_home, memdctl, read_log, start_memd, stop_memd
from tests.test_compaction_e2e import BIG, SLUG, install_session, seed_notes, wait_ingested

NOTES = DEFAULT_TEMPLATE + "\nWiring the matcher into the CLI; test_cli_flags still fails.\n"
WRITER = ClaudeFork()
SMALL = CompactionConfig(keep_min_tokens=2_000, keep_min_text_messages=2, keep_max_tokens=8_000)
CORPUS = [
    TRANSCRIPTS / "napoli-matcha" / "05_a737f62fb9_4_full.jsonl",  # parallel calls, interleaved
    TRANSCRIPTS / "napoli-matcha" / "9e_1fb706580f_0_full.jsonl",  # compacted once
    TRANSCRIPTS / "spotter" / "tool_heavy.jsonl",
    BIG,
]


def conversation_of(data: bytes) -> Conversation:
    conv = Conversation()
    conv.add_lines(data.splitlines())
    return conv


def fork_of(source: Path, fraction: float) -> tuple[Conversation, ForkPlan]:
    """A fork whose notes cover ``fraction`` of the messages; at 1.0 and more, the notes
    cover up to the middle prompt, which is then the first message kept."""
    conv = conversation_of(source.read_bytes())
    msgs = messages_of(conv)
    cfg = SMALL
    if fraction >= 1:
        cfg = CompactionConfig(keep_min_tokens=1, keep_min_text_messages=1)
        prompts = [
            i
            for i in range(len(msgs) - 1)
            if msgs[i + 1].role == "user" and says_something(msgs[i + 1])
        ]
        if not prompts:
            pytest.skip("one prompt in the whole session")
        at = prompts[len(prompts) // 2]
    else:
        at = int(len(msgs) * fraction)
    notes = NotesInput(NOTES, DEFAULT_TEMPLATE, msgs[at].uuid, "/n/summary.md")
    plan = plan_fork(
        conv, msgs, notes, threshold=10**9, cfg=cfg, transcript_path=str(source), writer=WRITER
    )
    assert isinstance(plan, ForkPlan), plan
    return conv, plan


@pytest.mark.parametrize("source", CORPUS, ids=lambda p: p.name[:14])
@pytest.mark.parametrize("fraction", [0.3, 0.8, 1.0])
def test_a_fork_reads_back_as_the_notes_then_exactly_the_kept_messages(
    source: Path, fraction: float
) -> None:
    conv, plan = fork_of(source, fraction)
    before = conv.api_messages()
    lines = [json.loads(line) for line in plan.fork.data.splitlines()]
    assert lines[0]["subtype"] == "compact_boundary" and lines[0]["parentUuid"] is None
    assert lines[1]["isCompactSummary"] is True and lines[1]["parentUuid"] == lines[0]["uuid"]
    assert [line["parentUuid"] for line in lines[1:]] == [line["uuid"] for line in lines[:-1]]
    assert len({line["uuid"] for line in lines}) == len(lines)
    assert {line["sessionId"] for line in lines} == {plan.fork.session_id}
    assert not {line["uuid"] for line in lines} & {m.last_uuid for m in conv.messages()}
    assert sum("isCompactSummary" in line for line in lines) == 1

    forked = conversation_of(plan.fork.data).api_messages()
    assert api_problems(forked) == []
    assert json.dumps(forked).count("test_cli_flags still fails") == 1  # the notes, once
    kept = before[plan.dropped_messages :]
    if kept[0]["role"] == "user":  # Claude Code merges it with the summary, as memd does
        assert forked[0]["content"][1:] == kept[0]["content"] and forked[1:] == kept[1:]
        summary = forked[0]["content"][0]["text"]
        assert not [b for b in kept[0]["content"] if b.get("text") and b["text"] in summary]
    else:
        assert forked[1:] == kept
    assert len(forked) < len(before)


def test_tool_results_point_at_the_copied_call_lines() -> None:
    _, plan = fork_of(CORPUS[0], 0.3)
    lines = [json.loads(line) for line in plan.fork.data.splitlines()]
    uuids = {line["uuid"] for line in lines}
    key = "sourceToolAssistantUUID"
    sources = [line[key] for line in lines if key in line]
    assert sources and set(sources) <= uuids


def test_a_line_claude_code_wrote_with_a_lone_surrogate_is_written_back_escaped() -> None:
    line = {"type": "user", "message": {"role": "user", "content": "a\ud800b é"}}
    data = encode_line(line)
    assert data.isascii() and json.loads(data) == line
    assert encode_line({"t": "é"}) == '{"t":"é"}'.encode()


def test_a_number_past_a_floats_range_is_written_back_as_claude_code_would_not_infinity(
    tmp_path: Path,
) -> None:
    """JSON allows ``1e999`` in a tool's input; Claude Code reads it as Infinity and writes
    null. The fork reads such a kept line back (it used to be refused, a "changed" transcript
    on every try) and writes JSON: no ``Infinity``, which no JSON reader takes."""
    lines = CORPUS[0].read_bytes().splitlines()
    last = max(i for i, line in enumerate(lines) if b'"type":"tool_use"' in line)
    lines[last] = lines[last].replace(b'"input":{', b'"input":{"huge":1e999,', 1)
    source = tmp_path / "huge.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    _, plan = fork_of(source, 0.3)

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    written = [json.loads(line, parse_constant=refuse) for line in plan.fork.data.splitlines()]
    inputs = [
        block["input"]
        for line in written
        for block in (line.get("message") or {}).get("content") or []
        if isinstance(block, dict) and block.get("type") == "tool_use"
    ]
    assert {"huge": None}.items() <= next(i for i in inputs if "huge" in i).items()


def test_a_kept_line_with_bytes_that_are_not_utf8_is_written_as_claude_code_reads_it(
    tmp_path: Path,
) -> None:
    """Claude Code reads invalid UTF-8 as U+FFFD, and so does memd: a kept line with such
    bytes (here in a tool's output, a field memd skips) is copied into the fork as U+FFFD,
    valid UTF-8, never refused as a changed transcript."""
    lines = CORPUS[0].read_bytes().splitlines()
    last = max(i for i, line in enumerate(lines) if b'"toolUseResult":{' in line)
    lines[last] = lines[last].replace(b'"toolUseResult":{', b'"toolUseResult":{"b":"\xff(",', 1)
    source = tmp_path / "not-utf8.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    _, plan = fork_of(source, 0.3)
    written = [json.loads(line.decode("utf-8")) for line in plan.fork.data.splitlines()]
    results = [line.get("toolUseResult") for line in written]
    assert [r["b"] for r in results if isinstance(r, dict) and "b" in r] == ["\ufffd("]


def test_the_new_file_is_owner_only_and_never_written_over_an_existing_one(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "proj"
    folder.mkdir(mode=0o700)
    path = write_new_session(tmp_path, folder / "new.jsonl", b'{"a":1}\n')
    assert path == folder / "new.jsonl" and path.read_bytes() == b'{"a":1}\n'
    assert path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(ForkExists):
        write_new_session(tmp_path, folder / "new.jsonl", b"other\n")
    assert path.read_bytes() == b'{"a":1}\n'
    os.symlink(tmp_path / "elsewhere", folder / "planted.jsonl")
    with pytest.raises(ForkExists):
        write_new_session(tmp_path, folder / "planted.jsonl", b"x\n")
    assert not (tmp_path / "elsewhere").exists()
    assert sorted(p.name for p in folder.iterdir()) == ["new.jsonl", "planted.jsonl"]


def test_the_new_file_goes_nowhere_but_a_real_folder_below_the_agents_root(
    tmp_path: Path,
) -> None:
    """A folder on the way that is a link (to a folder of the agent's or outside it), a path
    out of the root, a name that climbs: refused, and nothing is written anywhere."""
    root, outside = tmp_path / "sessions", tmp_path / "outside"
    (root / "2026" / "11").mkdir(parents=True, mode=0o700)
    outside.mkdir(mode=0o700)
    os.symlink(outside, root / "2026" / "12")
    os.symlink(root / "2026", root / "2027")
    attempts = [
        root / "2026" / "12" / "new.jsonl",  # the last folder a link out of the root
        root / "2027" / "11" / "new.jsonl",  # a folder on the way a link inside it
        outside / "new.jsonl",
        root / "2026" / "11" / ".." / ".." / ".." / "outside" / "new.jsonl",
        root / "2026" / "11" / "..",
    ]
    for path in attempts:
        with pytest.raises(OSError, match=r"link|not a new file"):
            write_new_session(root, path, b"x\n")
    assert list(outside.iterdir()) == [] and list((root / "2026" / "11").iterdir()) == []
    assert write_new_session(root, root / "2026" / "11" / "ok.jsonl", b"x\n").exists()


def test_memdctl_compact_fork_writes_a_resumable_session_with_no_model(tmp_path: Path) -> None:
    """No API key at all: the fork is made from the notes; the old file keeps every byte."""
    with fake_home(tmp_path) as home:
        target = install_session(home, BIG, "s4")
        seed_notes(home, "s4", BIG, 0.7)
        digest = hashlib.sha256(target.read_bytes()).hexdigest()
        proc = start_memd(home)
        try:
            wait_ingested(home, "s4", target.stat().st_size)
            done = memdctl(home, "compact", "s4", "--fork")
            assert done.returncode == 0, (done.stdout, done.stderr, read_log(home))
            (new_id,) = (p.stem for p in (home.projects / SLUG).glob("*.jsonl") if p.stem != "s4")
            assert f"claude --resume {new_id}" in done.stdout
            assert hashlib.sha256(target.read_bytes()).hexdigest() == digest
            new = home.projects / SLUG / f"{new_id}.jsonl"
            assert new.stat().st_mode & 0o777 == 0o600
            forked = conversation_of(new.read_bytes()).api_messages()
            assert api_problems(forked) == []
            assert json.dumps(forked).count("test_cli_flags") == 1
            twice = memdctl(home, "--json", "compact", "s4", "--fork")
            again: dict[str, Any] = json.loads(twice.stdout)
            assert again["forked"] and again["session"] != new_id and again["api_calls"] == 0
            assert call(home, "status")["usage"]["total"]["calls"] == 0
            # An id that climbs or names no one session forks nothing.
            before = sorted((home.projects / SLUG).iterdir())
            for ident in ("../s4", f"../{SLUG}/s4", "/s4", ""):
                refused = memdctl(home, "compact", ident, "--fork")
                assert refused.returncode != 0, refused
                assert "no session" in refused.stderr or "is required" in refused.stderr, refused
            assert sorted((home.projects / SLUG).iterdir()) == before
            # A session without notes is not forked, and says why (exit 1).
            install_session(home, BIG, "bare")
            wait_ingested(home, "bare", target.stat().st_size)
            refused = memdctl(home, "compact", "bare", "--fork")
            assert refused.returncode == 1 and "no notes" in refused.stderr, refused
            # A prefix of two sessions' ids is refused, naming how many it matches.
            install_session(home, BIG, "bare2")
            wait_ingested(home, "bare2", target.stat().st_size)
            refused = memdctl(home, "compact", "bar", "--fork")
            assert refused.returncode != 0 and "matches 2 sessions" in refused.stderr, refused
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def transcript_of(msgs: list[Msg]) -> bytes:
    """The lines Claude Code would write for ``msgs``: one per block, a response's lines
    sharing its ``message.id``, each line's parent the line before."""
    lines: list[dict[str, Any]] = []
    for n, msg in enumerate(msgs):
        for k, block in enumerate(msg.content):
            line: dict[str, Any] = {
                "type": msg.role,
                "uuid": f"{n}-{k}",
                "parentUuid": lines[-1]["uuid"] if lines else None,
                "sessionId": "s",
                "timestamp": "2026-11-26T08:00:00.000Z",
                "message": {"role": msg.role, "content": [block]},
            }
            if msg.role == "assistant":
                line["message"] |= {"id": f"msg_{n}", "model": "claude-x", "type": "message"}
            lines.append(line)
    return b"".join(encode_line(line) + b"\n" for line in lines)


@settings(max_examples=60)
@given(conversations(max_rounds=10, max_tokens=1), st.floats(0, 1))
def test_any_fork_reads_back_as_the_notes_then_the_kept_messages(
    msgs: list[Msg], at: float
) -> None:
    data = transcript_of(msgs)
    conv = conversation_of(data)
    parsed = messages_of(conv)
    assume(len(parsed) > 1)
    anchor = parsed[min(len(parsed) - 1, int(at * len(parsed)))].uuid
    notes = NotesInput(NOTES, DEFAULT_TEMPLATE, anchor)
    tiny = CompactionConfig(keep_min_tokens=1, keep_min_text_messages=1)
    plan = plan_fork(
        conv, parsed, notes, threshold=10**9, cfg=tiny, transcript_path="/t", writer=WRITER
    )
    assume(isinstance(plan, ForkPlan))
    assert isinstance(plan, ForkPlan)
    lines = [json.loads(line) for line in plan.fork.data.splitlines()]
    assert [line["parentUuid"] for line in lines[1:]] == [line["uuid"] for line in lines[:-1]]
    forked = conversation_of(plan.fork.data).api_messages()
    assert api_problems(forked) == []
    kept = conv.api_messages()[plan.dropped_messages :]
    if kept[0]["role"] == "user":
        assert forked[0]["content"][1:] == kept[0]["content"] and forked[1:] == kept[1:]
    else:
        assert forked[1:] == kept
    assert json.dumps(forked).count("test_cli_flags still fails") == 1
