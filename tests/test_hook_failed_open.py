"""The hook fails open, visibly: a record beside the socket, written only where it is safe
to write, read back as untrusted bytes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from memd_client.hook_record import MAX_FIELD, FailOpenRecord, parse_record, read_failed_open
from tests.ipc_support import short_dir

START = b'{"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": "hi"}'


def run_hook(socket: Path, stdin: bytes = START) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memd_client.hook"],
        input=stdin,
        env={**os.environ, "MEMD_SOCKET": str(socket)},
        capture_output=True,
        timeout=30,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


def test_memd_not_running_is_recorded_in_its_runtime_dir() -> None:
    with short_dir() as d:
        d.chmod(0o700)
        run_hook(d / "memd.sock")
        record = read_failed_open(d / "memd.sock")
        assert isinstance(record, FailOpenRecord)
        assert record.event == "UserPromptSubmit" and record.count == 1
        assert "memd is not running" in record.reason
        assert "start memd" in record.fix()
        assert [p.name for p in d.iterdir()] == ["hook-failed-open"]  # no temporary left


def test_nothing_is_written_where_it_is_not_safe_or_there_is_no_runtime_dir() -> None:
    with short_dir() as d:
        d.chmod(0o755)  # open to others: not memd's runtime dir
        run_hook(d / "memd.sock")
        assert list(d.iterdir()) == []
        run_hook(d / "missing" / "memd.sock")
        assert not (d / "missing").exists()


def test_a_link_at_the_records_name_is_replaced_not_followed() -> None:
    with short_dir() as d:
        d.chmod(0o700)
        target = d / "elsewhere"
        target.write_bytes(b"keep me")
        (d / "hook-failed-open").symlink_to(target)
        run_hook(d / "memd.sock")
        assert target.read_bytes() == b"keep me"
        assert not (d / "hook-failed-open").is_symlink()
        assert isinstance(read_failed_open(d / "memd.sock"), FailOpenRecord)


def test_a_damaged_record_is_reported_as_such() -> None:
    with short_dir() as d:
        (d / "hook-failed-open").write_bytes(b"memd-hook failed open\nnan\n1\n1\nx\ny\n")
        assert "is not a record of the hook's" in str(read_failed_open(d / "memd.sock"))
        (d / "hook-failed-open").unlink()
        os.mkfifo(d / "hook-failed-open")
        assert "is not a regular file" in str(read_failed_open(d / "memd.sock"))


@given(st.binary(max_size=5000))
def test_any_bytes_read_as_a_record_or_refused(data: bytes) -> None:
    record = parse_record(Path("r"), data)
    if record is not None:
        assert 0 < record.first <= record.last and record.count > 0
        for text in (record.event, record.reason, record.summary(), record.fix()):
            assert text.isprintable()
        assert len(record.reason) <= MAX_FIELD


@given(st.text(max_size=400), st.floats(), st.integers())
def test_a_record_with_hostile_fields_stays_bounded(reason: str, when: float, count: int) -> None:
    data = f"memd-hook failed open\n{when}\n{when}\n{count}\nStop\n{reason}\n".encode()
    record = parse_record(Path("r"), data)
    if record is not None:
        assert record.summary().isprintable() and len(record.reason) <= MAX_FIELD
