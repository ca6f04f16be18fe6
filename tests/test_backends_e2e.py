"""Issue 34's acceptance, on the real daemon: with no Anthropic key anywhere, real Claude Code,
Codex and Gemini sessions (tests/corpus, copied where each agent writes them while memd runs)
get notes and memories from a local OpenAI-compatible server found
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

from memd.memory.paths import memory_dir
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
    session_ids,
    start_memd,
    stop_memd,
    wait_for,
)
from tests.test_memory_links_e2e import MEMORY_DIR_RE, MEMORY_SYSTEM

pytestmark = pytest.mark.slow

CORPUS = Path(__file__).parent / "corpus"
REAL = {  # a real session of each agent (tests/corpus)
    "claude": CORPUS / "claude-code-2.1.331" / "f7dce3d6-f41d-4e48-922a-2def94740327.jsonl",
    "codex": CORPUS
    / "agents"
    / "codex-0.169.0"
    / "rollout-2026-11-26T06-42-28-01a21697-5f81-70d2-ac50-a2e65a3302d4.jsonl",
    "gemini": CORPUS / "agents" / "gemini-cli-0.61.0" / "session-2026-11-26T06-48-a795b61b.jsonl",
}

TUNING = (
    "--set",  # the corpus's Gemini chat was recorded against a model reporting ~10 tokens
    "session_notes.init_tokens=1",
    "--set",
    "memory.extraction_quiet_s=0.2",
    "--set",
    "memory.extract_beside_claude_code=true",
    "--set",  # judged at once: no Claude Code of its own writes here
    "memory.beside_wait_s=0",
    "--set",  # a short session still has messages the notes stand in for
    "compaction.keep_min_tokens=60",
    "--set",
    "compaction.keep_min_text_messages=2",
)


@pytest.fixture
def server() -> Iterator[LoopbackAPI]:
    with LoopbackAPI(context_limit=1_000_000) as api:
        yield api


def real_sessions(tmp_path: Path, home: Home, repo: Path) -> dict[str, str]:
    """The corpus's sessions copied where each agent writes them, as the agent would; each
    agent's session by the id memd shows for it (as a user finds it: ``memdctl sessions``)."""
    claude = home.projects / "-home-user-proj" / REAL["claude"].name
    codex = tmp_path / ".codex" / "sessions" / "2026" / "11" / "26" / REAL["codex"].name
    gemini = tmp_path / ".gemini" / "tmp" / "repo"
    for folder in (claude.parent, codex.parent, gemini / "chats"):
        folder.mkdir(parents=True, exist_ok=True)
    (gemini / ".project_root").write_text(str(repo))
    written = {"claude": claude, "codex": codex, "gemini": gemini / "chats" / REAL["gemini"].name}
    for agent, target in written.items():
        target.write_bytes(REAL[agent].read_bytes())
    return dict(zip(written, session_ids(home, *written.values()), strict=True))


def memory_of(home: Home, session: str) -> Path:
    """The memory dir of a session's project (its cwd's, as memd locates it)."""
    cwd = call(home, "session", {"session": session})["cwd"]
    return memory_dir(home.projects, Path(cwd))


def notes_saying(home: Home, session: str, words: str) -> bool:
    """Whether the session's notes (wherever its project's folder is) hold ``words``."""
    found = home.projects.glob(f"*/{session}/session-memory/summary.md")
    return any(words in path.read_text() for path in found)


def memories(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.md") if p.name != "MEMORY.md")


def forked_from_notes(home: Home, session: str) -> dict[str, Any]:
    fork: dict[str, Any] = call(home, "compact", {"session": session, "fork": True})
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
        local = f"llm.local_ports=['127.0.0.1:{port}']"
        proc = start_memd(home, *TUNING, "--set", local)
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
            ids = real_sessions(tmp_path, home, repo)  # written while memd runs, as agents do
            for agent, session in ids.items():
                wait_for(
                    partial(notes_saying, home, session, "Step "),
                    timeout=60,
                    what=f"the {agent} session's notes from the local model",
                )
                where = wait_for(partial(memory_of, home, session), timeout=30, what="its cwd")
                wait_for(partial(memories, where), timeout=60, what=f"{agent}'s memories")
            fork = forked_from_notes(home, ids["claude"])  # the real session, from notes
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
            ids = real_sessions(tmp_path, home, repo)
            for agent, session in ids.items():
                wait_for(
                    partial(notes_saying, home, session, "Step on Gemini"),
                    timeout=60,
                    what=f"the {agent} session's notes from Gemini",
                )
                where = wait_for(partial(memory_of, home, session), timeout=30, what="its cwd")
                wait_for(
                    (where / "project_deploy.md").exists,
                    timeout=60,
                    what=f"the memory from the {agent} session",
                )
            fork = forked_from_notes(home, ids["claude"])
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
