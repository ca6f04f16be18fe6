"""Who may talk to the daemon: peer credentials and the privacy of the socket directory.

The decisions are pure (:func:`check_peer`, :func:`check_socket_dir`); :func:`peer_uid` is
the one call that asks the kernel. Only the daemon's own user is served: the socket holds
the user's notes and memories, and root has other ways in.
"""

from __future__ import annotations

import socket
import stat
import struct
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Allow:
    pass


@dataclass(frozen=True)
class Deny:
    reason: str


def check_peer(peer_uid: int, own_uid: int) -> Allow | Deny:
    """Serve a peer only when it runs as the daemon's own user."""
    if peer_uid == own_uid:
        return Allow()
    return Deny(f"peer uid {peer_uid} is not the daemon's uid {own_uid}")


def check_socket_dir(mode: int, owner_uid: int, own_uid: int) -> Allow | Deny:
    """A directory may hold the socket only if it is ours and closed to group and others."""
    if not stat.S_ISDIR(mode):
        return Deny("is not a directory; remove it or set MEMD_RUNTIME_DIR elsewhere")
    if owner_uid != own_uid:
        return Deny(
            f"is owned by uid {owner_uid}, not by the daemon's uid {own_uid}; "
            "set MEMD_RUNTIME_DIR to a directory of your own"
        )
    if mode & 0o077:
        mode_text = f"{stat.S_IMODE(mode):04o}"
        return Deny(f"is open to group or others (mode {mode_text}); make it 0700 (chmod 700)")
    return Allow()


# struct ucred {pid_t pid; uid_t uid; gid_t gid;}
_UCRED = struct.Struct("=iII")
# struct xucred {u_int cr_version; uid_t cr_uid; short cr_ngroups; gid_t cr_groups[16];}
_XUCRED_HEAD = struct.Struct("=II")
_XUCRED_SIZE = 76
_SOL_LOCAL = 0
_LOCAL_PEERCRED = 0x001
_LOCAL_PEERPID = 0x002  # macOS
_PID = struct.Struct("=i")


if sys.platform == "linux":

    def peer_uid(sock: socket.socket) -> int:
        """The uid of the process at the other end of a connected Unix socket (SO_PEERCRED).

        Raises ``OSError`` when the kernel will not say; callers refuse the peer then.
        """
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
        _pid, uid, _gid = _UCRED.unpack(raw)
        return int(uid)

    def peer_pid(sock: socket.socket) -> int | None:
        """The process at the other end (SO_PEERCRED: the one that connected); None when
        the kernel will not say."""
        try:
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
        except OSError:
            return None
        pid = _UCRED.unpack(raw)[0]
        return int(pid) if pid > 0 else None

else:

    def peer_uid(sock: socket.socket) -> int:
        """The uid of the process at the other end of a connected Unix socket.

        LOCAL_PEERCRED, the record getpeereid() reads, on macOS and the BSDs. Raises
        ``OSError`` when the kernel will not say; callers refuse the peer then.
        """
        raw = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERCRED, _XUCRED_SIZE)
        if len(raw) < _XUCRED_HEAD.size:
            raise OSError("LOCAL_PEERCRED returned a short credential record")
        _version, uid = _XUCRED_HEAD.unpack_from(raw)
        return int(uid)

    def peer_pid(sock: socket.socket) -> int | None:
        """The process at the other end (LOCAL_PEERPID, macOS); None where the kernel has no
        such option or will not say."""
        try:
            raw = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERPID, _PID.size)
        except OSError:
            return None
        pid = _PID.unpack(raw[: _PID.size])[0] if len(raw) >= _PID.size else 0
        return int(pid) if pid > 0 else None
