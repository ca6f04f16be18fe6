"""The team tier through the real daemon and memdctl: two people, two daemons, one remote."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from memd.memory.paths import memory_dir
from tests.daemon_harness import Home, fake_home, memdctl, start_memd, stop_memd
from tests.team_support import git, memory

pytestmark = pytest.mark.slow


@dataclass
class Person:
    home: Home
    repo: Path

    @property
    def memory(self) -> Path:
        return memory_dir(self.home.projects, self.repo)

    def team(self, *args: str) -> tuple[int, str, str]:
        done = memdctl(self.home, "team", *args, cwd=self.repo, timeout=120)
        return done.returncode, done.stdout, done.stderr

    def refs(self) -> str:
        return git("for-each-ref", cwd=self.repo).decode() + git(
            "status", "--porcelain", "--ignored", cwd=self.repo
        ).decode()


@contextmanager
def people(tmp_path: Path, *names: str) -> Iterator[list[Person]]:
    origin = tmp_path / "origin.git"
    git("init", "--quiet", "--bare", "--initial-branch=main", str(origin))
    seed = tmp_path / "seed"
    git("clone", "--quiet", str(origin), str(seed))
    (seed / "deploy.sh").write_text("make deploy\n")
    git("add", "deploy.sh", cwd=seed)
    git("commit", "--quiet", "-m", "init", cwd=seed)
    git("push", "--quiet", "origin", "HEAD:main", cwd=seed)
    with ExitStack() as stack:
        made = []
        for name in names:
            root = tmp_path / name
            root.mkdir()
            home = stack.enter_context(fake_home(root))
            (root / ".gitconfig").write_text(f"[user]\n\tname = {name}\n\temail = {name}@x.org\n")
            repo = root / "src" / "proj"
            git("clone", "--quiet", str(origin), str(repo))
            proc = start_memd(home)
            stack.callback(stop_memd, proc)
            made.append(Person(home, repo))
        yield made


def test_two_people_share_team_memories_through_their_daemons(tmp_path: Path) -> None:
    with people(tmp_path, "alice", "bob") as (alice, bob):
        before = alice.refs()
        (alice.memory / "team").mkdir(parents=True)
        (alice.memory / "team" / "deploy.md").write_text(
            memory("deploy", "Deploys run deploy.sh; it needs VPN.")
        )
        (alice.memory / "private.md").write_text(memory("private", "personal note"))
        code, out, err = alice.team("sync")
        assert code == 0, (out, err)
        assert "pushed 1" in out
        assert alice.refs() == before  # no branch, index or work tree of alice's changed
        code, out, _ = bob.team("sync", "--json")
        assert code == 0 and json.loads(out)["taken"] == ["deploy.md"]
        shared = (bob.memory / "team" / "deploy.md").read_text()
        assert "needs VPN" in shared and "alice <alice@x.org>" in shared
        assert not (bob.memory / "private.md").exists()  # outside team/: never leaves
        code, out, _ = bob.team("log")
        assert code == 0 and "alice" in out and "deploy.md" in out
        status = json.loads(memdctl(bob.home, "status", "--json").stdout)
        rows = status["team"]["projects"]
        assert rows and rows[0]["last"]["ok"]
