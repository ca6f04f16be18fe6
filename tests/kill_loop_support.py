"""kill -9 at random points while notes and memory extractions run; then check what survived.

Used by ``tests/test_kill_loop.py`` (a few kills) and ``bench/kill_loop.py`` (100 and more).
Only public surfaces: the ``memd`` process, its socket, and the files on disk. The loopback
Messages API runs as a separate process and answers every notes run with an Edit that adds
one line (after a delay, so kills land inside runs); memory extraction after a turn gets its
default answers from the same server.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from memd.atomic import LEGACY_TEMP, STALE_TEMP
from memd.session.template import DEFAULT_TEMPLATE, Intact, check_skeleton
from memd.testing.loopback_process import LoopbackProcess
from memd_client.errors import MemdClientError
from tests.conftest import TRANSCRIPTS
from tests.daemon_harness import Home, call, fake_home, read_log, start_memd, stop_memd, wait_for

SLUG = "-home-user-killloop"
SOURCE = TRANSCRIPTS / "napoli-matcha" / "05_a737f62fb9_4_full.jsonl"
SESSIONS = ("k1", "k2")
WORKLOG = "_One terse line per step: what was tried and what came of it._\n"
NOTE_LINE = "- progress noted\n"
PATH_RE = "The notes file is (?P<path>/\\S+?summary\\.md)"
MEMORY_BODY = "---\nname: seeded\ndescription: a memory seeded by the test\ntype: user\n---\n\nx\n"
SETTINGS = (
    "--set",
    "session_notes.init_tokens=3000",
    "--set",
    "session_notes.update_tokens=1000",
    "--set",
    "session_notes.tool_calls_between_updates=1",
    "--set",
    "budget.backoff_initial_s=0.2",
    "--set",
    "budget.backoff_max_s=1",
)


def script(delay_s: float) -> str:
    edit: dict[str, Any] = {
        "tool_use": {
            "name": "Edit",
            "input": {
                "file_path": "{path}",
                "old_string": WORKLOG,
                "new_string": WORKLOG + NOTE_LINE,
            },
        },
        "delay_s": delay_s,
    }
    rules = [
        {"when": {"tool": "Edit", "turn": "first", "match": PATH_RE}, "reply": edit},
        {"when": {"turn": "after_tool"}, "reply": {"text": "Done."}},
    ]
    return "\n".join(json.dumps(r) for r in rules)


@dataclass
class KillReport:
    kills: int = 0
    kill_points_s: list[float] = field(default_factory=list)
    runs_in_flight_at_kill: int = 0
    temp_files_before_restart: int = 0  # left by the kills, removed at the next start
    notes_versions_seen: int = 0
    notes_lines_final: int = 0  # notes runs that completed, over all lives
    final_start_s: float = 0.0
    seconds: float = 0.0


def temp_files(root: Path) -> list[Path]:
    """Every file under ``root`` named like one of memd's atomic-write temp files."""
    found = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            if STALE_TEMP.fullmatch(name) or LEGACY_TEMP.fullmatch(name):
                found.append(Path(dirpath) / name)
    return found


def check_notes(text: str) -> None:
    """A notes file is the template plus whole added lines: never a torn write."""
    base = text.replace(NOTE_LINE, "")
    assert check_skeleton(text, DEFAULT_TEMPLATE) == Intact(), text[:400]
    assert WORKLOG in base and base.count(WORKLOG) == 1, text[:400]


def state_files(state_dir: Path) -> Iterator[Path]:
    for dirpath, _, names in os.walk(state_dir):
        for name in names:
            if name.endswith(".json"):
                yield Path(dirpath) / name


def _append_some(home: Home, rng: random.Random, lines: list[bytes], pos: dict[str, int]) -> None:
    project = home.projects / SLUG
    for sid in SESSIONS:
        start = pos[sid]
        end = min(len(lines), start + rng.randint(5, 40))
        with open(project / f"{sid}.jsonl", "ab") as f:
            f.write(b"".join(lines[start:end]))
        pos[sid] = end


def _runs_in_flight(home: Home) -> int:
    try:
        notes = call(home, "status")["notes"]
    except (MemdClientError, KeyError, TypeError):
        return 0
    running = notes.get("running", 0) if isinstance(notes, dict) else 0
    return int(running)


def _one_life(
    home: Home, rng: random.Random, lines: list[bytes], pos: dict[str, int], report: KillReport
) -> None:
    """Start memd, feed it, kill -9 it at a random moment, check the files at once."""
    proc = start_memd(home, *SETTINGS)
    try:
        if rng.random() < 0.8:  # most lives reach the model client; some die starting up
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=60, what="llm")
        _append_some(home, rng, lines, pos)
        point = rng.uniform(0.0, 1.5)
        deadline = time.monotonic() + point
        while time.monotonic() < deadline:
            if rng.random() < 0.3:
                _append_some(home, rng, lines, pos)
            time.sleep(rng.uniform(0.0, 0.3))
        report.runs_in_flight_at_kill += _runs_in_flight(home)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    report.kills += 1
    report.kill_points_s.append(point)
    report.temp_files_before_restart += len(temp_files(home.root))
    for sid in SESSIONS:
        notes = home.projects / SLUG / sid / "session-memory" / "summary.md"
        if notes.exists():
            check_notes(notes.read_text())
            report.notes_versions_seen += 1
    memory = home.projects / SLUG / "memory" / "seeded.md"
    assert memory.read_text() == MEMORY_BODY


def _final_checks(home: Home, report: KillReport, lines: list[bytes], pos: dict[str, int]) -> None:
    """After the next start: no temp file, state parses, ingest complete, runs redone."""
    begin = time.monotonic()
    proc = start_memd(home, *SETTINGS)
    report.final_start_s = time.monotonic() - begin
    try:
        assert temp_files(home.root) == [], temp_files(home.root)
        for path in state_files(home.state_dir):
            json.loads(path.read_bytes())
        assert not list(home.state_dir.rglob("*.corrupt"))
        project = home.projects / SLUG
        wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=30, what="the model")
        for sid in SESSIONS:  # the sessions go on to their end
            with open(project / f"{sid}.jsonl", "ab") as f:
                f.write(b"".join(lines[pos[sid] :]))
        sizes = {sid: (project / f"{sid}.jsonl").stat().st_size for sid in SESSIONS}
        for sid, size in sizes.items():
            wait_for(
                partial(_settled, home, sid, size),
                timeout=120,
                what=f"{sid} ingested to its end and its interrupted notes run redone",
            )
            notes = project / sid / "session-memory" / "summary.md"
            if notes.exists():
                check_notes(notes.read_text())
                report.notes_lines_final += notes.read_text().count(NOTE_LINE)
    finally:
        assert stop_memd(proc) == 0, read_log(home)


def _settled(home: Home, sid: str, size: int) -> bool:
    try:
        row = call(home, "session", {"session": sid})
    except MemdClientError:
        return False
    notes = row.get("notes") or {}
    return (
        row["offset"] == size
        and notes.get("phase") == "idle"
        and not notes.get("pending")
        and not notes.get("follow_up")
    )


def run_kill_loop(root: Path, kills: int, *, seed: int = 0, delay_s: float = 0.4) -> KillReport:
    """``kills`` lives of memd ended by SIGKILL, then the final checks; figures out."""
    rng = random.Random(seed)
    report = KillReport()
    begin = time.monotonic()
    lines = SOURCE.read_bytes().splitlines(keepends=True)
    with LoopbackProcess() as api:
        api.add_script(script(delay_s))
        env = {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": api.url}
        with fake_home(root, **env) as home:
            project = home.projects / SLUG
            (project / "memory").mkdir(parents=True)
            (project / "memory" / "seeded.md").write_text(MEMORY_BODY)
            pos = dict.fromkeys(SESSIONS, 20)
            for sid in SESSIONS:
                (project / f"{sid}.jsonl").write_bytes(b"".join(lines[:20]))
            for _ in range(kills):
                _one_life(home, rng, lines, pos, report)
            _final_checks(home, report, lines, pos)
    report.seconds = time.monotonic() - begin
    return report
