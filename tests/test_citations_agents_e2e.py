"""Citations of memories the agents write, in a repository whose config names canaries
(issue 26): a memory extraction and a dream run through the real daemon against the loopback
model server, for a session working in the armed repository; the extracted memory's
citations are inferred from its text and checked at recall and injection, and no canary runs
at any step."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from memd.memory.citations import from_frontmatter
from memd.memory.frontmatter import parse_document
from memd.memory.paths import memory_dir
from memd.testing.loopback_process import LoopbackProcess
from tests.daemon_harness import Home, call, fake_home, read_log, start_memd, stop_memd, wait_for
from tests.test_git_hostile import disarmed, hostile_repository, ran
from tests.test_memory_links_e2e import (
    MEMORY_DIR_RE,
    MEMORY_SYSTEM,
    extracted,
    hook,
    memdctl,
    transcript,
)

pytestmark = pytest.mark.slow

DREAM_SYSTEM = "tidy a project's long-term memory"

LEARNT = (
    "---\nname: retry backoff\ndescription: where the retry backoff lives\ntype: project\n"
    "---\n\nThe retry backoff is `backoff()` in src/retry.py:1-2; it caps at 60 s.\n"
)


def extraction_script() -> str:
    """The extraction agent writes one memory that cites the repository, then ends."""
    write = {"file_path": "{dir}/project_retry.md", "content": LEARNT}
    rules: list[dict[str, Any]] = [
        {
            "when": {"system_match": MEMORY_SYSTEM, "turn": "first", "match": MEMORY_DIR_RE},
            "reply": {"tool_use": {"name": "Write", "input": write}},
        },
        {
            "when": {"system_match": MEMORY_SYSTEM, "turn": "after_tool"},
            "reply": {"text": "Saved one memory."},
        },
    ]
    return "".join(json.dumps(r) + "\n" for r in rules)


def stop_and_extract(home: Home, mdir: Path, cwd: Path, session: str) -> None:
    """Once the daemon's model is on, a session in ``cwd`` that ends its turn (its Stop hook)
    gets a memory extracted into ``mdir``."""
    wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=30, what="the model")
    transcript(mdir.parent, cwd, session)
    event = {
        "session_id": session,
        "cwd": str(cwd),
        "transcript_path": str(mdir.parent / f"{session}.jsonl"),
        "stop_hook_active": False,
        "hook_event_name": "Stop",
    }
    call(home, "hook", {"event": "Stop", "input": event})
    wait_for(lambda: extracted(home, mdir), timeout=60, what="the memory extraction")


def test_extraction_and_dream_in_a_hostile_repository_run_no_canary(tmp_path: Path) -> None:
    repo, canaries, _ = hostile_repository(tmp_path)
    with (
        fake_home(tmp_path / "home", CLAUDE_CODE_DISABLE_AUTO_MEMORY="1") as home,
        LoopbackProcess() as api,
    ):
        home.root.mkdir(parents=True, exist_ok=True)
        mdir = memory_dir(home.projects, repo.root)
        mdir.mkdir(parents=True)
        api.add_script(extraction_script())
        home.env.update(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="test")
        proc = start_memd(
            home,
            "--set",
            "memory.extract_beside_claude_code=true",
            "--set",
            "memory.beside_wait_s=0",
        )
        try:
            stop_and_extract(home, mdir, repo.root, "sess-c")
            assert (mdir / "project_retry.md").read_text().endswith(LEARNT.split("---\n")[-1])
            dream = memdctl(home, "dream", str(repo.root), "--force", "--wait", "--json")
            assert dream.returncode == 0, dream.stderr
            assert json.loads(dream.stdout)["state"] == "completed", dream.stdout
            query = {"query": "where is the retry backoff", "cwd": str(repo.root)}
            (fresh,) = call(home, "recall", query)["memories"]
            assert (fresh["citations"], fresh["checks"]) == (["src/retry.py:1-2"], [])
            with disarmed(repo):
                repo.write("src/retry.py", "def retry_after(n):\n    return n\n")
            (stale,) = call(home, "recall", {**query, "query": "retry backoff caps"})["memories"]
            assert "backoff is no longer in src/retry.py" in stale["checks"]
            injected = hook(home, repo.root, "UserPromptSubmit", prompt="the retry backoff?")
            assert "Checked against the code now: backoff is no longer in src/retry.py" in (
                injected
            )
            assert ran(canaries) == []
        finally:
            assert stop_memd(proc) == 0, read_log(home)
    assert ran(canaries) == []


REWRITTEN = (
    "---\nname: retry backoff\ndescription: where the retry backoff lives\ntype: project\n"
    "---\n\nThe retry backoff is `backoff()` in src/retry.py; README.md:1-3 explains it.\n"
)


def dream_script() -> str:
    """The dream agent rewrites the extracted memory (it now cites the README too), then ends."""
    write = {"file_path": "project_retry.md", "content": REWRITTEN}
    rules = [
        {
            "when": {"system_match": DREAM_SYSTEM},
            "reply": {"tool_use": {"name": "Write", "input": write}},
            "times": 1,
        },
        {"when": {"system_match": DREAM_SYSTEM}, "reply": {"text": "Tidied."}, "times": 1},
    ]
    return "".join(json.dumps(r) + "\n" for r in rules)


def recorded(path: Path) -> dict[str, tuple[str | None, str | None, tuple[str, ...]]]:
    """The citations the memory file records: path → (commit, hash, symbols)."""
    cited = from_frontmatter(parse_document(path.read_text()).meta.extra)
    assert cited is not None, path.read_text()
    return {c.label: (c.commit, c.hash, c.symbols) for c in cited}


def test_extraction_and_dream_record_citations_a_restarted_daemon_checks(tmp_path: Path) -> None:
    repo, canaries, _ = hostile_repository(tmp_path)
    head = repo.git("rev-parse", "HEAD").strip()
    with (
        fake_home(tmp_path / "home", CLAUDE_CODE_DISABLE_AUTO_MEMORY="1") as home,
        LoopbackProcess() as api,
    ):
        home.root.mkdir(parents=True, exist_ok=True)
        mdir = memory_dir(home.projects, repo.root)
        mdir.mkdir(parents=True)
        api.add_script(extraction_script())
        api.add_script(dream_script())
        home.env.update(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="test")
        proc = start_memd(
            home,
            "--set",
            "memory.extract_beside_claude_code=true",
            "--set",
            "memory.beside_wait_s=0",
        )
        try:
            stop_and_extract(home, mdir, repo.root, "sess-r")
            wait_for(
                lambda: "citations:" in (mdir / "project_retry.md").read_text(),
                timeout=30,
                what="citations",
            )
            (commit, digest, symbols) = recorded(mdir / "project_retry.md")["src/retry.py:1-2"]
            assert (
                (commit, symbols) == (head, ("backoff",))
                and digest
                and re.fullmatch("[0-9a-f]{16}", digest)
            )
            dream = memdctl(home, "dream", str(repo.root), "--force", "--wait", "--json")
            assert dream.returncode == 0, dream.stderr
            assert json.loads(dream.stdout)["state"] == "completed", dream.stdout
            after = recorded(mdir / "project_retry.md")
            assert set(after) == {"src/retry.py", "README.md:1-3"}
            assert all(commit == head and digest for commit, digest, _ in after.values())
            assert parse_document((mdir / "project_retry.md").read_text()).body == (
                REWRITTEN.split("---\n")[-1].removeprefix("\n")
            )
        finally:
            assert stop_memd(proc) == 0, read_log(home)
        with disarmed(repo):
            repo.write("src/retry.py", "def retry_after(n):\n    return n\n")
        proc = start_memd(
            home,
            "--set",
            "memory.extract_beside_claude_code=true",
            "--set",
            "memory.beside_wait_s=0",
        )
        try:
            query = {"query": "where is the retry backoff", "cwd": str(repo.root)}
            (stale,) = call(home, "recall", query)["memories"]
            assert "backoff is no longer in src/retry.py" in stale["checks"], stale
            assert ran(canaries) == []
        finally:
            assert stop_memd(proc) == 0, read_log(home)
    assert ran(canaries) == []
