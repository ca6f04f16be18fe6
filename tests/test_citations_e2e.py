"""Citations through the real daemon (issue 26), in a repository whose config names canary
programs: ``remember`` records what a memory cites, recall and the hook's injected text
carry the checks' warnings, ``memdctl memories --check`` lists them, a failing memory ranks
below one that verifies, and no canary runs. With ``memory.verify_citations: false`` nothing
is checked."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from memd.memory.paths import memory_dir
from tests.citation_support import Repo
from tests.daemon_harness import (
    Home,
    call,
    claude_hook,
    fake_home,
    memdctl,
    read_log,
    start_memd,
    stop_memd,
)
from tests.test_git_hostile import disarmed, hostile_repository, ran

pytestmark = pytest.mark.slow

CLAUDE_MEMORY = (
    "---\nname: retry\ndescription: where the retry backoff lives and how long it waits\n"
    "type: project\n---\n\nThe retry backoff is `backoff()` in src/retry.py:1-2, capped at 60 s.\n"
)


def hook_prompt(home: Home, cwd: Path, prompt: str) -> str:
    done = claude_hook(
        home, cwd, "UserPromptSubmit", timeout=30, session_id="sess-cite", prompt=prompt
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    text: str = out["hookSpecificOutput"]["additionalContext"]
    return text


def remember(home: Home, cwd: Path, name: str, content: str) -> dict[str, Any]:
    params = {
        "cwd": str(cwd),
        "type": "reference",
        "name": name,
        "description": f"{name}: where the readme says how to release",
        "content": content,
    }
    result: dict[str, Any] = call(home, "remember", params)
    return result


def test_citations_are_recorded_checked_and_shown_and_no_canary_runs(tmp_path: Path) -> None:
    repo, canaries, _ = hostile_repository(tmp_path)
    cwd = repo.root
    with fake_home(tmp_path / "home", CLAUDE_CODE_DISABLE_AUTO_MEMORY="1") as home:
        home.root.mkdir(parents=True, exist_ok=True)
        mdir = memory_dir(home.projects, cwd)
        mdir.mkdir(parents=True)
        (mdir / "project_retry.md").write_text(CLAUDE_MEMORY)
        old = time.time() - 3600
        os.utime(mdir / "project_retry.md", (old, old))
        proc = start_memd(home)
        try:
            written = remember(home, cwd, "release", "Releases: see README.md:2-3 for the steps.")
            front = (mdir / written["file"]).read_text().split("---")[1]
            (cited,) = yaml.safe_load(front)["citations"]
            head = repo.git("rev-parse", "HEAD").strip()
            assert cited["path"] == "README.md" and cited["lines"] == "2-3"
            assert (cited["commit"], cited["branch"]) == (head, "main")
            fresh = call(home, "recall", {"query": "retry backoff release", "cwd": str(cwd)})
            assert {m["relative"]: m["checks"] for m in fresh["memories"]} == {
                "project_retry.md": [],
                written["file"]: [],
            }
            # Now the code moves on: the retry file is renamed, the readme edited.
            with disarmed(repo):
                repo.git("mv", "src/retry.py", "src/net_retry.py")
                repo.write("README.md", "rewritten\n" * 5)
                repo.git("add", "README.md")
                repo.git("commit", "-q", "-m", "move retry, rewrite the readme")
            result = call(home, "recall", {"query": "retry backoff release", "cwd": str(cwd)})
            checks = {m["relative"]: m["checks"] for m in result["memories"]}
            assert checks["project_retry.md"] == [
                "src/retry.py (cited) no longer exists; git saw it renamed to src/net_retry.py"
            ]
            assert checks[written["file"]] == [
                "lines 2-3 of README.md changed since this memory was written: "
                f"1 commit has touched README.md since {head[:10]}"
            ]
            assert all(m["verified"] is False for m in result["memories"])

            injected = hook_prompt(home, cwd, "where is the retry backoff?")
            assert "Checked against the code now: src/retry.py (cited) no longer exists" in (
                injected
            )
            listed = memdctl(home, "memories", str(cwd), "--check")
            assert listed.returncode == 0, listed.stderr
            assert "project_retry.md: FAILS (src/retry.py:1-2)" in listed.stdout
            assert "git saw it renamed to src/net_retry.py" in listed.stdout
            assert ran(canaries) == []
        finally:
            assert stop_memd(proc) == 0, read_log(home)
    assert ran(canaries) == []


def test_a_failing_memory_ranks_below_one_that_verifies(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "proj")
    repo.write("a.py", "def alpha():\n    pass\n")
    repo.write("b.py", "def beta():\n    pass\n")
    repo.commit()
    with fake_home(tmp_path / "home") as home:
        home.root.mkdir(parents=True, exist_ok=True)
        proc = start_memd(home)
        try:
            for name, path in (("deploy alpha", "a.py"), ("deploy beta", "b.py")):
                remember(home, repo.root, name, f"Deploy steps start in {path}:1-2.")
            query = {"query": "deploy alpha beta", "cwd": str(repo.root)}
            before = [m["relative"] for m in call(home, "recall", query)["memories"]]
            first = before[0]
            failing = "a.py" if "alpha" in first else "b.py"
            repo.write(failing, "gone\n")
            after = call(home, "recall", query)["memories"]
            assert [m["relative"] for m in after] == [before[1], first]
            assert [m["verified"] for m in after] == [True, False]
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_a_verified_next_candidate_takes_a_failing_memorys_place(tmp_path: Path) -> None:
    """With room for one memory, the ranker's best whose citations all fail gives its place
    to the next candidate that verifies; once that one fails too, the best is back first."""
    repo = Repo(tmp_path / "proj")
    repo.write("a.py", "def alpha():\n    pass\n")
    repo.write("b.py", "def beta():\n    pass\n")
    repo.commit()
    with fake_home(tmp_path / "home") as home:
        home.root.mkdir(parents=True, exist_ok=True)
        proc = start_memd(home, "--set", "memory.recall_max=1")
        try:
            cited = {}
            for name, path in (("deploy alpha", "a.py"), ("deploy beta", "b.py")):
                written = remember(home, repo.root, name, f"Deploy steps start in {path}:1-2.")
                cited[written["file"]] = path
            query = {"query": "deploy steps", "cwd": str(repo.root)}
            (best,) = call(home, "recall", query)["memories"]
            assert best["verified"] is True
            (other,) = set(cited) - {best["relative"]}
            repo.write(cited[best["relative"]], "gone\n")
            (instead,) = call(home, "recall", query)["memories"]
            assert (instead["relative"], instead["verified"]) == (other, True)
            repo.write(cited[other], "gone too\n")
            (back,) = call(home, "recall", query)["memories"]
            assert (back["relative"], back["verified"]) == (best["relative"], False)
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_checks_are_off_with_the_config_key(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "proj")
    repo.write("a.py", "def alpha():\n    pass\n")
    repo.commit()
    with fake_home(tmp_path / "home") as home:
        config = home.root / ".config" / "memd" / "config.yaml"
        config.parent.mkdir(parents=True)
        config.write_text("memory:\n  verify_citations: false\n")
        proc = start_memd(home)
        try:
            written = remember(home, repo.root, "alpha", "Alpha is in a.py:1-2.")
            mdir = memory_dir(home.projects, repo.root)
            assert "citations" not in (mdir / written["file"]).read_text()
            repo.write("a.py", "gone\n")
            result = call(home, "recall", {"query": "alpha", "cwd": str(repo.root)})
            (memory,) = result["memories"]
            assert (memory["checks"], memory["verified"]) == ([], None)
        finally:
            assert stop_memd(proc) == 0, read_log(home)
