"""Issue 34's acceptance, on the real daemon: with no Anthropic key anywhere, Claude Code,
Codex and Gemini sessions get notes and memories from a local OpenAI-compatible server found
on its port (the whole-answer protocol), or from the Gemini API (the tool loop), and
``compact --fork`` serves from those notes with no model call; ``reload`` switches backends
and ``status`` says which backend serves each job and why."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from memd.memory.paths import memory_dir, project_slug
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_replies import When
from memd.testing.weak_model import WeakModel
from tests.daemon_harness import (
    Home,
    call,
    fake_home,
    memdctl,
    read_log,
    start_memd,
    stop_memd,
    wait_for,
)
from tests.session_support import write_work_session
from tests.test_memory_links_e2e import MEMORY_DIR_RE, MEMORY_SYSTEM
from tests.test_source_memory_e2e import CODEX_ID, GEMINI_CHAT, gemini_chat, rollout

pytestmark = pytest.mark.slow

CLAUDE_ID = "5d0c7f3e-1b2a-4c3d-9e8f-0a1b2c3d4e5f"
TUNING = (
    "--set",
    "session_notes.init_tokens=1000",
    "--set",
    "memory.extraction_quiet_s=0.2",
    "--set",
    "memory.extract_beside_claude_code=true",
    "--set",  # a short session still has messages the notes stand in for
    "compaction.keep_min_tokens=60",
    "--set",
    "compaction.keep_min_text_messages=2",
)


@pytest.fixture
def server() -> Iterator[LoopbackAPI]:
    with LoopbackAPI(context_limit=1_000_000) as api:
        yield api


def sessions(tmp_path: Path, home: Home, repo: Path) -> dict[str, Path]:
    """One session of each agent, each past the notes' first trigger and at a turn's end."""
    claude = write_work_session(home.projects / "-work-project", CLAUDE_ID, turns=3)
    day = tmp_path / ".codex" / "sessions" / "2026" / "11" / "26"
    day.mkdir(parents=True)
    codex = day / f"rollout-2026-11-26T06-42-28-{CODEX_ID}.jsonl"
    codex.write_bytes(rollout(repo, answered=True))
    folder = tmp_path / ".gemini" / "tmp" / "repo"
    (folder / "chats").mkdir(parents=True)
    (folder / ".project_root").write_text(str(repo))
    gemini = folder / "chats" / f"{GEMINI_CHAT}.jsonl"
    gemini.write_bytes(gemini_chat(answered=True))
    return {"claude": claude, "codex": codex, "gemini": gemini}


def notes_of(home: Home, repo: Path) -> dict[str, Path]:
    def at(folder: str, session: str) -> Path:
        return home.projects / folder / session / "session-memory" / "summary.md"

    slug = project_slug(str(repo))
    return {
        "claude": at("-work-project", CLAUDE_ID),
        "codex": at(slug, CODEX_ID),
        "gemini": at(slug, GEMINI_CHAT),
    }


def memories(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.md") if p.name != "MEMORY.md")


def forked_from_notes(home: Home) -> dict[str, Any]:
    fork: dict[str, Any] = call(home, "compact", {"session": CLAUDE_ID, "fork": True})
    return fork


def test_a_local_openai_compatible_server_alone_keeps_every_agents_notes_and_memories(
    tmp_path: Path, server: LoopbackAPI
) -> None:
    repo = tmp_path / "work" / "repo"
    (repo / ".git").mkdir(parents=True)
    server.models = ("qwen2.5-coder:7b",)
    server.set_handler(WeakModel(fault_every=0))
    port = server.url.rsplit(":", 1)[1]
    with fake_home(tmp_path, CLAUDE_CODE_DISABLE_AUTO_MEMORY="1") as home:
        proc = start_memd(home, *TUNING, "--set", f"llm.local_ports=['127.0.0.1:{port}']")
        try:
            llm = wait_for(
                lambda: (s := call(home, "status")["llm"])["enabled"] and s,
                timeout=30,
                what="the local server found on its port",
            )
            job = llm["jobs"]["session_notes"]
            assert (job["backend"], job["model"], job["protocol"]) == (
                "local",
                "qwen2.5-coder:7b",
                "whole",
            )
            assert "answers at" in job["why"] and "anthropic" in llm["turn_on"]
            sessions(tmp_path, home, repo)  # written while memd runs, as agents do
            notes = notes_of(home, repo)
            for agent, path in notes.items():
                wait_for(
                    lambda p=path: p.exists() and "Step " in p.read_text(),  # type: ignore[misc]
                    timeout=60,
                    what=f"the {agent} session's notes from the local model",
                )
            for where in (
                memory_dir(home.projects, repo),
                home.projects / "-work-project" / "memory",
            ):
                wait_for(partial(memories, where), timeout=60, what=f"memories in {where}")
            fork = forked_from_notes(home)
            assert fork["forked"] and fork["api_calls"] == 0, fork
            usage = call(home, "status")["usage"]
            local = usage["by_backend"]["local"]
            assert local["calls"] >= 5 and local["billed"] == 0 and local["ms"] > 0
            posts = [r for r in server.requests if r.method == "POST"]
            assert posts and all(r.path == "/v1/chat/completions" for r in posts)
            probe = call(home, "probe_api")
            assert probe["ok"] and set(probe["backends"]) == {"local"}, probe
            shown = memdctl(home, "status").stdout
            assert "session_notes   local qwen2.5-coder:7b (whole;" in shown, shown
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def tool_loop_rules(api: LoopbackAPI) -> None:
    """The Gemini model as the tool loop drives it: one Edit of the notes, one memory."""
    worklog = "_One terse line per step: what was tried and what came of it._\n"
    edit = {"old_string": worklog, "new_string": worklog + "- Step on Gemini\n"}
    api.add_rule(
        When(tool="Edit", turn="first", match="The notes file is (?P<path>/\\S+?summary\\.md)"),
        replies.tool_use("Edit", {"file_path": "{path}", **edit}),
    )
    memory = "---\nname: deploy\ndescription: How to deploy\ntype: project\n---\n\nmake ship\n"
    api.add_rule(
        When(system_match=MEMORY_SYSTEM, turn="first", match=MEMORY_DIR_RE),
        replies.tool_use("Write", {"file_path": "{dir}/project_deploy.md", "content": memory}),
    )
    api.add_rule(When(turn="after_tool"), replies.text("Done."))


def test_the_gemini_api_alone_keeps_every_agents_notes_and_memories(
    tmp_path: Path, server: LoopbackAPI
) -> None:
    repo = tmp_path / "work" / "repo"
    (repo / ".git").mkdir(parents=True)
    tool_loop_rules(server)
    config = tmp_path / "memd.yaml"
    config.write_text(f"llm:\n  find_local: false\n  gemini:\n    base_url: {server.url}\n")
    with fake_home(
        tmp_path,
        CLAUDE_CODE_DISABLE_AUTO_MEMORY="1",
        GEMINI_API_KEY="test",
        MEMD_CONFIG=str(config),
    ) as home:
        proc = start_memd(home, *TUNING)
        try:
            llm = wait_for(
                lambda: (s := call(home, "status")["llm"])["enabled"] and s,
                timeout=30,
                what="the Gemini backend",
            )
            assert {j["backend"] for j in llm["jobs"].values()} == {"gemini"}
            assert llm["jobs"]["dream"]["protocol"] == "tools"
            assert "GEMINI_API_KEY is set" in llm["jobs"]["recall"]["why"]
            sessions(tmp_path, home, repo)
            for agent, path in notes_of(home, repo).items():
                wait_for(
                    lambda p=path: p.exists() and "Step on Gemini" in p.read_text(),  # type: ignore[misc]
                    timeout=60,
                    what=f"the {agent} session's notes from Gemini",
                )
            wait_for(
                lambda: (memory_dir(home.projects, repo) / "project_deploy.md").exists(),
                timeout=60,
                what="the memory from the Codex and Gemini sessions",
            )
            fork = forked_from_notes(home)
            assert fork["forked"] and fork["api_calls"] == 0
            posts = [r for r in server.requests if r.method == "POST"]
            assert posts and all(":streamGenerateContent" in r.path for r in posts)
            assert all(r.headers.get("x-goog-api-key") == "test" for r in posts)
            # reload switches the backend: the key gone, the config naming a local server
            config.write_text(
                f"llm:\n  provider: openai\n  base_url: {server.url}/v1\n  find_local: false\n"
            )
            assert "reloaded" in json.dumps(call(home, "reload"))
            switched = call(home, "status")["llm"]
            assert switched["jobs"]["session_notes"]["backend"] == "openai"
            assert "gemini" in switched["found_unused"]
            doctor = memdctl(home, "doctor").stdout
            assert "openai serves" in doctor and "found, not used: gemini" in doctor, doctor
        finally:
            assert stop_memd(proc) == 0, read_log(home)
