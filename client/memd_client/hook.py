"""``memd-hook``: the Claude Code hook command.

Claude Code runs it with the hook's JSON on stdin (FORMAT.md §10). It hands those bytes, and
the part of Claude Code's environment that decides what Claude Code does itself
(``CLAUDE_CODE_DISABLE_AUTO_MEMORY``, ``CLAUDE_CODE_SIMPLE``, ``CLAUDE_PROJECT_DIR``), to the
daemon's ``hook`` method, and prints what the daemon says to print (hooks JSON), which is
nothing when there is nothing to add:

- ``SessionStart``: the project's memory index when Claude Code does not load it itself;
- ``UserPromptSubmit``: memories recalled for the prompt, with their age (and, after a resume,
  the session's notes);
- ``Stop`` and ``SessionEnd``: tell the daemon a turn (or the session) ended.

It fails open: when the daemon is down, slow or confused, the hook prints nothing and exits 0,
so it never blocks the agent and never puts an error into its context.

It runs on every prompt, so it starts as fast as Python itself: the JSON is parsed by the
daemon, and the import graph is ``os``, ``sys``, ``_socket`` and ``msgpack`` — no
``pathlib``, ``socket``, ``json`` or ``typing`` (``python -X importtime -m memd_client.hook``;
``bench/hook.py`` measures it in a regular install).
"""

from __future__ import annotations

import os
import sys

Env = dict[str, str] | os._Environ[str]  # both are Mappings; no typing import needed

FORWARDED_ENV = ("CLAUDE_CODE_DISABLE_AUTO_MEMORY", "CLAUDE_CODE_SIMPLE", "CLAUDE_PROJECT_DIR")
MAX_STDIN_BYTES = 4 * 1024 * 1024
MAX_REPLY_BYTES = 1024 * 1024
DEFAULT_TIMEOUT_S = 3.0
SESSION_END_TIMEOUT_S = 1.0  # Claude Code gives SessionEnd hooks 1.5 s in all


def hook_timeout(env: Env, stdin: bytes = b"") -> float:
    """Seconds the whole exchange may take: ``MEMD_HOOK_TIMEOUT_MS`` or the default."""
    raw = env.get("MEMD_HOOK_TIMEOUT_MS", "")
    timeout = int(raw) / 1000.0 if raw.isdigit() and int(raw) > 0 else DEFAULT_TIMEOUT_S
    if b'"SessionEnd"' in stdin:
        timeout = min(timeout, SESSION_END_TIMEOUT_S)
    return timeout


def socket_path(env: Env) -> str:
    """The daemon's socket, as :func:`memd_client.paths.socket_path` finds it."""
    if env.get("MEMD_SOCKET"):
        return os.path.expanduser(env["MEMD_SOCKET"])
    if env.get("MEMD_RUNTIME_DIR"):
        return os.path.join(os.path.expanduser(env["MEMD_RUNTIME_DIR"]), "memd.sock")
    if env.get("XDG_RUNTIME_DIR"):
        return os.path.join(env["XDG_RUNTIME_DIR"], "memd", "memd.sock")
    return f"/tmp/memd-{os.getuid()}/memd.sock"


def request(stdin: bytes, env: Env) -> bytes:
    """One length-prefixed msgpack request frame for the daemon's ``hook`` method."""
    import msgpack

    forwarded = {k: env[k] for k in FORWARDED_ENV if k in env}
    body: bytes = msgpack.packb(
        {"id": 1, "method": "hook", "params": {"raw": stdin, "env": forwarded}},
        use_bin_type=True,
    )
    return len(body).to_bytes(4, "big") + body


def exchange(path: str, frame: bytes, timeout: float) -> bytes | None:
    """Send ``frame`` and read one reply frame's body (bounded in time and size)."""
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(frame)
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            if len(data) >= 4 and int.from_bytes(data[:4], "big") > MAX_REPLY_BYTES:
                return None
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
        return data[4 : 4 + int.from_bytes(data[:4], "big")]
    finally:
        sock.close()


def stdout_of(body: bytes) -> str | None:
    """What to print from the daemon's reply: its ``result.stdout`` string, else None."""
    import msgpack

    reply = msgpack.unpackb(body, raw=False)
    result = reply.get("result") if isinstance(reply, dict) else None
    out = result.get("stdout") if isinstance(result, dict) else None
    return out if isinstance(out, str) and out else None


def run(stdin: bytes, env: Env) -> str | None:
    """The hook's stdout for ``stdin`` (None: print nothing). Raises on any trouble."""
    if not stdin.strip():
        return None
    body = exchange(socket_path(env), request(stdin, env), hook_timeout(env, stdin))
    return stdout_of(body) if body is not None else None


def main() -> int:
    try:
        out = run(sys.stdin.buffer.read(MAX_STDIN_BYTES), os.environ)
    except BaseException:  # noqa: BLE001 - fail open: the agent must never see a hook error
        return 0
    if out:
        sys.stdout.write(out + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
