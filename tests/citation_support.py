"""Real git repositories for the citation tests: made with the git command line, with a
config of their own and nothing from the machine's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from memd.agent.process import SAFE_PATH


class Repo:
    """A work tree at ``root`` with helpers to edit, commit, move and switch branches."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.email", "t@example.invalid")
        self.git("config", "user.name", "t")
        self.git("config", "commit.gpgsign", "false")

    def env(self) -> dict[str, str]:
        home = str(self.root.parent)
        return {
            "PATH": SAFE_PATH,
            "HOME": home,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "LC_ALL": "C",
        }

    def git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", *args],
            cwd=self.root,
            env=self.env(),
            capture_output=True,
            check=True,
            timeout=30,
        )
        return done.stdout.decode()

    def write(self, relative: str, text: str) -> None:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def commit(self, message: str = "change") -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "--no-verify", "-m", message)
        return self.git("rev-parse", "HEAD").strip()


def numbered(count: int, prefix: str = "line") -> str:
    """``count`` distinct lines of text."""
    return "".join(f"{prefix} {i}\n" for i in range(1, count + 1))
