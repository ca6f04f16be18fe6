"""The real agent CLIs for end-to-end tests, installed once with npm into a cache dir, pinned.

One helper for Claude Code (``tests/claude_cli.py``), Codex CLI and Gemini CLI
(``tests/other_cli.py``): :func:`npm_installed` installs ``package@version`` under
``$MEMD_CLAUDE_CODE_CACHE`` (the name it had when Claude Code was the only one) or
``~/.cache/memd-tests``, in a folder of its own (``<name>-<version>``), and returns the
command, or ``None`` when npm is absent (the tests then skip, saying so).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

INSTALL_TIMEOUT_S = 600.0


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("MEMD_CLAUDE_CODE_CACHE") or str(Path.home() / ".cache" / "memd-tests"))


def npm_installed(
    package: str, version: str, folder: str, command: str, env: Mapping[str, str] | None = None
) -> Path | None:
    """``command`` of ``package@version``, installed into ``<cache>/<folder>-<version>`` when
    missing; ``None`` when npm is not available. Raises ``RuntimeError`` when npm fails."""
    prefix = cache_root(env) / f"{folder}-{version}"
    found = prefix / "node_modules" / ".bin" / command
    if found.exists():
        return found
    npm = shutil.which("npm")
    if npm is None:
        return None
    prefix.mkdir(parents=True, exist_ok=True)
    # The suite's workers (pytest-xdist) may ask for one CLI at once: one npm at a time per
    # folder, and the others find its result.
    with (prefix.parent / f"{prefix.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if found.exists():
            return found
        return npm_install(npm, package, version, prefix, found)


def npm_install(npm: str, package: str, version: str, prefix: Path, found: Path) -> Path:
    done = subprocess.run(
        [
            npm,
            "install",
            "--no-audit",
            "--no-fund",
            "--prefix",
            str(prefix),
            f"{package}@{version}",
        ],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    if done.returncode != 0 or not found.exists():
        raise RuntimeError(
            f"npm install {package}@{version} failed ({done.returncode}): {done.stderr}"
        )
    return found
