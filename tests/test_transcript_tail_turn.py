"""A read turn (:class:`memd.transcript.tail.Tail`): one descriptor for its successive reads,
the incomplete line carried between them, and every check of a lone read kept."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.transcript.tail import Tail, TailRead, UnreadableTranscript, read_appended


def _lines(count: int, width: int = 300, prefix: str = "u") -> bytes:
    return b"".join(
        json.dumps({"uuid": f"{prefix}{i}", "text": "w" * width}).encode() + b"\n"
        for i in range(count)
    )


def _check(tail: Tail, max_line_bytes: int) -> bool:
    """One read of ``tail`` gives a first part of what one unbounded :func:`read_appended`
    from its position gives, and all of it when it says there is no more."""
    whole = read_appended(
        tail.path, tail.position, max_bytes=1 << 40, max_line_bytes=max_line_bytes
    )
    got = tail.read()
    count = len(got.lines)
    assert got.reset == whole.reset
    assert got.lines == whole.lines[:count] and got.offsets == whole.offsets[:count]
    assert got.position.inode == whole.position.inode
    assert got.position.offset <= whole.position.offset
    if not got.more:
        assert got == whole and got.offsets == whole.offsets
    return got.more


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_turn_reads_each_byte_once_and_closes_at_the_end(tmp_path: Path) -> None:
    """The line cut by a read's byte cap is carried to the next read, not read again."""
    path = tmp_path / "s.jsonl"
    data = _lines(200)
    path.write_bytes(data)
    before = _open_descriptors()
    reads: list[TailRead] = []
    with Tail(path, max_bytes=4_096) as tail:
        while not reads or reads[-1].more:
            reads.append(tail.read())
            assert reads[-1].bytes_read <= 4_096
        assert _open_descriptors() == before  # closed once the end was reached
    assert len(reads) > 10
    assert b"".join(line + b"\n" for r in reads for line in r.lines) == data
    assert sum(r.bytes_read for r in reads) == len(data)


def test_a_file_replaced_between_two_reads_of_a_turn_is_read_from_the_start(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_lines(50))
    with Tail(path, max_bytes=4_096) as tail:
        assert tail.read().more
        new = tmp_path / "new.jsonl"
        new.write_bytes(_lines(3, prefix="n"))
        os.replace(new, path)
        read = tail.read()
    assert read.reset and not read.more
    assert [json.loads(line)["uuid"] for line in read.lines] == ["n0", "n1", "n2"]


def test_a_file_truncated_between_two_reads_of_a_turn_is_read_from_the_start(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_lines(50))
    with Tail(path, max_bytes=4_096) as tail:
        first = tail.read()
        os.truncate(path, first.position.offset - 1)
        read = tail.read()
    assert read.reset
    assert read.lines == first.lines[:-1]


def test_a_link_or_a_removal_between_two_reads_of_a_turn_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    other = tmp_path / "other.jsonl"
    other.write_bytes(_lines(50))
    path.write_bytes(_lines(50))
    with Tail(path, max_bytes=4_096) as tail:
        assert tail.read().more
        path.unlink()
        path.symlink_to(other)
        with pytest.raises(UnreadableTranscript) as caught:
            tail.read()
        assert caught.value.reason == "a symbolic link (not followed), not a regular file"
    path.unlink()
    path.write_bytes(_lines(50))
    with Tail(path, max_bytes=4_096) as tail:
        assert tail.read().more
        path.unlink()
        with pytest.raises(FileNotFoundError):
            tail.read()


_steps = st.lists(
    st.one_of(
        st.tuples(st.just("read"), st.integers(min_value=64, max_value=4_096)),
        st.tuples(st.just("append"), st.binary(max_size=3_000)),
        st.tuples(st.just("line"), st.integers(min_value=0, max_value=6_000)),
        st.tuples(st.just("truncate"), st.integers(min_value=0, max_value=20_000)),
        st.tuples(st.just("replace"), st.binary(max_size=3_000)),
    ),
    max_size=40,
)


@settings(deadline=None, max_examples=150)
@given(steps=_steps, max_line_bytes=st.integers(min_value=100, max_value=5_000))
def test_each_read_of_a_turn_is_what_a_lone_read_from_its_position_gives(
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[tuple[str, object]],
    max_line_bytes: int,
) -> None:
    """Whatever happens to the file between the reads of one turn (appends, lines longer
    than a read or than the line limit, truncations, replacements), each read gives the
    first lines :func:`read_appended` gives from the position the turn had reached, and the
    same read when it reaches the end. A truncation is read
    at once (truncated and written again before the read, the file is rewritten in place:
    the bytes a turn read already are not read again, whole lines or the cut one)."""
    path = tmp_path_factory.mktemp("turn") / "t.jsonl"
    path.write_bytes(b"")
    tail: Tail | None = None
    for step, arg in steps:
        if step == "read":
            assert isinstance(arg, int)
            if tail is None:
                tail = Tail(path, max_bytes=arg, max_line_bytes=max_line_bytes)
            tail.max_bytes = arg
            _check(tail, max_line_bytes)
        elif step in ("append", "line"):
            data = arg if isinstance(arg, bytes) else b"x" * int(str(arg)) + b"\n"
            with path.open("ab") as file:
                file.write(data)
        elif step == "truncate":  # and read at once: seen before anything is written again
            os.truncate(path, min(int(str(arg)), path.stat().st_size))
            if tail is not None:
                _check(tail, max_line_bytes)
        else:
            assert isinstance(arg, bytes)
            new = path.with_suffix(".new")
            new.write_bytes(arg)
            os.replace(new, path)
    with tail or Tail(path, max_line_bytes=max_line_bytes) as last:
        while _check(last, max_line_bytes):
            pass
