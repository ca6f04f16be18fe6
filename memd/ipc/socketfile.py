"""The socket file's life: a private directory, a stale socket cleared, our own file removed.

The runtime directory is checked before anything is created in it: without
``$XDG_RUNTIME_DIR`` it is the predictable ``/tmp/memd-<uid>``, which another local user may
have made first, as a directory of their own or as a symlink into the victim's files.

Blocking file-system calls here are quick local operations; the entry point runs
:func:`prepare_runtime_dir` and :func:`check_socket_path` before the event loop starts, and
the server runs them again (in a worker thread) for callers that start it directly.
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


def prepare_runtime_dir(directory: Path) -> None:
    """Create the socket's directory 0700 if missing; refuse one that is not private.

    Refused (:class:`StartupError`, one line naming the path, the problem and the fix): a
    symlink, something that is not a directory, a directory of another user, a directory open
    to group or others.
    """
    try:
        directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise StartupError(
            f"cannot create the runtime directory {directory}: {exc.strerror}; "
            "set MEMD_RUNTIME_DIR to a private directory of yours"
        ) from None
    try:
        st = os.lstat(directory)
    except OSError as exc:
        raise StartupError(
            f"cannot inspect the runtime directory {directory}: {exc.strerror}"
        ) from None
    if stat.S_ISLNK(st.st_mode):
        raise StartupError(
            f"refusing runtime directory {directory}: it is a symlink; remove it (memd "
            "creates the directory itself) or set MEMD_RUNTIME_DIR to a private directory"
        )
    match check_socket_dir(st.st_mode, st.st_uid, os.getuid()):
        case Deny(reason=reason):
            raise StartupError(f"refusing runtime directory {directory}: it {reason}")
        case Allow():
            pass


def check_socket_path(path: Path) -> bool:
    """Whether a socket file exists at ``path``; refuse anything else that is there."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(st.st_mode):
        raise StartupError(
            f"refusing socket path {path}: it exists and is not a socket; remove it and start again"
        )
    return True


async def clear_stale_socket(path: Path) -> None:
    """Remove a socket file nobody answers on; refuse a live socket or a non-socket file."""
    if not await anyio.to_thread.run_sync(check_socket_path, path):
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
    raise StartupError(
        f"another process is already serving on {path}; stop it or set MEMD_RUNTIME_DIR"
    )


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
