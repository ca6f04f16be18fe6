"""The dream gates (R-D1): the pure function, and the shell that never scans too early."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.dream.gates import Go, NeedScan, Observed, Skip, Thresholds, evaluate
from memd.dream.transcripts import count_sessions
from memd.sources.base import DreamScope, any_session
from memd.sources.codex import Codex
from memd.sources.gemini import Gemini
from memd.state import SessionState

LIMITS = Thresholds(24.0, 10.0, 5)
NOW = 1_800_000_000.0

times = st.one_of(st.none(), st.floats(NOW - 10 * 86400, NOW + 3600, allow_nan=False))
sessions = st.one_of(st.none(), st.lists(st.text(min_size=1, max_size=4), max_size=9).map(tuple))
observed = st.builds(
    Observed,
    now=st.just(NOW),
    disabled=st.one_of(st.none(), st.just("memory.auto_memory is false")),
    lock_mtime=times,
    last_scan_at=times,
    sessions=sessions,
    force=st.booleans(),
)


@given(observed)
def test_gates_follow_the_cheapest_first_order(seen: Observed) -> None:
    verdict = evaluate(seen, LIMITS)
    if seen.disabled:
        assert verdict == Skip("enabled", f"enabled: no ({seen.disabled})")
        return
    if seen.force:
        assert isinstance(verdict, Go) and verdict.forced
        return
    age_h = None if seen.lock_mtime is None else (NOW - seen.lock_mtime) / 3600
    if age_h is not None and age_h < 24:
        assert isinstance(verdict, Skip) and verdict.gate == "time"
        assert "of 24 h" in verdict.reason
        return
    if seen.sessions is None:
        throttled = seen.last_scan_at is not None and NOW - seen.last_scan_at < 600
        assert isinstance(verdict, Skip if throttled else NeedScan)
        if throttled:
            assert isinstance(verdict, Skip) and verdict.gate == "throttle"
        else:
            assert verdict == NeedScan(seen.lock_mtime or 0.0)
        return
    if len(seen.sessions) < 5:
        assert isinstance(verdict, Skip) and verdict.gate == "sessions"
        assert f"{len(seen.sessions)} of 5" in verdict.reason
    else:
        assert verdict == Go(seen.sessions)


def test_reasons_carry_the_numbers() -> None:
    seen = Observed(NOW, None, NOW - 7.2 * 3600, None)
    assert evaluate(seen, LIMITS) == Skip("time", "time: 7.2 h of 24 h")
    lock = 1_795_000_000.0  # 2026-11-18 ...
    counted = Observed(NOW, None, lock, None, ("a", "b", "c"))
    verdict = evaluate(counted, LIMITS)
    assert isinstance(verdict, Skip) and verdict.reason.startswith("sessions: 3 of 5 since 2026-")
    never = evaluate(Observed(NOW, None, None, None, ("a",)), LIMITS)
    assert never == Skip("sessions", "sessions: 1 of 5 since ever")
    throttled = evaluate(Observed(NOW, None, None, NOW - 120), LIMITS)
    assert throttled == Skip("throttle", "throttle: last scan 2.0 min ago, waits 10 min")


def test_force_never_skips_enabled() -> None:
    seen = Observed(NOW, "dream off", NOW, NOW, None, force=True)
    assert isinstance(evaluate(seen, LIMITS), Skip)


def test_session_count_is_stat_only_and_excludes_the_trigger(tmp_path: Path) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    for n in range(7):
        path = folder / f"s{n}.jsonl"
        path.write_text("{}\n")
        os.utime(path, (100.0 + n, 100.0 + n))
    (folder / "notes.txt").write_text("x")
    os.mkfifo(folder / "fifo.jsonl")  # never opened
    os.symlink(folder / "s6.jsonl", folder / "link.jsonl")
    scopes = [DreamScope(folder, any_session), DreamScope(tmp_path / "missing", any_session)]
    assert count_sessions(scopes, 103.0, exclude="s6") == ("s4", "s5")


@pytest.mark.parametrize("closed", ["time", "throttle"])
def test_no_scan_when_time_or_throttle_is_closed(
    tmp_path: Path, closed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stat-counting test: the shell's path through the gates never lists or stats the
    transcripts while a cheaper gate is closed."""
    scandirs: list[object] = []
    real_scandir = os.scandir

    def counting(path: str = ".") -> object:
        scandirs.append(path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", counting)
    from tests.dream_support import check_once

    verdict = check_once(tmp_path, closed)
    assert isinstance(verdict, Skip) and verdict.gate == closed
    assert scandirs == []


def test_the_scan_runs_once_the_cheap_gates_are_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scandirs: list[object] = []
    real_scandir = os.scandir

    def counting(path: str = ".") -> object:
        scandirs.append(path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", counting)
    from tests.dream_support import check_once

    verdict = check_once(tmp_path, "none")
    assert isinstance(verdict, Skip) and verdict.gate == "sessions"
    assert "3 of 5" in verdict.reason
    assert len(scandirs) == 1


def test_each_agents_sessions_count_for_the_dream_as_its_room_says(tmp_path: Path) -> None:
    """Issue 35: the dream counted only Claude Code's project folders. A Gemini project's
    chats count (the two files a resume in a new minute leaves are one chat); a Codex rollout
    counts alone (its day folder holds every project's)."""
    chats = tmp_path / ".gemini" / "tmp" / "proj" / "chats"
    day = tmp_path / ".codex" / "sessions" / "2026" / "11" / "28"
    for folder in (chats, day):
        folder.mkdir(parents=True)
    names = {
        chats: [
            "session-2026-11-26T06-45-f71100ab.jsonl",
            "session-2026-11-26T06-46-f71100ab.jsonl",  # the same chat, resumed
            "session-2026-11-26T06-48-a795b61b.jsonl",
            "notes.jsonl",
        ],
        day: [
            "rollout-2026-11-28T06-50-03-01a220eb-073e-74b1-af7e-d21de4f940f9.jsonl",
            "rollout-2026-11-28T07-00-00-01a220ec-0000-7000-8000-000000000001.jsonl",
        ],
    }
    for folder, files in names.items():
        for name in files:
            (folder / name).write_text("{}\n")
    gemini = Gemini(tmp_path / ".gemini")
    codex = Codex(tmp_path / ".codex")
    chat = SessionState("f71100ab", "", str(chats / names[chats][0]), agent="gemini")
    rollout_id = "01a220eb-073e-74b1-af7e-d21de4f940f9"
    rollout = SessionState(rollout_id, "", str(day / names[day][0]), agent="codex")
    scopes = [gemini.dream_scope(chat), codex.dream_scope(rollout)]
    assert None not in scopes
    counted = count_sessions([s for s in scopes if s is not None], 0.0)
    assert counted == (rollout_id, "a795b61b", "f71100ab")
    assert gemini.dream_scope(SessionState("x", "", str(tmp_path / "x.jsonl"))) is None
