"""Write health (:mod:`memd.writes`) and the writers that report to it, on a disk that
really fails (a tmpfs filled up or remounted read-only; a shim below ``os.open`` when the
tests cannot mount): memd's own state is kept and written later, a job's write raises and is
named until it works again, and what ``status`` shows is encodable whatever the path."""

from __future__ import annotations

import errno
import json
import os
import time
from functools import partial
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.atomic import persist, retry_kept, write_atomic
from memd.clock import FakeClock
from memd.llm.client import Usage
from memd.llm.ledger import Ledger
from memd.memory.cursors import CursorStore, SessionCursor
from memd.writes import (
    DISK_FAULTS,
    FIRST_RETRY_S,
    KEEP_JOB_FAILURES_S,
    MAX_RETRY_S,
    OTHER_RETRY_S,
    WRITES,
    WriteHealth,
    retry_delay,
    run_write_retries,
)
from memd_client import protocol
from tests.daemon_harness import wait_for
from tests.disk_support import faulty_disk


def row_for(path: Path) -> dict[str, object] | None:
    rows = WRITES.statistics(limit=1000)["paths"]
    return next((r for r in rows if r["path"] == str(path)), None)


# -- the registry, pure --------------------------------------------------------------------


@given(st.integers(min_value=1, max_value=10_000))
def test_a_disk_fault_backs_off_doubling_up_to_the_cap(attempts: int) -> None:
    for code in DISK_FAULTS:
        delay = retry_delay(code, attempts)
        assert FIRST_RETRY_S <= delay <= MAX_RETRY_S
        assert delay == min(MAX_RETRY_S, FIRST_RETRY_S * 2.0 ** min(attempts - 1, 64))


def test_an_error_waiting_cannot_fix_is_retried_rarely_not_in_a_loop() -> None:
    assert retry_delay(errno.EACCES, 1) == OTHER_RETRY_S
    assert retry_delay(None, 1) == OTHER_RETRY_S


@given(st.binary(min_size=1, max_size=40))
def test_any_failing_path_leaves_status_encodable(name: bytes) -> None:
    health = WriteHealth()
    path = os.fsdecode(b"/state/" + name.replace(b"\0", b"_"))
    health.failed(path, OSError(errno.ENOSPC, "No space left on device"))
    stats = health.statistics()
    protocol.encode_frame(protocol.success(1, stats))
    assert stats["failing"] == 1 and stats["paths"][0]["error"] == "ENOSPC"


def test_a_job_failure_is_named_until_it_works_or_for_an_hour() -> None:
    health = WriteHealth()
    health.failed("/m/a.md", OSError(errno.EROFS, "Read-only file system"))
    health.failed("/m/b.md", OSError(errno.EROFS, "Read-only file system"))
    row = health.statistics()["paths"][0]
    assert row["retried_by"] == "its job" and row["next_retry"] is None
    health.succeeded("/m/a.md")
    assert [r["path"] for r in health.statistics()["paths"]] == ["/m/b.md"]
    later = time.time() + KEEP_JOB_FAILURES_S + 1
    assert health.statistics(now=later)["failing"] == 0
    assert health.statistics()["recovered_total"] == 1


# -- memd's own state on a failing disk ------------------------------------------------------


@pytest.mark.parametrize("kind", ["ENOSPC", "EROFS"])
def test_persist_keeps_the_newest_bytes_and_writes_them_once_the_disk_is_back(
    tmp_path: Path, kind: str
) -> None:
    with faulty_disk(tmp_path / "state", in_process=True) as disk:
        path = tmp_path / "state" / "state.json"
        assert persist(path, b"v1")
        disk.fault(kind)
        assert persist(path, b"v2") is False  # no raise: kept
        row = row_for(path)
        assert row is not None and row["error"] == kind and row["retried_by"] == "memd"
        assert row["attempts"] == 1
        assert persist(path, b"v3") is False
        assert row_for(path)["attempts"] == 1  # type: ignore[index]  # held, not tried again
        assert path.read_bytes() == b"v1"  # nothing torn
        disk.heal()
        retry_kept(at_exit=True)
        assert path.read_bytes() == b"v3"
        assert row_for(path) is None


def test_the_ledger_and_the_cursors_survive_a_full_disk(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with faulty_disk(state, in_process=True) as disk:
        clock = FakeClock(1_700_000_000.0)
        ledger = Ledger.load(state, clock)
        cursors = CursorStore.load(state)
        disk.fault("ENOSPC")
        ledger.record("session_notes", Usage(1000, 50), project="p", session="s")

        async def write_both() -> SessionCursor:
            await ledger.flush()
            cursor = SessionCursor("s", "p", "/t/s.jsonl", "/w", "/m")
            return await cursors.update(cursor, cursor="u1", pending=True)

        record = anyio.run(write_both)
        assert record.cursor == "u1"
        assert row_for(ledger.path) is not None and row_for(cursors.path) is not None
        disk.heal()
        assert retry_kept(at_exit=True) == 0
        assert Ledger.load(state, clock).statistics().total.input == 1000
        assert CursorStore.load(state).get("s") == record


def test_a_job_write_raises_and_is_named_until_it_works(tmp_path: Path) -> None:
    with faulty_disk(tmp_path / "memory", in_process=True) as disk:
        path = tmp_path / "memory" / "topic.md"
        disk.fault("ENOSPC")
        with pytest.raises(OSError) as raised:
            write_atomic(path, b"a memory")
        assert raised.value.errno == errno.ENOSPC
        assert row_for(path)["retried_by"] == "its job"  # type: ignore[index]
        assert not path.exists() and not list(path.parent.iterdir())[1:]  # no temp left
        disk.heal()
        write_atomic(path, b"a memory")
        assert row_for(path) is None


@pytest.mark.anyio
async def test_the_retry_task_writes_kept_state_without_being_asked(tmp_path: Path) -> None:
    with faulty_disk(tmp_path / "state", in_process=True) as disk:
        path = tmp_path / "state" / "sessions.json"
        async with anyio.create_task_group() as tg:
            await tg.start(run_write_retries, retry_kept)
            disk.fault("ENOSPC")
            assert not await anyio.to_thread.run_sync(persist, path, b'{"v": 1}')
            disk.heal()
            wait = partial(wait_for, path.exists, timeout=30, what="the kept write")
            await anyio.to_thread.run_sync(wait)
            tg.cancel_scope.cancel()
        assert json.loads(path.read_bytes()) == {"v": 1}
        assert row_for(path) is None
