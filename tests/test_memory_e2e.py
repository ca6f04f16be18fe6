"""Persistent memory through the real daemon: the hook command for each documented event,
recall and memories over the socket, memdctl recall — with no API key (lexical recall)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import memd_client
from memd.memory.paths import memory_dir
from memd_client.hooks_install import MemdHook, parse_memd_hook, undetached
from tests.daemon_harness import (
    Home,
    call,
    fake_home,
    read_log,
    start_memd,
    stop_memd,
    wait_features,
)

pytestmark = pytest.mark.slow

MEMORIES = {
    "feedback_tests.md": (
        "feedback",
        "Run the test suite with scripts/check, never bare pytest",
        "The user wants `scripts/check` used: it runs ruff, mypy and pytest together.",
    ),
    "project_release.md": (
        "project",
        "Releases are cut from the release branch every Thursday",
        "Tag on the release branch; CI publishes the wheel.",
    ),
    "user_role.md": (
        "user",
        "The user is a backend engineer who prefers terse answers",
        "Keep explanations short; show code first.",
    ),
}


def write_memories(home: Home, cwd: Path, age_days: float) -> Path:
    mdir = memory_dir(home.projects, cwd)
    mdir.mkdir(parents=True)
    index = []
    old = time.time() - age_days * 86400
    for name, (kind, desc, body) in MEMORIES.items():
        path = mdir / name
        path.write_text(
            f"---\nname: {name[:-3]}\ndescription: {desc}\ntype: {kind}\n---\n\n{body}\n"
        )
        os.utime(path, (old, old))
        index.append(f"- [{name[:-3]}]({name}) — {desc}")
    (mdir / "MEMORY.md").write_text("\n".join(index) + "\n")
    return mdir


def registered_hook(home: Home) -> str:
    """The hook command ``memdctl install-hooks`` writes to Claude Code's settings, run from
    an interpreter and a package whose paths hold a space, quotes and a dollar sign.

    A link to the interpreter in another folder is outside any venv it came from (Python finds
    ``pyvenv.cfg`` beside the path it was started by), so ``memdctl`` gets this process's import
    path: the test holds however the interpreter and the packages were installed."""
    awkward = home.root / 'memd\'s "$HOME" install'
    awkward.mkdir()
    (awkward / "python3").symlink_to(sys.executable)
    (awkward / "memd_client").symlink_to(Path(memd_client.__file__).parent)
    env = {**home.env, "PYTHONPATH": os.pathsep.join([str(awkward), *filter(None, sys.path)])}
    done = subprocess.run(
        [str(awkward / "python3"), "-m", "memd_client.cli", "install-hooks"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    settings = json.loads((home.root / ".claude" / "settings.json").read_text())
    commands = {h["command"] for g in settings["hooks"].values() for h in g[0]["hooks"]}
    commands = {undetached(c) or c for c in commands}  # SessionEnd's runs in the background
    assert len(commands) == 1
    command: str = commands.pop()
    assert parse_memd_hook(command) == MemdHook(
        str(awkward / "python3"), str(awkward / "memd_client" / "hook.py"), "interpreter"
    )
    return command


def hook(home: Home, event: dict[str, Any], command: str) -> subprocess.CompletedProcess[bytes]:
    """The hook as Claude Code runs it: the registered command through bash, in the project."""
    return subprocess.run(
        ["bash", "-c", command],
        input=json.dumps(event).encode(),
        env=home.env,
        cwd=event.get("cwd"),
        capture_output=True,
        timeout=30,
    )


def context_of(done: subprocess.CompletedProcess[bytes], event: str) -> str:
    assert done.returncode == 0 and done.stderr == b""
    out = json.loads(done.stdout)
    assert out["hookSpecificOutput"]["hookEventName"] == event
    text: str = out["hookSpecificOutput"]["additionalContext"]
    assert len(text.encode()) <= 8192
    return text


def test_hook_events_recall_and_memories(tmp_path: Path) -> None:
    cwd = tmp_path / "work" / "proj"
    cwd.mkdir(parents=True)
    # Claude Code's own auto memory off (forwarded by the hook): memd injects its index.
    with fake_home(tmp_path, CLAUDE_CODE_DISABLE_AUTO_MEMORY="1") as home:
        write_memories(home, cwd, age_days=3)
        command = registered_hook(home)
        proc = start_memd(home)
        try:
            wait_features(home)  # a hook sent while they load waits past its budget
            common = {"session_id": "sess-1", "cwd": str(cwd), "transcript_path": "/nonexistent"}
            start = context_of(
                hook(
                    home,
                    {**common, "hook_event_name": "SessionStart", "source": "startup"},
                    command,
                ),
                "SessionStart",
            )
            assert "Run the test suite with scripts/check" in start

            prompt = {
                **common,
                "hook_event_name": "UserPromptSubmit",
                "prompt": "how should I run the test suite before committing?",
            }
            recalled = context_of(hook(home, prompt, command), "UserPromptSubmit")
            assert "feedback_tests.md" in recalled
            assert "3 days ago" in recalled
            # The same session is not shown the same memory twice.
            again = hook(home, prompt, command)
            assert again.returncode == 0
            assert b"feedback_tests.md" not in again.stdout

            stop = hook(
                home, {**common, "hook_event_name": "Stop", "stop_hook_active": False}, command
            )
            assert (stop.returncode, stop.stdout, stop.stderr) == (0, b"", b"")

            result = call(home, "recall", {"query": "when do we release?", "cwd": str(cwd)})
            assert result["method"] == "lexical"
            top = result["memories"][0]
            assert top["relative"] == "project_release.md"
            assert top["age"] == "3 days ago" and "3 days" in top["warning"]
            assert result["caveat"]

            rows = call(home, "memories", {"cwd": str(cwd)})["memories"]
            assert sorted(r["relative"] for r in rows) == sorted(MEMORIES)

            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "memd_client.cli",
                    "recall",
                    "release branch",
                    "--project",
                    str(cwd),
                ],
                env=home.env,
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert done.returncode == 0, done.stderr
            assert "project_release.md" in done.stdout
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_opted_out_project_gets_nothing(tmp_path: Path) -> None:
    cwd = tmp_path / "work" / "secret"
    cwd.mkdir(parents=True)
    (cwd / ".memd-ignore").write_text("")
    with fake_home(tmp_path) as home:
        write_memories(home, cwd, age_days=0)
        command = registered_hook(home)
        proc = start_memd(home)
        try:
            wait_features(home)  # else a hook that timed out would pass for one opted out
            event = {
                "session_id": "s",
                "cwd": str(cwd),
                "hook_event_name": "SessionStart",
                "source": "startup",
            }
            done = hook(home, event, command)
            assert (done.returncode, done.stdout) == (0, b"")
            assert call(home, "memory_index", {"cwd": str(cwd)})["opted_out"]
        finally:
            assert stop_memd(proc) == 0
