"""Recall prefers what agents used (issue 36, item 3), through the real daemon: two memories a
prompt matches alike are both injected into a Claude Code session by memd's hook; the answer
in the session's transcript quotes the one that came second; after the turn's Stop, that one
comes first."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from memd.memory.paths import memory_dir, project_slug
from tests.daemon_harness import (
    Home,
    claude_hook,
    fake_home,
    memdctl,
    read_log,
    start_memd,
    stop_memd,
    wait_for,
)
from tests.session_support import TranscriptBuilder

pytestmark = pytest.mark.slow

QUERY = "how do deploys go out?"
BODIES = {
    "deploy_api.md": "Deploys of the api go out with `make ship-api` from the release host.",
    "deploy_web.md": "Deploys of the web go out with `make ship-web` from the release host.",
}


def project(home: Home) -> Path:
    repo = home.root / "work" / "repo"
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    folder = memory_dir(home.projects, repo)
    folder.mkdir(parents=True)
    for name, body in BODIES.items():
        text = f"---\nname: {name[:-3]}\ndescription: deploys\ntype: project\n---\n\n{body}\n"
        (folder / name).write_text(text)
    return repo


def recalled(home: Home, repo: Path) -> list[str]:
    done = memdctl(home, "--json", "recall", QUERY, "--project", str(repo))
    assert done.returncode == 0, done.stderr
    return [m["relative"] for m in json.loads(done.stdout)["memories"]]


def session_using(home: Home, repo: Path, used: str) -> None:
    """A Claude Code session: the prompt (memd's hook injects), an answer quoting ``used``'s
    command, the Stop."""
    builder = TranscriptBuilder("s-used")
    transcript = home.projects / project_slug(str(repo)) / "s-used.jsonl"
    transcript.parent.mkdir(parents=True, exist_ok=True)
    session, path = "s-used", str(transcript)
    hooked = claude_hook(
        home, repo, "UserPromptSubmit", prompt=QUERY, session_id=session, transcript_path=path
    )
    assert used in hooked.stdout.decode(), hooked
    builder.user(QUERY)
    command = BODIES[used].split("`")[1]
    answer = f"Run `{command}`."
    builder.assistant(answer)
    for line in builder.lines:
        line["cwd"] = str(repo)
    transcript.write_bytes(builder.jsonl())
    stopped = claude_hook(
        home, repo, "Stop", last_assistant_message=answer, session_id=session, transcript_path=path
    )
    assert stopped.returncode == 0, stopped


def test_a_memory_the_agent_used_comes_first_in_the_next_recall(tmp_path: Path) -> None:
    with fake_home(tmp_path, CLAUDE_CODE_DISABLE_AUTO_MEMORY="1") as home:
        repo = project(home)
        proc = start_memd(home)
        try:
            before = recalled(home, repo)
            assert sorted(before) == sorted(BODIES), before
            second = before[1]
            session_using(home, repo, second)

            def used() -> bool:
                done = memdctl(home, "--json", "memories", str(repo))
                rows = {r["relative"]: r for r in json.loads(done.stdout)["memories"]}
                return bool(rows[second]["used"] == 1 and rows[before[0]]["used"] == 0)

            wait_for(used, timeout=30, what=f"the use of {second}")
            assert recalled(home, repo) == [second, before[0]]
        finally:
            assert stop_memd(proc) == 0, read_log(home)
