"""Where the daemon's socket lives. Shared by daemon and clients, so both agree without config.

Order: ``$MEMD_SOCKET`` (clients only), ``$MEMD_RUNTIME_DIR``, ``$XDG_RUNTIME_DIR/memd``,
then ``/tmp/memd-<uid>`` (created 0700 by the daemon; the daemon refuses a directory that
is not owned by the user or is open to others).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def default_runtime_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("MEMD_RUNTIME_DIR"):
        return Path(env["MEMD_RUNTIME_DIR"]).expanduser()
    if env.get("XDG_RUNTIME_DIR"):
        return Path(env["XDG_RUNTIME_DIR"]) / "memd"
    return Path("/tmp") / f"memd-{os.getuid()}"


def socket_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("MEMD_SOCKET"):
        return Path(env["MEMD_SOCKET"]).expanduser()
    return default_runtime_dir(env) / "memd.sock"
