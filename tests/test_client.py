"""The blocking and asyncio clients against the real server, and when nothing listens."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from memd.ipc.server import Server
from memd_client import (
    AsyncClient,
    Client,
    ClientTimeout,
    ConnectionLost,
    DaemonNotRunning,
    ProtocolMismatch,
    RemoteError,
)
from memd_client import protocol as p
from tests.ipc_support import (
    FRAME_LIMIT,
    STATUS,
    Gate,
    methods,
    serving,
    serving_in_thread,
    short_dir,
)


@pytest.fixture
def sock_path() -> Iterator[Path]:
    with short_dir() as d:
        yield d / "memd.sock"


@pytest.fixture
def served(sock_path: Path) -> Iterator[tuple[Path, Server]]:
    with serving_in_thread(sock_path) as server:
        yield sock_path, server


def dead_socket(path: Path) -> None:
    """A socket file nobody listens on: connecting to it is refused."""
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()


def one_shot_server(path: Path, answer: Callable[[socket.socket], None]) -> threading.Thread:
    """A listener that accepts one connection, reads the request and lets ``answer`` act."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(1)

    def run() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                answer(conn)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


# -- blocking client ------------------------------------------------------------------------


def test_calls_reuse_one_connection(served: tuple[Path, Server]) -> None:
    path, server = served
    with Client(path) as client:
        assert client.hello()["protocol"] == p.PROTOCOL_VERSION
        assert client.call("status") == STATUS
        assert client.call("echo", {"q": [1, "two"]}) == {"q": [1, "two"]}
    assert server.statistics().connections_total == 1


def test_remote_errors_carry_the_code_and_leave_the_connection_usable(
    served: tuple[Path, Server],
) -> None:
    path, server = served
    with Client(path) as client:
        with pytest.raises(RemoteError) as caught:
            client.call("missing", {"session": "abc"})
        assert caught.value.code == p.NOT_FOUND
        assert caught.value.message == "no session named abc"
        with pytest.raises(RemoteError) as unknown:
            client.call("no_such_method")
        assert unknown.value.code == p.UNKNOWN_METHOD
        assert client.call("echo") == {}
    assert server.statistics().connections_total == 1


def test_an_oversize_request_is_refused_and_the_client_reconnects(
    served: tuple[Path, Server],
) -> None:
    path, server = served
    with Client(path) as client:
        with pytest.raises(RemoteError) as caught:
            client.call("echo", {"blob": "x" * (FRAME_LIMIT * 2)})
        assert caught.value.code == p.FRAME_TOO_LARGE
        assert client.call("echo", {"small": 1}) == {"small": 1}
    assert server.statistics().connections_total == 2


def test_timeout_then_the_next_call_works(served: tuple[Path, Server]) -> None:
    path, server = served
    with Client(path, timeout=0.2) as client:
        with pytest.raises(ClientTimeout, match="hang"):
            client.call("hang")
        client.timeout = 5
        assert client.call("echo", {"after": "timeout"}) == {"after": "timeout"}
    assert server.statistics().connections_total == 2


@pytest.mark.parametrize("make", [lambda path: None, dead_socket])
def test_daemon_not_running_says_where_and_how_to_start(
    sock_path: Path, make: Callable[[Path], None]
) -> None:
    make(sock_path)
    with pytest.raises(DaemonNotRunning) as caught, Client(sock_path) as client:
        client.call("status")
    message = str(caught.value)
    assert str(sock_path) in message
    assert "`memd`" in message and "systemctl --user start memd" in message


def test_default_path_comes_from_the_environment(
    sock_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMD_SOCKET", str(sock_path))
    client = Client()
    assert client.path == sock_path
    with pytest.raises(DaemonNotRunning, match=str(sock_path)):
        client.call("status")


def test_daemon_closing_mid_call_is_connection_lost(sock_path: Path) -> None:
    thread = one_shot_server(sock_path, lambda conn: None)
    with pytest.raises(ConnectionLost), Client(sock_path, timeout=5) as client:
        client.call("status")
    thread.join()


def test_unreadable_reply_is_a_protocol_mismatch(sock_path: Path) -> None:
    thread = one_shot_server(sock_path, lambda conn: conn.sendall(struct.pack(">I", 1) + b"\xc1"))
    with pytest.raises(ProtocolMismatch), Client(sock_path, timeout=5) as client:
        client.call("status")
    thread.join()


def test_hello_refuses_another_protocol_version(sock_path: Path) -> None:
    async def future_hello(params: dict[str, Any]) -> Any:
        return {"protocol": p.PROTOCOL_VERSION + 1}

    with (
        serving_in_thread(sock_path, methods(hello=future_hello)),
        Client(sock_path) as client,
        pytest.raises(ProtocolMismatch, match="protocol 2"),
    ):
        client.hello()


def test_importing_the_client_stays_light() -> None:
    code = (
        "import sys, memd_client.client\n"
        "heavy = {'anyio', 'memd', 'asyncio', 'dataclasses'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- asyncio client -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_async_client_calls_and_errors(sock_path: Path) -> None:
    async with serving(sock_path) as (server, _), AsyncClient(sock_path) as client:
        assert (await client.hello())["protocol"] == p.PROTOCOL_VERSION
        assert await client.call("status") == STATUS
        with pytest.raises(RemoteError) as caught:
            await client.call("disabled")
        assert caught.value.code == p.DISABLED
        assert await client.call("echo", {"n": 1}) == {"n": 1}
        assert server.statistics().connections_total == 1


@pytest.mark.anyio
async def test_async_client_serialises_concurrent_calls(sock_path: Path) -> None:
    results: dict[int, Any] = {}
    async with serving(sock_path), AsyncClient(sock_path) as client:

        async def one(n: int) -> None:
            results[n] = await client.call("echo", {"n": n})

        async with anyio.create_task_group() as tg:
            for n in range(16):
                tg.start_soon(one, n)
    assert results == {n: {"n": n} for n in range(16)}


@pytest.mark.anyio
async def test_async_client_timeout_and_reconnect(sock_path: Path) -> None:
    async with serving(sock_path) as (server, _), AsyncClient(sock_path, timeout=0.2) as client:
        with pytest.raises(ClientTimeout):
            await client.call("hang")
        client.timeout = 5
        assert await client.call("echo", {"again": True}) == {"again": True}
        assert server.statistics().connections_total == 2


@pytest.mark.anyio
async def test_async_client_daemon_not_running(sock_path: Path) -> None:
    with pytest.raises(DaemonNotRunning, match=str(sock_path)):
        await AsyncClient(sock_path).call("status")


@pytest.mark.anyio
async def test_async_client_sees_a_daemon_that_stops_mid_call(sock_path: Path) -> None:
    gate = Gate()
    outcome: list[BaseException] = []

    async def call(client: AsyncClient) -> None:
        try:
            await client.call("gate")
        except ConnectionLost as exc:
            outcome.append(exc)

    with anyio.fail_after(5):
        # Leaving the block cancels the server first, closing its connection mid-request;
        # then the task group waits for the caller to see that.
        async with (
            AsyncClient(sock_path, timeout=5) as client,
            anyio.create_task_group() as callers,
            serving(sock_path, methods(gate=gate)),
        ):
            callers.start_soon(call, client)
            await gate.entered.wait()
    assert len(outcome) == 1
