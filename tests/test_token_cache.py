"""Token estimates kept across restarts: the same figures after a save and a load, the same
keys in every process, and a file that cannot be trusted is set aside, never an error."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.compaction.tokencache import MAGIC, RECORD, TokenCache, message_key
from memd.tokens import estimate_content, estimator_id
from memd.transcript.conversation import Conversation
from tests.conftest import CORPUS

SAMPLE = CORPUS / "napoli-matcha" / "05_a737f62fb9_1_full.jsonl"


def conversation(path: Path) -> Conversation:
    conv = Conversation()
    with path.open("rb") as f:
        conv.add_lines(f)
    return conv


def test_estimates_survive_a_save_and_a_load(tmp_path: Path) -> None:
    conv = conversation(SAMPLE)
    cache = TokenCache()
    assert cache.warm(conv) == len(conv.outline()) > 10
    cache.save(tmp_path / "t.bin")
    assert cache.changed == 0

    again = TokenCache.load(tmp_path / "t.bin")
    assert len(again) == len(cache)
    assert again.warm(conv) == 0  # nothing left to tokenize
    for m in conv.messages():
        assert again.tokens(m) == estimate_content(m.content)


def test_the_oldest_go_first_and_the_order_survives_a_restart(tmp_path: Path) -> None:
    messages = conversation(SAMPLE).messages()
    assert len(messages) >= 16
    cache = TokenCache(max_entries=10)
    for m in messages[:16]:
        cache.tokens(m)
    assert len(cache) == 10  # messages 6..15 are left
    assert not cache.known(messages[5].uuids) and cache.known(messages[6].uuids)
    cache.tokens(messages[6])  # used again: now the newest
    cache.save(tmp_path / "t.bin")
    loaded = TokenCache.load(tmp_path / "t.bin", max_entries=10)
    loaded.tokens(messages[0])  # one more: the least recently used goes
    assert not loaded.known(messages[7].uuids)
    assert loaded.known(messages[6].uuids) and loaded.known(messages[8].uuids)


def test_keys_are_the_same_in_every_process() -> None:
    uuids = ("a1b2", "c3d4-\udc80", "é")  # a lone surrogate, as a hostile line can carry
    code = (
        "import sys; from memd.compaction.tokencache import message_key;"
        f"print(message_key({uuids!r}))"
    )
    keys = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert keys == {str(message_key(uuids))}


@given(st.lists(st.text(), min_size=1, max_size=5), st.lists(st.text(), min_size=1, max_size=5))
def test_different_lines_give_different_keys(a: list[str], b: list[str]) -> None:
    if "\n".join(a) != "\n".join(b):
        assert message_key(a) != message_key(b)


def header() -> bytes:
    return MAGIC + estimator_id().encode() + b"\n"


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"memd-tok0\nsomething else\n" + RECORD.pack(1, 2), "another estimator"),
        (MAGIC + b"cl100k rules 0\n" + RECORD.pack(1, 2), "another estimator"),
        (header() + RECORD.pack(1, 2)[:-1], "cut short"),
        (header() + RECORD.pack(1, 2) * 11, "too long"),
    ],
)
def test_a_file_that_cannot_be_used_is_set_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, why: str
) -> None:
    path = tmp_path / "t.bin"
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING):
        assert len(TokenCache.load(path, max_entries=10)) == 0
    assert why in caplog.text


def test_no_file_a_fifo_or_a_directory_is_an_empty_cache(tmp_path: Path) -> None:
    assert len(TokenCache.load(tmp_path / "missing")) == 0
    os.mkfifo(tmp_path / "fifo")  # no writer: a blocking open would hang here
    assert len(TokenCache.load(tmp_path / "fifo")) == 0
    (tmp_path / "dir").mkdir()
    assert len(TokenCache.load(tmp_path / "dir")) == 0
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert len(TokenCache.load(tmp_path / "loop")) == 0


@given(st.binary(max_size=200))
def test_any_bytes_load_without_an_error(data: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.bin"
        path.write_bytes(header() + data)
        cache = TokenCache.load(path, max_entries=10)
        assert len(cache) == (len(data) // RECORD.size if len(data) % RECORD.size == 0 else 0)


def test_the_compaction_breakers_file_is_read_as_hostile(tmp_path: Path) -> None:
    """The other file the compaction service keeps: any file type or depth is no state."""
    from memd.compaction.service import _load_breakers

    os.mkfifo(tmp_path / "fifo")
    assert _load_breakers(tmp_path / "fifo") == {}
    (tmp_path / "deep").write_text("[" * 100_000)
    assert _load_breakers(tmp_path / "deep") == {}
    (tmp_path / "ok").write_text('{"s": 2, "t": "x"}')
    assert {k: v.consecutive_failures for k, v in _load_breakers(tmp_path / "ok").items()} == {
        "s": 2
    }


def test_only_the_most_recently_used_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memd.compaction import tokencache

    monkeypatch.setattr(tokencache, "SAVED_ENTRIES", 5)
    messages = conversation(SAMPLE).messages()
    cache = TokenCache()
    for m in messages[:12]:
        cache.tokens(m)
    cache.save(tmp_path / "t.bin")
    loaded = TokenCache.load(tmp_path / "t.bin")
    assert [loaded.known(m.uuids) for m in messages[:12]] == [False] * 7 + [True] * 5
