"""A stop under a slow API (issue 22): the real daemon, a real SIGTERM, the loopback Messages
API answering nothing. In-flight model calls were awaited for the whole grace period (SIGTERM
took 10 s and more under most API faults); now they are cancelled at once, and nothing is
lost: the state is saved, a dream mid-run is undone, a notes run is redone at the next start."""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from memd.daemon.signals import STOP_DEADLINE_S
from memd.dream.lock import LOCK_NAME
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd_client.errors import MemdClientError
from tests.daemon_harness import (
    Home,
    call,
    fake_home,
    load_stretch,
    read_log,
    start_memd,
    stop_memd,
    wait_for,
)
from tests.test_dream_e2e import DREAM_SYSTEM, PRIOR_NS, setup_project, tree, wait_edited
from tests.test_notes_e2e import SOURCE, row, script

pytestmark = pytest.mark.slow

NOTES_SLUG = "-home-user-stall"
SUMMARY_SYSTEM = "hand-over summaries"
DREAM_EDITS = {
    "tool_uses": [
        {
            "name": "Edit",
            "input": {
                "file_path": "project_release.md",
                "old_string": "cut yesterday",
                "new_string": "cut on 2026-11-21",
            },
        },
        {"name": "Write", "input": {"file_path": "feedback_tests.md", "content": "merged\n"}},
    ]
}


def kind_of(body: dict[str, Any]) -> str:
    """Which job a request is from: its system prompt or its one tool tells."""
    system = replies.system_text(body)
    if DREAM_SYSTEM in system:
        return "dream"
    if SUMMARY_SYSTEM in system:
        return "compact"
    if [t.get("name") for t in body.get("tools") or []] == ["Edit"]:
        return "notes"
    return "other"


class SilentAPI:
    """The dream's first call gets its two edits; every other call gets no answer until
    :meth:`release` (the API hangs), counted by kind while it waits."""

    def __init__(self) -> None:
        self.waiting: collections.Counter[str] = collections.Counter()
        self.cond = threading.Condition()
        self.released = threading.Event()
        self.dream_answered = False

    def __call__(self, body: dict[str, Any]) -> replies.Reply | None:
        kind = kind_of(body)
        with self.cond:
            if kind == "dream" and not self.dream_answered:
                self.dream_answered = True
                return replies.reply_from_json(DREAM_EDITS)
            self.waiting[kind] += 1
            self.cond.notify_all()
        self.released.wait(600)
        return replies.text("late")

    def wait_waiting(self, kind: str) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: self.waiting[kind] > 0, 60 * load_stretch()):
                raise AssertionError(f"no {kind} call reached the API")

    def release(self) -> None:
        self.released.set()


def start(home: Home, api: LoopbackAPI, *args: str) -> subprocess.Popen[bytes]:
    home.env.update(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="test")
    proc = start_memd(home, "--set", "dream.scan_throttle_minutes=0", *args)
    wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=30, what="the model client")
    return proc


def compact_in_flight(home: Home, session: str) -> dict[str, Any]:
    """``compact`` sent from a thread (its model call will hang); what came back, later."""
    outcome: dict[str, Any] = {}

    def send() -> None:
        try:
            with home.client(timeout=120) as client:
                outcome["result"] = client.call("compact", {"session": session})
        except MemdClientError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    outcome["thread"] = thread
    return outcome


def notes_asked(api: LoopbackAPI) -> int:
    return sum(kind_of(r.body) == "notes" for r in api.requests if isinstance(r.body, dict))


def test_sigterm_under_a_silent_api_cancels_model_calls_and_loses_nothing(
    tmp_path: Path,
) -> None:
    silent = SilentAPI()
    with fake_home(tmp_path) as home, LoopbackAPI() as api:
        api.set_handler(silent)
        try:
            stop_under_a_silent_api(home, tmp_path, api, silent)
        finally:
            silent.release()


def stop_under_a_silent_api(
    home: Home, tmp_path: Path, api: LoopbackAPI, silent: SilentAPI
) -> None:
    cwd, mdir = setup_project(home, tmp_path, sessions=0)
    before = tree(mdir)
    proc = start(home, api, "--set", "session_notes.wait_timeout_s=1")
    call(home, "dream", {"cwd": str(cwd), "force": True})
    wait_edited(home, cwd)
    silent.wait_waiting("dream")
    transcript = home.projects / NOTES_SLUG / "n1.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_bytes(SOURCE.read_bytes())
    silent.wait_waiting("notes")
    compact = compact_in_flight(home, "n1")
    silent.wait_waiting("compact")

    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=3 * STOP_DEADLINE_S * load_stretch())
    took = time.monotonic() - sent
    log = read_log(home)
    assert code == 0, log
    assert took < STOP_DEADLINE_S, log  # it was the whole grace period (10 s), and more
    assert "stopped on SIGTERM" in log and "grace period was over" not in log, log
    assert "has not finished stopping" not in log, log  # not the backstop either
    compact["thread"].join(10)
    assert "stopping" in str(compact.get("error") or compact.get("result")), compact

    # nothing lost: the dream is undone, the state saved, the notes run owed
    assert tree(mdir) == before
    assert (mdir / LOCK_NAME).stat().st_mtime_ns == PRIOR_NS
    saved = json.loads((home.state_dir / "sessions.json").read_text())["sessions"]
    offsets = {s["session_id"]: s["offset"] for s in saved.values()}
    assert offsets["n1"] == transcript.stat().st_size
    api.set_handler(None)
    api.load_script(replies.parse_script(script()))
    asked = notes_asked(api)
    proc = start(home, api)
    try:
        wait_for(lambda: notes_asked(api) > asked, timeout=30, what="the notes run redone")
        assert row(home, "n1") is not None
    finally:
        assert stop_memd(proc) == 0, read_log(home)
