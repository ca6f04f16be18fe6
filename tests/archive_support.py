"""A project whose memories have gone unused for weeks (issue 36, item 3): what the archive's
tests through the real daemon share.

:func:`stale_world` makes, in a fake home, a git repository and its memory dir: memories whose
files were last written 40 days ago (``os.utime``), one of them pinned, one under ``team/``,
one an agent used two days ago, one whose citations verified yesterday, one written today;
``MEMORY.md`` lists them. memd's own record says it has seen this dir's memories' use for 40
days (``usage.json``'s ``dirs``, with the used one's last use), and its verification log the
verified one (``citations.json``): what 40 days of a daemon's life would have left, written
up front because the daemon's clock cannot be moved.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memd.memory.archive import archive_dir
from memd.memory.paths import memory_dir
from tests.daemon_harness import Home, call, wait_for

DAY_S = 86_400.0
UNUSED_DAYS = 40


def note(name: str, body: str, *, pinned: bool = False) -> str:
    pin = "metadata:\n  pinned: true\n" if pinned else ""
    return f"---\nname: {name}\ndescription: {name} notes\ntype: project\n{pin}---\n\n{body}\n"


STALE = {
    "stale_deploy.md": note("stale_deploy", "Deploys once went out with `make ship-old`."),
    "stale_lint.md": note("stale_lint", "The linter was once flake8, run by hand."),
}
KEPT = {
    "pinned_rules.md": note("pinned_rules", "Never push to main.", pinned=True),
    "team/shared.md": note("shared", "The team's release rota."),
    "used_cache.md": note("used_cache", "The cache lives in /var/cache/app."),
    "verified_port.md": note("verified_port", "The port is set in conf/settings.toml."),
}
FRESH = {"fresh_today.md": note("fresh_today", "Written today.")}


@dataclass(frozen=True)
class World:
    repo: Path
    memory: Path

    @property
    def archive(self) -> Path:
        return archive_dir(self.memory)

    def index(self) -> str:
        return (self.memory / "MEMORY.md").read_text()


def index_line(relative: str) -> str:
    name = Path(relative).stem
    return f"- [{name}]({relative}) — {name} notes"


def stale_world(home: Home, stale: dict[str, str] = STALE) -> World:
    """The repository and its memory dir (see the module docstring)."""
    repo = home.root / "work" / "repo"
    (repo / "conf").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "conf" / "settings.toml").write_text("port = 8080\n")
    memory = memory_dir(home.projects, repo)
    now = time.time()
    old = now - UNUSED_DAYS * DAY_S
    for relative, text in {**stale, **KEPT, **FRESH}.items():
        path = memory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if relative not in FRESH:
            os.utime(path, (old, old))
    lines = [index_line(r) for r in {**stale, **KEPT, **FRESH} if not r.startswith("team/")]
    (memory / "MEMORY.md").write_text("# Memory\n\n" + "\n".join(lines) + "\n")
    state = home.state_dir
    state.mkdir(parents=True, exist_ok=True)
    usage = {
        "version": 1,
        "memories": {
            f"{memory}/used_cache.md": {"injected": 3, "used": 1, "last_used": now - 2 * DAY_S}
        },
        "dirs": {str(memory): old},
    }
    (state / "usage.json").write_text(json.dumps(usage))
    real = os.path.realpath(memory)
    verified = {f"{real}/verified_port.md": {"last_verified": now - DAY_S}}
    (state / "citations.json").write_text(json.dumps(verified))
    return World(repo, memory)


def tree(folder: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every file beneath ``folder`` (hidden ones too)."""
    if not folder.exists():
        return {}
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def archive_status(home: Home) -> dict[str, Any]:
    status: dict[str, Any] = call(home, "status")
    archive: dict[str, Any] = status["memory"]["archive"]
    return archive


def wait_swept(home: Home, after: int = 0) -> dict[str, Any]:
    """The archive's status once a sweep after the first ``after`` (its ``sweeps``) is done
    with no move left unfinished."""

    def swept() -> dict[str, Any] | None:
        archive = archive_status(home)
        done = archive.get("sweeps", 0) > after and archive.get("unfinished") == 0
        return archive if done else None

    return wait_for(swept, timeout=60, what="the archive's sweep")
