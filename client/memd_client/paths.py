"""Where the daemon's socket lives. Shared by daemon and clients, so both agree without config.

The daemon listens in the first of ``$MEMD_RUNTIME_DIR``, ``$XDG_RUNTIME_DIR/memd``, then
``/tmp/memd-<uid>`` (created 0700; it refuses a directory that is not the user's own or is
open to others).

A client cannot count on seeing the same environment: Codex CLI starts MCP servers with a short
list of variables that leaves out ``XDG_RUNTIME_DIR``, hooks run under whatever started the
agent, and systemd gives the daemon ``XDG_RUNTIME_DIR=/run/user/<uid>`` where a shell may have
none. So a client looks, in order, at ``$MEMD_SOCKET``, ``$MEMD_RUNTIME_DIR``,
``$XDG_RUNTIME_DIR/memd``, ``/run/user/<uid>/memd`` (what systemd gives a user service) and
``/tmp/memd-<uid>``, and takes the first that holds a socket in a folder that passes the
daemon's own check: a real directory (not a link) owned by the user, that nobody else can
write. A folder someone else made or opened up is never used: a socket planted there would
see every prompt the hooks send. With no socket anywhere, the daemon's own default is named.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

SOCKET_NAME = "memd.sock"
RUN_USER = Path("/run/user")


def default_runtime_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where the daemon makes its socket and lock."""
    env = os.environ if env is None else env
    if env.get("MEMD_RUNTIME_DIR"):
        return Path(env["MEMD_RUNTIME_DIR"]).expanduser()
    if env.get("XDG_RUNTIME_DIR"):
        return Path(env["XDG_RUNTIME_DIR"]) / "memd"
    return Path("/tmp") / f"memd-{os.getuid()}"


def model_calls_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where the daemon runs the agents' CLIs as its model (``memd.llm.cli_run``), beside its
    socket: a session an agent records of such a call names a folder below it."""
    return default_runtime_dir(env) / "model-calls"


def runtime_candidates(env: Mapping[str, str] | None = None) -> list[Path]:
    """The folders a client looks in for the socket, in order, without repeats."""
    env = os.environ if env is None else env
    if env.get("MEMD_RUNTIME_DIR"):
        return [Path(env["MEMD_RUNTIME_DIR"]).expanduser()]
    found: list[Path] = []
    for folder in (
        Path(env["XDG_RUNTIME_DIR"]) / "memd" if env.get("XDG_RUNTIME_DIR") else None,
        RUN_USER / str(os.getuid()) / "memd",
        Path("/tmp") / f"memd-{os.getuid()}",
    ):
        if folder is not None and folder not in found:
            found.append(folder)
    return found


def safe_folder(folder: Path) -> bool:
    """A real directory of the user's that no one else can write (the daemon's own rule)."""
    try:
        info = os.lstat(folder)
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.getuid()
        and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def socket_path(env: Mapping[str, str] | None = None) -> Path:
    """The socket a client should connect to (see the module docstring)."""
    env = os.environ if env is None else env
    if env.get("MEMD_SOCKET"):
        return Path(env["MEMD_SOCKET"]).expanduser()
    candidates = runtime_candidates(env)
    for folder in candidates:
        try:
            is_socket = stat.S_ISSOCK(os.lstat(folder / SOCKET_NAME).st_mode)
        except OSError:
            continue
        if is_socket and safe_folder(folder):
            return folder / SOCKET_NAME
    return default_runtime_dir(env) / SOCKET_NAME
