"""End to end: the real ``memd`` process, real transcripts appended line by line, memdctl.

These start subprocesses; they wait on the daemon's observable state (status replies) with
deadlines, never on fixed sleeps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memd_client.status_form import expanded
from tests.conftest import CORPUS
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
from tests.transcript_oracle import read_lines

pytestmark = pytest.mark.slow

SLUG = "-home-user-proj"
SOURCES = [
    CORPUS / "spotter" / "short.jsonl",
    CORPUS / "napoli-matcha" / "05_a737f62fb9_1_full.jsonl",
]


def status_json(home: Home) -> dict[str, Any]:
    done = memdctl(home, "status", "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def session_row(home: Home, session_id: str) -> dict[str, Any] | None:
    rows = call(home, "sessions")
    return next((r for r in rows if r["session_id"] == session_id), None)


def expected_figures(data: bytes) -> tuple[int, int]:
    """Message count and context tokens of ``data`` by the independent oracle (not memd's own
    objects: a bug shared by the daemon and its parser would hide there)."""
    reading = read_lines(data.splitlines(), sidechain_file=False)
    return reading.message_count, reading.context_tokens


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def test_status_follows_transcripts_as_they_grow(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        proc = start_memd(home)
        try:
            status = wait_for(
                lambda: (s := status_json(home))["llm"]["reason"].startswith("disabled") and s,
                timeout=10,
                what="the model client to be set up",
            )
            assert status["llm"]["enabled"] is False
            assert "no API key" in status["llm"]["reason"]
            assert "ANTHROPIC_API_KEY" in status["llm"]["reason"]
            project = home.projects / SLUG
            project.mkdir(parents=True, exist_ok=True)
            for source in SOURCES:
                target = project / f"{source.stem}.jsonl"
                written = b""
                lines = source.read_bytes().splitlines(keepends=True)
                for i, line in enumerate(lines):
                    append(target, line)
                    written += line
                    size = len(written)

                    def caught_up(sid: str = source.stem, size: int = size) -> bool:
                        row = session_row(home, sid)
                        return row is not None and row["offset"] == size

                    start = time.monotonic()
                    wait_for(caught_up, timeout=2.0, what=f"{target.name} line {i + 1}")
                    assert time.monotonic() - start < 2.0
                    if i % 10 == 0 or i == len(lines) - 1:
                        row = next(
                            r
                            for r in status_json(home)["sessions"]
                            if r["session_id"] == source.stem
                        )
                        assert (row["message_count"], row["context_tokens"]) == expected_figures(
                            written
                        )
                assert session_row(home, source.stem)["bytes_parsed"] == len(written)  # type: ignore[index]
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_restart_resumes_from_saved_offsets(tmp_path: Path) -> None:
    source = SOURCES[1]
    data = source.read_bytes()
    half = data.rfind(b"\n", 0, len(data) // 2) + 1
    with fake_home(tmp_path) as home:
        project = home.projects / SLUG
        project.mkdir(parents=True)
        target = project / "s1.jsonl"
        target.write_bytes(data[:half])
        proc = start_memd(home)
        wait_for(
            lambda: (session_row(home, "s1") or {}).get("offset") == half, timeout=10, what="ingest"
        )
        assert stop_memd(proc) == 0, read_log(home)
        saved = json.loads((home.state_dir / "sessions.json").read_text())
        assert saved["sessions"][str(target)]["offset"] == half

        proc = start_memd(home)
        try:
            row = wait_for(lambda: session_row(home, "s1"), timeout=10, what="session listed")
            assert row["bytes_parsed"] == half  # nothing was parsed twice
            append(target, data[half:])
            wait_for(
                lambda: (session_row(home, "s1") or {}).get("offset") == len(data),
                timeout=10,
                what="the rest of the file",
            )
            final = session_row(home, "s1")
            assert final is not None
            row = final
            assert row["bytes_parsed"] == len(data)
            assert (row["message_count"], row["context_tokens"]) == expected_figures(data)
            ingest = call(home, "status")["ingest"]
            assert ingest["bytes_parsed"] == len(data)
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_second_instance_names_the_running_one(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        proc = start_memd(home)
        try:
            second = subprocess.run(
                [sys.executable, "-m", "memd.daemon.main"],
                env=home.env,
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert second.returncode == 3
            assert f"pid {proc.pid}" in second.stderr
            assert str(home.socket) in second.stderr
            assert call(home, "hello")["pid"] == proc.pid  # the first one is unharmed
        finally:
            assert stop_memd(proc) == 0


def test_bad_lines_are_counted_and_replaced_files_reread(tmp_path: Path) -> None:
    source = SOURCES[0]
    lines = source.read_bytes().splitlines(keepends=True)
    with fake_home(tmp_path) as home:
        project = home.projects / SLUG
        project.mkdir(parents=True)
        target = project / "s2.jsonl"
        proc = start_memd(home)
        try:
            target.write_bytes(lines[0] + b"{not json\n" + b"".join(lines[1:5]))
            wait_for(
                lambda: (session_row(home, "s2") or {}).get("offset") == target.stat().st_size,
                timeout=5,
                what="ingest with a bad line",
            )
            row = session_row(home, "s2")
            assert row is not None and row["bad_lines"] == 1
            assert row["message_count"] == expected_figures(target.read_bytes())[0]
            # Replace the file with a shorter one (new inode): memd starts over.
            replacement = project / "s2.tmp"
            replacement.write_bytes(b"".join(lines[:3]))
            os.replace(replacement, target)
            wait_for(
                lambda: (session_row(home, "s2") or {}).get("offset") == target.stat().st_size,
                timeout=5,
                what="re-read after replacement",
            )
            row = session_row(home, "s2")
            assert row is not None
            assert row["message_count"] == expected_figures(target.read_bytes())[0]
        finally:
            assert stop_memd(proc) == 0


def test_memdctl_when_daemon_is_down(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        done = memdctl(home, "status")
        assert done.returncode == 3
        assert "not running" in done.stderr
        assert "memd" in done.stderr


def test_sighup_reloads_config(tmp_path: Path) -> None:
    cfg = tmp_path / ".config" / "memd" / "config.yaml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("session_notes:\n  init_tokens: 11111\n")
    with fake_home(tmp_path) as home:
        proc = start_memd(home)
        try:
            assert call(home, "config")["config"]["session_notes"]["init_tokens"] == 11111
            cfg.write_text("session_notes:\n  init_tokens: 22222\n")
            proc.send_signal(signal.SIGHUP)
            wait_for(
                lambda: call(home, "config")["config"]["session_notes"]["init_tokens"] == 22222,
                timeout=5,
                what="reload",
            )
            cfg.write_text("session_notes:\n  init_tokens: nope\n")
            done = memdctl(home, "reload")
            assert done.returncode == 1
            assert "init_tokens" in done.stdout + done.stderr
            assert call(home, "config")["config"]["session_notes"]["init_tokens"] == 22222
        finally:
            assert stop_memd(proc) == 0


def test_bad_config_fails_fast_naming_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("transcripts:\n  watch_step_ms: soon\n  colour: blue\n")
    with fake_home(tmp_path) as home:
        done = subprocess.run(
            [sys.executable, "-m", "memd.daemon.main", "--config", str(cfg)],
            env=home.env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 2
        assert "transcripts.watch_step_ms: expected a whole number" in done.stderr
        assert "transcripts.colour: unknown key" in done.stderr


def test_llm_enabled_with_a_key_and_usage_shown(tmp_path: Path) -> None:
    with fake_home(
        tmp_path, ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL="http://127.0.0.1:9"
    ) as home:
        proc = start_memd(home)
        try:
            status = wait_for(
                lambda: (s := call(home, "status"))["llm"]["enabled"] and s,
                timeout=20,
                what="the model client to load",
            )
            assert status["llm"]["provider"] == "anthropic"
            assert "usage" in status and "guard" in status
            assert "test-key" not in json.dumps(status)
        finally:
            assert stop_memd(proc) == 0


def test_memd_own_files_and_subagents_are_never_sessions(tmp_path: Path) -> None:
    """R-B2: notes, memories and sub-agent transcripts under the projects root stay out."""
    source = SOURCES[0]
    with fake_home(tmp_path) as home:
        proc = start_memd(home)
        try:
            project = home.projects / SLUG
            notes = project / "s3" / "session-memory" / "summary.md"
            notes.parent.mkdir(parents=True)
            notes.write_text("# Session Title\n_t_\n")
            memory = project / "memory" / "MEMORY.md"
            memory.parent.mkdir(parents=True)
            memory.write_text("- [a](a.md) — b\n")
            sub = project / "s3" / "subagents" / "agent-a1.jsonl"
            sub.parent.mkdir(parents=True)
            sub.write_bytes(source.read_bytes())
            (project / "agent-0123abcd.jsonl").write_bytes(source.read_bytes())
            # A real session written last: once it is listed, the others had their chance.
            (project / "s3.jsonl").write_bytes(source.read_bytes())
            wait_for(lambda: session_row(home, "s3"), timeout=5, what="the real session")
            ids = [r["session_id"] for r in call(home, "sessions")]
            assert ids == ["s3"]
        finally:
            assert stop_memd(proc) == 0


def test_memdctl_status_text_names_what_is_disabled(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        proc = start_memd(home)
        try:
            wait_for(
                lambda: call(home, "status")["llm"]["reason"].startswith("disabled"),
                timeout=10,
                what="the model client to be set up",
            )
            done = memdctl(home, "status")
            assert done.returncode == 0, done.stderr
            assert "disabled: no API key" in done.stdout
            assert "budget    hour:" in done.stdout
        finally:
            assert stop_memd(proc) == 0


def test_status_lists_the_newest_sessions_briefly_and_notes_only_when_asked(
    tmp_path: Path,
) -> None:
    """``status`` is a glance: the newest sessions (10 unless ``limit`` says otherwise) with
    the figures ``memdctl status`` shows, the same as ``sessions`` reports; the notes status
    of each listed session only with ``notes`` (what ``memdctl top`` asks for)."""
    with fake_home(tmp_path) as home:
        project = home.projects / SLUG
        project.mkdir(parents=True)
        data = SOURCES[0].read_bytes()
        ids = [f"5e55{i:04d}-0000-4000-8000-000000000000" for i in range(13)]
        for i, sid in enumerate(ids):
            path = project / f"{sid}.jsonl"
            path.write_bytes(data.replace(SOURCES[0].stem.encode(), sid.encode()))
            os.utime(path, (time.time() - 100 + i, time.time() - 100 + i))
        proc = start_memd(home)
        try:
            wait_for(
                lambda: call(home, "status", {"limit": 1})["ingest"]["parsed"] == len(ids),
                timeout=20,
                what="every session to be read",
            )
            full = {r["session_id"]: r for r in call(home, "sessions")}
            status = expanded(call(home, "status"))
            listed = [r["session_id"] for r in status["sessions"]]
            assert listed == ids[::-1][:10]  # newest first
            for row in status["sessions"]:
                assert row == {k: full[row["session_id"]][k] for k in row}
                assert row["message_count"] > 0 and row["context_tokens"] > 0
            assert "sessions" not in status["notes"]
            three = expanded(call(home, "status", {"limit": 3}))["sessions"]
            assert [r["session_id"] for r in three] == listed[:3]
            asked = call(home, "status", {"limit": 12, "notes": True})
            assert [n["session_id"] for n in asked["notes"]["sessions"]] == ids[::-1][:12]
            assert all(n["phase"] == "idle" for n in asked["notes"]["sessions"])
        finally:
            assert stop_memd(proc) == 0


def test_active_window_hours_is_which_sessions_are_read_at_start(tmp_path: Path) -> None:
    """R-T6 through the daemon: with ``transcripts.active_window_hours=3`` a transcript
    written 2.9 h ago is read at start and one written 3.1 h ago is only registered."""
    with fake_home(tmp_path) as home:
        project = home.projects / SLUG
        project.mkdir(parents=True)
        data = SOURCES[0].read_bytes()
        ages = {
            "a9e00029-0000-4000-8000-000000000000": 2.9,
            "a9e00031-0000-4000-8000-000000000000": 3.1,
        }
        for sid, hours in ages.items():
            path = project / f"{sid}.jsonl"
            path.write_bytes(data.replace(SOURCES[0].stem.encode(), sid.encode()))
            then = time.time() - hours * 3600
            os.utime(path, (then, then))
        proc = start_memd(home, "--set", "transcripts.active_window_hours=3")
        try:

            def idle() -> bool:
                ingest = call(home, "status", {"limit": 1})["ingest"]
                quiet: bool = ingest["sessions"] == 2 and ingest["queued"] == ingest["running"] == 0
                return quiet

            def settled() -> bool:  # the startup scan is over, and what it queued is read
                log = (home.root / "memd.log").read_text(errors="replace")
                return "startup scan:" in log and idle()

            wait_for(settled, timeout=20, what="the startup scan")
            rows = {r["session_id"]: r["parsed"] for r in call(home, "sessions")}
            assert rows == dict(zip(ages, [True, False], strict=True)), rows
        finally:
            assert stop_memd(proc) == 0, read_log(home)
