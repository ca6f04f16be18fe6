"""Bounded serving over real sockets: connection limit, read budget, frame deadline, EMFILE."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio import wait_all_tasks_blocked

from memd.ipc.connection import CONNECTION_BYTES, CONNECTION_STATE_BYTES, RECEIVE_BYTES
from memd.ipc.limits import ServeLimits
from memd.ipc.server import Server
from memd_client import protocol as p
from memd_client.cli_top import hook_line, screen_lines
from memd_client.client import Client
from memd_client.errors import ClientTimeout, DaemonBusy, DaemonNotRunning
from memd_client.hook import FailedOpen
from memd_client.hook import run as run_hook
from memd_client.hook_record import FailOpenRecord, read_failed_open
from tests.daemon_harness import run_memdctl
from tests.ipc_support import FRAME_LIMIT, Gate, RawConnection, methods, serving, short_dir

pytestmark = pytest.mark.anyio


@pytest.fixture
def sock_path() -> Iterator[Path]:
    with short_dir() as d:
        yield d / "memd.sock"


INLINE = frozenset({"hello", "status"})


def header(size: int) -> bytes:
    return struct.pack(">I", size)


async def answered(conn: RawConnection, rid: int = 1) -> None:
    await conn.request(rid, "echo", {"n": rid})
    assert await conn.reply() == p.Success(rid, {"n": rid})


async def test_at_the_limit_with_every_connection_at_work_the_next_gets_busy(
    sock_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only connections with a request in flight hold their place: when each of them has
    one, the next connection gets ``busy`` and clients fail open. (Here every connection is
    this process's: its share is lifted to the whole limit, as if they were many clients.)"""
    limit = ServeLimits().max_connections
    assert limit == 256
    with anyio.fail_after(60):
        release, all_in = anyio.Event(), anyio.Event()
        entered = 0

        async def wait(params: dict[str, Any]) -> Any:
            nonlocal entered
            entered += 1
            if entered == limit:
                all_in.set()
            await release.wait()
            return {"released": True}

        table = methods(wait=wait)
        serve = serving(
            sock_path,
            table,
            limits=ServeLimits(),
            inline=INLINE,
            request_timeout=120,
            peer_cap=limit,
        )
        async with serve as (server, _), AsyncExitStack() as stack:
            conns = []
            for i in range(limit):
                conn = await RawConnection.open(sock_path)
                stack.push_async_callback(conn.aclose)
                await conn.request(i, "wait")
                conns.append(conn)
            await all_in.wait()
            extra = await RawConnection.open(sock_path)
            await extra.request(1, "echo")
            reply = await extra.reply()
            assert isinstance(reply, p.Failure)
            assert (reply.id, reply.code) == (None, p.BUSY)
            assert await extra.frame() is None
            await extra.aclose()
            with Client(sock_path, timeout=5) as client, pytest.raises(DaemonBusy) as busy:
                await anyio.to_thread.run_sync(client.call, "echo")
            assert isinstance(busy.value, DaemonNotRunning)  # treated as down
            hook_input = b'{"hook_event_name": "Stop", "session_id": "s"}'
            monkeypatch.setenv("MEMD_SOCKET", str(sock_path))
            # the hook reads the busy reply: it fails open, saying why
            with pytest.raises(FailedOpen, match="busy"):
                await anyio.to_thread.run_sync(run_hook, hook_input, dict(os.environ))
            stats = server.statistics()
            assert (stats.connections_busy, stats.connections_evicted) == (3, 0)
            # Their requests answered, they are idle: the next client is served.
            release.set()
            for i, conn in enumerate(conns):
                assert await conn.reply() == p.Success(i, {"released": True})
            again = await RawConnection.open(sock_path)
            stack.push_async_callback(again.aclose)
            await answered(again, 7)
            assert server.statistics().connections_evicted == 1


OTHER_CLIENT = """
import sys
from memd_client.client import Client
with Client(sys.argv[1], timeout=30) as client:
    print(client.call("echo", {"from": "another process"})["from"])
"""


async def test_one_process_has_requests_in_flight_on_half_the_connections_at_most(
    sock_path: Path,
) -> None:
    """Requests that wait (``extract`` waits up to 300 s) sent over every connection by one
    process held every place: the next client got ``busy``. Its share is half: past it its
    request is answered ``busy`` at once (the connection lives on), and another process is
    served meanwhile; once its requests are answered it works again."""
    gate = Gate()
    limits = ServeLimits(max_connections=8)
    serve = serving(sock_path, methods(wait=gate), limits=limits, inline=INLINE)
    async with serve as (server, _), AsyncExitStack() as stack:
        assert server.shares.cap == 4
        hog = []
        with anyio.fail_after(30):
            for i in range(6):
                conn = await RawConnection.open(sock_path)
                stack.push_async_callback(conn.aclose)
                await conn.request(i, "wait")
                hog.append(conn)
            for i, conn in enumerate(hog[4:], start=4):  # past its share: answered at once
                refused = await conn.reply()
                assert isinstance(refused, p.Failure) and (refused.id, refused.code) == (
                    i,
                    p.BUSY,
                )
                assert "as many as one client may" in refused.message
            await conn.request(9, "wait")  # still refused, the connection still served
            again = await conn.reply()
            assert isinstance(again, p.Failure) and again.code == p.BUSY
            await hog[0].request(10, "wait")  # on a connection at work: no new place, served
            other = await anyio.run_process(
                [sys.executable, "-c", OTHER_CLIENT, str(sock_path)], check=False
            )
            assert (other.returncode, other.stdout) == (0, b"another process\n"), other.stderr
            gate.release.set()
            replies = [await conn.reply() for conn in hog[:4]] + [await hog[0].reply()]
            assert sorted(r.id for r in replies if isinstance(r, p.Success)) == [0, 1, 2, 3, 10]
            await answered(hog[5], 11)  # its share is free again
        assert server.statistics().connections_busy == 0


async def test_at_the_limit_the_longest_idle_connection_makes_room(sock_path: Path) -> None:
    """A new client is served when every place is taken by idle connections: the one idle the
    longest is told so and closed; those with a request in flight are never chosen."""
    limits = ServeLimits(max_connections=8)
    async with serving(sock_path, limits=limits) as (server, _), AsyncExitStack() as stack:
        conns = []
        for i in range(8):
            conn = await RawConnection.open(sock_path)
            stack.push_async_callback(conn.aclose)
            if i == 0:
                await conn.request(0, "hang")  # the oldest, but at work
            else:
                await answered(conn, i)
            conns.append(conn)
        for n in range(1, 4):
            new = await RawConnection.open(sock_path)
            stack.push_async_callback(new.aclose)
            await answered(new, 100 + n)
            notice = await conns[n].reply()  # the n-th oldest idle one made room
            assert isinstance(notice, p.Failure) and (notice.id, notice.code) == (None, p.BUSY)
            assert "longest without a request" in notice.message
            assert await conns[n].frame() is None
        for conn in conns[4:]:
            await answered(conn, 9)  # the others are still served
        stats = server.statistics()
        assert (stats.connections_evicted, stats.connections_busy) == (3, 0)
        assert stats.connections_open == 8
        assert stats.requests_in_flight == 1  # the hanging request was left alone


async def test_at_the_limit_slow_senders_make_room_the_longest_without_a_frame_first(
    sock_path: Path,
) -> None:
    """A frame under way holds no place against a new client (a client writes its request
    at once): a partial header, a partial body (its budget given back) and a body waiting
    for budget are closed to make room, the connection longest without a whole frame first,
    whatever it sent since; those with a request in flight are never chosen. Budget a closed
    one held goes to the frame waiting for it."""
    size = FRAME_LIMIT - 10
    limits = ServeLimits(
        max_buffered_bytes=size + 100 + 5 * CONNECTION_BYTES,  # one body's room
        frame_timeout_s=60.0,
        max_connections=5,
    )
    body = p.encode_frame(p.request(9, "echo", {"pad": "x" * (size - 40)}))[4:]
    serve = serving(sock_path, limits=limits, inline=INLINE)
    async with serve as (server, _), AsyncExitStack() as stack:

        async def opened() -> RawConnection:
            conn = await RawConnection.open(sock_path)
            stack.push_async_callback(conn.aclose)
            return conn

        with anyio.fail_after(20):
            worker = await opened()
            await worker.request(0, "hang")  # the oldest, but at work
            header_only, partial_body, waiting = await opened(), await opened(), await opened()
            answered_later = await opened()
            await answered(answered_later, 1)  # a whole frame after the others connected
            await header_only.send(b"\x00")
            await partial_body.send(header(len(body)) + body[:10])
            await wait_all_tasks_blocked()
            await waiting.send(header(len(body)) + body[:10])  # no room left in the budget
            await header_only.send(b"\x00")  # bytes since: still no whole frame
            await wait_all_tasks_blocked()
            assert server.statistics().buffered_bytes == len(body)
            for n, slow in enumerate([header_only, partial_body, waiting]):
                await answered(await opened(), 10 + n)  # served: a slow one made room
                notice = await slow.reply()
                assert isinstance(notice, p.Failure) and notice.code == p.BUSY
                assert "longest without a request" in notice.message
                assert await slow.frame() is None
                if slow is partial_body:  # its room went to the frame waiting for it
                    await wait_all_tasks_blocked()
                    assert server.statistics().buffered_bytes == len(body)
            await answered(answered_later, 2)  # never chosen over a slow sender
            stats = server.statistics()
            assert (stats.connections_evicted, stats.connections_busy) == (3, 0)
            assert stats.requests_in_flight == 1 and stats.buffered_bytes == 0


async def test_an_idle_connection_is_closed_after_the_idle_deadline(sock_path: Path) -> None:
    limits = ServeLimits(idle_timeout_s=0.5)
    async with serving(sock_path, limits=limits) as (server, _):
        conn = await RawConnection.open(sock_path)
        await answered(conn, 1)
        with anyio.fail_after(10):
            notice = await conn.reply()
        assert isinstance(notice, p.Failure) and (notice.id, notice.code) == (None, p.TIMEOUT)
        assert "ipc.idle_timeout_s" in notice.message
        assert await conn.frame() is None
        await conn.aclose()
        assert server.statistics().connections_idle_closed == 1


async def test_a_connection_waiting_for_a_reply_is_not_idle(sock_path: Path) -> None:
    """A request in flight (a long wait, a stream) keeps its connection past the idle
    deadline, and the reply arrives; the deadline counts again from the reply."""
    gate = Gate()
    limits = ServeLimits(idle_timeout_s=0.3)
    table = methods(wait=gate)
    async with serving(sock_path, table, limits=limits) as (server, _):
        conn = await RawConnection.open(sock_path)
        await conn.request(1, "wait")
        await gate.entered.wait()
        await anyio.sleep(1.5)  # five idle deadlines
        gate.release.set()
        assert await conn.reply() == p.Success(1, {"released": True})
        with anyio.fail_after(10):
            notice = await conn.reply()
        assert isinstance(notice, p.Failure) and notice.code == p.TIMEOUT
        assert server.statistics().connections_idle_closed == 1
        await conn.aclose()


def test_the_hook_prints_nothing_when_memd_is_busy_and_doctor_and_top_say_so(
    tmp_path: Path,
) -> None:
    """The hook command exits 0 with no output when its connection is turned away, and
    records why: ``memdctl doctor`` warns with the time, the reason and the fix; ``top``
    shows it."""
    with short_dir() as d:
        path = d / "memd.sock"
        script = textwrap.dedent(
            f"""
            import anyio, sys
            from functools import partial
            from pathlib import Path
            from memd.ipc.limits import ServeLimits
            from memd.ipc.server import run_server
            from tests.ipc_support import methods
            async def main():
                async with anyio.create_task_group() as tg:
                    await tg.start(partial(run_server, Path({str(path)!r}), methods(),
                        max_frame_bytes=4096, request_timeout=5,
                        limits=ServeLimits(max_connections=0)))
                    print("ready", flush=True)
                    await anyio.to_thread.run_sync(sys.stdin.read)  # the loop keeps serving
                    tg.cancel_scope.cancel()
            anyio.run(main)
            """
        )
        server = subprocess.Popen(
            [sys.executable, "-c", script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        try:
            assert server.stdout is not None and server.stdout.readline() == "ready\n"
            env = {**os.environ, "MEMD_SOCKET": str(path)}
            for _ in range(2):
                hook = subprocess.run(
                    [sys.executable, "-m", "memd_client.hook"],
                    input=b'{"hook_event_name": "SessionStart", "session_id": "s", "cwd": "/"}',
                    env=env,
                    capture_output=True,
                    timeout=30,
                )
                assert (hook.returncode, hook.stdout, hook.stderr) == (0, b"", b"")
            # ...and leaves a record of it that doctor and top show
            record = read_failed_open(path)
            assert isinstance(record, FailOpenRecord) and record.recent()
            assert (record.count, record.event) == (2, "SessionStart")
            assert "busy" in record.reason
            assert (path.parent / "hook-failed-open").stat().st_mode & 0o777 == 0o600
            doctor = run_memdctl(env, "doctor", "--socket", str(path))
            line = next(x for x in doctor.stdout.splitlines() if "hook runs" in x)
            assert line.startswith("warn") and "failed open 2 times" in line, doctor.stdout
            assert "SessionStart" in line and "busy" in line
            assert "fix: memd was at ipc.max_connections" in doctor.stdout
            screen = screen_lines(None, "memd is busy", 100, 24, hook_line(record))
            assert any("hook   FAILED OPEN: the hook failed open 2 times" in x for x in screen)
        finally:
            server.communicate("", timeout=30)


async def test_a_slow_sender_is_dropped_after_the_frame_deadline(sock_path: Path) -> None:
    limits = ServeLimits(frame_timeout_s=0.3)
    async with serving(sock_path, limits=limits, inline=INLINE) as (server, _):
        slow = await RawConnection.open(sock_path)
        good = await RawConnection.open(sock_path)
        await slow.send(header(100) + b"\x81")  # a body that never finishes
        with anyio.fail_after(10):
            await answered(good)
            reply = await slow.reply()
            assert isinstance(reply, p.Failure)
            assert (reply.id, reply.code) == (None, p.TIMEOUT)
            assert await slow.frame() is None
            await answered(good, 2)
        assert server.statistics().buffered_bytes == 0
        await slow.aclose()
        await good.aclose()


async def test_a_header_alone_is_also_held_to_the_deadline(sock_path: Path) -> None:
    async with serving(sock_path, limits=ServeLimits(frame_timeout_s=0.3), inline=INLINE):
        slow = await RawConnection.open(sock_path)
        await slow.send(b"\x00\x00")
        with anyio.fail_after(10):
            reply = await slow.reply()
            assert isinstance(reply, p.Failure) and reply.code == p.TIMEOUT
        await slow.aclose()


async def test_incoming_frames_share_one_read_budget(sock_path: Path) -> None:
    """Three frames just under the limit fill the budget; a fourth waits for room and gets
    it when one completes; the budget never exceeds its cap; small requests still pass."""
    size = FRAME_LIMIT - 10
    limits = ServeLimits(
        max_buffered_bytes=3 * size + 100 + 8 * CONNECTION_BYTES,
        frame_timeout_s=30.0,
        max_connections=8,  # each has CONNECTION_BYTES of the cap set aside
    )
    body = p.encode_frame(p.request(9, "echo", {"pad": "x" * (size - 40)}))[4:]
    async with serving(sock_path, limits=limits, inline=INLINE) as (server, _):
        holders = [await RawConnection.open(sock_path) for _ in range(4)]
        good = await RawConnection.open(sock_path)
        with anyio.fail_after(10):
            for conn in holders:
                await conn.send(header(len(body)) + body[:10])
                await wait_all_tasks_blocked()
            # the fourth holds its first 10 bytes (one read) and waits for room
            assert server.statistics().buffered_bytes == 3 * len(body)
            await answered(good)
            # the first completes: its reservation goes to the waiting fourth
            await holders[0].send(body[10:])
            reply = await holders[0].reply()
            assert isinstance(reply, p.Success)
            await wait_all_tasks_blocked()
            assert server.statistics().buffered_bytes == 3 * len(body)
            for conn in holders[1:]:
                await conn.send(body[10:])
                assert isinstance(await conn.reply(), p.Success)
            await answered(good, 2)
        await wait_all_tasks_blocked()
        assert server.statistics().buffered_bytes == 0
        for conn in [*holders, good]:
            await conn.aclose()


async def test_a_body_holds_its_budget_until_its_request_is_answered(sock_path: Path) -> None:
    """What a body decodes to lives as long as its handler: with three bodies' room, three
    requests to a handler that waits are in flight at once; a fourth big one waits for room,
    and gets it when they are answered (here: timed out), while small requests go on."""
    size = FRAME_LIMIT - 10
    limits = ServeLimits(
        max_buffered_bytes=3 * size + 100 + 8 * CONNECTION_BYTES,
        frame_timeout_s=30.0,
        max_connections=8,
    )
    body = p.encode_frame(p.request(9, "hang", {"pad": "x" * (size - 40)}))[4:]
    serve = serving(sock_path, limits=limits, inline=INLINE, request_timeout=1.0)
    async with serve as (server, _):
        holders = [await RawConnection.open(sock_path) for _ in range(4)]
        good = await RawConnection.open(sock_path)
        with anyio.fail_after(10):
            for conn in holders:  # a first read, then the rest: bodies that are buffered
                await conn.send(header(len(body)) + body[:10])
                await wait_all_tasks_blocked()
            for conn in holders:
                await conn.send(body[10:])
            while server.statistics().requests_in_flight < 3:  # noqa: ASYNC110 - no event
                await anyio.sleep(0.01)
            stats = server.statistics()  # the fourth waits: the three hold their room
            assert (stats.requests_total, stats.buffered_bytes) == (3, 3 * len(body))
            await answered(good)
            for conn in holders[:3]:
                reply = await conn.reply()
                assert isinstance(reply, p.Failure) and reply.code == p.TIMEOUT
            reply = await holders[3].reply()  # admitted once they were answered
            assert isinstance(reply, p.Failure) and reply.code == p.TIMEOUT
            await answered(good, 2)
            while server.statistics().buffered_bytes:  # noqa: ASYNC110 - no event to wait on
                await anyio.sleep(0.01)
        assert server.statistics().requests_total == 6
        for conn in [*holders, good]:
            await conn.aclose()


async def test_a_frame_waiting_for_budget_past_its_deadline_gets_busy(sock_path: Path) -> None:
    limits = ServeLimits(
        max_buffered_bytes=FRAME_LIMIT + 4 * CONNECTION_BYTES,
        frame_timeout_s=0.3,
        max_connections=4,
    )
    async with serving(sock_path, limits=limits, inline=INLINE) as (server, _):
        first = await RawConnection.open(sock_path)
        second = await RawConnection.open(sock_path)
        with anyio.fail_after(10):
            await first.send(header(FRAME_LIMIT - 100) + b"\x81")
            await wait_all_tasks_blocked()
            await second.send(header(FRAME_LIMIT - 100) + b"\x81")
            reply = await second.reply()
            assert isinstance(reply, p.Failure) and reply.code in (p.BUSY, p.TIMEOUT)
            reply = await first.reply()
            assert isinstance(reply, p.Failure) and reply.code == p.TIMEOUT
        assert server.statistics().buffered_bytes == 0
        await first.aclose()
        await second.aclose()


async def test_a_frame_larger_than_the_whole_budget_is_refused_at_once(sock_path: Path) -> None:
    async with serving(sock_path, limits=ServeLimits(max_buffered_bytes=100), inline=INLINE):
        conn = await RawConnection.open(sock_path)
        await conn.send(header(1000))
        with anyio.fail_after(10):
            reply = await conn.reply()
            assert isinstance(reply, p.Failure) and reply.code == p.BUSY
        await conn.aclose()


EMFILE_SERVER = """
import logging, resource, sys, anyio
from functools import partial
from pathlib import Path
from memd.ipc.server import run_server
from tests.ipc_support import methods

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")

async def main() -> None:
    release = anyio.Event()

    async def held(params):  # a request in flight until the client holds its connections
        await release.wait()
        return {}

    async with anyio.create_task_group() as tg:
        server = await tg.start(partial(run_server, Path(sys.argv[1]), methods(held=held),
                                        max_frame_bytes=4096, request_timeout=60))
        import os
        used = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (used + 8, used + 8))
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)  # the client holds its connections
        release.set()
        await anyio.to_thread.run_sync(sys.stdin.readline)  # they are closed
        await anyio.sleep(1.5)  # the longest back-off step, then accept works again
        print(server.statistics().accept_failures, flush=True)
        tg.cancel_scope.cancel()

anyio.run(main)
"""


def start_emfile_server(path: Path) -> subprocess.Popen[str]:
    """A server left a few descriptors only; it answers on stdin (see EMFILE_SERVER)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", EMFILE_SERVER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert proc.stdin is not None and proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    return proc


def hold_connections(path: Path, n: int, request: bytes = b"") -> list[Any]:
    import socket as socketlib

    held = []
    for _ in range(n):
        sock = socketlib.socket(socketlib.AF_UNIX)
        sock.connect(str(path))  # the backlog takes them even when accept fails
        sock.sendall(request)
        held.append(sock)
    return held


def finish_emfile_server(proc: subprocess.Popen[str], held: list[Any]) -> tuple[int, str]:
    """Close the held connections; the server's accept failures and its log."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    for sock in held:
        sock.close()
    proc.stdin.write("\n")
    proc.stdin.flush()
    failures = int(proc.stdout.readline())
    _, stderr = proc.communicate(timeout=30)
    return failures, stderr


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts fds through /proc")
def test_accept_errors_are_logged_once_per_burst_with_back_off(tmp_path: Path) -> None:
    """Out of descriptors with every connection at work: accept backs off, logging once."""
    with short_dir() as d:
        path = d / "memd.sock"
        proc = start_emfile_server(path)
        try:
            # each one has a request in flight (or waits in the backlog): none can make room
            held = hold_connections(path, 30, p.encode_frame(p.request(1, "held", {})))
            with Client(path, timeout=0.5) as probe, pytest.raises(ClientTimeout):
                probe.call("echo")  # no fd left to serve it: it waits in the backlog
            failures, stderr = finish_emfile_server(proc, held)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert failures >= 1
    assert stderr.count("accept failed") == 1, stderr
    assert stderr.count("accepting again") == 1, stderr
    # back-off doubling up to 1 s: a burst of a few seconds is a handful of attempts, not a spin
    assert failures < 40, failures


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts fds through /proc")
def test_out_of_descriptors_idle_connections_make_room(tmp_path: Path) -> None:
    """Out of descriptors, with idle connections held open: each new client is served in
    place of the longest-idle one, and accepting never stops."""
    with short_dir() as d:
        path = d / "memd.sock"
        proc = start_emfile_server(path)
        try:
            held = hold_connections(path, 30)
            with Client(path, timeout=20) as probe:
                assert probe.call("echo", {"n": 1}) == {"n": 1}
            with Client(path, timeout=20) as probe:
                assert probe.call("echo", {"n": 2}) == {"n": 2}
            failures, stderr = finish_emfile_server(proc, held)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert "closed 1 idle ones to make room" in stderr, stderr
    assert failures < 40, failures


async def test_a_big_body_cut_off_by_its_deadline_leaves_the_server_serving(
    sock_path: Path,
) -> None:
    """Regression: a body big enough for its own mapping, cancelled mid-read, crashed the
    server (an mmap cannot be closed while a view of it is alive)."""
    limits = ServeLimits(frame_timeout_s=0.3)
    async with serving(sock_path, max_frame_bytes=8 << 20, limits=limits) as (server, _):
        slow = await RawConnection.open(sock_path)
        await slow.send(header(4 << 20) + b"\x81" + b"\x00" * (1 << 20))
        with anyio.fail_after(10):
            reply = await slow.reply()
            assert isinstance(reply, p.Failure) and reply.code == p.TIMEOUT
            good = await RawConnection.open(sock_path)
            await answered(good)
            big = p.encode_frame(
                p.request(5, "echo", {"pad": "y" * (2 << 20)}), max_frame_bytes=8 << 20
            )
            good.decoder = p.FrameDecoder(8 << 20)
            await good.send(big)
            echoed = await good.reply()
            assert isinstance(echoed, p.Success) and len(echoed.result["pad"]) == 2 << 20
        assert server.statistics().buffered_bytes == 0
        await slow.aclose()
        await good.aclose()


# -- what one connection holds, measured with tracemalloc ------------------------------------

CLIENTS = """
import socket, struct, sys
import msgpack
path, n, mode, size = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
socks = []
for _ in range(n):
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(path)
    if mode == "waiting":  # a frame whose body waits for budget, its first read in memd
        sock.sendall(struct.pack(">I", size) + b"\\x81" + b"\\x00" * 40000)
    else:  # answered once, then idle
        body = msgpack.packb({"id": 1, "method": "hello", "params": {}})
        sock.sendall(struct.pack(">I", len(body)) + body)
        sock.recv(4096)
    socks.append(sock)
print("connected", flush=True)
sys.stdin.readline()
"""


async def traced_growth(server: Server, mode: str, n: int, size: int) -> tuple[int, int]:
    """Python heap growth of this process (the server's side only: the clients are another
    process) once ``n`` connections are open and settled, and the body budget used then."""
    path = server.path
    import gc
    import tracemalloc

    async def settle() -> None:
        for _ in range(10):
            await wait_all_tasks_blocked()
            await anyio.sleep(0.02)
        gc.collect()

    async def connect(count: int) -> anyio.abc.Process:
        args = [sys.executable, "-c", CLIENTS, str(path), str(count), mode, str(size)]
        proc = await anyio.open_process(args)
        assert proc.stdout is not None
        seen = b""
        while not seen.endswith(b"\n"):
            seen += await proc.stdout.receive(1)
        return proc

    warm = await connect(4)  # the code paths run once before the first snapshot
    assert warm.stdin is not None
    await warm.stdin.send(b"\n")
    await warm.wait()
    await settle()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        clients = await connect(n)
        await settle()
        after = tracemalloc.take_snapshot()
        held = server.budget.used
    finally:
        tracemalloc.stop()
    assert clients.stdin is not None
    await clients.stdin.send(b"\n")
    await clients.wait()
    return sum(s.size_diff for s in after.compare_to(before, "filename")), held


@pytest.mark.parametrize("mode", ["idle", "waiting"])
async def test_a_connection_holds_no_more_than_is_set_aside_for_it(
    sock_path: Path, mode: str
) -> None:
    """Each connection's share of the cap (CONNECTION_BYTES: its objects and one read) covers
    what it really holds: 64 connections idle between frames, and 64 whose frames wait for
    room in the body budget (one 1 MiB body holds it all) holding their first read."""
    # Measured (CPython 3.11, anyio 4): 10.2 KiB idle and 27.1 KiB waiting, of 16 and 32.
    n, size = 64, (1 << 20) - 16
    limits = ServeLimits(
        max_buffered_bytes=(1 << 20) + (n + 4) * CONNECTION_BYTES,
        max_connections=n + 4,
        frame_timeout_s=60.0,
    )
    options: dict[str, Any] = {"max_frame_bytes": 1 << 20, "inline": frozenset({"hello"})}
    async with serving(sock_path, limits=limits, **options) as (server, _):
        with anyio.fail_after(60):
            grown, held = await traced_growth(server, mode, n, size)
        per_connection = (grown - held) / n  # a body is the budget's
        if mode == "idle":
            assert per_connection <= CONNECTION_STATE_BYTES, per_connection
        else:
            assert held == size  # one body; the others wait with their read
            assert per_connection <= CONNECTION_BYTES, per_connection
            assert per_connection > RECEIVE_BYTES  # they do hold their read


async def test_a_client_that_takes_no_reply_is_closed_after_the_frame_deadline(
    sock_path: Path,
) -> None:
    """Requests sent and replies never read would keep a request in flight, and the place,
    for ever: the connection is closed once a reply waits ``frame_timeout_s`` for room."""
    limits = ServeLimits(frame_timeout_s=0.5, max_connections=2)
    async with serving(sock_path, limits=limits, inline=INLINE) as (server, _):
        hog = await RawConnection.open(sock_path)
        frame = p.encode_frame({"id": 1, "method": "status"})
        with anyio.fail_after(20):
            with pytest.raises((anyio.BrokenResourceError, anyio.EndOfStream, OSError)):
                while True:  # until the server stops reading: it closed the connection
                    await hog.send(frame * 64)
            while server.statistics().connections_open:  # noqa: ASYNC110 - no event to wait on
                await anyio.sleep(0.05)
        assert server.statistics().connections_stalled == 1
        await hog.aclose()
        conn = await RawConnection.open(sock_path)
        await answered(conn)
        await conn.aclose()


async def test_a_client_reconnects_when_its_kept_connection_was_closed_idle(
    sock_path: Path,
) -> None:
    async with serving(sock_path, limits=ServeLimits(idle_timeout_s=0.2)) as (server, _):
        with Client(sock_path, timeout=5) as client:
            assert await anyio.to_thread.run_sync(client.call, "echo", {"n": 1}) == {"n": 1}
            with anyio.fail_after(10):
                while not server.statistics().connections_idle_closed:  # noqa: ASYNC110 - no event
                    await anyio.sleep(0.05)
            assert await anyio.to_thread.run_sync(client.call, "echo", {"n": 2}) == {"n": 2}
