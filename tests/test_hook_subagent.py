"""A hook event Claude Code fires inside a sub-agent (its input names ``agent_id`` and
``agent_type``, 2.1.69) is not the main session's: memd injects nothing into it, counts no
turn end and takes no compaction over (issue 25). The real hook client and a real daemon."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memd.memory.paths import memory_dir
from tests.daemon_harness import Home, claude_hook, fake_home, read_log, start_memd, stop_memd

BODY = "Deploys go through scripts/bg-deploy.sh with a 10 minute canary."
SUBAGENT = {"agent_id": "a31c5b6ea7d05f773", "agent_type": "general-purpose"}


def hook(home: Home, cwd: Path, event: str, **extra: Any) -> str:
    done = claude_hook(home, cwd, event, **{"session_id": "main-1", **extra})
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    return done.stdout.decode()


def test_a_subagents_hook_events_get_nothing_the_main_sessions_do(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        project = home.root / "proj"
        project.mkdir()
        settings = home.root / ".claude" / "settings.json"
        settings.parent.mkdir(parents=True)
        settings.write_text(json.dumps({"autoMemoryEnabled": False}))  # memd injects the index
        mdir = memory_dir(home.projects, project)
        mdir.mkdir(parents=True)
        (mdir / "MEMORY.md").write_text("- [Deploy](deploy.md) — how deploys work\n")
        memory = "---\nname: deploy\ndescription: how deploys work\ntype: project\n---\n\n"
        (mdir / "deploy.md").write_text(memory + BODY + "\n")
        proc = start_memd(home)
        try:
            prompt = "how do we deploy with the canary?"
            # What a main session gets: the index at its start, the memory on its prompt.
            assert "deploy.md" in hook(home, project, "SessionStart", source="startup")
            assert BODY in hook(home, project, "UserPromptSubmit", prompt=prompt)
            # The same events from a sub-agent of another session: nothing at all.
            sub = {**SUBAGENT, "session_id": "main-2"}
            assert hook(home, project, "SessionStart", source="startup", **sub) == ""
            assert hook(home, project, "UserPromptSubmit", prompt=prompt, **sub) == ""
            manual = {"trigger": "manual", "custom_instructions": ""}
            assert hook(home, project, "PreCompact", **manual, **sub) == ""
            # A main session started with --agent names agent_type alone: it is the main one.
            main = {"agent_type": "reviewer", "session_id": "main-3"}
            assert BODY in hook(home, project, "UserPromptSubmit", prompt=prompt, **main)
        finally:
            assert stop_memd(proc) == 0, read_log(home)
