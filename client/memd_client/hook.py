"""``memd-hook``: the hook command of every agent memd serves (Claude Code, Codex CLI, Gemini
CLI: :mod:`memd_client.agents`).

The agent runs it with the hook's input on stdin (Claude Code: FORMAT.md §10); an agent's
command ends with the agent's name (``… hook.py codex``; Claude Code's names none), which goes
to the daemon as the request's ``agent`` (the agent's room there reads its input and answers
in its shape; see :mod:`memd.sources.hooks`). It hands those bytes, and the environment the
agents' rooms read (:data:`FORWARDED_ENV`: what decides what Claude Code does itself, and the
variables that move its memory dir), to the daemon's ``hook`` method, and prints what the
daemon says to print (hooks JSON), which is nothing when there is nothing to add:

- ``SessionStart``: the project's memory index when Claude Code does not load it itself;
- ``UserPromptSubmit``: memories recalled for the prompt, with their age (and, after a resume,
  the session's notes);
- ``Stop`` and ``SessionEnd``: tell the daemon a turn (or the session) ended.

It fails open: when the daemon is down, busy (a ``busy`` error reply), slow or confused, the
hook prints nothing and exits 0, so it never blocks the agent and never puts an error into
its context. So that a failure is not silent, it then leaves a few lines beside the socket
(:data:`FAILED_OPEN_FILE`, owner-only: when, which event, why; see :func:`note_failed_open`),
which ``memdctl doctor`` and ``memdctl top`` show. Nothing is written when the hook works.

It runs on every prompt, so it starts as fast as Python itself: the JSON is parsed by the
daemon, and the import graph is ``posix``, ``sys`` (both built in) and ``_socket`` — not even
``os`` (whose ``_collections_abc`` and the environment's decoding cost a sixth of the
interpreter's start), no ``pathlib``, ``socket``, ``json``, ``typing``, ``__future__``, nor
``msgpack`` (whose ``datetime`` import alone costs more than the rest): the one request frame
and the reply are coded by the small msgpack subset below (:func:`pack`, :func:`unpack`; the
reply may use any msgpack type but ext). ``python -X importtime -m memd_client.hook`` shows
it; ``bench/hook.py --regular`` measures it in a regular install.

``memdctl install-hooks`` registers it as ``<python> -I -S -c '…from memd_client.hook import
main; main(exit_at_once=True)' <…>/memd_client/hook.py``
(:func:`memd_client.hooks_install.hook_command`): no console-script launcher (which imports
``re``), the module's cached bytecode rather than a compile of this file on every run, and an
exit that skips the interpreter's teardown (a fifth of the process; nothing is left to
flush or close by then). The ``memd-hook`` console script stays for hand-written settings.
The module needs nothing else from ``memd_client``, so it also runs as a script (``python
…/memd_client/hook.py``; no file beside it shadows a standard-library module).
"""

import posix
import sys

Env = dict[str, str]

# Every agent table's ``forwarded_env`` (a copy: the hook imports nothing it can do without;
# tests/test_agent_names.py checks it is the same).
FORWARDED_ENV = (
    "CLAUDE_CODE_DISABLE_AUTO_MEMORY",
    "CLAUDE_CODE_SIMPLE",
    "CLAUDE_PROJECT_DIR",
    "CLAUDE_COWORK_MEMORY_PATH_OVERRIDE",
    "CLAUDE_CODE_PROJECT_DIR_NAME",
    "CLAUDE_CONFIG_DIR",
)
# Set in the environment of every agent CLI memd runs as its model (memd.llm.cli_run): a hook
# that agent runs on memd's own call does nothing.
MODEL_CALL_ENV = "MEMD_MODEL_CALL"
MAX_STDIN_BYTES = 4 * 1024 * 1024
MAX_REPLY_BYTES = 1024 * 1024
DEFAULT_TIMEOUT_S = 3.0
RUN_USER = "/run/user"  # systemd's runtime dirs (memd_client.paths.RUN_USER)
SESSION_END_TIMEOUT_S = 1.0  # Claude Code gives SessionEnd hooks 1.5 s in all
# Beside the socket: the last time the hook failed open. Lines: a title, the last failure's
# time, the first of this burst (failures less than BURST_S apart), their count, the event,
# the reason (memd_client.hook_record reads it).
FAILED_OPEN_FILE = "hook-failed-open"
FAILED_OPEN_TITLE = "memd-hook failed open"
BURST_S = 3600.0
EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "Stop",
    "SessionEnd",
    "PreCompact",
    "BeforeAgent",
    "AfterAgent",
)


class FailedOpen(Exception):
    """The daemon answered with an error (``busy``, ``timeout``…) or not at all."""


def hook_timeout(env: Env, stdin: bytes = b"") -> float:
    """Seconds the whole exchange may take: ``MEMD_HOOK_TIMEOUT_MS`` or the default."""
    raw = env.get("MEMD_HOOK_TIMEOUT_MS", "")
    timeout = int(raw) / 1000.0 if raw.isdigit() and int(raw) > 0 else DEFAULT_TIMEOUT_S
    if b'"hook_event_name":"SessionEnd"' in stdin or b'"hook_event_name": "SessionEnd"' in stdin:
        timeout = min(timeout, SESSION_END_TIMEOUT_S)
    return timeout


def socket_path(env: Env) -> str:
    """The daemon's socket, as :func:`memd_client.paths.socket_path` finds it (a copy: the
    hook imports nothing it can do without)."""
    if env.get("MEMD_SOCKET"):
        return _expanduser(env["MEMD_SOCKET"])
    if env.get("MEMD_RUNTIME_DIR"):
        return _join(_expanduser(env["MEMD_RUNTIME_DIR"]), "memd.sock")
    uid = posix.getuid()
    candidates = [f"{RUN_USER}/{uid}/memd", f"/tmp/memd-{uid}"]
    if env.get("XDG_RUNTIME_DIR"):
        candidates.insert(0, _join(env["XDG_RUNTIME_DIR"], "memd"))
    for folder in candidates:
        try:
            info, sock = posix.lstat(folder), posix.lstat(_join(folder, "memd.sock"))
        except OSError:
            continue
        if (
            sock.st_mode & 0o170000 == 0o140000  # a socket
            and info.st_mode & 0o170000 == 0o040000  # in a real directory
            and info.st_uid == uid
            and not info.st_mode & 0o022  # that no one else can write
        ):
            return _join(folder, "memd.sock")
    return _join(candidates[0] if env.get("XDG_RUNTIME_DIR") else candidates[-1], "memd.sock")


def _join(folder: str, name: str) -> str:
    """``os.path.join(folder, name)`` for a relative ``name``."""
    return folder + name if not folder or folder.endswith("/") else f"{folder}/{name}"


def _expanduser(path: str) -> str:
    """``os.path.expanduser``, which imports ``os``: only for a path that starts with ``~``."""
    if not path.startswith("~"):
        return path
    import posixpath

    return posixpath.expanduser(path)


def environ() -> Env:
    """The process's environment as ``os.environ`` decodes it (UTF-8, surrogateescape)."""
    return {
        k.decode("utf-8", "surrogateescape"): v.decode("utf-8", "surrogateescape")
        for k, v in posix.environ.items()
    }


def request(stdin: bytes, env: Env, agent: str = "") -> bytes:
    """One length-prefixed msgpack request frame for the daemon's ``hook`` method (``agent``:
    the agent the command names, left out when it names none: the daemon's unnamed agent,
    which older daemons assume too)."""
    params: dict[str, object] = {"raw": stdin}
    if agent:
        params["agent"] = agent
    params["env"] = {k: env[k] for k in FORWARDED_ENV if k in env}
    body = pack({"id": 1, "method": "hook", "params": params})
    return len(body).to_bytes(4, "big") + body


def agent_of(argv: list[str]) -> str:
    """The agent the command line names (its last argument, when that is a plain name and
    not the hook's own file), or ``""``."""
    last = argv[-1] if len(argv) > 1 else ""
    return last if last.isidentifier() and last.isascii() else ""


def pack(obj: object) -> bytes:
    """msgpack of a map/str/bytes/int/None tree (what :func:`request` sends)."""
    if obj is None:
        return b"\xc0"
    if isinstance(obj, bool):
        return b"\xc3" if obj else b"\xc2"
    if isinstance(obj, int):
        if 0 <= obj < 128:
            return bytes([obj])
        return b"\xd3" + obj.to_bytes(8, "big", signed=True)
    if isinstance(obj, str):
        data = obj.encode("utf-8", "surrogatepass")
        return _head(data, 0xA0, 32, b"\xd9", b"\xda", b"\xdb") + data
    if isinstance(obj, bytes):
        return _head(obj, None, 0, b"\xc4", b"\xc5", b"\xc6") + obj
    if isinstance(obj, dict):
        size = len(obj)
        head = bytes([0x80 | size]) if size < 16 else b"\xdf" + size.to_bytes(4, "big")
        return head + b"".join(pack(k) + pack(v) for k, v in obj.items())
    raise TypeError(f"cannot pack {type(obj).__name__}")


def _head(data: bytes, fix: int | None, fix_max: int, b8: bytes, b16: bytes, b32: bytes) -> bytes:
    n = len(data)
    if fix is not None and n < fix_max:
        return bytes([fix | n])
    if n < 256:
        return b8 + bytes([n])
    return b16 + n.to_bytes(2, "big") if n < 65536 else b32 + n.to_bytes(4, "big")


_FIXED = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8}
_SIZED = {0xD9: 1, 0xDA: 2, 0xDB: 4, 0xC4: 1, 0xC5: 2, 0xC6: 4}
_CONTAINERS = {0xDC: 2, 0xDD: 4, 0xDE: 2, 0xDF: 4}


def unpack(data: bytes, at: int = 0, depth: int = 0) -> tuple[object, int]:
    """One msgpack value at ``at`` and the offset after it; ``ValueError`` for anything
    malformed, an ext type, or nesting deeper than 64."""
    if depth > 64 or at >= len(data):
        raise ValueError("truncated or too deep")
    tag = data[at]
    at += 1
    if tag < 0x80 or tag >= 0xE0:
        return (tag if tag < 0x80 else tag - 0x100), at
    if tag <= 0x9F or tag in _CONTAINERS:
        if tag <= 0x9F:
            size, is_map = tag & 0x0F, tag < 0x90
        else:
            width = _fits(data, at, _CONTAINERS[tag])
            size, is_map = int.from_bytes(data[at : at + width], "big"), tag >= 0xDE
            at += width
        return _container(data, at, size, is_map, depth)
    if tag <= 0xBF:
        return _text(data, at, tag & 0x1F, True)
    if tag in (0xC0, 0xC2, 0xC3):
        return {0xC0: None, 0xC2: False, 0xC3: True}[tag], at
    if tag in _FIXED:
        width = _fits(data, at, _FIXED[tag])
        signed = tag >= 0xD0
        return int.from_bytes(data[at : at + width], "big", signed=signed), at + width
    if tag in _SIZED:
        width = _fits(data, at, _SIZED[tag])
        size = int.from_bytes(data[at : at + width], "big")
        return _text(data, at + width, size, tag >= 0xD9)
    if tag in (0xCA, 0xCB):
        return 0.0, at + _fits(data, at, 4 if tag == 0xCA else 8)  # the hook reads no float
    raise ValueError(f"msgpack type 0x{tag:02x} is not expected")


def _fits(data: bytes, at: int, width: int) -> int:
    """``width``, when that many bytes are left at ``at``."""
    if at + width > len(data):
        raise ValueError("truncated")
    return width


def _text(data: bytes, at: int, size: int, is_str: bool) -> tuple[object, int]:
    if at + size > len(data):
        raise ValueError("truncated")
    raw = data[at : at + size]
    return (raw.decode("utf-8") if is_str else raw), at + size


def _container(data: bytes, at: int, size: int, is_map: bool, depth: int) -> tuple[object, int]:
    if size > len(data):
        raise ValueError("truncated")
    if not is_map:
        items = []
        for _ in range(size):
            item, at = unpack(data, at, depth + 1)
            items.append(item)
        return items, at
    mapping = {}
    for _ in range(size):
        key, at = unpack(data, at, depth + 1)
        value, at = unpack(data, at, depth + 1)
        if not isinstance(key, str | int | bytes | None):
            raise ValueError("unhashable map key")
        mapping[key] = value
    return mapping, at


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
    reply, _ = unpack(body)
    return _stdout(reply)


def _stdout(reply: object) -> str | None:
    result = reply.get("result") if isinstance(reply, dict) else None
    out = result.get("stdout") if isinstance(result, dict) else None
    return out if isinstance(out, str) and out else None


def run(stdin: bytes, env: Env, agent: str = "") -> str | None:
    """The hook's stdout for ``stdin`` (None: print nothing). Raises on any trouble, an
    error reply included (:class:`FailedOpen`)."""
    if not stdin.strip() or env.get(MODEL_CALL_ENV):
        return None  # nothing asked, or the agent is memd's own model call (an agent's CLI)
    timeout = hook_timeout(env, stdin)
    body = exchange(socket_path(env), request(stdin, env, agent), timeout)
    if body is None:
        raise FailedOpen("memd closed the connection without a whole reply")
    reply, _ = unpack(body)
    error = reply.get("error") if isinstance(reply, dict) else None
    if isinstance(error, dict):
        raise FailedOpen(f"memd answered {error.get('code')}: {error.get('message')}")
    return _stdout(reply)


def main(exit_at_once: bool = False) -> int:
    """Run the hook on stdin; 0 (it fails open). ``exit_at_once``: end the process here,
    without the interpreter's teardown (the registered command, whose process ends anyway)."""
    stdin, env = b"", environ()
    try:
        stdin = sys.stdin.buffer.read(MAX_STDIN_BYTES)
        out = run(stdin, env, agent_of(sys.argv))
    except BaseException as exc:  # noqa: BLE001 - fail open: the agent must never see a hook error
        note_failed_open(env, stdin, exc)
        out = None
    try:
        if out:
            sys.stdout.write(out + "\n")
            sys.stdout.flush()
    finally:
        if exit_at_once:
            posix._exit(0)
    return 0


# -- failing open, visibly ------------------------------------------------------------------------


def why(exc: BaseException, env: Env, stdin: bytes) -> str:
    """One line saying why the hook failed open."""
    if isinstance(exc, FailedOpen):
        text = str(exc)
    elif isinstance(exc, TimeoutError):
        text = f"memd did not answer within {hook_timeout(env, stdin):g}s"
    elif isinstance(exc, FileNotFoundError | ConnectionRefusedError):
        text = f"memd is not running (nothing answers on {socket_path(env)})"
    elif isinstance(exc, OSError):
        text = f"cannot reach memd at {socket_path(env)}: {exc.strerror or exc}"
    elif isinstance(exc, ValueError):
        text = "memd's reply could not be read"
    else:
        text = type(exc).__name__
    return "".join(c if c.isprintable() else " " for c in text)[:300]


def note_failed_open(env: Env, stdin: bytes, exc: BaseException) -> None:
    """Record that the hook failed open, beside the socket: only in a folder of the user's
    own that nobody else may enter (the runtime dir memd makes), through a new owner-only
    file renamed over the last record. Never raises; a local file, so it does not wait."""
    try:
        import posixpath

        where = posixpath.dirname(socket_path(env))
        if not where.startswith("/"):
            return  # a relative socket names no folder of memd's
        folder = posix.open(
            where, posix.O_RDONLY | posix.O_DIRECTORY | posix.O_NOFOLLOW | posix.O_CLOEXEC
        )
    except BaseException:  # noqa: BLE001 - no folder (memd never ran): nowhere to say it
        return
    try:
        info = posix.fstat(folder)
        if info.st_uid == posix.getuid() and not info.st_mode & 0o077:
            _write_record(folder, _record(folder, env, stdin, exc))
    except BaseException:  # noqa: BLE001 - failing open must not fail
        pass
    finally:
        posix.close(folder)


def _record(folder: int, env: Env, stdin: bytes, exc: BaseException) -> bytes:
    import time

    now = time.time()
    first, count = now, 1
    last = _last_record(folder)
    if len(last) >= 4 and last[0] == FAILED_OPEN_TITLE:
        try:
            before, since, seen = float(last[1]), float(last[2]), int(last[3])
        except ValueError:
            before = since = float("-inf")
            seen = 0
        if 0 <= now - before < BURST_S and 0 < since <= before and 0 < seen < 10**9:
            first, count = since, seen + 1
    at = stdin.find(b'"hook_event_name"', 0, 65536)
    named = stdin[at : at + 64] if at >= 0 else b""
    event = next((e for e in EVENTS if f'"{e}"'.encode() in named), "unknown event")
    lines = (
        FAILED_OPEN_TITLE,
        f"{now:.3f}",
        f"{first:.3f}",
        str(count),
        event,
        why(exc, env, stdin),
    )
    return ("\n".join(lines) + "\n").encode("utf-8", "replace")


def _last_record(folder: int) -> list[str]:
    flags = posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_NONBLOCK | posix.O_CLOEXEC
    try:
        fd = posix.open(FAILED_OPEN_FILE, flags, dir_fd=folder)
    except OSError:
        return []
    try:
        return posix.read(fd, 1024).decode("utf-8", "replace").split("\n")
    except OSError:
        return []
    finally:
        posix.close(fd)


def _write_record(folder: int, data: bytes) -> None:
    temp = f".{FAILED_OPEN_FILE}.{posix.getpid()}"
    try:
        posix.unlink(temp, dir_fd=folder)  # left by a hook that was killed, with this pid
    except OSError:
        pass
    flags = posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_NOFOLLOW | posix.O_CLOEXEC
    fd = posix.open(temp, flags, 0o600, dir_fd=folder)
    try:
        posix.write(fd, data)
    finally:
        posix.close(fd)
    try:
        posix.rename(temp, FAILED_OPEN_FILE, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError:
        posix.unlink(temp, dir_fd=folder)
        raise


if __name__ == "__main__":
    sys.exit(main())
