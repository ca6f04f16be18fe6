"""Names as bytes on the wire (issue 23): escaped in replies, unescaped in requests, and a
reply is always encodable, whatever bytes named the files it talks about."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd_client.client import Client
from memd_client.names import encodable, escape_name, escape_surrogates, unescape_name
from tests.ipc_support import methods, serving_in_thread, short_dir

# Every code point, lone surrogates included (what os.fsdecode and JSON can hand over).
any_text = st.text(st.characters(codec=None, categories=None, exclude_categories=()))
any_name = st.binary(max_size=64).map(os.fsdecode)


@given(st.one_of(any_text, any_name))
def test_an_escaped_name_is_encodable_printable_and_comes_back(name: str) -> None:
    shown = escape_name(name)
    shown.encode("utf-8")  # msgpack, JSON and a terminal take it
    assert not any(ord(c) < 0x20 or ord(c) == 0x7F for c in shown)
    assert unescape_name(shown) == name


@given(st.binary(max_size=64))
def test_bytes_on_disk_survive_the_round_trip(raw: bytes) -> None:
    assert os.fsencode(unescape_name(escape_name(os.fsdecode(raw)))) == raw


@given(any_text)
def test_unescape_never_raises_on_what_a_user_types(typed: str) -> None:
    unescape_name(typed)


def test_escaped_forms_are_the_documented_ones() -> None:
    assert escape_name(os.fsdecode(b"caf\xe9.jsonl")) == "caf\\xe9.jsonl"
    assert escape_name("a\\b") == "a\\\\b" and unescape_name("a\\\\b") == "a\\b"
    assert escape_name("line\nbreak") == "line\\x0abreak"
    assert escape_name("\ud800") == "\\ud800"
    assert escape_name("café ✓") == "café ✓"  # UTF-8 names are shown as they are
    assert unescape_name("a\\qb") == "a\\qb"  # not an escape: as typed


replies = st.recursive(
    st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), any_text, any_name),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.one_of(any_text, any_name), inner)
    ),
    max_leaves=20,
)


@given(replies)
def test_a_reply_made_encodable_packs_with_both_encoders(reply: Any) -> None:
    safe = encodable(reply)
    msgpack.unpackb(msgpack.packb(safe, use_bin_type=True), raw=False)  # and reads back
    assert msgspec.msgpack.Encoder().encode(safe) == msgpack.packb(safe, use_bin_type=True)


@pytest.mark.parametrize("encoder", ["msgpack", "msgspec"])
def test_the_server_answers_with_names_escaped_whatever_its_packer(encoder: str) -> None:
    """A handler that returns a name as it came from disk (a lone surrogate) gets its
    reply through, escaped, not ``internal``; a name sent as raw bytes goes escaped too."""

    async def name(params: dict[str, Any]) -> Any:
        return {os.fsdecode(b"caf\xe9"): [os.fsdecode(b"\xff.jsonl"), "plain"]}

    with short_dir() as d:
        path: Path = d / "memd.sock"
        with serving_in_thread(path, methods(name=name)) as server:
            if encoder == "msgspec":
                server.use_packer(msgspec.msgpack.Encoder().encode)
            with Client(path, timeout=10) as client:
                assert client.call("name") == {"caf\\xe9": ["\\xff.jsonl", "plain"]}
                sent = {"session": os.fsdecode(b"s\xe9")}  # a raw byte on a command line
                assert client.call("echo", sent) == {"session": "s\\xe9"}


@given(st.one_of(any_text, any_name))
def test_free_text_is_shown_with_its_surrogates_escaped_and_nothing_else(text: str) -> None:
    shown = escape_surrogates(text)
    shown.encode("utf-8")
    if not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        assert shown == text  # newlines, backslashes, tables: as they were


def test_memdctl_shows_a_local_path_that_is_not_utf8_escaped(tmp_path: Path) -> None:
    """``memdctl doctor`` names paths of its own (the settings file, the unit): under a
    Latin-1 home they were printed as raw bytes; they are escaped as memd's names are."""
    home = tmp_path / os.fsdecode(b"caf\xe9")
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "MEMD_"))}
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(tmp_path / "run"))
    for args in (["doctor"], ["--json", "doctor"]):
        done = subprocess.run(
            [sys.executable, "-m", "memd_client.cli", *args],
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert b"\xe9" not in done.stdout + done.stderr, done.stdout
        if "--json" not in args:
            assert b"caf\\xe9/.claude/settings.json" in done.stdout, done.stdout
