"""``memd-mcp`` end to end: the real server process, the SDK's client over stdio, the real
daemon. Tools and schemas, remember → recall in a fresh session, read_memory, redaction,
the Claude Code hook seeing what another agent saved, and failing open with the daemon down."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from mcp_types import TextResourceContents

from memd.memory.paths import memory_dir, project_slug
from tests.daemon_harness import Home, claude_hook, fake_home, start_memd, stop_memd
from tests.mcp_support import call, mcp_session, text_of

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

TOOLS = {"recall", "list_memories", "read_memory", "remember", "session_notes", "memory_status"}


def make_project(tmp_path: Path) -> Path:
    repo = tmp_path / "work" / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    return repo


def hook_prompt(home: Home, cwd: Path, prompt: str) -> str:
    done = claude_hook(home, cwd, "UserPromptSubmit", timeout=30, prompt=prompt)
    assert done.returncode == 0 and done.stderr == b""
    text: str = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    return text


async def test_tools_remember_recall_read_and_the_hook(tmp_path: Path) -> None:
    repo = make_project(tmp_path)
    with fake_home(tmp_path) as home:
        proc = start_memd(home)
        try:
            async with mcp_session(home, repo / "src", client="codex-test") as session:
                listed = {t.name: t for t in (await session.list_tools()).tools}
                assert set(listed) == TOOLS
                for tool in listed.values():
                    assert tool.description and len(tool.description) > 60
                    assert tool.input_schema["type"] == "object"
                schema = listed["remember"].input_schema
                assert set(schema["required"]) == {"type", "name", "description", "content"}
                assert schema["properties"]["type"]["enum"] == [
                    "user",
                    "feedback",
                    "project",
                    "reference",
                ]
                assert listed["recall"].input_schema["required"] == ["query"]
                saved = await call(
                    session,
                    "remember",
                    {
                        "type": "feedback",
                        "name": "Release checklist",
                        "description": "Bump the changelog before tagging a release",
                        "content": "Always bump CHANGELOG.md before tagging a release tarball.",
                    },
                )
                assert not saved.is_error, text_of(saved)
                assert "Saved feedback_release_checklist.md" in text_of(saved)

            # A fresh session (a new server process) finds it, with its age.
            async with mcp_session(home, repo) as session:
                found = await call(session, "recall", {"query": "tagging a release tarball"})
                text = text_of(found)
                assert not found.is_error and "Release checklist" in text
                assert "(today)" in text and "CHANGELOG.md" in text and "stale" in text
                read = text_of(await call(session, "read_memory", {"name": "Release checklist"}))
                assert "written by: codex-test" in read and "Always bump CHANGELOG.md" in read
                listing = text_of(await call(session, "list_memories", {}))
                assert "[feedback] feedback_release_checklist.md (today)" in listing
                status = text_of(await call(session, "memory_status", {}))
                assert "memories: 1" in status and f"project root: {repo}" in status
                resources = (await session.list_resources()).resources
                uris = {str(r.uri) for r in resources}
                assert uris == {
                    "memd://memory/MEMORY.md",
                    "memd://memory/feedback_release_checklist.md",
                }
                index = (await session.read_resource("memd://memory/MEMORY.md")).contents[0]
                assert isinstance(index, TextResourceContents)
                assert "[Release checklist](feedback_release_checklist.md)" in index.text

            # Claude Code's hook, in the same project, injects what the other agent saved.
            injected = hook_prompt(home, repo / "src", "how do I tag a release tarball?")
            assert "feedback_release_checklist.md" in injected
            assert "Always bump CHANGELOG.md" in injected
            assert (memory_dir(home.projects, repo) / "feedback_release_checklist.md").is_file()
        finally:
            stop_memd(proc)


async def test_planted_secrets_and_private_spans_come_back_redacted(tmp_path: Path) -> None:
    repo = make_project(tmp_path)
    with fake_home(tmp_path) as home:
        mdir = memory_dir(home.projects, repo)
        mdir.mkdir(parents=True)
        planted = mdir / "reference_deploy.md"
        planted.write_text(
            "---\nname: Deploy access\ndescription: how deploys authenticate\n"
            "type: reference\n---\n\nDeploys use key sk-ant-api03-" + "x" * 40 + " and the "
            "<private>office door code 4711</private> is not needed.\n"
        )
        old = time.time() - 5 * 86400
        os.utime(planted, (old, old))
        (mdir / "MEMORY.md").write_text("- [Deploy access](reference_deploy.md) — deploys\n")
        proc = start_memd(home)
        try:
            async with mcp_session(home, repo) as session:
                texts = [
                    text_of(await call(session, "read_memory", {"name": "reference_deploy.md"})),
                    text_of(await call(session, "recall", {"query": "how deploys authenticate"})),
                ]
                resource = await session.read_resource("memd://memory/reference_deploy.md")
                content = resource.contents[0]
                assert isinstance(content, TextResourceContents)
                texts.append(content.text)
            for text in texts:
                assert "sk-ant-api03" not in text and "4711" not in text, text
                assert "[REDACTED:anthropic_key]" in text and "[private]" in text
                assert "5 days ago" in text
        finally:
            stop_memd(proc)


async def test_remember_honours_the_opt_out_and_limits(tmp_path: Path) -> None:
    repo = make_project(tmp_path)
    with fake_home(tmp_path) as home:
        proc = start_memd(home)
        try:
            async with mcp_session(home, repo) as session:
                big = await call(
                    session,
                    "remember",
                    {"type": "project", "name": "n", "description": "d", "content": "x" * 5000},
                )
                assert big.is_error and "mcp.remember_max_bytes" in text_of(big)
                assert not memory_dir(home.projects, repo).exists()
                secret = "deploy with sk-ant-api03-" + "k" * 40 + " <private>my pin 9931</private>"
                args = {"type": "project", "name": "Deploy", "description": "d", "content": secret}
                saved = text_of(await call(session, "remember", args))
                assert "Removed before writing: anthropic_key ×1, private ×1" in saved
                written = (memory_dir(home.projects, repo) / "project_deploy.md").read_text()
                assert "sk-ant-api03" not in written and "9931" not in written
                (repo / ".memd-ignore").touch()
                off = await call(session, "remember", {**args, "name": "Other"})
                assert off.is_error and ".memd-ignore" in text_of(off)
                listing = await call(session, "list_memories", {})
                assert "Memory is off for this project" in text_of(listing)
            files = sorted(p.name for p in memory_dir(home.projects, repo).iterdir())
            assert files == ["MEMORY.md", "project_deploy.md"]
        finally:
            stop_memd(proc)


async def test_home_is_refused_roots_and_claude_project_dir_name_the_project(
    tmp_path: Path,
) -> None:
    with fake_home(tmp_path) as home:
        proc = start_memd(home)
        try:
            async with mcp_session(home, tmp_path) as session:
                refused = await call(session, "list_memories", {})
                assert refused.is_error and "home directory" in text_of(refused)
                assert "`project` argument" in text_of(refused)
                repo = make_project(tmp_path)
                named = await call(session, "list_memories", {"project": str(repo)})
                assert not named.is_error and "No memories yet" in text_of(named)
            # The client's root, else CLAUDE_PROJECT_DIR, names the project instead of the cwd.
            other = tmp_path / "work" / "other"
            (other / ".git").mkdir(parents=True)
            env = {"CLAUDE_PROJECT_DIR": str(repo)}
            async with mcp_session(home, tmp_path, env=env, roots=[other / "sub"]) as session:
                (other / "sub").mkdir()
                status = text_of(await call(session, "memory_status", {}))
                assert f"project root: {other}\n" in status
            async with mcp_session(home, tmp_path, env=env) as session:
                status = text_of(await call(session, "memory_status", {}))
                assert f"project root: {repo}\n" in status
        finally:
            stop_memd(proc)


async def test_daemon_down_every_tool_answers_the_fix_and_the_server_stays_up(
    tmp_path: Path,
) -> None:
    repo = make_project(tmp_path)
    args = {
        "recall": {"query": "anything"},
        "list_memories": {},
        "read_memory": {"name": "x"},
        "remember": {"type": "user", "name": "n", "description": "d", "content": "c"},
        "session_notes": {},
        "memory_status": {},
    }
    with fake_home(tmp_path) as home:
        async with mcp_session(home, repo) as session:
            for _ in range(2):
                for tool, tool_args in args.items():
                    result = await call(session, tool, tool_args)
                    text = text_of(result)
                    assert result.is_error, tool
                    assert "memd is not running" in text and "start it with `memd`" in text
            assert (await session.list_resources()).resources == []
            assert len((await session.list_tools()).tools) == len(TOOLS)
            # Once the daemon is up, the same server process answers.
            proc = start_memd(home)
            try:
                result = await call(session, "list_memories", {})
                assert not result.is_error, text_of(result)
            finally:
                stop_memd(proc)


def plant_session(home: Home, cwd: Path, session: str, age_s: float, notes: str | None) -> None:
    folder = home.projects / project_slug(str(cwd))
    folder.mkdir(parents=True, exist_ok=True)
    entry = {
        "type": "user",
        "uuid": f"{session}-u1",
        "parentUuid": None,
        "sessionId": session,
        "cwd": str(cwd),
        "timestamp": "2026-01-01T00:00:00.000Z",
        "message": {"role": "user", "content": "fix the flaky upload test"},
    }
    transcript = folder / f"{session}.jsonl"
    transcript.write_text(json.dumps(entry) + "\n")
    when = time.time() - age_s
    os.utime(transcript, (when, when))
    if notes is not None:
        path = folder / session / "session-memory" / "summary.md"
        path.parent.mkdir(parents=True)
        path.write_text(notes)


async def test_session_notes_of_the_projects_claude_session(tmp_path: Path) -> None:
    repo = make_project(tmp_path)
    with fake_home(tmp_path) as home:
        notes = (
            "# Current State\n_what is happening_\n\nUpload test fixed; token ghp_"
            + ("a" * 36)
            + " used.\n"
        )
        plant_session(home, repo / "src", "older-with-notes", 600, notes)
        plant_session(home, repo, "newest-no-notes", 60, None)
        plant_session(home, tmp_path / "elsewhere", "other-project", 1, "# Other\n\nnot ours\n")
        proc = start_memd(home)
        try:
            async with mcp_session(home, repo) as session:
                latest = text_of(await call(session, "session_notes", {}))
                assert "older-with-notes" in latest and "Upload test fixed" in latest
                assert "ghp_aaaa" not in latest and "[REDACTED:github_token]" in latest
                named = await call(session, "session_notes", {"session": "newest"})
                assert "No working notes yet for session newest-no-notes" in text_of(named)
                missing = await call(session, "session_notes", {"session": "other-project"})
                assert missing.is_error and "no Claude Code session" in text_of(missing)
                status = text_of(await call(session, "memory_status", {}))
                assert "Claude Code sessions: 2" in status and "dream:" in status
        finally:
            stop_memd(proc)
