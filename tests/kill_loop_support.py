"""kill -9 while notes and memory extractions run, inside writes and inside ingest; then check
what survived.

Used by ``tests/test_kill_loop.py`` (a few kills) and ``bench/kill_loop.py`` (100 and more).
Only public surfaces: the ``memd`` process, its socket, and the files on disk. Two sessions
start from a corpus transcript and grow by generated turns (each with a tool call and a turn
end), so notes and memory runs keep coming however many lives there are. The loopback
Messages API runs as a separate process: it answers every notes run with an Edit that adds
one line, and every memory extraction with a Write that replaces the seeded memory (each after
a delay, so kills land inside runs).

Each life of the daemon is one phase, in turn:

- ``random``: a kill at a random moment 0-1.5 s after the first append;
- ``state``, ``notes``, ``memory``: a kill sent the moment memd creates the temp file of an
  atomic write (``.<name>.memd-XXXXXXXX.tmp``) in the state dir, in a session-memory dir, or in
  the memory dir (``tests/inotify_killer.py`` watches them with inotify at a real-time
  priority). It *landed* inside the write when the temp file is still there afterwards;
- ``ingest``: a transcript grown by 16 MiB of generated lines before the start; the kill is
  sent while ``status`` shows the ingest worker busy and that transcript's offset short of its
  size (two looks 30 ms apart).

After every kill: every notes file is a whole version, the memory file is its seeded or its
rewritten version, the index is absent or whole. After the last one memd starts once more and
must show: no temp file anywhere, every state file parses (no ``.corrupt``), every transcript
(the big one too) ingested to its end, every interrupted notes and memory run redone.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from memd.atomic import STALE_TEMP
from memd.memory.paths import memory_dir
from memd.testing.loopback_process import LoopbackProcess
from memd_client.errors import MemdClientError
from tests.daemon_harness import Home, call, fake_home, read_log, start_memd, stop_memd, wait_for
from tests.inotify_killer import arm_killer
from tests.kill_loop_world import (
    BIG,
    BIG_CWD,
    MEMORY_BODY,
    NOTE_LINE,
    REWRITTEN,
    SESSIONS,
    SLUG,
    SOURCE,
    WORKLOG,
    Growth,
    World,
    append_some,
    check_memory,
    check_notes,
    grow_big,
    state_files,
    temp_files,
)
from tests.session_support import TranscriptBuilder

PATH_RE = "The notes file is (?P<path>/\\S+?summary\\.md)"
MEMORY_SYSTEM = "long-term memory of an AI coding assistant"
MEMORY_DIR_RE = "The memory directory is (?P<dir>/\\S+?)\\. "
PHASES = ("random", "state", "notes", "memory", "ingest")
TEMP_OF = "\\.{name}\\.memd-[a-z0-9_]{{8}}\\.tmp"  # memd.atomic's temp name for ``name``
# The state files the state phase aims at, in turn: offsets, memory cursors, notes records.
# (The usage ledger is flushed every 30 s: its writes are the same atomic write.)
STATE_TARGETS = ("sessions\\.json", "memory-extraction\\.json", "k[12]\\.json")
WRITE_WAIT_S = 30.0  # for the write a phase waits for; then a kill anyway, counted as missed
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
    "--set",
    "memory.extract_beside_claude_code=true",
    "--set",  # judged at once: no Claude Code of its own writes here
    "memory.beside_wait_s=0",
    "--set",
    f"privacy.ignore_projects=[{BIG_CWD}]",
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
    write: dict[str, Any] = {
        "tool_use": {
            "name": "Write",
            "input": {"file_path": "{dir}/seeded.md", "content": REWRITTEN},
        },
        "delay_s": delay_s,
    }
    memory = {"tool": "Write", "turn": "first", "system_match": MEMORY_SYSTEM}
    rules = [
        {"when": {"tool": "Edit", "turn": "first", "match": PATH_RE}, "reply": edit},
        {"when": {**memory, "match": MEMORY_DIR_RE}, "reply": write},
        {"when": {"turn": "after_tool"}, "reply": {"text": "Done."}},
    ]
    return "\n".join(json.dumps(r) for r in rules)


@dataclass
class PhaseCount:
    lives: int = 0
    landed: int = 0  # kills shown to have landed inside the phase's write or ingest


@dataclass
class KillReport:
    kills: int = 0
    kill_points_s: list[float] = field(default_factory=list)
    runs_in_flight_at_kill: int = 0
    temp_files_before_restart: int = 0  # left by the kills, removed at the next start
    notes_versions_seen: int = 0
    memory_versions_seen: Counter[str] = field(default_factory=Counter)  # "seeded"/"rewritten"
    notes_lines_final: int = 0  # notes runs that completed, over all lives
    phases: dict[str, PhaseCount] = field(default_factory=lambda: {p: PhaseCount() for p in PHASES})
    landed_in: Counter[str] = field(default_factory=Counter)  # file name -> kills inside writes
    after_rename: int = 0  # write-phase kills that came after the rename: the write was whole
    missed: Counter[str] = field(default_factory=Counter)  # why a phase's kill did not land
    ingest_at_kill: list[float] = field(default_factory=list)  # the big file's unread share
    final_start_s: float = 0.0
    seconds: float = 0.0


def _status(home: Home) -> dict[str, Any]:
    try:
        result: dict[str, Any] = call(home, "status")
        return result
    except MemdClientError:
        return {}


def _runs_in_flight(home: Home) -> int:
    notes = _status(home).get("notes")
    return int(notes.get("running", 0)) if isinstance(notes, dict) else 0


def _ingest_idle(home: Home) -> bool:
    ingest = _status(home).get("ingest") or {}
    return bool(ingest) and ingest.get("queued") == 0 and ingest.get("running") == 0


# -- one life per phase -------------------------------------------------------------------------


def _one_life(world: World, report: KillReport, phase: str) -> None:
    """Start memd, feed it, kill -9 it in the phase's way, check the files at once."""
    home = world.home
    if phase == "ingest":
        grow_big(world)
    proc = start_memd(home, *SETTINGS)
    landed = False
    try:
        match phase:
            case "random":
                _random_kill(world, report, proc)
            case "ingest":
                landed = _kill_in_ingest(world, report, proc)
            case _:
                landed = _kill_in_write(world, report, proc, phase)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    report.kills += 1
    report.phases[phase].lives += 1
    report.phases[phase].landed += landed
    report.temp_files_before_restart += len(temp_files(home.root))
    for sid in SESSIONS:
        notes = world.project / sid / "session-memory" / "summary.md"
        if notes.exists():
            check_notes(notes.read_text())
            report.notes_versions_seen += 1
    report.memory_versions_seen[check_memory(world)] += 1


def _random_kill(world: World, report: KillReport, proc: subprocess.Popen[bytes]) -> None:
    rng, home = world.rng, world.home
    if rng.random() < 0.8:  # most lives reach the model client; some die starting up
        wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=60, what="llm")
    append_some(world)
    point = rng.uniform(0.0, 1.5)
    deadline = time.monotonic() + point
    while time.monotonic() < deadline:
        if rng.random() < 0.3:
            append_some(world)
        time.sleep(rng.uniform(0.0, 0.3))
    report.runs_in_flight_at_kill += _runs_in_flight(home)
    os.kill(proc.pid, signal.SIGKILL)
    report.kill_points_s.append(point)


def _aim(world: World, report: KillReport, phase: str) -> tuple[list[Path], str]:
    """The folders a write phase watches and the temp file names it kills on."""
    match phase:
        case "state":
            target = STATE_TARGETS[report.phases["state"].lives % len(STATE_TARGETS)]
            return [world.home.state_dir], TEMP_OF.format(name=target)
        case "notes":
            folders = [world.project / sid / "session-memory" for sid in SESSIONS]
            return folders, STALE_TEMP.pattern
        case _:
            return [world.memory], STALE_TEMP.pattern


def _kill_in_write(
    world: World, report: KillReport, proc: subprocess.Popen[bytes], phase: str
) -> bool:
    """Arm the killer on the phase's folders, then give memd work that writes there."""
    home = world.home
    if phase != "state":  # state is written as soon as anything grows; runs need the model
        wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=60, what="llm")
    wait_for(partial(_ingest_idle, home), timeout=120, what="ingest to be idle")
    killer = _arm(proc.pid, *_aim(world, report, phase))
    try:
        deadline = time.monotonic() + WRITE_WAIT_S
        while killer.poll() is None and time.monotonic() < deadline:
            append_some(world)
            time.sleep(world.rng.uniform(0.2, 1.0))
        out, _ = killer.communicate(timeout=WRITE_WAIT_S + 30)
    finally:
        if killer.poll() is None:
            killer.kill()
            killer.wait()
    report.runs_in_flight_at_kill += 0 if proc.poll() is not None else _runs_in_flight(home)
    proc.wait(30)
    said = out.strip().splitlines()[-1] if out.strip() else ""
    if not said.startswith("killed "):
        report.missed[f"{phase}: {said or 'the killer failed'}"] += 1
        return False
    temp = Path(said.removeprefix("killed "))
    if temp.exists():  # the rename never came: the kill landed inside the write
        report.landed_in[_target_name(temp.name)] += 1
        return True
    report.after_rename += 1
    return False


def _arm(pid: int, folders: list[Path], pattern: str) -> subprocess.Popen[str]:
    return arm_killer(pid, folders, pattern, WRITE_WAIT_S)


def _target_name(temp_name: str) -> str:
    """``.summary.md.memd-abcdefgh.tmp`` -> ``summary.md``."""
    match = re.fullmatch(r"\.(.+)\.memd-[a-z0-9_]{8}\.tmp", temp_name)
    return match[1] if match else temp_name


def _kill_in_ingest(world: World, report: KillReport, proc: subprocess.Popen[bytes]) -> bool:
    """Kill while the big transcript is being read: the ingest worker busy and its offset
    short of its size, seen twice 30 ms apart."""
    home, size = world.home, (world.project / f"{BIG}.jsonl").stat().st_size
    seen = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        offset = _reading(home, size)
        seen = seen + 1 if offset is not None else 0
        if offset is not None and seen >= 2:
            os.kill(proc.pid, signal.SIGKILL)
            report.ingest_at_kill.append(1 - offset / size)
            return True
        if offset is None and _ingest_idle(home) and _big_offset(home) == size:
            report.missed["ingest: read whole before two looks"] += 1
            break
        time.sleep(0.03)
    os.kill(proc.pid, signal.SIGKILL)
    return False


def _reading(home: Home, size: int) -> int | None:
    """The big session's offset while the ingest worker runs and it is short of ``size``."""
    running = (_status(home).get("ingest") or {}).get("running", 0)
    offset = _big_offset(home)
    return offset if running and offset is not None and offset < size else None


def _big_offset(home: Home) -> int | None:
    try:
        rows = call(home, "sessions", {"project": SLUG})
    except MemdClientError:
        return None
    return next((int(r["offset"]) for r in rows if r["session_id"] == BIG), None)


# -- after the last kill ------------------------------------------------------------------------


def _final_checks(world: World, report: KillReport) -> None:
    """After the next start: no temp file, state parses, ingest complete, runs redone."""
    home = world.home
    begin = time.monotonic()
    proc = start_memd(home, *SETTINGS)
    report.final_start_s = time.monotonic() - begin
    try:
        assert temp_files(home.root) == [], temp_files(home.root)
        for path in state_files(home.state_dir):
            json.loads(path.read_bytes())
        assert not list(home.state_dir.rglob("*.corrupt"))
        wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=30, what="the model")
        for sid in SESSIONS:  # the sessions go on a little, to their end
            with open(world.project / f"{sid}.jsonl", "ab") as f:
                f.write(world.growth[sid].turns(2))
        for sid in (*SESSIONS, BIG):
            path = world.project / f"{sid}.jsonl"
            if not path.exists():
                continue
            wait_for(
                partial(_settled, home, sid, path.stat().st_size),
                timeout=300,
                what=f"{sid} ingested to its end and its interrupted notes run redone",
            )
        for sid in SESSIONS:
            notes = world.project / sid / "session-memory" / "summary.md"
            if notes.exists():
                check_notes(notes.read_text())
                report.notes_lines_final += notes.read_text().count(NOTE_LINE)
        wait_for(partial(_memory_settled, home), timeout=120, what="memory runs redone")
        report.memory_versions_seen[check_memory(world)] += 1
    finally:
        assert stop_memd(proc) == 0, read_log(home)


def _settled(home: Home, sid: str, size: int) -> bool:
    """Read to its end by the daemon's own ingest (``sessions``: ``session`` would catch up
    with the file itself), and no notes run owed."""
    try:
        rows = call(home, "sessions", {"project": SLUG})
        if next((r["offset"] for r in rows if r["session_id"] == sid), None) != size:
            return False
        row = call(home, "session", {"session": sid})
    except MemdClientError:
        return False
    notes = row.get("notes") or {}
    return notes.get("phase") == "idle" and not notes.get("pending") and not notes.get("follow_up")


def _memory_settled(home: Home) -> bool:
    memory = _status(home).get("memory") or {}
    return bool(memory) and not any(
        memory.get(k) for k in ("queued", "running", "waiting", "pending_sessions")
    )


def run_kill_loop(root: Path, kills: int, *, seed: int = 0, delay_s: float = 0.4) -> KillReport:
    """``kills`` lives of memd ended by SIGKILL, the phases in turn, then the final checks."""
    rng = random.Random(seed)
    report = KillReport()
    begin = time.monotonic()
    start = SOURCE.read_bytes().splitlines(keepends=True)[:20]
    entries = [json.loads(line) for line in start]
    cwd = next(e["cwd"] for e in entries if e.get("cwd"))
    last = next(e["uuid"] for e in reversed(entries) if e.get("uuid"))
    growth = {sid: Growth(TranscriptBuilder(session_id=sid, parent=last), cwd) for sid in SESSIONS}
    with LoopbackProcess() as api:
        api.add_script(script(delay_s))
        env = {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": api.url}
        with fake_home(root, **env) as home:
            world = World(home, rng, growth, memory_dir(home.projects, Path(cwd)))
            world.memory.mkdir(parents=True)
            (world.memory / "seeded.md").write_text(MEMORY_BODY)
            world.project.mkdir(parents=True, exist_ok=True)
            for sid in SESSIONS:
                (world.project / f"{sid}.jsonl").write_bytes(b"".join(start))
            for life in range(kills):
                _one_life(world, report, PHASES[life % len(PHASES)])
            _final_checks(world, report)
    report.seconds = time.monotonic() - begin
    return report
