"""Homes that share one bare remote, for the team-sync tests (real git, real files).

A :class:`Home` is one person's machine: a memory dir, memd's state folder for the project,
a git identity. Each syncs with :func:`memd.team.sync.sync` against the same bare repository
on this machine, as teammates do against their repository's remote.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from memd.git import blob_id
from memd.team.entries import Limits
from memd.team.local import Scope
from memd.team.outcome import Outcome, Settings, Target
from memd.team.store import Identity
from memd.team.sync import sync

GIT_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@x",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@x",
}


def git(*args: str, cwd: Path | None = None, stdin: bytes = b"") -> bytes:
    """Run git the way a test sets things up (not through memd)."""
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=GIT_ENV, input=stdin, capture_output=True, check=True
    )
    return done.stdout


def bare_remote(path: Path) -> str:
    git("init", "--quiet", "--bare", str(path))
    return str(path)


def memory(name: str, body: str, kind: str = "project") -> str:
    """A memory file's text as Claude Code writes it."""
    return (
        f"---\nname: {name}\ndescription: about {name}\nmetadata:\n  type: {kind}\n---\n\n{body}\n"
    )


@dataclass
class Home:
    """One person's machine (see the module docstring)."""

    root: Path
    name: str
    url: str
    limits: Limits = field(default_factory=Limits)

    @property
    def memory_dir(self) -> Path:
        return self.root / "memory"

    @property
    def team(self) -> Path:
        return self.memory_dir / "team"

    @property
    def state(self) -> Path:
        return self.root / "state"

    def write(self, relative: str, text: str) -> None:
        path = self.team / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def remove(self, relative: str) -> None:
        (self.team / relative).unlink()

    def files(self) -> dict[str, str]:
        """Every file under team/, by path relative to it."""
        if not self.team.is_dir():
            return {}
        return {
            str(p.relative_to(self.team)): p.read_text()
            for p in sorted(self.team.rglob("*"))
            if p.is_file() and not p.name.startswith(".")
        }

    def settings(self, **changes: object) -> Settings:
        values: dict[str, object] = {
            "identity": Identity(self.name, f"{self.name}@example.org"),
            "limits": self.limits,
            "now": time.time,
        }
        values.update(changes)
        return Settings(**values)  # type: ignore[arg-type]

    def sync(self, *, target: Target | None = None, **changes: object) -> Outcome:
        self.team.mkdir(parents=True, exist_ok=True)
        return sync(
            self.state,
            Scope(self.memory_dir, "team"),
            target or Target(self.url),
            self.settings(**changes),
            GIT_ENV,
        )


def homes(tmp_path: Path, *names: str) -> tuple[str, list[Home]]:
    url = bare_remote(tmp_path / "remote.git")
    made = [Home(tmp_path / n, n, url) for n in names]
    for home in made:
        home.team.mkdir(parents=True)
    return url, made


def remote_files(url: str, ref: str = "refs/memd/team") -> dict[str, bytes]:
    """The entries the remote's ref holds, blobs with their content (read with plain git;
    links and submodules as empty)."""
    try:
        listing = git("--git-dir", url, "ls-tree", "-r", "-z", ref)
    except subprocess.CalledProcessError:
        return {}
    found: dict[str, bytes] = {}
    for record in filter(None, listing.split(b"\0")):
        head, _, name = record.partition(b"\t")
        mode, kind, oid = head.split()
        blob = kind == b"blob" and mode != b"120000"
        content = git("--git-dir", url, "cat-file", "blob", oid.decode()) if blob else b""
        found[os.fsdecode(name)] = content
    return found


def remote_names(url: str, ref: str = "refs/memd/team") -> set[str]:
    try:
        listing = git("--git-dir", url, "ls-tree", "-r", "-z", "--name-only", ref)
    except subprocess.CalledProcessError:
        return set()
    return {os.fsdecode(n) for n in listing.split(b"\0") if n}


def bodies(files: Mapping[str, str]) -> set[str]:
    """Each memory's body (what a person wrote), without the frontmatter memd stamps."""
    return {text.split("\n---\n", 1)[-1].strip() for text in files.values()}


def ids(files: Mapping[str, str]) -> list[str]:
    return [blob_id(t.encode()) for t in files.values()]
