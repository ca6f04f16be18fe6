"""Gemini CLI's chats (memd/sources/gemini/) against the independent oracle, at every line
of every sample the real CLI wrote: upserts, ``$set`` histories (start, resume, compression,
rewind), ``$rewindTo``, repeated headers and the 2-line file a resume leaves."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.sources.gemini import Gemini
from memd.sources.gemini.reader import NO_MESSAGES, GeminiReader
from memd.testing.api_rules import request_problems
from memd.transcript.tail import TailPosition, read_appended
from tests.agents_oracle import read_gemini
from tests.conftest import AGENTS, SHARED

SAMPLES = sorted((AGENTS / "gemini-cli-0.61.0").rglob("*.jsonl"))
SHARED_SAMPLES = (
    sorted((SHARED / "data" / "agents" / "gemini-cli-0.61.0").rglob("*.jsonl")) if SHARED else []
)


def _lines(path: Path) -> tuple[int, list[tuple[int, bytes]]]:
    read = read_appended(path, TailPosition(0, 0, 0), max_bytes=1 << 30)
    return read.position.inode, list(zip(read.offsets, read.lines, strict=True))


def _flat(messages: list[dict[str, object]]) -> list[tuple[str, str, str]]:
    out = []
    for message in messages:
        content = message["content"]
        assert isinstance(content, list)
        out += [(str(message["role"]), str(b["type"]), str(b["text"])) for b in content]
    return out


def _check(reader: GeminiReader, lines: list[bytes]) -> None:
    want = read_gemini(lines)
    conv = reader.conversation
    assert (reader.ignored == NO_MESSAGES) == want.ignored
    assert conv.turn_ends == want.turn_ends
    assert len(conv.boundaries) == want.compactions
    assert conv.context().from_usage == want.from_usage
    got = _flat(conv.api_messages())
    assert [(r, k) for r, k, _ in got] == [(r, k) for r, k, _ in want.blocks]
    assert all(g.startswith(w) for (_, _, g), (_, _, w) in zip(got, want.blocks, strict=True))
    messages = conv.api_messages()
    if messages:
        assert not request_problems({"model": "m", "max_tokens": 1, "messages": messages})


@pytest.mark.parametrize("path", SAMPLES + SHARED_SAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("batch", [1, 7, 1000])
def test_every_prefix_of_every_chat_reads_as_the_oracle_does(path: Path, batch: int) -> None:
    inode, lines = _lines(path)
    reader = GeminiReader(str(path), inode, "/home/USER/proj", None)
    for n in range(0, len(lines), batch):
        assert reader.feed(lines[n : n + batch]) == 0
        _check(reader, [raw for _, raw in lines[: n + batch]])


def test_the_samples_cover_rewind_compression_and_resume() -> None:
    readings = [read_gemini([raw for _, raw in _lines(p)[1]]) for p in SAMPLES]
    assert sum(r.compactions for r in readings) == 1
    assert sum(r.ignored for r in readings) == 1  # the 2-line file of a resume
    rewound = [p for p in SAMPLES if b"$rewindTo" in p.read_bytes()]
    assert rewound


def test_chats_are_placed_by_project_root_or_projects_json(tmp_path: Path) -> None:
    source = Gemini(tmp_path)
    chats = source.root / "proj" / "chats"
    chats.mkdir(parents=True)
    sample = SAMPLES[-1]
    (chats / sample.name).write_bytes(sample.read_bytes())
    (chats / "parent-id").mkdir()
    (chats / "parent-id" / sample.name).write_bytes(b"{}\n")
    key = source.session_key(chats / sample.name)
    assert key is not None and key.session_id == sample.stem
    assert source.session_key(chats / "parent-id" / sample.name) is None  # a sub-agent's
    assert [p for p, _ in source.walk()] == [chats / sample.name]
    assert source.locate(sample.stem) == chats / sample.name
    reader = source.reader(str(chats / sample.name), 0)
    assert reader.cwd is None and reader.ignored and "no project" in reader.ignored
    (tmp_path / "projects.json").write_text('{"projects": {"/home/u/proj": "proj"}}')
    assert source.reader(str(chats / sample.name), 0).cwd == "/home/u/proj"
    (source.root / "proj" / ".project_root").write_text("/home/u/real\n")
    assert source.reader(str(chats / sample.name), 0).cwd == "/home/u/real"


NOT_UTF8 = [b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80\x80"]


@given(st.data())
def test_bytes_that_are_not_utf8_are_read_as_gemini_cli_reads_them(data: st.DataObject) -> None:
    """Gemini CLI reads its chat through Node's ``readline`` over a byte stream, which makes
    each invalid UTF-8 sequence U+FFFD and keeps the line; memd reads such a line the same
    way (it was a bad line, and a prompt or answer holding it was lost to notes and memory)."""
    raws = data.draw(st.sampled_from(SAMPLES)).read_bytes().splitlines(keepends=True)
    n = data.draw(st.sampled_from([n for n, raw in enumerate(raws) if b'"text":"' in raw]))
    start = raws[n].index(b'"text":"') + len(b'"text":"')
    inside = [at for at in range(start, raws[n].index(b'"', start)) if raws[n][at - 1] != 92]
    cut = data.draw(st.sampled_from(inside or [start]))  # in the text, not inside an escape
    raws[n] = raws[n][:cut] + data.draw(st.sampled_from(NOT_UTF8)) + raws[n][cut:]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "session-2026-11-26T06-48-a795b61b.jsonl"
        path.write_bytes(b"".join(raws))
        inode, lines = _lines(path)
        reader = GeminiReader(str(path), inode, "/home/USER/proj", None)
        assert reader.feed(lines) == 0
        _check(reader, [line for _, line in lines])  # U+FFFD where the oracle has it


@pytest.mark.parametrize("path", SAMPLES + SHARED_SAMPLES, ids=lambda p: p.name)
def test_a_chat_is_known_by_the_session_id_gemini_prints_and_resumes_by(path: Path) -> None:
    """Issue 35: memd called a chat by its file's name, which ``memdctl session`` had to be
    given in full; Gemini prints (``-p --output-format json``) and resumes by ``sessionId``,
    which every file of one chat carries, the 2-line file a resume leaves too."""
    header = json.loads(path.read_bytes().split(b"\n", 1)[0])
    inode, lines = _lines(path)
    reader = GeminiReader(str(path), inode, "/home/USER/proj", None)
    assert reader.session_id is None  # nothing read yet: the file's name stands in
    reader.feed(lines[:1])
    assert reader.session_id == header["sessionId"]
    reader.feed(lines[1:])  # a repeated header (a resume in the same minute) changes nothing
    assert reader.session_id == header["sessionId"]
    assert Gemini(path.parent).own_id(path) == header["sessionId"]
    assert path.stem.endswith(header["sessionId"][:8])


def test_a_chat_without_a_readable_header_has_no_id_of_its_own(tmp_path: Path) -> None:
    source = Gemini(tmp_path)
    chat = tmp_path / "session-2026-11-28T04-52-62be604e.jsonl"
    for data in (b"", b"not json\n", b'{"sessionId": "../x"}\n', b'{"id": "m", "type": "user"}\n'):
        chat.write_bytes(data)
        assert source.own_id(chat) is None, data
    chat.write_bytes(b'{"sessionId": "62be604e-' + b"a" * 70_000 + b'"}')  # past the cap
    assert source.own_id(chat) is None
    assert source.own_id(tmp_path / "gone.jsonl") is None
