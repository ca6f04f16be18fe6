"""Session notes end to end: the real daemon, a real transcript appended line by line, the
loopback Messages API answering with Edit calls, kill -9 in the middle of an extraction."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from memd.session.template import DEFAULT_TEMPLATE, Intact, check_skeleton
from memd.testing.loopback_process import LoopbackProcess
from memd_client.errors import RemoteError
from tests.conftest import CORPUS
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

pytestmark = pytest.mark.slow

SLUG = "-home-user-notes"
SOURCE = CORPUS / "napoli-matcha" / "05_a737f62fb9_4_full.jsonl"
WORKLOG = "_One terse line per step: what was tried and what came of it._\n"
PATH_RE = "The notes file is (?P<path>/\\S+?summary\\.md)"


def script(delay_s: float = 0.0) -> str:
    edit: dict[str, Any] = {
        "tool_use": {
            "name": "Edit",
            "input": {
                "file_path": "{path}",
                "old_string": WORKLOG,
                "new_string": WORKLOG + "- progress noted\n",
            },
        }
    }
    if delay_s:
        edit["delay_s"] = delay_s
    rules = [
        {"when": {"tool": "Edit", "turn": "first", "match": PATH_RE}, "reply": edit},
        {"when": {"turn": "after_tool"}, "reply": {"text": "Done."}},
    ]
    return "\n".join(json.dumps(r) for r in rules)


def notes_requests(api: LoopbackProcess) -> int:
    """Requests from notes extractions: they offer the Edit tool and nothing else (memory
    extraction after a turn talks to the same server with more tools)."""
    return sum(
        1
        for r in api.requests()
        if [t.get("name") for t in r["body"].get("tools") or []] == ["Edit"]
    )


def row(home: Home, sid: str) -> dict[str, Any] | None:
    try:
        result: dict[str, Any] = call(home, "session", {"session": sid})
    except RemoteError:  # not listed yet
        return None
    return result


def settled(home: Home, sid: str, size: int) -> dict[str, Any] | None:
    r = row(home, sid)
    if r is None or r["offset"] != size:
        return None
    notes = r["notes"]
    return r if notes is None or notes["phase"] == "idle" else None


class ExpectedTriggers:
    """R-S3 restated from the raw JSON lines (tool calls, natural pauses) and the context
    figure the daemon reports (checked against the raw usage elsewhere)."""

    def __init__(self) -> None:
        self.tool_ids: list[tuple[int, str]] = []  # (line, tool_use id), in order
        self.last_response: tuple[str, bool] | None = None  # (message id, has tool calls)
        self.extracted_at: tuple[int, int] | None = None  # (line, tokens)

    def see(self, i: int, line: bytes) -> None:
        entry = json.loads(line)
        msg = entry.get("message") or {}
        if entry.get("type") != "assistant" or entry.get("isSidechain"):
            return
        if msg.get("model") == "<synthetic>":
            return
        calls = [b["id"] for b in msg.get("content", []) if b.get("type") == "tool_use"]
        self.tool_ids += [(i, c) for c in calls if c not in {t for _, t in self.tool_ids}]
        same = self.last_response is not None and self.last_response[0] == msg.get("id")
        had = self.last_response[1] if same and self.last_response else False
        self.last_response = (str(msg.get("id")), had or bool(calls))

    def due(self, i: int, context: int) -> bool:
        if self.extracted_at is None:
            return context >= 10_000
        line, tokens = self.extracted_at
        calls_since = sum(1 for at, _ in self.tool_ids if at > line)
        pause = self.last_response is not None and not self.last_response[1]
        return context - tokens >= 5_000 and (calls_since >= 3 or pause)


def test_extractions_follow_rs3_and_keep_the_skeleton(tmp_path: Path) -> None:
    with LoopbackProcess() as api:
        api.add_script(script())
        with fake_home(tmp_path, ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=api.url) as home:
            proc = start_memd(home)
            try:
                wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=20, what="llm")
                project = home.projects / SLUG
                project.mkdir(parents=True)
                target = project / "n1.jsonl"
                notes = project / "n1" / "session-memory" / "summary.md"
                reads = start_reader(notes)
                expected = ExpectedTriggers()
                started: list[int] = []
                wanted: list[int] = []
                for i, line in enumerate(SOURCE.read_bytes().splitlines(keepends=True)):
                    before = notes_requests(api)
                    with target.open("ab") as f:
                        f.write(line)
                    r = wait_for(
                        lambda: settled(home, "n1", target.stat().st_size),
                        timeout=20,
                        what=f"line {i} settled",
                    )
                    expected.see(i, line)
                    if expected.due(i, r["context_tokens"]):
                        wanted.append(i)
                        expected.extracted_at = (i, r["context_tokens"])
                    if notes_requests(api) > before:
                        started.append(i)
                        assert check_skeleton(notes.read_text(), DEFAULT_TEMPLATE) == Intact()
                assert started == wanted
                assert len(started) >= 2
                stop_reader(reads)
                assert reads.bad == [] and reads.count > 0
                assert notes.read_text().count("- progress noted") == len(started)
            finally:
                assert stop_memd(proc) == 0, read_log(home)


class Reader(threading.Thread):
    """Reads the notes file as fast as it can; any read that is not a whole file is bad."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.stop = threading.Event()
        self.bad: list[str] = []
        self.count = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                text = self.path.read_text()
            except FileNotFoundError:
                continue
            self.count += 1
            if check_skeleton(text, DEFAULT_TEMPLATE) != Intact():
                self.bad.append(text)


def start_reader(path: Path) -> Reader:
    reader = Reader(path)
    reader.start()
    return reader


def stop_reader(reader: Reader) -> None:
    reader.stop.set()
    reader.join(10)


def test_kill_9_mid_extraction_keeps_notes_and_redoes_the_run(tmp_path: Path) -> None:
    lines = SOURCE.read_bytes().splitlines(keepends=True)
    with LoopbackProcess() as api:
        api.add_script(script(delay_s=30.0))
        with fake_home(tmp_path, ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=api.url) as home:
            project = home.projects / SLUG
            project.mkdir(parents=True)
            target = project / "n2.jsonl"
            notes = project / "n2" / "session-memory" / "summary.md"
            proc = start_memd(home)
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=20, what="llm")
            target.write_bytes(b"".join(lines))
            wait_for(
                lambda: (row(home, "n2") or {}).get("notes", {}).get("phase") == "running",
                timeout=20,
                what="an extraction in flight",
            )
            wait_for(notes.exists, timeout=20, what="the notes file created from the template")
            before = notes.read_text()
            assert check_skeleton(before, DEFAULT_TEMPLATE) == Intact()
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            assert notes.read_text() == before  # nothing half-written

            api.reset()
            api.add_script(script())
            proc = start_memd(home)
            try:
                wait_for(
                    lambda: "- progress noted" in notes.read_text(),
                    timeout=30,
                    what="the interrupted extraction to run again",
                )
                assert check_skeleton(notes.read_text(), DEFAULT_TEMPLATE) == Intact()
            finally:
                assert stop_memd(proc) == 0, read_log(home)


def test_extract_keeps_notes_for_any_name_and_refuses_where_it_cannot(tmp_path: Path) -> None:
    """A Gemini chat known by a file name that is not UTF-8 (its header gives no
    ``sessionId``) gets its notes (its folder: the name escaped, text the model can be told; it
    failed on every run, unrecorded, and ``extract`` said "runs 0", exit 0). A chat memd cannot
    place in a project, and a session whose notes path cannot be text, get none: ``extract``
    says why and exits 1, and no folder is made (the unplaced chat's notes went to
    ``~/.claude/projects/<id>/``, as if a project). Each session is named as ``memdctl
    sessions`` shows it."""
    from tests.test_source_memory_e2e import gemini_chat

    repo = tmp_path / "work" / "repo"
    (repo / ".git").mkdir(parents=True)
    gemini = tmp_path / ".gemini" / "tmp"
    with fake_home(tmp_path) as home, LoopbackProcess() as api:
        api.add_script(script())
        home.env.update(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="test")
        (gemini / "repo" / "chats").mkdir(parents=True)
        (gemini / "repo" / ".project_root").write_text(str(repo))
        (gemini / ("f" * 64) / "chats").mkdir(parents=True)  # the legacy layout: not placed
        claude_folder = os.fsencode(home.projects) + b"/-caf\xe9"
        os.makedirs(claude_folder)
        chats = {
            "named": os.fsencode(gemini / "repo" / "chats")
            + b"/session-2026-11-26T06-48-\xff.jsonl",
            "unplaced": os.fsencode(gemini / ("f" * 64) / "chats")
            + b"/session-2026-11-26T06-49-ab.jsonl",
        }
        proc = start_memd(home)
        try:
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=30, what="the model")
            chat = gemini_chat(answered=True)
            own_id = b'"a795b61b-c6fd-41fc-bbd3-8abb79ce05cc"'
            contents = {  # one chat with no id of its own, the other Gemini's
                "named": chat.replace(b'"sessionId": ' + own_id + b", ", b""),
                "unplaced": chat.replace(own_id, b'"0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6"'),
            }
            assert contents["named"] != chat != contents["unplaced"]
            for which, path in chats.items():
                with open(path, "wb") as f:
                    f.write(contents[which])
            with open(claude_folder + b"/s1.jsonl", "wb") as f:
                f.write(SOURCE.read_bytes()[:20_000].rsplit(b"\n", 1)[0] + b"\n")
            named, unplaced, s1 = session_ids(home, *chats.values(), claude_folder + b"/s1.jsonl")
            assert named == "session-2026-11-26T06-48-\\xff"  # the file's name, escaped
            done = memdctl(home, "extract", named)
            assert done.returncode == 0, done.stdout + done.stderr
            (row_named,) = [r for r in call(home, "sessions", {}) if r["session_id"] == named]
            notes = home.projects / row_named["project"] / named / "session-memory" / "summary.md"
            assert "- progress noted" in notes.read_text()
            assert call(home, "session", {"session": named})["notes"]["extractions"] == 1
            before = sorted(os.listdir(home.projects))
            for sid, why in [
                (unplaced, "cannot place this session in a project"),
                (s1, "holds bytes that are not UTF-8"),
            ]:
                done = memdctl(home, "extract", sid)
                assert done.returncode == 1, done.stdout + done.stderr
                assert why in done.stderr and "memd keeps no notes" in done.stderr, done.stderr
            assert sorted(os.listdir(home.projects)) == before
            assert not (home.projects / unplaced).exists()
            assert not os.path.exists(claude_folder + b"/s1")
        finally:
            assert stop_memd(proc) == 0, read_log(home)
