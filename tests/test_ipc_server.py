"""The socket server over real Unix sockets: files, errors, framing abuse, peers, shutdown."""

from __future__ import annotations

import os
import socket
import stat
import struct
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memd.errors import BudgetExhausted, LLMDisabled, NotFound, PromptTooLong, StartupError
from memd.ipc.peercred import Allow, Deny, check_peer, check_socket_dir, peer_pid, peer_uid
from memd.ipc.server import InvalidParams, Server, error_code_for, run_server
from memd_client import protocol as p
from memd_client.client import Client
from tests.conftest import PROFILE_SUPPRESSED
from tests.ipc_support import (
    FAILING,
    FRAME_LIMIT,
    STATUS,
    Gate,
    RawConnection,
    methods,
    serving,
    serving_in_thread,
    short_dir,
)
from tests.uid_support import NOBODY, Exited, run_forked

pytestmark = pytest.mark.anyio


@pytest.fixture
def sock_path() -> Iterator[Path]:
    with short_dir() as d:
        yield d / "run" / "memd.sock"


def header(size: int) -> bytes:
    return struct.pack(">I", size)


# -- pure decisions -------------------------------------------------------------------------


def test_peer_decision() -> None:
    assert check_peer(1000, 1000) == Allow()
    verdict = check_peer(1001, 1000)
    assert isinstance(verdict, Deny) and "1001" in verdict.reason


@pytest.mark.parametrize(
    ("mode", "owner", "allowed"),
    [
        (stat.S_IFDIR | 0o700, 1000, True),
        (stat.S_IFDIR | 0o750, 1000, False),
        (stat.S_IFDIR | 0o701, 1000, False),
        (stat.S_IFDIR | 0o700, 0, False),
        (stat.S_IFREG | 0o700, 1000, False),
    ],
)
def test_socket_dir_decision(mode: int, owner: int, allowed: bool) -> None:
    assert isinstance(check_socket_dir(mode, owner, 1000), Allow) is allowed


def test_error_codes_for_handler_exceptions() -> None:
    assert error_code_for(InvalidParams("x")) == p.INVALID_PARAMS
    assert error_code_for(NotFound("x")) == p.NOT_FOUND
    assert error_code_for(LLMDisabled("x")) == p.DISABLED
    assert error_code_for(PromptTooLong("x")) == p.UNAVAILABLE
    assert error_code_for(BudgetExhausted("x", resume_at=1.0)) == p.UNAVAILABLE
    assert error_code_for(KeyError("x")) == p.INTERNAL


def test_peer_pid_reads_the_process_that_connected() -> None:
    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b:
        assert peer_pid(a) == os.getpid()
    with socket.socket(socket.AF_UNIX) as lone:
        assert peer_pid(lone) in (None, os.getpid())  # not connected: nothing to count


def test_peer_uid_reads_our_own_uid() -> None:
    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b:
        assert peer_uid(a) == os.getuid()


# -- the socket file ------------------------------------------------------------------------


async def start_fails(path: Path) -> StartupError:
    """Run a server that must refuse to start; its error."""
    with pytest.raises(StartupError) as caught, anyio.fail_after(5):
        await run_server(path, methods(), max_frame_bytes=FRAME_LIMIT, request_timeout=1)
    return caught.value


async def test_socket_is_private_and_removed_on_exit(sock_path: Path) -> None:
    path = anyio.Path(sock_path)
    async with serving(sock_path):
        st = await path.stat()
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
        assert stat.S_IMODE((await path.parent.stat()).st_mode) == 0o700
    assert not await path.exists()


@pytest.mark.parametrize("mode", [0o755, 0o770, 0o701])
async def test_refuses_a_directory_open_to_others(sock_path: Path, mode: int) -> None:
    sock_path.parent.mkdir()
    sock_path.parent.chmod(mode)
    error = await start_fails(sock_path)
    assert str(sock_path.parent) in str(error) and "0700" in str(error)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to chown")
async def test_refuses_a_directory_owned_by_another_user(sock_path: Path) -> None:
    sock_path.parent.mkdir(mode=0o700)
    os.chown(sock_path.parent, 65534, 65534)
    assert "owned by uid 65534" in str(await start_fails(sock_path))


async def test_replaces_a_stale_socket(sock_path: Path) -> None:
    sock_path.parent.mkdir(mode=0o700)
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(sock_path))  # bound, never listening: connecting is refused
    dead.close()
    async with serving(sock_path):
        conn = await RawConnection.open(sock_path)
        await conn.request(1, "echo", {"a": 1})
        assert await conn.reply() == p.Success(1, {"a": 1})
        await conn.aclose()


async def test_does_not_steal_a_live_socket(sock_path: Path) -> None:
    async with serving(sock_path):
        assert "already serving" in str(await start_fails(sock_path))
        conn = await RawConnection.open(sock_path)
        await conn.request(1, "echo")
        assert isinstance(await conn.reply(), p.Success)
        await conn.aclose()


async def test_refuses_to_delete_a_file_that_is_not_a_socket(sock_path: Path) -> None:
    sock_path.parent.mkdir(mode=0o700)
    path = anyio.Path(sock_path)
    await path.write_text("precious")
    assert "not a socket" in str(await start_fails(sock_path))
    assert await path.read_text() == "precious"


# -- requests -------------------------------------------------------------------------------


async def deep(params: dict[str, Any]) -> Any:
    nested: dict[str, Any] = {}
    for _ in range(100_000):
        nested = {"a": nested}
    return nested


@pytest.mark.parametrize("packer", ["msgpack", "msgspec"])
async def test_handler_failures_become_error_replies_and_the_connection_lives(
    sock_path: Path, packer: str
) -> None:
    """Every failure, an unencodable or oversized result included, is an error reply, with
    either encoder the server may use."""
    failing = {**FAILING, "deep": p.INTERNAL}
    async with serving(sock_path, methods(deep=deep)) as (server, _):
        if packer == "msgspec":
            import msgspec.msgpack

            server.use_packer(msgspec.msgpack.Encoder().encode)
        conn = await RawConnection.open(sock_path)
        for rid, (method, code) in enumerate(failing.items()):
            await conn.request(rid, method)
            reply = await conn.reply()
            assert isinstance(reply, p.Failure), method
            assert (reply.id, reply.code) == (rid, code)
            assert reply.message
        await conn.request("last", "echo", {"still": "here"})
        assert await conn.reply() == p.Success("last", {"still": "here"})
        await conn.aclose()
        stats = server.statistics()
    assert stats.errors[p.INTERNAL] == 4
    assert stats.requests_total == len(failing) + 1


async def test_handler_error_messages_reach_the_client(sock_path: Path) -> None:
    async with serving(sock_path):
        conn = await RawConnection.open(sock_path)
        await conn.request(1, "missing")
        reply = await conn.reply()
        assert isinstance(reply, p.Failure) and reply.message == "no session named abc"
        await conn.request(2, "boom")
        reply = await conn.reply()
        # internal details stay in the log; the client learns where to look
        assert isinstance(reply, p.Failure) and "kaboom" not in reply.message
        assert "log" in reply.message
        await conn.aclose()


async def test_unknown_method_and_bad_envelopes_keep_the_connection(sock_path: Path) -> None:
    async with serving(sock_path):
        conn = await RawConnection.open(sock_path)
        await conn.request(1, "no_such_method")
        assert await conn.reply() == p.Failure(
            1, p.UNKNOWN_METHOD, "memd has no method 'no_such_method'"
        )
        await conn.send(p.encode_frame({"id": 2, "method": "echo", "params": [1, 2]}))
        reply = await conn.reply()
        assert isinstance(reply, p.Failure) and (reply.id, reply.code) == (2, p.BAD_REQUEST)
        await conn.send(p.encode_frame({"id": 2.5, "method": "echo"}))
        reply = await conn.reply()
        assert isinstance(reply, p.Failure) and (reply.id, reply.code) == (None, p.BAD_REQUEST)
        await conn.request(3, "status")
        assert await conn.reply() == p.Success(3, STATUS)
        await conn.aclose()


async def test_pipelined_requests_are_answered_as_they_finish(sock_path: Path) -> None:
    gate = Gate()
    async with serving(sock_path, methods(gate=gate)):
        conn = await RawConnection.open(sock_path)
        await conn.request(1, "gate")
        await conn.request(2, "echo", {"n": 2})
        with anyio.fail_after(5):
            await gate.entered.wait()
            assert await conn.reply() == p.Success(2, {"n": 2})
            gate.release.set()
            assert await conn.reply() == p.Success(1, {"released": True})
        await conn.aclose()


async def test_a_request_past_the_timeout_gets_a_timeout_reply(sock_path: Path) -> None:
    async with serving(sock_path, request_timeout=0.05):
        conn = await RawConnection.open(sock_path)
        await conn.request(1, "hang")
        await conn.request(2, "echo")
        first, second = await conn.reply(), await conn.reply()
        by_id = {first.id: first, second.id: second}
        assert by_id[2] == p.Success(2, {})
        assert isinstance(by_id[1], p.Failure) and by_id[1].code == p.TIMEOUT
        await conn.aclose()


async def test_a_method_with_its_own_limit_outlives_the_default(sock_path: Path) -> None:
    """Regression: extract and compact may run longer than the default request timeout."""

    async def slow(params: dict[str, Any]) -> Any:
        await anyio.sleep(0.2)
        return {"done": True}

    table = {**methods(), "slow": slow}
    async with serving(sock_path, table, request_timeout=0.05, method_timeouts={"slow": 5.0}):
        conn = await RawConnection.open(sock_path)
        await conn.request(1, "slow")
        assert await conn.reply() == p.Success(1, {"done": True})
        await conn.request(2, "hang")
        reply = await conn.reply()
        assert isinstance(reply, p.Failure) and reply.code == p.TIMEOUT
        await conn.aclose()


# -- framing abuse --------------------------------------------------------------------------


async def test_a_malformed_frame_gets_a_reply_then_a_clean_close(sock_path: Path) -> None:
    async with serving(sock_path):
        conn = await RawConnection.open(sock_path)
        await conn.send(header(1) + b"\xc1")
        reply = await conn.reply()
        assert isinstance(reply, p.Failure)
        assert (reply.id, reply.code) == (None, p.BAD_FRAME)
        assert await conn.frame() is None
        await conn.aclose()


async def test_a_request_of_empty_maps_is_refused_and_the_server_serves_on(
    sock_path: Path,
) -> None:
    """1 MiB of empty msgpack maps would decode to ~75 MiB: refused while it is decoded,
    and the next client is answered."""
    count = 1 << 20
    body = b"\x81\xa6params\xdd" + struct.pack(">I", count) + b"\x80" * count
    async with serving(sock_path, max_frame_bytes=2 << 20) as (server, _):
        conn = await RawConnection.open(sock_path)
        conn.decoder = p.FrameDecoder(2 << 20)
        await conn.send(header(len(body)) + body)
        with anyio.fail_after(10):
            reply = await conn.reply()
            assert isinstance(reply, p.Failure)
            assert (reply.id, reply.code) == (None, p.BAD_FRAME)
            assert "maps and arrays" in reply.message
            other = await RawConnection.open(sock_path)
            await other.request(1, "echo", {"still": "here"})
            assert await other.reply() == p.Success(1, {"still": "here"})
        await conn.aclose()
        await other.aclose()
        assert server.statistics().buffered_bytes == 0


async def test_an_oversize_prefix_is_answered_without_waiting_for_the_body(
    sock_path: Path,
) -> None:
    async with serving(sock_path) as (server, _):
        conn = await RawConnection.open(sock_path)
        await conn.send(header(FRAME_LIMIT + 1))  # the body never comes
        with anyio.fail_after(5):
            reply = await conn.reply()
            assert isinstance(reply, p.Failure)
            assert (reply.id, reply.code) == (None, p.FRAME_TOO_LARGE)
            assert await conn.frame() is None
        await conn.aclose()
        assert server.statistics().errors == {p.FRAME_TOO_LARGE: 1}


async def test_requests_before_a_bad_frame_are_still_answered(sock_path: Path) -> None:
    async with serving(sock_path):
        conn = await RawConnection.open(sock_path)
        await conn.send(p.encode_frame(p.request(1, "echo", {"x": 1})) + header(1) + b"\xc1")
        replies = [await conn.reply(), await conn.reply()]
        assert p.Success(1, {"x": 1}) in replies
        assert any(isinstance(r, p.Failure) and r.code == p.BAD_FRAME for r in replies)
        assert await conn.frame() is None
        await conn.aclose()


def framed(body: bytes) -> bytes:
    return header(len(body)) + body


def packed(obj: Any) -> bytes:
    return framed(msgpack.packb(obj))


request_ids = st.integers(-5, 5) | st.text(max_size=3)
json_like = st.none() | st.booleans() | st.integers(-10, 10) | st.text(max_size=5)
envelopes = st.fixed_dictionaries(
    {},
    optional={
        "id": request_ids
        | st.floats(allow_nan=False)
        | st.none()
        | st.lists(json_like, max_size=2),
        "method": st.sampled_from(["echo", "status", "nope", "hello", ""]) | st.integers(-9, 9),
        "params": st.dictionaries(st.text(max_size=4), json_like, max_size=3)
        | st.lists(json_like, max_size=2)
        | json_like,
    },
)
segments = st.one_of(
    envelopes.map(packed),
    st.binary(max_size=30).map(framed),
    st.binary(max_size=8),
    st.integers(FRAME_LIMIT + 1, 2**32 - 1).map(header),
    (json_like | st.lists(json_like, max_size=3)).map(packed),
)


FATAL = {p.BAD_FRAME, p.FRAME_TOO_LARGE}


def expected_replies(stream: bytes) -> tuple[int, bool]:
    """Readable frames before the first unreadable one, and whether there is one."""
    decoder = p.FrameDecoder(FRAME_LIMIT)
    decoder.receive_data(stream)
    count = 0
    try:
        while decoder.next_frame() is not None:
            count += 1
    except p.FrameError:
        return count, True
    return count, False


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[*PROFILE_SUPPRESSED, HealthCheck.function_scoped_fixture],
)
@given(st.lists(segments, min_size=1, max_size=6))
def test_fuzzed_streams_get_replies_or_a_close_while_others_are_served(
    fuzz_server: tuple[Path, Client], chunks: list[bytes]
) -> None:
    path, good = fuzz_server
    assert good.call("echo", {"before": 1}) == {"before": 1}
    with socket.socket(socket.AF_UNIX) as raw:
        raw.settimeout(10)
        raw.connect(str(path))
        try:
            raw.sendall(b"".join(chunks))
            raw.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may have answered and closed before we were done writing
        received = b""
        while data := raw.recv(65536):
            received += data
    replies = [p.parse_response(frame) for frame in p.FrameDecoder(1 << 20).feed(received)]
    frames_before_error, stream_error = expected_replies(b"".join(chunks))
    fatal = [r for r in replies if isinstance(r, p.Failure) and r.code in FATAL]
    assert len(fatal) == (1 if stream_error else 0)
    assert len(replies) == frames_before_error + len(fatal)
    for reply in replies:
        assert isinstance(reply, p.Success | p.Failure), reply
        assert isinstance(reply, p.Success) or reply.code in p.ERROR_CODES
    assert good.call("status") == STATUS


@pytest.fixture(scope="module")
def fuzz_server() -> Iterator[tuple[Path, Client]]:
    with short_dir() as d:
        path = d / "memd.sock"
        with serving_in_thread(path), Client(path, timeout=10) as good:
            yield path, good


# -- peers ----------------------------------------------------------------------------------


def _as_other_user(path: Path, payload: bytes, write_fd: int) -> None:
    """In a forked child: drop to uid 65534, talk to the socket, report what came back."""
    code = 1
    try:
        os.setgid(65534)
        os.setuid(65534)
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(str(path))
            sock.sendall(payload)
            while chunk := sock.recv(65536):
                os.write(write_fd, chunk)
        code = 0
    finally:
        os._exit(code)


def _read_all(fd: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    return data


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a child as another user")
async def test_another_user_is_refused(sock_path: Path) -> None:
    async with serving(sock_path) as (server, _):
        # Open the path up for this test only, so the kernel lets the other user connect
        # and the refusal we see is the server's own peer check.
        path = anyio.Path(sock_path)
        await path.parent.parent.chmod(0o711)
        await path.parent.chmod(0o711)
        await path.chmod(0o666)
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            _as_other_user(sock_path, p.encode_frame(p.request(1, "status")), write_fd)
        os.close(write_fd)
        with anyio.fail_after(10):
            received = await anyio.to_thread.run_sync(_read_all, read_fd)
        os.close(read_fd)
        _, status = await anyio.to_thread.run_sync(os.waitpid, pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        frames = p.FrameDecoder().feed(received)
        assert len(frames) == 1
        reply = p.parse_response(frames[0])
        assert isinstance(reply, p.Failure) and reply.code == p.FORBIDDEN
        assert "65534" in reply.message
        assert server.statistics().connections_refused == 1
        assert server.statistics().requests_total == 0


async def test_a_peer_whose_uid_is_not_the_servers_is_refused(sock_path: Path) -> None:
    """The end-to-end peer check without root: a server that serves only another uid must
    refuse this process (the same path as a real second user, SO_PEERCRED included)."""
    async with serving(sock_path, own_uid=os.getuid() + 1) as (server, tg):
        conn = await RawConnection.open(sock_path)
        await conn.request(1, "status")
        with anyio.fail_after(10):
            reply = await conn.reply()
            assert isinstance(reply, p.Failure)
            assert (reply.id, reply.code) == (None, p.FORBIDDEN)
            assert f"peer uid {os.getuid()}" in reply.message
            assert await conn.frame() is None
        await conn.aclose()
        assert server.statistics().connections_refused == 1
        assert server.statistics().requests_total == 0
        tg.cancel_scope.cancel()


def _serve_until_told(path: Path, stop_r: int, stop_w: int) -> int:
    """In a child running as 65534: serve until the parent closes its end of the pipe."""
    os.close(stop_w)

    async def serve() -> None:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                await tg.start(
                    partial(
                        run_server, path, methods(), max_frame_bytes=FRAME_LIMIT, request_timeout=5
                    )
                )
                await anyio.wait_readable(stop_r)
                tg.cancel_scope.cancel()

    anyio.run(serve)
    return 0


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run the daemon as another user")
async def _connect_when_listening(path: Path) -> RawConnection:
    """The socket file appears at bind(), a moment before listen(): until then a connect is
    refused, which says nothing about the server."""
    while True:
        try:
            return await RawConnection.open(path)
        except ConnectionRefusedError:
            await anyio.sleep(0.01)


async def test_a_daemon_running_as_another_user_refuses_root() -> None:
    """The other way round: the server itself unprivileged (uid 65534), root connects."""
    with short_dir() as d:
        d.chmod(0o711)
        run_dir = d / "run"
        run_dir.mkdir(mode=0o700)
        os.chown(run_dir, NOBODY, NOBODY)
        path = run_dir / "memd.sock"
        stop_r, stop_w = os.pipe()
        async with anyio.create_task_group() as tg:
            child: list[Exited] = []

            async def run_child() -> None:
                serve = partial(_serve_until_told, path, stop_r, stop_w)
                child.append(await anyio.to_thread.run_sync(partial(run_forked, serve, uid=NOBODY)))

            tg.start_soon(run_child)
            try:
                with anyio.fail_after(20):
                    while not await anyio.Path(path).exists():  # noqa: ASYNC110 - another process
                        await anyio.sleep(0.01)
                    assert (await anyio.Path(path).stat()).st_uid == NOBODY
                    conn = await _connect_when_listening(path)
                    await conn.request(1, "status")
                    reply = await conn.reply()
                    await conn.aclose()
            finally:
                os.close(stop_w)
        os.close(stop_r)
        assert child == [Exited(0, "")]
        assert isinstance(reply, p.Failure) and reply.code == p.FORBIDDEN
        assert "peer uid 0" in reply.message and f"uid {NOBODY}" in reply.message


# -- phased shutdown ------------------------------------------------------------------------


async def test_stop_accepting_lets_running_requests_finish(sock_path: Path) -> None:
    gate = Gate()
    with anyio.fail_after(5):
        # No cancellation below: the task group ends only because run_server returns by
        # itself once it stopped accepting and its last connection closed.
        async with anyio.create_task_group() as tg:
            server: Server = await tg.start(
                partial(
                    run_server,
                    sock_path,
                    methods(gate=gate),
                    max_frame_bytes=FRAME_LIMIT,
                    request_timeout=10,
                )
            )
            conn = await RawConnection.open(sock_path)
            idle = await RawConnection.open(sock_path)
            await conn.request(1, "gate")
            await gate.entered.wait()
            server.stop_accepting()
            assert not await anyio.Path(sock_path).exists()
            with pytest.raises(OSError):
                await anyio.connect_unix(sock_path)
            assert server.statistics().requests_in_flight == 1
            gate.release.set()
            await server.wait_idle()
            assert await conn.reply() == p.Success(1, {"released": True})
            assert await conn.frame() is None  # no new requests: the connection closes
            assert await idle.frame() is None
            await conn.aclose()
            await idle.aclose()
    stats = server.statistics()
    assert (stats.accepting, stats.connections_open, stats.requests_in_flight) == (False, 0, 0)
    assert stats.connections_total == 2


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@given(_VALUES)
def test_the_daemons_encoder_writes_the_bytes_the_protocol_does(value: Any) -> None:
    """Once its features load, the daemon encodes replies with msgspec (Server.use_packer):
    for anything a handler returns, the bytes must be msgpack's own, so a client cannot tell."""
    import msgspec.msgpack

    assert msgspec.msgpack.Encoder().encode(value) == p.pack(value)
