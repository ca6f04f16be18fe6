"""Links planted in a memory dir, through every way memd reads it (issue 22).

``MEMORY.md``, a topic file, a folder and ``team/`` are symbolic links to files outside the
memory dir, and a topic file is a hard link to one. The outside files hold a canary. Through
the real daemon: the hook client for SessionStart and UserPromptSubmit, recall, memories and
the index over the socket, the real ``memd-mcp`` server's tools and resources, ``remember``,
a memory extraction and a dream against the loopback model server, ``memdctl memories``. Not
one canary byte may come back anywhere (replies, hook output, model requests, the log), the
memory dir must hold no copy of one afterwards, every planted link must still be the same
link, and ``status`` and ``doctor`` must name each planted entry.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession

from memd.memory.paths import memory_dir
from memd.testing.loopback_process import LoopbackProcess
from tests import daemon_harness
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
from tests.mcp_support import call as mcp_call
from tests.mcp_support import mcp_session, text_of

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

CANARY = "CANARY-5e81-outside-the-memory-dir"
MEMORY_SYSTEM = "long-term memory of an AI coding assistant"
MEMORY_DIR_RE = "The memory directory is (?P<dir>/\\S+?)\\. "
QUERY = "how do we deploy to production with the deploy keys?"
REAL = (
    "---\nname: deploy steps\ndescription: How we deploy to production\ntype: project\n---\n\n"
    "Deploys go through the release pipeline.\n"
)
NEW = (
    "---\nname: new note\ndescription: Something learnt in this session\ntype: feedback\n---\n\n"
    "Prefer small commits.\n"
)
PLANTED = ("MEMORY.md", "deploy.md", "team", "folder", "keys.md")


def secret(name: str) -> str:
    """An outside file that would rank first for :data:`QUERY` if memd read it."""
    return (
        f"---\nname: {name}\ndescription: deploy to production with the deploy keys {CANARY}\n"
        f"type: project\n---\n\n{CANARY} -----BEGIN OPENSSH PRIVATE KEY-----\n"
    )


def plant(mdir: Path, outside: Path) -> dict[str, str]:
    """The memory dir with its traps; returns what each planted link points to."""
    outside.mkdir()
    (outside / "id_rsa").write_text(f"- [deploy keys](keys.md) — {CANARY}\n")
    (outside / "topic.md").write_text(secret("deploy topic"))
    for folder in ("team", "folder"):
        (outside / folder).mkdir()
        (outside / folder / "deploy.md").write_text(secret(f"{folder} deploy"))
    (outside / "hard.md").write_text(secret("deploy keys"))
    mdir.mkdir(parents=True)
    (mdir / "real.md").write_text(REAL)
    (mdir / "MEMORY.md").symlink_to(outside / "id_rsa")
    (mdir / "deploy.md").symlink_to(outside / "topic.md")
    (mdir / "team").symlink_to(outside / "team")
    (mdir / "folder").symlink_to(outside / "folder")
    os.link(outside / "hard.md", mdir / "keys.md")
    return {name: os.readlink(mdir / name) for name in PLANTED if (mdir / name).is_symlink()}


def outside_hashes(outside: Path) -> dict[str, str]:
    return {
        str(p.relative_to(outside)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(outside.rglob("*"))
        if p.is_file()
    }


def assert_dir_clean(
    mdir: Path, outside: Path, links: dict[str, str], hashes: dict[str, str]
) -> None:
    """No memory file holds canary text; every link is the one planted; nothing outside
    changed."""
    for folder, _dirs, files in os.walk(mdir):  # links to folders are not entered
        for name in files:
            path = Path(folder) / name
            info = path.lstat()
            if path.is_symlink() or info.st_nlink > 1:
                continue  # a planted entry itself (checked below)
            assert CANARY.encode() not in path.read_bytes(), path
    for name, target in links.items():
        assert (mdir / name).is_symlink() and os.readlink(mdir / name) == target, name
    assert (mdir / "keys.md").stat().st_ino == (outside / "hard.md").stat().st_ino
    assert outside_hashes(outside) == hashes


def hook(home: Home, cwd: Path, event: str, **extra: Any) -> str:
    """The real hook client, as Claude Code runs it; the context it injects."""
    done = claude_hook(home, cwd, event, **extra)
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    return done.stdout.decode("utf-8", "replace")


# The dream runs a model turn or two: memdctl waits longer than the harness's minute.
memdctl = partial(daemon_harness.memdctl, timeout=120)


async def through_mcp(session: ClientSession) -> list[str]:
    """Every tool and resource of the MCP server aimed at the planted entries."""
    seen = [
        text_of(await mcp_call(session, "recall", {"query": QUERY})),
        text_of(await mcp_call(session, "list_memories", {})),
        text_of(await mcp_call(session, "memory_status", {})),
    ]
    names = ("keys.md", "deploy.md", "team/deploy.md", "folder/deploy.md", "deploy keys")
    for name in names:
        seen.append(text_of(await mcp_call(session, "read_memory", {"name": name})))
    listed = {str(r.uri) for r in (await session.list_resources()).resources}
    seen.append(" ".join(sorted(listed)))
    wanted = {f"memd://memory/{n}" for n in ("MEMORY.md", "keys.md", "deploy.md")}
    for uri in sorted(listed | wanted):
        try:
            contents = (await session.read_resource(uri)).contents
        except Exception as exc:  # a refused resource answers an error; its text is checked
            seen.append(str(exc))
            continue
        seen.extend(getattr(c, "text", "") for c in contents)
    return seen


def transcript(folder: Path, cwd: Path, session: str) -> None:
    """One finished turn of a Claude Code session in ``cwd``."""
    lines = [
        {
            "type": "user",
            "uuid": f"{session}-u1",
            "parentUuid": None,
            "sessionId": session,
            "cwd": str(cwd),
            "timestamp": "2026-11-20T10:00:00.000Z",
            "message": {"role": "user", "content": "Please keep commits small from now on."},
        },
        {
            "type": "assistant",
            "uuid": f"{session}-a1",
            "parentUuid": f"{session}-u1",
            "sessionId": session,
            "cwd": str(cwd),
            "timestamp": "2026-11-20T10:00:05.000Z",
            "message": {
                "id": "msg_1",
                "role": "assistant",
                "model": "claude-sonnet-4-6",
                "content": [{"type": "text", "text": "Understood: small commits."}],
                "usage": {"input_tokens": 100, "output_tokens": 10},
            },
        },
    ]
    (folder / f"{session}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def write_one_memory(name: str, content: str) -> list[dict[str, Any]]:
    """The extraction agent's rules: write ``content`` to ``name`` in the memory dir, then
    end its turn."""
    return [
        {
            "when": {"system_match": MEMORY_SYSTEM, "turn": "first", "match": MEMORY_DIR_RE},
            "reply": {
                "tool_use": {
                    "name": "Write",
                    "input": {"file_path": f"{{dir}}/{name}", "content": content},
                }
            },
        },
        {
            "when": {"system_match": MEMORY_SYSTEM, "turn": "after_tool"},
            "reply": {"text": "Saved one memory."},
        },
    ]


def extraction_script() -> str:
    """The extraction agent writes one new memory, then ends its turn."""
    return "".join(json.dumps(r) + "\n" for r in write_one_memory("new.md", NEW))


def extracted(home: Home, mdir: Path) -> dict[str, Any] | None:
    memory = call(home, "status")["memory"]
    row = (memory.get("projects") or {}).get(str(mdir)) or {}
    busy = memory.get("queued") or memory.get("running")
    last: dict[str, Any] | None = row.get("last_run")
    return last if last and not busy else None


async def test_no_canary_byte_comes_back_through_any_reader(tmp_path: Path) -> None:
    repo = tmp_path / "work" / "repo"
    (repo / ".git").mkdir(parents=True)
    with (
        fake_home(tmp_path, CLAUDE_CODE_DISABLE_AUTO_MEMORY="1") as home,
        LoopbackProcess() as api,
    ):
        mdir = memory_dir(home.projects, repo)
        outside = tmp_path / "outside"
        links = plant(mdir, outside)
        hashes = outside_hashes(outside)
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
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=30, what="the model")
            seen = [
                hook(home, repo, "SessionStart", source="startup"),
                hook(home, repo, "UserPromptSubmit", prompt=QUERY),
                json.dumps(call(home, "recall", {"query": QUERY, "cwd": str(repo)})),
                json.dumps(call(home, "memories", {"cwd": str(repo)})),
                json.dumps(call(home, "memory_index", {"cwd": str(repo)})),
                memdctl(home, "memories", "--project", str(repo)).stdout,
            ]
            # The real memory is injected and recalled; the traps are not.
            assert "real.md" in seen[1] and "deploy steps" in seen[2]
            async with mcp_session(home, repo) as session:
                seen += await through_mcp(session)
                args = {"type": "project", "name": "n", "description": "d", "content": "c"}
                refused = await mcp_call(session, "remember", args)
            assert refused.is_error and "MEMORY.md is a symbolic link" in text_of(refused)
            assert "nothing was written" in text_of(refused)
            assert not (mdir / "project_n.md").exists()

            transcript(mdir.parent, repo, "sess-x")
            event = {
                "session_id": "sess-x",
                "cwd": str(repo),
                "transcript_path": str(mdir.parent / "sess-x.jsonl"),
                "stop_hook_active": False,
                "hook_event_name": "Stop",
            }
            call(home, "hook", {"event": "Stop", "input": event})
            wait_for(lambda: extracted(home, mdir), timeout=60, what="the memory extraction")
            assert (mdir / "new.md").read_text() == NEW  # the run wrote; the index is a link

            dream = memdctl(home, "dream", str(repo), "--force", "--wait", "--json")
            seen.append(dream.stdout + dream.stderr)
            status = call(home, "status")
            text_status = memdctl(home, "status").stdout
            doctor = memdctl(home, "doctor").stdout
        finally:
            assert stop_memd(proc) == 0, read_log(home)
        requests = api.requests()
        assert any(MEMORY_SYSTEM in json.dumps(r["body"].get("system")) for r in requests)
        assert any("tidy a project's long-term memory" in json.dumps(r) for r in requests)
        seen += [json.dumps(requests), read_log(home)]
        for text in seen:
            assert CANARY not in text, text[:2000]
        assert_dir_clean(mdir, outside, links, hashes)
        refused_paths = {e["path"]: e["kind"] for e in status["refused"]["entries"]}
        for name in PLANTED:
            path = str(mdir / name)
            assert path in refused_paths, (name, refused_paths)
            assert path in text_status and path in doctor
        assert refused_paths[str(mdir / "keys.md")] == "a file with 2 hard links"
        assert len(status["refused"]["entries"]) == status["refused"]["count"]
