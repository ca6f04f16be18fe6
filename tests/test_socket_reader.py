"""SocketReader: a connection's reads through one event-loop registration."""

from __future__ import annotations

import socket

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.ipc.reader import SocketReader

# What the peer sends: chunks, each maybe after a pause that lets the reader wait first.
_CHUNKS = st.lists(st.tuples(st.binary(min_size=1, max_size=3000), st.booleans()), max_size=12)
_SIZES = st.lists(st.integers(1, 4096), min_size=1, max_size=8)


@given(chunks=_CHUNKS, sizes=_SIZES, into=st.booleans())
def test_every_byte_arrives_once_in_order_then_the_end(
    chunks: list[tuple[bytes, bool]], sizes: list[int], into: bool
) -> None:
    """Whatever the peer's chunking and pauses and the reader's sizes, the reads put
    together are exactly what was sent, and the end of stream reads as empty."""

    async def main() -> bytes:
        ours, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setblocking(False)
        reader = SocketReader(ours)
        got = bytearray()

        async def send() -> None:
            for data, pause in chunks:
                if pause:
                    await anyio.sleep(0.001)
                peer.sendall(data)
            peer.close()

        try:
            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(send)
                    for i in range(10_000):
                        data = await read(reader, sizes[i % len(sizes)], into)
                        if not data:
                            break
                        got += data
                # Past the end it stays the end.
                assert await reader.receive(16) == b""
        finally:
            reader.close()
            ours.close()
        return bytes(got)

    assert anyio.run(main) == b"".join(data for data, _ in chunks)


async def read(reader: SocketReader, size: int, into: bool) -> bytes:
    if not into:
        data = await reader.receive(size)
        assert len(data) <= size
        return data
    buffer = bytearray(size)
    with memoryview(buffer) as view:
        n = await reader.receive_into(view)
    return bytes(buffer[:n])


@pytest.mark.anyio
async def test_a_reset_reads_as_the_end() -> None:
    """The peer closes with our bytes unread: the kernel resets the connection."""
    ours, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setblocking(False)
    reader = SocketReader(ours)
    try:
        ours.send(b"never read")
        peer.close()  # a plain recv() now raises ConnectionResetError
        with anyio.fail_after(5):
            assert await reader.receive(1) == b""
    finally:
        reader.close()
        ours.close()


@pytest.mark.anyio
async def test_a_cancelled_read_leaves_the_next_one_working() -> None:
    """A read cancelled while it waits (a frame deadline, shutdown) leaves nothing behind:
    the next read gets the next bytes, and close() drops the registration."""
    ours, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setblocking(False)
    reader = SocketReader(ours)
    try:
        with anyio.move_on_after(0.05):
            await reader.receive(10)
            pytest.fail("nothing was sent")
        peer.send(b"after")
        with anyio.fail_after(5):
            assert await reader.receive(10) == b"after"
        reader.close()
        peer.send(b"more")  # readable now, with no registration: nothing calls back
        await anyio.sleep(0.01)
        with anyio.fail_after(5):
            assert await reader.receive(10) == b"more"  # reading registers again
    finally:
        reader.close()
        ours.close()
        peer.close()
