"""``compact --fork`` of a Gemini CLI chat (issue 35, item 4): the room's fork writer.

The new chat, read back by memd's reader and by the independent oracle
(tests/agents_oracle.py), is the notes once, Gemini's own acknowledgement, then exactly the
messages kept, as Gemini wrote them; each kept message's id names it in the new file; the
context Gemini sends again at every resume is not kept; a line that changed since it was
read refuses the fork; the file is named and headed as Gemini names and heads a chat, and
Gemini's resume finds it by the new id. The real CLI resuming a fork is in
tests/test_agent_forks_cli.py.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from memd.compaction.prompts import NOTES_PREAMBLE
from memd.memory.session_context import opens_with_notes
from memd.sources.gemini import Gemini
from memd.sources.gemini.fork import ACK, RESENT, GeminiFork
from memd.sources.gemini.reader import GeminiReader
from memd.transcript.content import TranscriptChanged
from memd.transcript.conversation import Conversation
from memd.transcript.tail import TailPosition, read_appended
from tests.agents_oracle import read_gemini
from tests.test_source_gemini import SAMPLES, _flat

SUMMARY = NOTES_PREAMBLE + "\n\n<session-notes>\nNOTES_LINE\n</session-notes>"
FOLLOWED = [p for p in SAMPLES if not read_gemini(p.read_bytes().splitlines()).ignored]
WRITER = GeminiFork()


def read(path: Path) -> GeminiReader:
    got = read_appended(path, TailPosition(0, 0, 0), max_bytes=1 << 30)
    reader = GeminiReader(str(path), got.position.inode, "/home/USER/proj", None)
    assert reader.feed(zip(got.offsets, got.lines, strict=True)) == 0
    return reader


def prompts(conv: Conversation) -> list[int]:
    """Where a kept run may start: a user message that is a prompt (not a tool's result,
    not the context Gemini sends)."""
    api = conv.api_messages()
    return [
        i
        for i, m in enumerate(api)
        if m["role"] == "user" and not str(m["content"][0]["text"]).startswith(("[", *RESENT))
    ]


def copy(sample: Path, tmp_path: Path) -> Path:
    chats = tmp_path / "chats"
    chats.mkdir(exist_ok=True)
    source = chats / sample.name
    shutil.copy(sample, source)
    return source


@pytest.mark.parametrize("sample", FOLLOWED, ids=lambda p: p.name[-24:])
def test_the_fork_is_the_notes_then_the_kept_messages(sample: Path, tmp_path: Path) -> None:
    source = copy(sample, tmp_path)
    conv = read(source).conversation
    outline = conv.outline()
    assert not opens_with_notes(conv.messages())
    for cut in prompts(conv):
        kept = outline[cut:]
        sid = WRITER.new_id()
        fork = WRITER.write(conv, kept, session_id=sid, summary=SUMMARY, pre_tokens=1)
        path = WRITER.place(source, sid)
        path.write_bytes(fork.data)
        new = read(path)
        assert new.ignored is None and new.session_id == sid
        kept_blocks = [
            b for b in _flat([m.to_api() for m in conv.fill(kept)]) if not b[2].startswith(RESENT)
        ]
        want = [("user", "text", SUMMARY), ("assistant", "text", ACK), *kept_blocks]
        assert _flat(new.conversation.api_messages()) == want
        oracle = read_gemini(fork.data.splitlines())  # as Gemini rebuilds it
        assert [(r, k) for r, k, _ in oracle.blocks] == [(r, k) for r, k, _ in want]
        assert all(
            g.startswith(w) for (_, _, g), (_, _, w) in zip(want, oracle.blocks, strict=True)
        )
        assert opens_with_notes(new.conversation.messages())
        # Each kept message's id names the same message in the new file.
        old = {u: m for m in kept for u in m.uuids}
        ids = {u: m for m in new.conversation.outline() for u in m.uuids}
        assert fork.summary_id in ids and set(fork.renamed) <= set(old)
        for was, now in fork.renamed.items():
            assert now in ids and old[was].role == ids[now].role
        path.unlink()


def test_the_header_is_gemini_s_and_its_resume_finds_the_new_id(tmp_path: Path) -> None:
    source = copy(FOLLOWED[0], tmp_path)
    conv = read(source).conversation
    fork = WRITER.write(
        conv,
        conv.outline()[prompts(conv)[-1] :],
        session_id=WRITER.new_id(),
        summary=SUMMARY,
        pre_tokens=1,
    )
    path = WRITER.place(source, fork.session_id)
    path.write_bytes(fork.data)
    old = json.loads(source.read_bytes().splitlines()[0])
    head = json.loads(fork.data.splitlines()[0])
    assert head["sessionId"] == fork.session_id != old["sessionId"]
    assert head["projectHash"] == old["projectHash"] and head["kind"] == "main"
    # Gemini finds a chat by the first 8 of its id in the name, then its header.
    assert re.fullmatch(
        rf"session-\d{{4}}-\d\d-\d\dT\d\d-\d\d-{fork.session_id[:8]}\.jsonl", path.name
    )
    assert path.parent == source.parent
    source_of = Gemini(tmp_path)
    assert source_of.own_id(path) == fork.session_id


def test_a_line_changed_since_it_was_read_refuses_the_fork(tmp_path: Path) -> None:
    source = copy(FOLLOWED[0], tmp_path)
    conv = read(source).conversation
    kept = conv.outline()[prompts(conv)[-1] :]
    data = source.read_bytes()
    line = next(iter(kept[-1].lines()))
    raw = data[line.at : line.at + line.size]
    source.write_bytes(data.replace(raw, b" " * len(raw)))
    with pytest.raises(TranscriptChanged):
        WRITER.write(conv, kept, session_id=WRITER.new_id(), summary=SUMMARY, pre_tokens=1)


def test_a_chat_without_its_header_is_not_forked(tmp_path: Path) -> None:
    source = copy(FOLLOWED[0], tmp_path)
    conv = read(source).conversation
    kept = conv.outline()[prompts(conv)[-1] :]
    first, rest = source.read_bytes().split(b"\n", 1)
    source.write_bytes(first.replace(b'"projectHash"', b'"projecthash"') + b"\n" + rest)
    with pytest.raises(TranscriptChanged, match="header"):
        WRITER.write(conv, kept, session_id=WRITER.new_id(), summary=SUMMARY, pre_tokens=1)
