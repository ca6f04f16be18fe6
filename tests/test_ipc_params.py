"""Every method of the real method table answers ``invalid_params`` for null or wrong-kind
params (never ``internal``); the list of methods and params comes from the table itself."""

from __future__ import annotations

from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import anyio
import pytest

from memd.config import load_config
from memd.daemon.service import Daemon
from memd.ipc.handlers import INLINE_METHODS, method_table
from memd.ipc.params import METHOD_PARAMS, Kind, check_params
from memd.ipc.server import Handler, InvalidParams
from memd_client import protocol as p
from tests.ipc_support import RawConnection, serving, short_dir
from tests.wire_support import built_daemon

pytestmark = pytest.mark.anyio

WRONG: dict[Kind, Any] = {
    "str": 7,
    "int": "7",
    "number": "7",
    "bool": "yes",
    "list[str]": [1],
    "list": "x",
    "map": "x",
    "bytes": "x",
}

# Numbers a frame can carry that no method may take: each would become a figure some reply
# cannot encode (``should_compact`` with ``context_window`` -2^63 answered ``internal``).
OUT_OF_RANGE: dict[Kind, list[Any]] = {
    "int": [-1, -(2**63), 10**12 + 1, 2**64 - 1],
    "number": [-0.5, float("inf"), float("nan"), 1e300, 2**64 - 1],
}


@pytest.fixture
async def table(tmp_path: Path) -> AsyncIterator[dict[str, Handler]]:
    yield method_table(await built_daemon(tmp_path))


def cases(table: dict[str, Handler]) -> list[tuple[str, dict[str, Any]]]:
    """(method, params) pairs that must be refused, generated from the table."""
    out: list[tuple[str, dict[str, Any]]] = []
    for method in table:
        declared = METHOD_PARAMS[method]
        out.append((method, {"undeclared": None}))
        for key, kind in declared.items():
            out.append((method, {key: None}))
            out.append((method, {key: WRONG[kind]}))
            out += [(method, {key: value}) for value in OUT_OF_RANGE.get(kind, [])]
    return out


async def test_every_method_declares_its_params(table: dict[str, Handler]) -> None:
    undeclared = set(table) - set(METHOD_PARAMS)
    assert not undeclared, f"declare the params of {undeclared} in memd/ipc/params.py"
    assert set(METHOD_PARAMS) == set(table), "METHOD_PARAMS names a method the table lacks"
    assert set(table) >= INLINE_METHODS


async def test_null_or_wrong_kind_params_answer_invalid_params_for_every_method(
    table: dict[str, Handler],
) -> None:
    """Regression: ``status`` with ``{"limit": null}`` answered ``internal``."""
    todo = cases(table)
    assert ("status", {"limit": None}) in todo
    assert len(todo) > 2 * len(table)
    with short_dir() as d:
        async with serving(d / "memd.sock", table):
            conn = await RawConnection.open(d / "memd.sock")
            for rid, (method, params) in enumerate(todo):
                await conn.request(rid, method, params)
                reply = await conn.reply()
                assert isinstance(reply, p.Failure), (method, params, reply)
                assert (reply.id, reply.code) == (rid, p.INVALID_PARAMS), (method, params, reply)
                key = next(iter(params))
                assert f"'{key}'" in reply.message
            await conn.aclose()


class Recording(dict[str, Any]):
    """Params that remember which keys a handler looked at."""

    def __init__(self) -> None:
        super().__init__()
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.read.add(key)
        return super().__contains__(key)


async def test_handlers_read_only_declared_params(table: dict[str, Handler]) -> None:
    for method, handler in table.items():
        params = Recording()
        inner = getattr(handler, "__wrapped__", handler)
        # Only the keys it reads matter here; some handlers wait (a dream check waits for
        # the model client), so each gets a moment and is then cancelled.
        with anyio.move_on_after(1.0):
            try:
                await inner(params)
            except Exception:
                pass
        assert params.read <= set(METHOD_PARAMS[method]), (method, params.read)


def test_check_params_accepts_the_right_kinds() -> None:
    check_params("status", {"limit": 5})
    check_params("extract", {"session": "s", "wait": 0.5})
    check_params("recall", {"query": "q", "cwd": "/", "recent_tools": ["Read"]})
    check_params("hook", {"event": "Stop", "input": {"a": None}})  # nested nulls are data
    check_params("status", {"newer_client_key": 1})
    check_params("should_compact", {"session": "s", "context_window": 10**12})
    with pytest.raises(InvalidParams, match="'limit' must be a whole number from 0 to "):
        check_params("status", {"limit": True})
    with pytest.raises(InvalidParams, match=r"'tokens' must be a whole number .* got -1$"):
        check_params("should_compact", {"session": "s", "tokens": -1})


async def test_inline_methods_finish_without_waiting(tmp_path: Path) -> None:
    """The server answers INLINE_METHODS on the connection's own reader, with no timeout of
    their own: a handler among them that waits (a thread, a lock, a file) stalls that
    connection with no deadline. Each must finish at its first step."""
    from tests.conftest import CORPUS

    sid = "1n11e000-0000-4000-8000-000000000000"
    project = tmp_path / ".claude" / "projects" / "-home-u-p"
    project.mkdir(parents=True)
    source = CORPUS / "spotter" / "short.jsonl"
    path = project / f"{sid}.jsonl"
    path.write_bytes(source.read_bytes().replace(source.stem.encode(), sid.encode()))
    env = {"HOME": str(tmp_path), "MEMD_RUNTIME_DIR": str(tmp_path / "run")}
    daemon = Daemon.load(load_config(env=env), env=env)
    await daemon.build_features()
    assert await daemon.registry.ingest(path) is not None
    table = method_table(daemon)
    for method in sorted(INLINE_METHODS):
        params = {"session": sid, "tokens": 1_000} if "session" in METHOD_PARAMS[method] else {}
        coro = table[method](params)
        assert isinstance(coro, Coroutine)
        try:
            step = coro.send(None)
        except StopIteration:
            continue
        coro.close()
        pytest.fail(f"inline method {method!r} waited on {step!r}")
