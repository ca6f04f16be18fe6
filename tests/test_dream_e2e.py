"""Dream end to end: the real daemon process against the loopback Messages-API server.

Turn ends arrive as Stop hooks (the signal memory extraction uses); the scripted model
merges two duplicate memories and dates a relative date; the wipe guard, kill -9, --abort
and a file written by someone else during the run are each proved on the real process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from memd.dream.lock import FLOCK_NAME, LOCK_NAME
from memd.memory.paths import memory_dir
from memd.testing.loopback_process import LoopbackProcess
from memd_client.errors import MemdClientError
from tests import daemon_harness
from tests.daemon_harness import Home, call, fake_home, read_log, start_memd, stop_memd, wait_for
from tests.inotify_killer import arm_killer

pytestmark = pytest.mark.slow

DREAM_SYSTEM = "tidy a project's long-term memory"
TWO_DAYS = 2 * 86400.0
PRIOR_NS = 1_790_000_000_123_456_789

TESTS_A = (
    "---\nname: test command\ndescription: Run tests with scripts/check\ntype: feedback\n---\n\n"
    "Use scripts/check, never bare pytest.\n"
)
TESTS_B = (
    "---\nname: testing\ndescription: scripts/check runs ruff, mypy and pytest\n"
    "type: feedback\n---\n\nscripts/check runs ruff, mypy and pytest together.\n"
)
RELEASE = (
    "---\nname: release\ndescription: Releases are cut from the release branch\n"
    "type: project\n---\n\nThe release branch was cut yesterday; tag it before Thursday.\n"
)
INDEX = (
    "- [test command](feedback_tests.md) — Run tests with scripts/check\n"
    "- [testing](feedback_testing.md) — scripts/check runs ruff, mypy and pytest\n"
    "- [release](project_release.md) — Releases are cut from the release branch\n"
)
MERGED = (
    "---\nname: test command\ndescription: Run tests with scripts/check (ruff, mypy, pytest)\n"
    "type: feedback\n---\n\nUse scripts/check, never bare pytest: it runs ruff, mypy and "
    "pytest together.\n"
)
NEW_INDEX = (
    "- [test command](feedback_tests.md) — Run tests with scripts/check (ruff, mypy, pytest)\n"
    "- [release](project_release.md) — Releases are cut from the release branch\n"
)


def tree(mdir: Path) -> dict[str, str]:
    """Relative path → SHA-256 of every file, the lock files left out."""
    out = {}
    for path in sorted(mdir.rglob("*")):
        if path.is_file() and path.name not in (LOCK_NAME, FLOCK_NAME):
            out[str(path.relative_to(mdir))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def setup_project(home: Home, tmp_path: Path, sessions: int) -> tuple[Path, Path]:
    cwd = tmp_path / "work" / "proj"
    cwd.mkdir(parents=True)
    mdir = memory_dir(home.projects, cwd)
    mdir.mkdir(parents=True)
    (mdir / "feedback_tests.md").write_text(TESTS_A)
    (mdir / "feedback_testing.md").write_text(TESTS_B)
    (mdir / "project_release.md").write_text(RELEASE)
    (mdir / "MEMORY.md").write_text(INDEX)
    lock = mdir / LOCK_NAME
    lock.write_bytes(b"")
    os.utime(lock, ns=(PRIOR_NS, PRIOR_NS))
    for n in range(sessions):
        add_session(mdir.parent, f"other-{n}")
    add_session(mdir.parent, "trigger")
    return cwd, mdir


def add_session(folder: Path, session: str) -> None:
    (folder / f"{session}.jsonl").write_text(
        json.dumps({"type": "user", "sessionId": session, "message": {"content": "release"}}) + "\n"
    )


def rules(*replies: dict[str, Any]) -> str:
    lines = [
        json.dumps({"when": {"system_match": DREAM_SYSTEM}, "reply": reply, "times": 1})
        for reply in replies
    ]
    return "\n".join(lines) + "\n"


def merge_script(final_delay_s: float = 0.0) -> str:
    return rules(
        {
            "tool_uses": [
                {"name": "Read", "input": {"file_path": "MEMORY.md"}},
                {"name": "Read", "input": {"file_path": "feedback_testing.md"}},
                {"name": "TranscriptGrep", "input": {"pattern": "release"}},
            ],
            "text": "Orienting: two notes on running tests look like duplicates.",
        },
        {
            "tool_uses": [
                {"name": "Write", "input": {"file_path": "feedback_tests.md", "content": MERGED}},
                {
                    "name": "Delete",
                    "input": {
                        "file_path": "feedback_testing.md",
                        "merged_into": "feedback_tests.md",
                    },
                },
                {
                    "name": "Edit",
                    "input": {
                        "file_path": "project_release.md",
                        "old_string": "cut yesterday",
                        "new_string": "cut on 2026-11-21",
                    },
                },
                {"name": "Write", "input": {"file_path": "MEMORY.md", "content": NEW_INDEX}},
            ],
            "text": "Merging the duplicates and dating the release note.",
        },
        {"text": "Merged two test notes; dated the release note.", "delay_s": final_delay_s},
    )


def start(home: Home, api: LoopbackProcess, *args: str) -> subprocess.Popen[bytes]:
    home.env.update(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="test")
    proc = start_memd(home, "--set", "dream.scan_throttle_minutes=0", *args)
    wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=30, what="the model client")
    return proc


def stop_hook(home: Home, cwd: Path, session: str, mdir: Path) -> None:
    event = {
        "hook_event_name": "Stop",
        "session_id": session,
        "cwd": str(cwd),
        "transcript_path": str(mdir.parent / f"{session}.jsonl"),
        "stop_hook_active": False,
    }
    call(home, "hook", {"event": "Stop", "input": event})


def dream_row(home: Home, cwd: Path) -> dict[str, Any]:
    row: dict[str, Any] = call(home, "dream", {"op": "status", "cwd": str(cwd)})
    return row


# The dream runs a model turn or two: memdctl waits longer than the harness's minute.
memdctl = partial(daemon_harness.memdctl, timeout=120)


def finished(home: Home, cwd: Path, count: int) -> list[dict[str, Any]] | None:
    row = dream_row(home, cwd)
    runs = row["last_runs"]
    return runs if row["running"] is None and len(runs) >= count else None


def test_five_sessions_dream_once_four_do_not(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home, LoopbackProcess() as api:
        cwd, mdir = setup_project(home, tmp_path, sessions=4)
        before = tree(mdir)
        api.add_script(merge_script(final_delay_s=1.5))
        proc = start(home, api)
        try:
            stop_hook(home, cwd, "trigger", mdir)
            gates = wait_for(
                lambda: dream_row(home, cwd)["gates"]["at"] and dream_row(home, cwd)["gates"],
                timeout=30,
                what="the first gate check",
            )
            assert gates["state"] == "closed" and gates["gate"] == "sessions"
            assert gates["reason"].startswith("sessions: 4 of 5 since ")
            status = call(home, "status")["dream"]["projects"][0]
            assert [g["state"] for g in status["gate_states"]] == [
                "open",
                "open",
                "open",
                "closed",
                "not reached",
            ]
            assert tree(mdir) == before

            add_session(mdir.parent, "other-4")
            stop_hook(home, cwd, "trigger", mdir)
            live = wait_for(
                lambda: (r := dream_row(home, cwd)["running"]) and r["turns"] >= 2 and r,
                timeout=30,
                what="the dream's second turn",
            )
            assert sorted(live["sessions"]) == [f"other-{n}" for n in range(5)]
            assert live["tool_calls"] == 7 and len(live["files_touched"]) == 4
            assert "dating the release note" in live["latest_text"] and live["tokens"] > 0
            assert call(home, "status")["dream"]["projects"][0]["lock"]["holder"] == "this daemon"

            runs = wait_for(lambda: finished(home, cwd, 1), timeout=30, what="the dream to end")
            assert len(runs) == 1
            run = runs[0]
            text = memdctl(home, "status")
            assert f"dream     {mdir}: open - open: 5 sessions to review" in text.stdout, text
            assert run["state"] == "completed", run
            assert sorted(run["files"]) == [
                "MEMORY.md",
                "feedback_testing.md",
                "feedback_tests.md",
                "project_release.md",
            ]
            assert not (mdir / "feedback_testing.md").exists()
            assert (mdir / "feedback_tests.md").read_text() == MERGED
            assert "cut on 2026-11-21" in (mdir / "project_release.md").read_text()
            assert (mdir / LOCK_NAME).stat().st_mtime > time.time() - 60
            dream_requests = [
                r for r in api.requests() if DREAM_SYSTEM in json.dumps(r["body"].get("system"))
            ]
            assert len(dream_requests) == 3

            plain = memdctl(home, "dream", str(cwd))  # the gates now: just consolidated
            assert plain.returncode == 0, plain.stderr
            assert "closed - time: 0.0 h of 24 h" in plain.stdout
            runs_text = memdctl(home, "dream", str(cwd), "--log")
            assert runs_text.returncode == 0 and f"{run['run_id']}  dream completed" in (
                runs_text.stdout
            )
            by_path = memdctl(home, "dream", "--log", str(cwd))  # was taken as a run id
            assert by_path.returncode == 0, by_path.stderr
            assert f"{run['run_id']}  dream completed" in by_path.stdout
            missing = memdctl(home, "dream", str(cwd), "--log", "no-such-run")
            assert missing.returncode == 4 and "no single run" in missing.stderr, missing
            log = memdctl(home, "dream", str(cwd), "--log", run["run_id"])
            assert log.returncode == 0, log.stderr
            assert "-The release branch was cut yesterday" in log.stdout
            assert "+The release branch was cut on 2026-11-21" in log.stdout
            assert "deleted feedback_testing.md (merged into feedback_tests.md)" in log.stdout

            restored = memdctl(home, "dream", str(cwd), "--restore", run["run_id"], "--json")
            assert restored.returncode == 0, restored.stderr
            assert json.loads(restored.stdout)["state"] == "restored"
            assert tree(mdir) == before
            assert wait_for(lambda: finished(home, cwd, 2), timeout=10, what="history")
            # A later turn end with no new sessions does not dream again.
            stop_hook(home, cwd, "trigger", mdir)
            assert len(finished(home, cwd, 2) or []) == 2
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_a_model_that_deletes_everything_trips_the_wipe_guard(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home, LoopbackProcess() as api:
        cwd, mdir = setup_project(home, tmp_path, sessions=0)
        before = tree(mdir)
        deletes = [
            {"name": "Delete", "input": {"file_path": name, "merged_into": "MEMORY.md"}}
            for name in ("feedback_tests.md", "feedback_testing.md", "project_release.md")
        ]
        api.add_script(
            rules(
                {
                    "tool_uses": [
                        {"name": "Write", "input": {"file_path": "MEMORY.md", "content": ""}},
                        *deletes,
                    ]
                },
                {"text": "Cleaned up."},
            )
        )
        proc = start(home, api)
        try:
            done = memdctl(home, "dream", str(cwd), "--force", "--wait", "--json")
            assert done.returncode == 1, done.stdout + done.stderr
            run = json.loads(done.stdout)
            assert run["state"] == "failed" and "wipe guard" in run["reason"]
            assert "MEMORY.md is empty or missing" in run["reason"]
            assert tree(mdir) == before
            assert (mdir / LOCK_NAME).stat().st_mtime_ns == PRIOR_NS
            assert (mdir / LOCK_NAME).read_bytes() == b""
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def slow_script() -> str:
    """Edits two files, then hangs on the next model call."""
    return rules(
        {
            "tool_uses": [
                {
                    "name": "Edit",
                    "input": {
                        "file_path": "project_release.md",
                        "old_string": "cut yesterday",
                        "new_string": "cut on 2026-11-21",
                    },
                },
                {"name": "Write", "input": {"file_path": "feedback_tests.md", "content": MERGED}},
            ]
        },
        {"text": "never seen", "delay_s": 60},
    )


def wait_edited(home: Home, cwd: Path) -> dict[str, Any]:
    row: dict[str, Any] = wait_for(
        lambda: (r := dream_row(home, cwd)["running"]) and len(r["files_touched"]) == 2 and r,
        timeout=30,
        what="the dream's edits",
    )
    return row


def test_kill_9_mid_dream_is_undone_at_restart(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home, LoopbackProcess() as api:
        cwd, mdir = setup_project(home, tmp_path, sessions=0)
        before = tree(mdir)
        api.add_script(slow_script())
        proc = start(home, api)
        try:
            call(home, "dream", {"cwd": str(cwd), "force": True})
            wait_edited(home, cwd)
            assert tree(mdir) != before
            assert (mdir / LOCK_NAME).read_text() == str(proc.pid)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            proc = start(home, api)
            assert tree(mdir) == before
            assert (mdir / LOCK_NAME).stat().st_mtime_ns == PRIOR_NS
            assert (mdir / LOCK_NAME).read_bytes() == b""
            runs = dream_row(home, cwd)["last_runs"]
            assert runs[0]["state"] == "interrupted"
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_abort_undoes_the_run_and_keeps_other_writers_files(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home, LoopbackProcess() as api:
        cwd, mdir = setup_project(home, tmp_path, sessions=0)
        before = tree(mdir)
        api.add_script(slow_script())
        # memd extracts here too (beside Claude Code it leaves that to Claude Code's agent)
        proc = start(
            home,
            api,
            "--set",
            "memory.extract_beside_claude_code=true",
            "--set",
            "memory.beside_wait_s=0",
        )
        try:
            call(home, "dream", {"cwd": str(cwd), "force": True})
            wait_edited(home, cwd)
            # memd's own extraction waits while the dream holds the memory dir
            stop_hook(home, cwd, "trigger", mdir)
            wait_for(
                lambda: (
                    call(home, "status")["memory"]["projects"]
                    .get(str(mdir), {})
                    .get("waiting_reason")
                    == "a dream is running there"
                ),
                timeout=30,
                what="the extraction to wait for the dream",
            )
            (mdir / "user_role.md").write_text("written by another process\n")
            (mdir / "feedback_tests.md").write_text("edited by hand meanwhile\n")
            aborted = memdctl(home, "dream", str(cwd), "--abort", "--json")
            assert aborted.returncode == 0, aborted.stderr
            run = json.loads(aborted.stdout)
            assert run["state"] == "aborted" and run["flagged"] == ["feedback_tests.md"]
            after = tree(mdir)
            assert after.pop("user_role.md")
            assert (mdir / "feedback_tests.md").read_text() == "edited by hand meanwhile\n"
            assert {k: v for k, v in after.items() if k != "feedback_tests.md"} == {
                k: v for k, v in before.items() if k != "feedback_tests.md"
            }
            assert (mdir / LOCK_NAME).stat().st_mtime_ns == PRIOR_NS
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_a_live_foreign_holder_is_busy_even_when_forced(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home, LoopbackProcess() as api:
        cwd, mdir = setup_project(home, tmp_path, sessions=6)
        holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        proc = start(home, api)
        try:
            (mdir / LOCK_NAME).write_text(str(holder.pid))  # fresh mtime, a live non-memd PID
            done = memdctl(home, "dream", str(cwd), "--force", "--json")
            assert done.returncode == 1, done.stderr
            verdict = json.loads(done.stdout)["verdict"]
            assert verdict["gate"] == "lock" and str(holder.pid) in verdict["reason"]
            assert (mdir / LOCK_NAME).read_text() == str(holder.pid)
        finally:
            holder.kill()
            holder.wait()
            assert stop_memd(proc) == 0, read_log(home)


def test_a_kill_the_moment_the_lock_is_taken_is_repaired_at_the_next_start(
    tmp_path: Path,
) -> None:
    """kill -9 the moment memd's PID lands in ``.consolidate-lock`` (inotify sees the rename):
    the run was recorded before the lock was taken, so the next start undoes it and rolls the
    lock back, and neither the time gate nor the lock holds the next dream back."""
    with fake_home(tmp_path) as home, LoopbackProcess() as api:
        cwd, mdir = setup_project(home, tmp_path, sessions=5)
        before = tree(mdir)
        api.add_script(merge_script())
        proc = start(home, api)
        killer = arm_killer(proc.pid, [mdir], re.escape(LOCK_NAME), 30.0)
        try:
            with contextlib.suppress(MemdClientError):
                call(home, "dream", {"cwd": str(cwd), "force": True})
            assert killer.stdout is not None
            assert killer.stdout.readline().startswith("killed "), read_log(home)
            proc.wait(timeout=10)
            assert (mdir / LOCK_NAME).read_text() == str(proc.pid)  # it died holding the lock
            assert api.requests() == []

            proc = start(home, api)
            assert (mdir / LOCK_NAME).stat().st_mtime_ns == PRIOR_NS
            assert (mdir / LOCK_NAME).read_bytes() == b""
            assert tree(mdir) == before
            assert dream_row(home, cwd)["last_runs"][0]["state"] == "interrupted"
            done = memdctl(home, "dream", str(cwd), "--wait", "--json")  # not forced
            assert done.returncode == 0, done.stdout + done.stderr
            assert json.loads(done.stdout)["state"] == "completed", done.stdout
        finally:
            killer.kill()
            killer.communicate()  # and its pipe closed
            assert stop_memd(proc) == 0, read_log(home)
