"""One memory for every agent: a fact stated in a Codex session, or in a Gemini chat, is
extracted (the loopback model server standing in for the model) into the memory dir of the
session's git root, the one Claude Code loads, and a Claude Code hook in the same repository
then recalls it; the Codex session gets its notes as a Claude Code session does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memd.memory.paths import memory_dir, project_slug
from memd.testing.loopback_process import LoopbackProcess
from tests.daemon_harness import (
    Home,
    call,
    claude_hook,
    fake_home,
    read_log,
    start_memd,
    stop_memd,
    wait_for,
)
from tests.test_memory_links_e2e import MEMORY_SYSTEM, write_one_memory

pytestmark = pytest.mark.slow

FACT = "Deploys go out with `make ship`, never by hand."
LEARNT = (
    "---\nname: deploy command\ndescription: How this repository is deployed to production\n"
    "type: project\n---\n\nDeploys go out with `make ship`, never by hand.\n"
)
CODEX_ID = "01a21697-5f81-70d2-ac50-a2e65a3302d4"
NOTES_RE = "The notes file is (?P<path>/\\S+?summary\\.md)"
WORKLOG = "_One terse line per step: what was tried and what came of it._\n"
NOTES_EDIT = {
    "tool_use": {
        "name": "Edit",
        "input": {
            "file_path": "{path}",
            "old_string": WORKLOG,
            "new_string": WORKLOG + "- deploys: `make ship`\n",
        },
    }
}


def rollout(cwd: Path, *, answered: bool) -> bytes:
    """A Codex rollout of one turn whose prompt states :data:`FACT`; ``answered``: with the
    model's answer and the turn's end."""
    meta = {"id": CODEX_ID, "cwd": str(cwd), "source": "exec", "cli_version": "0.169.0"}
    lines: list[dict[str, Any]] = [
        {"type": "session_meta", "payload": meta},
        {"type": "turn_context", "payload": {"cwd": str(cwd)}},
        {
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": f"Note for later: {FACT}"}],
            },
        },
    ]
    if answered:
        usage = {"input_tokens": 12_000, "output_tokens": 20}  # past the notes' first trigger
        lines += [
            {
                "type": "response_item",
                "payload": {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Understood: `make ship`."}],
                },
            },
            {
                "type": "event_msg",
                "payload": {"type": "token_count", "info": {"last_token_usage": usage}},
            },
            {"type": "event_msg", "payload": {"type": "task_complete"}},
        ]
    return b"".join(json.dumps(x).encode() + b"\n" for x in lines)


def extraction_script() -> str:
    """The extraction agent writes the fact as one memory, then ends its turn."""
    rules: list[dict[str, Any]] = [
        *write_one_memory("deploy_command.md", LEARNT),
        {"when": {"tool": "Edit", "turn": "first", "match": NOTES_RE}, "reply": NOTES_EDIT},
        {"when": {"turn": "after_tool"}, "reply": {"text": "Done."}},
    ]
    return "".join(json.dumps(r) + "\n" for r in rules)


def claude_prompt(home: Home, cwd: Path, prompt: str) -> str:
    """The real hook client as Claude Code runs it on a prompt; what it injects."""
    done = claude_hook(home, cwd, "UserPromptSubmit", prompt=prompt)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode("utf-8", "replace")


def test_a_fact_from_a_codex_session_is_recalled_in_claude_code(tmp_path: Path) -> None:
    repo = tmp_path / "work" / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    with (
        fake_home(tmp_path, CLAUDE_CODE_DISABLE_AUTO_MEMORY="1") as home,
        LoopbackProcess() as api,
    ):
        api.add_script(extraction_script())
        home.env.update(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="test")
        day = tmp_path / ".codex" / "sessions" / "2026" / "11" / "26"
        day.mkdir(parents=True)
        path = day / f"rollout-2026-11-26T06-42-28-{CODEX_ID}.jsonl"
        mdir = memory_dir(home.projects, repo)
        proc = start_memd(home)
        try:
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=30, what="the model")
            path.write_bytes(rollout(repo / "src", answered=False))  # Codex ran in a subfolder
            wait_for(lambda: call(home, "sessions", {}), timeout=30, what="the Codex session")
            path.write_bytes(rollout(repo / "src", answered=True))
            wait_for(
                lambda: (mdir / "deploy_command.md").exists(),
                timeout=60,
                what="the memory extracted from the Codex session",
            )
            assert (mdir / "deploy_command.md").read_text() == LEARNT
            asked = json.dumps(
                [r for r in api.requests() if MEMORY_SYSTEM in json.dumps(r["body"].get("system"))]
            )
            assert "make ship" in asked  # the Codex conversation reached the extraction
            injected = claude_prompt(home, repo, "how do we deploy this to production?")
            assert "deploy_command.md" in injected or "make ship" in injected, injected
            row = call(home, "session", {"session": CODEX_ID})
            assert row["agent"] == "codex" and row["cwd"] == str(repo / "src")
            # Session notes too, where memd keeps them for the session's project.
            project = home.projects / project_slug(str(repo / "src"))
            notes = project / CODEX_ID / "session-memory" / "summary.md"
            wait_for(
                lambda: notes.exists() and "make ship" in notes.read_text(),
                timeout=60,
                what="the Codex session's notes",
            )
        finally:
            assert stop_memd(proc) == 0, read_log(home)


GEMINI_CHAT = "session-2026-11-26T06-48-a795b61b"


def gemini_chat(*, answered: bool) -> bytes:
    """A Gemini chat of one turn whose prompt states :data:`FACT` (as the CLI writes it: a
    header, the start's ``$set``, the prompt, the answer upserted)."""
    lines: list[dict[str, Any]] = [
        {"sessionId": "a795b61b-c6fd-41fc-bbd3-8abb79ce05cc", "kind": "main"},
        {"$set": {"messages": [{"id": "ctx", "type": "user", "content": [{"text": "<ctx>"}]}]}},
        {"id": "p1", "type": "user", "content": [{"text": f"Note for later: {FACT}"}]},
    ]
    if answered:
        tokens = {"input": 1200, "output": 20}
        answer = {"id": "g1", "type": "gemini", "content": "Understood.", "tokens": tokens}
        lines += [{**answer, "content": ""}, {"$set": {"lastUpdated": "now"}}, answer]
    return b"".join(json.dumps(x).encode() + b"\n" for x in lines)


def test_a_fact_from_a_gemini_chat_is_recalled_in_claude_code(tmp_path: Path) -> None:
    repo = tmp_path / "work" / "repo"
    (repo / ".git").mkdir(parents=True)
    with (
        fake_home(tmp_path, CLAUDE_CODE_DISABLE_AUTO_MEMORY="1") as home,
        LoopbackProcess() as api,
    ):
        api.add_script(extraction_script())
        home.env.update(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="test")
        folder = tmp_path / ".gemini" / "tmp" / "repo"
        (folder / "chats").mkdir(parents=True)
        (folder / ".project_root").write_text(str(repo))
        path = folder / "chats" / f"{GEMINI_CHAT}.jsonl"
        mdir = memory_dir(home.projects, repo)
        proc = start_memd(home)
        try:
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=30, what="the model")
            path.write_bytes(gemini_chat(answered=False))
            wait_for(lambda: call(home, "sessions", {}), timeout=30, what="the Gemini chat")
            path.write_bytes(gemini_chat(answered=True))
            wait_for(
                lambda: (mdir / "deploy_command.md").exists(),
                timeout=60,
                what="the memory extracted from the Gemini chat",
            )
            asked = json.dumps(
                [r for r in api.requests() if MEMORY_SYSTEM in json.dumps(r["body"].get("system"))]
            )
            assert "make ship" in asked
            injected = claude_prompt(home, repo, "how do we deploy this to production?")
            assert "deploy_command.md" in injected or "make ship" in injected, injected
            assert call(home, "session", {"session": "a795b61b"})["agent"] == "gemini"
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_a_codex_stop_before_its_rollout_is_read_is_the_turn_end(tmp_path: Path) -> None:
    """``codex exec`` runs its Stop hook as it ends, often before the daemon has read the
    rollout: the Stop waits for the session's first growth, and no quiet period is needed."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    with fake_home(tmp_path) as home, LoopbackProcess() as api:
        api.add_script(extraction_script())
        config = tmp_path / "memd.yaml"
        config.write_text("memory:\n  extraction_quiet_s: 600\n")
        home.env.update(MEMD_CONFIG=str(config), ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="t")
        day = tmp_path / ".codex" / "sessions" / "2026" / "11" / "26"
        day.mkdir(parents=True)
        proc = start_memd(home)
        try:
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=30, what="the model")
            stop = {
                "session_id": CODEX_ID,
                "cwd": str(repo),
                "hook_event_name": "Stop",
                "last_assistant_message": "Understood: `make ship`.",
            }
            done = subprocess.run(
                [sys.executable, "-m", "memd_client.hook", "codex"],
                input=json.dumps(stop).encode(),
                env=home.env,
                capture_output=True,
                timeout=60,
            )
            assert done.returncode == 0 and not done.stdout.strip(), done
            path = day / f"rollout-2026-11-26T06-42-28-{CODEX_ID}.jsonl"
            path.write_bytes(rollout(repo, answered=True))
            mdir = memory_dir(home.projects, repo)
            wait_for(
                lambda: (mdir / "deploy_command.md").exists(),
                timeout=60,
                what="the memory extracted at the Codex Stop",
            )
        finally:
            assert stop_memd(proc) == 0, read_log(home)
