"""The usage record (issue 36, item 2): what it counts, when an injection is ignored, the
last day's and week's shares, that it survives a restart, stays bounded, lets go of files that
are gone, and reads any file on disk without failing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memd.memory import usage
from memd.memory.usage import (
    HOUR_S,
    MAX_MEMORIES,
    MAX_PENDING,
    MAX_SESSIONS,
    PENDING_MAX_AGE_S,
    USAGE_FILE,
    USE_TURNS,
    UsageRecord,
    Verdict,
    as_dict,
)
from tests.conftest import PROFILE_SUPPRESSED

A, B, C = "/m/a.md", "/m/b.md", "/m/c.md"


class Wall:
    def __init__(self, at: float = 1_800_000_000.0) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def record(tmp_path: Path, wall: Wall | None = None) -> UsageRecord:
    return UsageRecord(tmp_path / USAGE_FILE, wall or Wall())


def test_injections_and_uses_are_counted_per_memory(tmp_path: Path) -> None:
    wall = Wall()
    r = record(tmp_path, wall)
    r.injected("s1", [A, B], anchor="u1", agent="codex")
    wall.at += 60
    r.judged("s1", [Verdict(A, "quoted")], agent="codex", turn_ended=[B])
    a, b = r.row(A), r.row(B)
    assert (a.injected, a.used, a.ignored, a.last_signal) == (1, 1, 0, "quoted")
    assert a.last_used == wall.at and a.last_injected == wall.at - 60
    assert (b.injected, b.used, b.ignored) == (1, 0, 0)
    assert r.pending("s1")[B].turns == USE_TURNS - 1 and A not in r.pending("s1")
    assert as_dict(a)["last_agent"] == "codex" and as_dict(b)["last_used"] is None


def test_an_injection_is_ignored_after_its_turns_without_a_use(tmp_path: Path) -> None:
    r = record(tmp_path)
    r.injected("s1", [A])
    for _ in range(USE_TURNS - 1):
        r.judged("s1", [], turn_ended=[A])
        assert r.row(A).ignored == 0
    r.judged("s1", [], turn_ended=[A])
    assert (r.row(A).ignored, r.row(A).used, r.pending("s1")) == (1, 0, {})


def test_a_look_without_a_reply_takes_no_turn(tmp_path: Path) -> None:
    r = record(tmp_path)
    r.injected("s1", [A])
    for _ in range(10):
        r.judged("s1", [], turn_ended=[])
    assert r.pending("s1")[A].turns == USE_TURNS


def test_an_injection_waiting_a_day_is_ignored(tmp_path: Path) -> None:
    wall = Wall()
    r = record(tmp_path, wall)
    r.injected("s1", [A])
    wall.at += PENDING_MAX_AGE_S
    r.judged("s1", [])
    assert r.row(A).ignored == 1


def test_a_memory_in_the_context_already_is_not_injected_twice(tmp_path: Path) -> None:
    r = record(tmp_path)
    r.injected("s1", [A], anchor="u1")
    r.injected("s1", [A], anchor="u9")  # memd's MCP answer served it again
    assert r.row(A).injected == 1 and r.pending("s1")[A].anchor == "u1"
    r.judged("s1", [Verdict(A, "cited")])
    r.injected("s1", [A], anchor="u12")
    assert r.row(A).injected == 2


def test_a_verdict_for_what_is_not_waiting_changes_nothing(tmp_path: Path) -> None:
    r = record(tmp_path)
    r.judged("s1", [Verdict(A, "quoted")])
    assert r.row(A).used == 0 and r.rows([A]) == {}


def test_the_shares_of_the_last_day_and_week(tmp_path: Path) -> None:
    wall = Wall()
    r = record(tmp_path, wall)
    r.injected("old", [A, B, C])
    r.judged("old", [Verdict(A, "quoted")])
    wall.at += 2 * 24 * HOUR_S
    r.injected("new", [A, B])
    r.judged("new", [Verdict(A, "quoted"), Verdict(B, "opened_cited")])
    shares = r.shares()
    assert shares["day"] == {"injected": 2, "used": 2, "share": 1.0}
    assert shares["week"] == {"injected": 5, "used": 3, "share": 0.6}
    wall.at += 8 * 24 * HOUR_S
    assert r.shares()["week"] == {"injected": 0, "used": 0, "share": None}


def test_a_use_counts_in_the_hour_of_its_injection(tmp_path: Path) -> None:
    wall = Wall()
    r = record(tmp_path, wall)
    r.injected("s", [A])
    wall.at += 23.5 * HOUR_S
    r.judged("s", [Verdict(A, "quoted")])
    wall.at += HOUR_S  # the injection's hour left the day: its use with it
    assert r.shares()["day"] == {"injected": 0, "used": 0, "share": None}


def test_the_record_survives_a_restart(tmp_path: Path) -> None:
    r = record(tmp_path)
    r.injected("s1", [A, B], anchor="u1", agent="gemini")
    r.judged("s1", [Verdict(A, "read_over_mcp")], turn_ended=[B])
    r.tracked_since("/m")
    r.save()
    again = record(tmp_path)
    assert again.row(A) == r.row(A) and again.row(B) == r.row(B)
    assert again.pending("s1") == r.pending("s1") and again.cursor("s1") == r.cursor("s1")
    assert again.shares() == r.shares() and again.tracked_since("/m") == r.tracked_since("/m")


def test_nothing_is_written_when_nothing_changed(tmp_path: Path) -> None:
    r = record(tmp_path)
    r.save()
    assert not (tmp_path / USAGE_FILE).exists()
    r.injected("s1", [A])
    r.save()
    stamp = (tmp_path / USAGE_FILE).stat().st_mtime_ns
    os.utime(tmp_path / USAGE_FILE, ns=(1, 1))
    r.save()
    assert (tmp_path / USAGE_FILE).stat().st_mtime_ns == 1 != stamp


def test_memories_whose_files_are_gone_leave_the_record(tmp_path: Path) -> None:
    r = record(tmp_path)
    r.injected("s1", [A, B, C])
    assert r.prune(lambda path: path != B) == 1
    assert r.rows([A, B, C]).keys() == {A, C} and B not in r.pending("s1")
    r.forget([C])
    assert r.rows([A, B, C]).keys() == {A}


def test_the_record_is_bounded(tmp_path: Path) -> None:
    r = record(tmp_path)
    for n in range(MAX_MEMORIES + 10):
        r.injected(f"s{n % (MAX_SESSIONS + 5)}", [f"/m/{n}.md"])
    assert len(r.rows(f"/m/{n}.md" for n in range(MAX_MEMORIES + 10))) == MAX_MEMORIES
    assert r.row("/m/0.md").injected == 0  # the least recently injected went first
    r.injected("one", [f"/m/x{n}.md" for n in range(MAX_PENDING + 7)])
    assert len(r.pending("one")) == MAX_PENDING
    r.save()
    data = json.loads((tmp_path / USAGE_FILE).read_bytes())
    assert len(data["sessions"]) <= MAX_SESSIONS


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b"[]",
        b'{"version": 2}',
        b'{"version": 1, "memories": {"/m/a.md": {"injected": -1}}}',
        b'{"version": 1, "memories": {"/m/a.md": {"injected": 1e400}}}',
        b'{"version": 1, "memories": {"/m/a.md": {"used": true}}}',
        b'{"version": 1, "hours": {"1": [1]}}',
        b'{"version": 1, "sessions": {"s": {"pending": {"/m/a.md": {"at": "x"}}}}}',
        b"[" * 100_000,
    ],
)
def test_a_file_memd_cannot_read_is_moved_aside_and_the_record_starts_empty(
    tmp_path: Path, content: bytes
) -> None:
    (tmp_path / USAGE_FILE).write_bytes(content)
    r = record(tmp_path)
    assert r.rows([A]) == {} and r.shares()["week"]["injected"] == 0
    assert (tmp_path / (USAGE_FILE + ".corrupt")).read_bytes() == content
    r.injected("s", [A])
    r.save()
    assert record(tmp_path).row(A).injected == 1


def test_a_file_past_the_size_cap_is_not_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(usage, "MAX_FILE_BYTES", 64)
    (tmp_path / USAGE_FILE).write_bytes(
        b'{"version": 1, "memories": {}, "pad": "' + b"x" * 100 + b'"}'
    )
    assert record(tmp_path).rows([A]) == {}
    assert (tmp_path / (USAGE_FILE + ".corrupt")).exists()


@settings(
    max_examples=60,
    suppress_health_check=[*PROFILE_SUPPRESSED, HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["inject", "judge", "tick", "prune", "save"]),
            st.sampled_from(["s1", "s2"]),
            st.lists(st.sampled_from([A, B, C]), max_size=3),
        ),
        max_size=30,
    )
)
def test_counts_stay_consistent_under_any_sequence(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, str, list[str]]]
) -> None:
    """However calls interleave: used + ignored + waiting never exceed injected, and what was
    saved reads back the same."""
    folder = tmp_path_factory.mktemp("usage")
    wall = Wall()
    r = record(folder, wall)
    for kind, session, paths in steps:
        if kind == "inject":
            r.injected(session, paths)
        elif kind == "judge":
            verdicts = [Verdict(p, "quoted" if i % 2 else None) for i, p in enumerate(paths)]
            r.judged(session, verdicts, turn_ended=paths)
        elif kind == "tick":
            wall.at += HOUR_S * 7
        elif kind == "prune":
            r.prune(frozenset({A, B, C} - set(paths)).__contains__)
        else:
            r.save()
    for path in (A, B, C):
        row = r.row(path)
        waiting = sum(path in r.pending(s) for s in ("s1", "s2"))
        assert row.used + row.ignored + waiting <= row.injected, (path, row)
    r.save()
    again = record(folder, wall)
    assert all(again.row(p) == r.row(p) for p in (A, B, C))
