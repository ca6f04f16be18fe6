"""The hook reads the daemon's reply with its own msgpack subset: whatever bytes come back
(a different daemon, a corrupted frame, a hostile peer on the socket), it either reads a value
or refuses with ValueError, promptly, and the hook as a process prints nothing and exits 0."""

from __future__ import annotations

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from memd_client import hook
from tests.test_hook import VALUES


def _read_or_refuse(body: bytes) -> None:
    try:
        _, end = hook.unpack(body)
    except ValueError:
        return
    assert 0 < end <= len(body)
    hook.stdout_of(body)  # a readable reply never crashes the printing step either


@given(st.binary(max_size=2048))
def test_any_bytes_are_read_or_refused_with_value_error(body: bytes) -> None:
    _read_or_refuse(body)


@given(VALUES, st.data())
def test_a_damaged_reply_is_read_or_refused_with_value_error(
    value: object, data: st.DataObject
) -> None:
    body = bytearray(msgpack.packb({"id": 1, "result": {"stdout": value}}, use_bin_type=True))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        match data.draw(st.sampled_from(["flip", "cut", "insert"])):
            case "flip" if body:
                at = data.draw(st.integers(min_value=0, max_value=len(body) - 1))
                body[at] = data.draw(st.integers(min_value=0, max_value=255))
            case "cut":
                del body[data.draw(st.integers(min_value=0, max_value=len(body))) :]
            case _:
                at = data.draw(st.integers(min_value=0, max_value=len(body)))
                body[at:at] = data.draw(st.binary(min_size=1, max_size=8))
    _read_or_refuse(bytes(body))


def test_a_reply_that_promises_more_than_it_holds_is_refused_at_once() -> None:
    for body in (
        b"\xdd\xff\xff\xff\xff",
        b"\xdf\xff\xff\xff\xff",
        b"\xdb\xff\xff\xff\xff",
        b"\xc6\x7f\xff\xff\xff",
    ):
        try:
            hook.unpack(body)
        except ValueError:
            continue
        raise AssertionError(f"{body!r} was read")


def test_deep_nesting_is_refused_not_a_recursion_error() -> None:
    for depth in (65, 1_000, 100_000):
        try:
            hook.unpack(b"\x91" * depth + b"\xc0")
        except ValueError:
            continue
        raise AssertionError(f"nesting {depth} was read")
