"""A daemon built in the test's process for calling its methods directly, and the check that
a reply goes out as msgpack and comes back the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack

from memd.config import load_config
from memd.daemon.service import Daemon


async def built_daemon(home: Path) -> Daemon:
    """A daemon of a fresh ``home`` with its features built (no socket, no background)."""
    env = {"HOME": str(home), "MEMD_RUNTIME_DIR": str(home / "run")}
    daemon = Daemon.load(load_config(env=env), env=env)
    await daemon.build_features()
    return daemon


def packs_back(reply: Any) -> bool:
    """Whether ``reply`` packs and unpacks to itself (tuples read back as lists)."""
    back: object = msgpack.unpackb(msgpack.packb(reply, use_bin_type=True), raw=False)
    return bool(back == _plain(reply))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
