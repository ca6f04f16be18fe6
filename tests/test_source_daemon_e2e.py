"""The real daemon following other agents' sessions as they are written: a Codex rollout
appended to (resume, compactions) and rewritten in place; listed by ``memdctl sessions`` and
``session`` with its agent, project and the agent's own context figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memd.memory.paths import project_slug
from tests.agents_oracle import read_codex, read_gemini
from tests.conftest import AGENTS
from tests.daemon_harness import Home, call, fake_home, start_memd, stop_memd, wait_for
from tests.daemon_harness import memdctl as run_memdctl

pytestmark = pytest.mark.slow

ROLLOUT = "rollout-2026-11-26T06-42-43-01a21697-9962-7c23-a4c4-7f3c3e5b70ce.jsonl"
CODEX_ID = "01a21697-9962-7c23-a4c4-7f3c3e5b70ce"


def codex_lines(cwd: Path) -> list[bytes]:
    """The sample rollout with its cwd made ``cwd`` (the sample's is /home/USER/proj)."""
    text = (AGENTS / "codex-0.169.0" / ROLLOUT).read_text()
    return [line.encode() for line in text.replace("/home/USER/proj", str(cwd)).splitlines()]


def memdctl(home: Home, *args: str) -> str:
    done = run_memdctl(home, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def row(home: Home, session_id: str) -> dict[str, Any] | None:
    rows = call(home, "sessions", {})
    return next((r for r in rows if r["session_id"] == session_id), None)


def test_a_codex_rollout_is_followed_as_it_is_written(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    with fake_home(tmp_path) as home:
        day = tmp_path / ".codex" / "sessions" / "2026" / "11" / "26"
        day.mkdir(parents=True)
        path = day / ROLLOUT
        lines = codex_lines(project)
        first = 14  # through the first tool output and its token count
        path.write_bytes(b"\n".join(lines[:first]) + b"\n")
        proc = start_memd(home)
        try:
            want = read_codex(lines[:first])
            seen = wait_for(
                lambda: (r := row(home, CODEX_ID)) and r["context_from_usage"] and r,
                timeout=30,
                what="the Codex session with its figure",
            )
            assert seen["agent"] == "codex"
            assert seen["project"] == project_slug(str(project))
            assert seen["cwd"] == str(project)
            assert seen["context_from_usage"] == want.from_usage == 90010
            with path.open("ab") as f:  # resumed twice, compacted twice
                f.write(b"\n".join(lines[first:]) + b"\n")
            want = read_codex(lines)
            done = wait_for(
                lambda: (r := row(home, CODEX_ID)) and r["turn_ends"] == 3 and r,
                timeout=30,
                what="the rest of the rollout",
            )
            assert done["boundaries_seen"] == want.compactions == 2
            assert done["context_from_usage"] == want.from_usage
            listed = memdctl(home, "sessions")
            assert "codex" in listed and CODEX_ID[:8] in listed
            detail = memdctl(home, "session", CODEX_ID)
            assert "codex" in detail and str(project) in detail
            # No model here, so no notes: a fork is refused with the reason, nothing written
            # (the fork itself is tests/test_codex_fork.py's and test_agent_forks_cli.py's).
            refused = run_memdctl(home, "compact", CODEX_ID, "--fork")
            assert refused.returncode == 1, refused
            assert "no notes yet" in refused.stderr, refused.stderr
            assert sorted(p.name for p in day.iterdir()) == [ROLLOUT]
            status = call(home, "status", {})
            sources = {s["agent"]: s for s in status["ingest"]["sources"]}
            assert sources["codex"]["watcher"] in ("inotify", "native")
            # Rewritten in place: the same file, other (shorter) bytes: read again from the start.
            path.write_bytes(b"\n".join(lines[:first]) + b"\n")
            again = wait_for(
                lambda: (r := row(home, CODEX_ID)) and r["turn_ends"] == 0 and r,
                timeout=30,
                what="the rewritten rollout read again",
            )
            assert again["context_from_usage"] == 90010 and again["boundaries_seen"] == 0
        finally:
            stop_memd(proc)


def test_a_codex_sub_agent_and_a_memory_job_are_listed_but_not_followed(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        day = tmp_path / ".codex" / "sessions" / "2026" / "11" / "26"
        day.mkdir(parents=True)
        child = next((AGENTS / "codex-0.169.0" / "subagent").glob("*b5c2*.jsonl"))
        (day / child.name).write_bytes(child.read_bytes())
        lines = codex_lines(tmp_path)
        meta = json.loads(lines[0])
        meta["payload"]["source"] = {"subagent": "memory_consolidation"}
        job = "rollout-2026-11-26T07-00-00-01a21697-0000-7000-8000-000000000001.jsonl"
        (day / job).write_bytes(b"\n".join([json.dumps(meta).encode(), *lines[1:]]) + b"\n")
        proc = start_memd(home)
        try:
            rows = wait_for(
                lambda: (
                    len(r := call(home, "sessions", {})) == 2 and all(x["parsed"] for x in r) and r
                ),
                timeout=30,
                what="both files read",
            )
            reasons = sorted(r["ignored"] for r in rows)
            assert reasons == ["Codex's own memory consolidation", "a Codex sub-agent's thread"]
            assert all(r["message_count"] == 0 for r in rows)
        finally:
            stop_memd(proc)


GEMINI_CHAT = AGENTS / "gemini-cli-0.61.0" / "session-2026-11-26T06-48-a795b61b.jsonl"


def test_a_gemini_chat_is_followed_through_resume_and_rewind(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    with fake_home(tmp_path) as home:
        folder = tmp_path / ".gemini" / "tmp" / "proj"
        (folder / "chats").mkdir(parents=True)
        (folder / ".project_root").write_text(str(project))
        path = folder / "chats" / GEMINI_CHAT.name
        legacy = tmp_path / ".gemini" / "tmp" / ("ab" * 32) / "chats"
        legacy.mkdir(parents=True)
        (legacy / "session-old.json").write_text('{"sessionId": "old", "messages": []}')
        lines = GEMINI_CHAT.read_bytes().splitlines()
        rewind = next(i for i, line in enumerate(lines) if b"$rewindTo" in line)
        path.write_bytes(b"\n".join(lines[:rewind]) + b"\n")
        session = "a795b61b-c6fd-41fc-bbd3-8abb79ce05cc"  # its sessionId, not its file's name
        proc = start_memd(home)
        try:
            want = read_gemini(lines[:rewind])
            seen = wait_for(
                lambda: (r := row(home, session)) and r["turn_ends"] == want.turn_ends and r,
                timeout=30,
                what="the Gemini chat up to the rewind",
            )
            assert seen["agent"] == "gemini" and seen["ignored"] is None
            assert seen["project"] == project_slug(str(project))
            assert seen["context_from_usage"] == want.from_usage
            before = seen["message_count"]
            with path.open("ab") as f:  # /rewind to the 2nd prompt, then a new prompt
                f.write(b"\n".join(lines[rewind:]) + b"\n")
            want = read_gemini(lines)
            done = wait_for(
                lambda: (r := row(home, session)) and r["turn_ends"] == want.turn_ends and r,
                timeout=30,
                what="the chat after the rewind",
            )
            assert done["message_count"] < before + 2  # the rewound turn is gone
            detail = call(home, "session", {"session": session[:8]})  # a prefix will do
            assert detail["agent"] == "gemini" and detail["session_id"] == session
            # A resume in a new minute leaves a 2-line file of another chat's (alone here):
            # listed, not followed.
            other = next((AGENTS / "gemini-cli-0.61.0" / "compress-resume").glob("*06-46*"))
            (folder / "chats" / other.name).write_bytes(other.read_bytes())
            stub = wait_for(
                lambda: (
                    (r := row(home, "f71100ab-3353-4c51-9589-eeec35ec9b41")) and r["parsed"] and r
                ),
                timeout=30,
                what="the resume's 2-line file",
            )
            assert "no message of its own" in stub["ignored"]
            text = memdctl(home, "status")
            assert "source    gemini: " in text
            assert "1 legacy single-JSON chats (*.json), not read" in text
            assert "1 project folders without .project_root" in text
        finally:
            stop_memd(proc)


def test_the_codex_home_is_configured_and_the_source_turned_off(tmp_path: Path) -> None:
    elsewhere = tmp_path / "codex-home"
    day = elsewhere / "sessions" / "2026" / "11" / "26"
    day.mkdir(parents=True)
    (day / ROLLOUT).write_bytes(b"\n".join(codex_lines(tmp_path)) + b"\n")
    with fake_home(tmp_path, MEMD_CODEX_HOME=str(elsewhere)) as home:
        proc = start_memd(home)
        try:
            wait_for(lambda: row(home, CODEX_ID), timeout=30, what="the session at MEMD_CODEX_HOME")
            roots = {s["agent"]: s["root"] for s in call(home, "status", {})["ingest"]["sources"]}
            assert roots["codex"] == str(elsewhere / "sessions")
            assert roots["gemini"] == str(tmp_path / ".gemini" / "tmp")
        finally:
            stop_memd(proc)
        proc = start_memd(home, "--set", "sources.codex=false", "--set", "sources.gemini=false")
        try:
            status = call(home, "status", {})
            agents = [s["agent"] for s in status["ingest"]["sources"]]
            assert "claude_code" in agents and not {"codex", "gemini"} & set(agents), agents
            assert row(home, CODEX_ID) is None  # not listed, not read
        finally:
            stop_memd(proc)


RESUMED = AGENTS / "gemini-cli-0.61.0" / "compress-resume"
RESUMED_ID = "f71100ab-3353-4c51-9589-eeec35ec9b41"


def gemini_project(tmp_path: Path) -> tuple[Path, Path]:
    """A project and its folder of Gemini chats (placed by ``.project_root``)."""
    project = tmp_path / "proj"
    project.mkdir()
    folder = tmp_path / ".gemini" / "tmp" / "proj"
    (folder / "chats").mkdir(parents=True)
    (folder / ".project_root").write_text(str(project))
    return project, folder / "chats"


def test_the_files_of_one_gemini_chat_are_one_session_known_by_its_id(tmp_path: Path) -> None:
    """A chat resumed in a new minute is two files of one ``sessionId`` (issue 35): one
    session, the file Gemini keeps writing, found by any prefix of the id Gemini prints."""
    _, chats = gemini_project(tmp_path)
    with fake_home(tmp_path) as home:
        for chat in sorted(RESUMED.glob("*.jsonl")):
            (chats / chat.name).write_bytes(chat.read_bytes())
        proc = start_memd(home)
        try:
            rows = wait_for(
                lambda: (r := call(home, "sessions", {})) and all(x["parsed"] for x in r) and r,
                timeout=30,
                what="the chat's two files read",
            )
            assert [(r["session_id"], r["ignored"]) for r in rows] == [(RESUMED_ID, None)]
            for ident in (RESUMED_ID, RESUMED_ID[:8], RESUMED_ID[:3]):
                detail = call(home, "session", {"session": ident})
                assert detail["path"].endswith("06-45-f71100ab.jsonl"), detail["path"]
            assert call(home, "status", {})["ingest"]["sessions"] == 1
        finally:
            stop_memd(proc)


def test_a_gemini_chat_saved_under_its_file_name_keeps_its_notes_under_its_id(
    tmp_path: Path,
) -> None:
    """State saved before memd read Gemini's ids named the chat by its file: the chat is
    known by its sessionId after the upgrade, and its notes, their record and its memory
    cursor come with it (a restart would otherwise have forgotten them)."""
    project, chats = gemini_project(tmp_path)
    chat = chats / GEMINI_CHAT.name
    chat.write_bytes(GEMINI_CHAT.read_bytes())
    old, new = GEMINI_CHAT.stem, "a795b61b-c6fd-41fc-bbd3-8abb79ce05cc"
    slug = project_slug(str(project))
    with fake_home(tmp_path) as home:
        proc = start_memd(home)  # reads the chat: as an older memd would have, but by its id
        try:
            wait_for(lambda: row(home, new), timeout=30, what="the chat")
        finally:
            stop_memd(proc)
        state_dir = tmp_path / ".local" / "state" / "memd"
        saved = json.loads((state_dir / "sessions.json").read_text())
        (entry,) = saved["sessions"].values()
        entry["session_id"] = old  # what memd saved before issue 35
        (state_dir / "sessions.json").write_text(json.dumps(saved))
        notes = home.projects / slug / old / "session-memory" / "summary.md"
        notes.parent.mkdir(parents=True)
        notes.write_text("# Session Title\nThe rewind test\n")
        record = {"version": 1, "session_id": old, "project": slug, "extractions": 3}
        (state_dir / "session-notes").mkdir(exist_ok=True)
        (state_dir / "session-notes" / f"{old}.json").write_text(json.dumps(record))
        cursor = {"session_id": old, "project": slug, "path": str(chat), "cwd": str(project)}
        cursors = {"version": 1, "sessions": {old: {**cursor, "memory_dir": "/m"}}}
        (state_dir / "memory-extraction.json").write_text(json.dumps(cursors))
        proc = start_memd(home)
        try:
            wait_for(lambda: row(home, new), timeout=30, what="the chat by its id")
            assert row(home, old) is None
            detail = call(home, "session", {"session": new[:8]})
            assert detail["notes"]["extractions"] == 3, detail["notes"]
        finally:
            stop_memd(proc)
        moved = home.projects / slug / new / "session-memory" / "summary.md"
        assert moved.read_text() == "# Session Title\nThe rewind test\n"
        assert not (state_dir / "session-notes" / f"{old}.json").exists()
        kept = json.loads((state_dir / "memory-extraction.json").read_text())["sessions"]
        assert list(kept) == [new] and kept[new]["session_id"] == new
