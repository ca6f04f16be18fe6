"""The env file: ``$XDG_CONFIG_HOME/memd/env`` (default ``~/.config/memd/env``).

memd reads it itself, so systemd, launchd and a shell behave alike (the service units do not
name it). ``KEY=VALUE`` lines, ``#`` comments, an optional ``export`` and quotes around the
value, as systemd's ``EnvironmentFile`` and a shell's ``source`` both accept.

Rules:

* The real environment wins over the file (``MEMD``'s precedence: CLI > env > files).
* The file holds secrets: memd refuses (does not load, says why in the log, ``status`` and
  ``doctor``) a file that is not a regular file owned by the user with no group/other bits.
* Its values feed the model client's settings only: they are never put into the daemon's
  process environment, so nothing memd starts (sandboxed programs) inherits them.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

MAX_BYTES = 64 * 1024
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class EnvFile:
    """What was read: ``values`` (empty when missing or refused) and ``problem`` in words."""

    path: Path
    values: dict[str, str] = field(default_factory=dict)
    exists: bool = False
    problem: str | None = None
    refused: bool = False  # unsafe or unreadable: nothing was loaded

    def status(self) -> dict[str, object]:
        """For ``memdctl status``: the path, whether it was loaded, the key names (never a
        value) and the problem, if any."""
        return {
            "path": str(self.path),
            "loaded": self.exists and not self.refused,
            "keys": sorted(self.values),
            "problem": self.problem,
        }


def env_file_path(env: Mapping[str, str]) -> Path:
    """``$XDG_CONFIG_HOME/memd/env`` (an absolute XDG_CONFIG_HOME only), else ``~/.config``."""
    xdg = env.get("XDG_CONFIG_HOME", "")
    base = Path(xdg) if xdg.startswith("/") else Path(env.get("HOME") or Path.home()) / ".config"
    return base / "memd" / "env"


def parse_env_text(text: str) -> tuple[dict[str, str], list[str]]:
    """Pure: the values and one problem per line that is not ``[export] NAME=VALUE``."""
    values: dict[str, str] = {}
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not _NAME.fullmatch(name):
            problems.append(f"line {number}: expected NAME=VALUE")
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[name] = value
    return values, problems


def read_env_file(path: Path, uid: int | None = None) -> EnvFile:
    """Read ``path`` if it is safe to; never raises for what is on disk."""
    uid = os.getuid() if uid is None else uid
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return EnvFile(path)
    except OSError as exc:
        return EnvFile(
            path, exists=True, problem=f"cannot read {path}: {exc.strerror}", refused=True
        )
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        problem = _unsafe(path, info, uid)
        if problem is not None:
            return EnvFile(path, exists=True, problem=problem, refused=True)
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        too_big = f"{path} is over {MAX_BYTES} bytes; not read"
        return EnvFile(path, exists=True, problem=too_big, refused=True)
    values, problems = parse_env_text(data.decode("utf-8", errors="replace"))
    problem = f"{path}: " + "; ".join(problems) if problems else None
    return EnvFile(path, values, exists=True, problem=problem)


def _unsafe(path: Path, info: os.stat_result, uid: int) -> str | None:
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is not a regular file; not read"
    if info.st_uid != uid:
        return f"{path} belongs to uid {info.st_uid}, not to you (uid {uid}); not read"
    if info.st_mode & 0o077:
        return (
            f"{path} can be read or written by others (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"not read. It holds secrets: run `chmod 600 {path}`"
        )
    return None


def merged(process_env: Mapping[str, str], file: EnvFile) -> dict[str, str]:
    """The environment the model client is configured from: the file, then the real
    environment on top (the real environment wins)."""
    return {**file.values, **process_env}
