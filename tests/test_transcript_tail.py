"""Tailing transcripts: line splitting, offsets, truncation, replacement, bad and long lines."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.errors import StateError, TranscriptError
from memd.transcript.conversation import Conversation
from memd.transcript.tail import (
    LineSplitter,
    TailPosition,
    TailRead,
    UnreadableTranscript,
    read_appended,
)


def _line(uuid: str, parent: str | None, text: str = "hi") -> bytes:
    entry = {
        "type": "user",
        "uuid": uuid,
        "parentUuid": parent,
        "message": {"role": "user", "content": text},
    }
    return json.dumps(entry, ensure_ascii=False).encode() + b"\n"


# -- LineSplitter (pure) ------------------------------------------------------------------------

_text = st.text(alphabet=st.sampled_from('ab \n\u00e9\u4e2d\U0001f600{}"'), max_size=200)


@settings(deadline=None)
@given(text=_text, cuts=st.lists(st.integers(min_value=0, max_value=1000), max_size=20))
def test_splitter_gives_the_same_lines_however_the_bytes_are_cut(
    text: str, cuts: list[int]
) -> None:
    data = text.encode()
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    splitter = LineSplitter()
    lines: list[bytes] = []
    for start, end in itertools.pairwise(points):
        lines.extend(splitter.feed(data[start:end]))
    *complete, partial = data.split(b"\n")
    assert lines == [line for line in complete if line]
    for line in lines:
        line.decode()  # multi-byte characters survived the cuts
    assert splitter.pending == len(partial)
    assert splitter.consumed == len(data) - len(partial)


def test_splitter_holds_a_partial_line_until_its_newline() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b'{"a": 1}\n{"b"') == [b'{"a": 1}']
    assert splitter.pending == 4
    assert splitter.feed(b": 2}") == []
    assert splitter.feed(b"\n") == [b'{"b": 2}']
    assert splitter.pending == 0


def test_splitter_skips_and_counts_lines_over_the_limit() -> None:
    splitter = LineSplitter(max_line_bytes=10)
    assert splitter.feed(b"short\n" + b"x" * 25) == [b"short"]
    assert splitter.feed(b"y" * 25 + b"\nok\n" + b"z" * 11 + b"\nend\n") == [b"ok", b"end"]
    assert splitter.skipped == 2


def test_splitter_counts_a_long_line_that_arrives_in_one_piece() -> None:
    splitter = LineSplitter(max_line_bytes=4)
    assert splitter.feed(b"a\nlong line\nb\n") == [b"a", b"b"]
    assert splitter.skipped == 1


# -- read_appended (I/O shell) ----------------------------------------------------------------


def test_first_read_returns_complete_lines_and_the_offset_after_them(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_line("a", None) + _line("b", "a") + b'{"type": "us')
    read = read_appended(path)
    assert read.lines == [_line("a", None)[:-1], _line("b", "a")[:-1]]
    assert read.position.offset == len(_line("a", None) + _line("b", "a"))
    assert read.position.size == path.stat().st_size
    assert read.position.inode == path.stat().st_ino
    assert not read.reset and not read.more


def test_a_partial_line_waits_for_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    whole = _line("a", None, "caf\u00e9 \u4e2d")
    path.write_bytes(whole[:-7])  # cut inside the multi-byte characters
    first = read_appended(path)
    assert first.lines == [] and first.position.offset == 0
    with path.open("ab") as file:
        file.write(whole[-7:])
    second = read_appended(path, first.position)
    assert second.lines == [whole[:-1]]
    assert second.position.offset == len(whole)


def test_only_appended_bytes_are_read(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_line("a", None))
    first = read_appended(path)
    with path.open("ab") as file:
        file.write(_line("b", "a"))
    second = read_appended(path, first.position)
    assert second.lines == [_line("b", "a")[:-1]]
    assert not second.reset
    assert read_appended(path, second.position).lines == []


def test_a_truncated_file_is_read_again_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_line("a", None) + _line("b", "a"))
    first = read_appended(path)
    path.write_bytes(_line("c", None))  # same inode, shorter
    second = read_appended(path, first.position)
    assert second.reset
    assert second.lines == [_line("c", None)[:-1]]
    assert second.position.offset == len(_line("c", None))


def test_a_replaced_file_is_read_again_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_line("a", None))
    first = read_appended(path)
    replacement = tmp_path / "new.jsonl"
    replacement.write_bytes(_line("x", None) + _line("y", "x") + _line("z", "y"))
    os.replace(replacement, path)  # longer than the old offset, but a different inode
    second = read_appended(path, first.position)
    assert second.reset
    assert [json.loads(line)["uuid"] for line in second.lines] == ["x", "y", "z"]


def test_a_broken_line_is_counted_and_the_next_lines_still_parse(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_line("a", None) + b'{"type": "user", "uuid": \n' + _line("b", "a"))
    conversation = Conversation()
    conversation.add_lines(read_appended(path).lines)
    assert conversation.bad_lines == 1
    assert [e.uuid for e in conversation.active_chain()] == ["a", "b"]


def test_an_overlong_line_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_line("a", None) + _line("big", "a", "x" * 5_000) + _line("b", "a"))
    read = read_appended(path, max_line_bytes=1_000)
    assert read.skipped == 1
    assert [json.loads(line)["uuid"] for line in read.lines] == ["a", "b"]
    assert read.position.offset == path.stat().st_size


def test_a_big_file_is_read_in_capped_steps(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    lines = [_line(f"u{i}", f"u{i - 1}" if i else None, "w" * 300) for i in range(200)]
    path.write_bytes(b"".join(lines))
    got: list[bytes] = []
    position: TailPosition | None = None
    steps = 0
    while True:
        read = read_appended(path, position, max_bytes=4_096)
        got += read.lines
        position = read.position
        steps += 1
        if not read.more:
            break
    assert got == [line[:-1] for line in lines]
    assert steps > 10
    assert position.offset == path.stat().st_size


def _read_all(path: Path, position: TailPosition | None, **caps: int) -> list[TailRead]:
    """Call :func:`read_appended` until it has nothing more to read."""
    reads = [read_appended(path, position, **caps)]
    while reads[-1].more:
        reads.append(read_appended(path, reads[-1].position, **caps))
    return reads


def test_a_line_longer_than_one_step_is_still_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    big = _line("big", None, "x" * 50_000)
    path.write_bytes(big + _line("b", "big"))
    reads = _read_all(path, None, max_bytes=1_000)
    assert [line for r in reads for line in r.lines] == [big[:-1], _line("b", "big")[:-1]]
    assert [at for r in reads for at in r.offsets] == [0, len(big)]


def test_each_call_reads_a_bounded_number_of_bytes_whatever_the_line(tmp_path: Path) -> None:
    """A line with no newline yet (a 20 GB one, say) is not read in one go."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(_line("a", None) + b"y" * 300_000)
    reads = _read_all(path, None, max_bytes=10_000)
    assert all(r.bytes_read <= 10_000 for r in reads)
    assert [line for r in reads for line in r.lines] == [_line("a", None)[:-1]]
    assert reads[-1].position.offset == len(_line("a", None))


def test_a_partial_line_is_scanned_once_not_from_its_start_on_every_change(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    head = _line("a", None)
    path.write_bytes(head + b'{"type": "user", "x": "' + b"y" * 100_000)
    first = _read_all(path, None)[-1]
    assert first.position.offset == len(head)
    assert first.position.scanned == path.stat().st_size
    with path.open("ab") as file:
        file.write(b"y" * 10)
    again = read_appended(path, first.position)
    assert again.bytes_read == 10 and again.lines == []
    with path.open("ab") as file:
        file.write(b'"}\n' + _line("b", "a"))
    done = read_appended(path, again.position)
    assert [json.loads(line).get("uuid") for line in done.lines] == [None, "b"]
    assert done.offsets[0] == len(head) and done.position.scanned == 0
    assert done.position.offset == path.stat().st_size


def test_an_incomplete_line_over_the_limit_is_skipped_to_its_newline_unread(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_line("a", None) + b"z" * 50_000)
    position = _read_all(path, None, max_bytes=4_096, max_line_bytes=1_000)[-1].position
    with path.open("ab") as file:
        file.write(b"\n" + _line("b", "a"))
    read = read_appended(path, position, max_bytes=4_096, max_line_bytes=1_000)
    assert read.skipped == 1
    assert [json.loads(line)["uuid"] for line in read.lines] == ["b"]
    assert read.bytes_read < 1_000  # the skipped line was not read again


def test_the_holes_of_a_sparse_file_are_not_read(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_line("a", None))
    with path.open("r+b") as file:
        file.truncate(8 * 1024**3)  # 8 GiB, no newline after the first line: a hole
    reads = _read_all(path, None)
    assert sum(r.bytes_read for r in reads) < 64 * 1024**2
    assert [line for r in reads for line in r.lines] == [_line("a", None)[:-1]]
    assert reads[-1].position.scanned == 8 * 1024**3
    with path.open("ab") as file:
        file.write(b"\n" + _line("b", "a"))
    after = _read_all(path, reads[-1].position)
    assert [line for r in after for line in r.lines] == [_line("b", "a")[:-1]]
    assert sum(r.skipped for r in after) == 1  # the 8 GiB line, over the line limit


def test_a_missing_file_is_reported_as_such(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_appended(tmp_path / "gone.jsonl")


def test_an_unreadable_path_is_a_transcript_error(tmp_path: Path) -> None:
    directory = tmp_path / "a-directory"
    directory.mkdir()
    with pytest.raises(TranscriptError, match="a-directory"):
        read_appended(directory)


def test_a_position_with_unknown_inode_or_nothing_read_is_not_a_reset(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_line("a", None) + _line("b", "a"))
    fresh = read_appended(path, TailPosition(0, 0, 0))
    assert not fresh.reset and len(fresh.lines) == 2
    unknown_inode = read_appended(path, TailPosition(len(_line("a", None)), 0, 0))
    assert not unknown_inode.reset and len(unknown_inode.lines) == 1
    elsewhere = read_appended(path, TailPosition(0, path.stat().st_ino + 1, 0))
    assert not elsewhere.reset


def test_a_position_survives_a_round_trip_through_the_state_file() -> None:
    position = TailPosition(offset=120, inode=99, size=4_000)
    stored = json.loads(json.dumps(position.to_dict()))
    assert TailPosition.from_dict(stored) == position


@pytest.mark.parametrize(
    "stored",
    [
        None,
        [],
        {"offset": 1, "inode": 2},
        {"offset": -1, "inode": 2, "size": 3},
        {"offset": "1", "inode": 2, "size": 3},
        {"offset": True, "inode": 2, "size": 3},
    ],
)
def test_a_malformed_stored_position_is_a_state_error(stored: object) -> None:
    with pytest.raises(StateError):
        TailPosition.from_dict(stored)


# -- hostile paths (R-T7) ----------------------------------------------------------------------


def _unreadable(path: Path) -> UnreadableTranscript:
    with pytest.raises(UnreadableTranscript) as caught:
        read_appended(path)
    return caught.value


def test_only_regular_files_are_read_and_nothing_blocks(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.jsonl")  # open() on it would wait for a writer forever
    (tmp_path / "dir.jsonl").mkdir()
    (tmp_path / "loop.jsonl").symlink_to("loop.jsonl")
    (tmp_path / "real.jsonl").write_bytes(b"{}\n")
    (tmp_path / "link.jsonl").symlink_to("real.jsonl")
    assert _unreadable(tmp_path / "fifo.jsonl").reason == "a FIFO, not a regular file"
    assert _unreadable(tmp_path / "dir.jsonl").reason == "a directory, not a regular file"
    for name in ("loop.jsonl", "link.jsonl"):
        reason = _unreadable(tmp_path / name).reason
        assert reason == "a symbolic link (not followed), not a regular file"
    assert not _unreadable(tmp_path / "fifo.jsonl").transient


def test_out_of_file_descriptors_is_unreadable_for_now(tmp_path: Path) -> None:
    """EMFILE is transient: retrying later helps without the file changing."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"{}\n")
    code = (
        "import os, resource, sys\n"
        "from memd.transcript.tail import UnreadableTranscript, read_appended\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))\n"
        "held = []\n"
        "try:\n"
        "    while True: held.append(os.open(os.devnull, os.O_RDONLY))\n"
        "except OSError: pass\n"
        "try:\n"
        "    read_appended(sys.argv[1])\n"
        "except UnreadableTranscript as exc:\n"
        "    print(exc.reason, exc.transient)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "too many open files (EMFILE) True", done.stderr


def test_a_file_rewritten_in_place_is_read_again(tmp_path: Path) -> None:
    """Same inode, new content (deleted and re-created on a filesystem that reuses inodes,
    or copied over): the byte before the saved offset is no longer a newline."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": 2}\n')
    first = read_appended(path)
    with path.open("r+b") as f:
        f.write(b'{"c": 333333}\n{"d": 4}\n')
    again = read_appended(path, first.position)
    assert again.reset and again.lines == [b'{"c": 333333}', b'{"d": 4}']
