"""The socket file's life: a private directory, a stale socket cleared, our own file removed.

Blocking file-system calls here are quick local operations; the server runs
:func:`prepare_socket_dir` in a worker thread and the rest at start and stop only.
"""

from __future__ import annotations

import os
import stat
from functools import partial
from pathlib import Path

import anyio

from memd.errors import StartupError
from memd.ipc.peercred import Allow, Deny, check_socket_dir

_STALE_PROBE_TIMEOUT = 1.0


def prepare_socket_dir(directory: Path) -> None:
    """Create the socket's directory 0700 if missing; refuse one that is not private."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = directory.stat()
    match check_socket_dir(st.st_mode, st.st_uid, os.getuid()):
        case Deny(reason=reason):
            raise StartupError(f"refusing socket directory {directory}: it {reason}")
        case Allow():
            pass


def _socket_file_exists(path: Path) -> bool:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(st.st_mode):
        raise StartupError(f"{path} exists and is not a socket; remove it and start again")
    return True


async def clear_stale_socket(path: Path) -> None:
    """Remove a socket file nobody answers on; refuse a live socket or a non-socket file."""
    if not await anyio.to_thread.run_sync(_socket_file_exists, path):
        return
    try:
        with anyio.fail_after(_STALE_PROBE_TIMEOUT):
            stream = await anyio.connect_unix(path)
    except (ConnectionRefusedError, FileNotFoundError):
        await anyio.to_thread.run_sync(partial(path.unlink, missing_ok=True))
        return
    except TimeoutError:
        pass  # something holds it but is too busy to answer: still not ours to remove
    else:
        await stream.aclose()
    raise StartupError(f"another process is already serving on {path}")


def socket_inode(path: Path) -> int | None:
    """The inode at ``path`` now, to recognise our own socket file later."""
    try:
        return path.lstat().st_ino
    except FileNotFoundError:
        return None


def unlink_if_ours(path: Path, inode: int | None) -> None:
    """Remove the socket file unless it was replaced by someone else's since we bound it."""
    if inode is not None and socket_inode(path) == inode:
        path.unlink(missing_ok=True)
