"""The registry's indexes answer exactly what a scan over every session would."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from memd.daemon.session_index import SessionIndex
from memd.session.status import NotesStatistics, NotesView, SessionNotesStatus
from memd.state import SessionState

IDS = ["aaaa-1", "aaaa-2", "ab-3", "b-4", "c"]
PROJECTS = ["-p-one", "-p-two", "-p-three"]


def state(
    sid: str,
    project: str,
    mtime: float = 0.0,
    lines: int = 0,
    parsed: bool = False,
    file: str = "",
    ignored: str = "",
) -> SessionState:
    path = f"/r/{project}/{file or sid}.jsonl"
    return SessionState(
        sid,
        project,
        path,
        mtime=mtime,
        lines=lines,
        bad_lines=lines // 2,
        bytes_parsed=lines * 10,
        parsed=parsed,
        ignored=ignored,
    )


FILES = ["f1", "f2", ""]  # a session's files may be named otherwise than its id (Gemini)
put_op = st.builds(
    state,
    st.sampled_from(IDS),
    st.sampled_from(PROJECTS),
    st.sampled_from([0.0, 1.0, 2.0, 5.5]),
    st.integers(0, 3),
    st.booleans(),
    st.sampled_from(FILES),
    st.sampled_from(["", "no message of its own"]),
)
remove_op = st.builds(
    lambda name, p: f"/r/{p}/{name}.jsonl",
    st.sampled_from([*IDS, *FILES[:-1]]),
    st.sampled_from(PROJECTS),
)


def heads(model: dict[str, SessionState]) -> dict[str, SessionState]:
    """Each id's session: of the files that carry it, one memd follows, then the newest."""
    found: dict[str, SessionState] = {}
    for s in sorted(model.values(), key=lambda s: (bool(s.ignored), -s.mtime, s.path)):
        found.setdefault(s.session_id, s)
    return found


def newest(model: dict[str, SessionState], project: str | None = None) -> list[str]:
    rows = [s for s in heads(model).values() if project is None or s.project == project]
    return [s.path for s in sorted(rows, key=lambda s: (-s.mtime, s.path))]


@given(st.lists(st.one_of(put_op, remove_op), max_size=40), st.integers(0, 6))
def test_the_index_agrees_with_a_scan(ops: list[SessionState | str], limit: int) -> None:
    index = SessionIndex()
    model: dict[str, SessionState] = {}
    for op in ops:
        if isinstance(op, SessionState):
            index.put(op)
            model[op.path] = op
        else:
            assert (index.remove(op) is None) == (op not in model)
            model.pop(op, None)
    assert len(index) == len(heads(model))
    assert sorted(index.paths()) == sorted(model)
    assert [s.path for s in index.newest()] == newest(model)
    assert [s.path for s in index.newest(limit)] == newest(model)[:limit]
    for project in PROJECTS:
        assert [s.path for s in index.newest(limit, project)] == newest(model, project)[:limit]
    for sid in IDS:
        found = index.by_id(sid)
        expected = heads(model).get(sid)
        assert (found.path if found else None) == (expected.path if expected else None)
    for prefix in ("a", "aaaa", "ab", "b-4", "z", ""):
        got = sorted(s.path for s in index.with_prefix(prefix))
        want = [s.path for sid, s in heads(model).items() if sid.startswith(prefix)]
        assert got == sorted(want)
    totals = index.totals
    assert totals.parsed == sum(s.parsed for s in model.values())
    assert totals.lines == sum(s.lines for s in model.values())
    assert totals.bad_lines == sum(s.bad_lines for s in model.values())
    assert totals.bytes_parsed == sum(s.bytes_parsed for s in model.values())


def test_status_dicts_name_every_field() -> None:
    """The hand-written ``as_dict`` methods (no deep copy on the status path) drift from the
    dataclasses if a field is added to one and not the other."""
    status = SessionNotesStatus(
        "s",
        "p",
        "/n",
        "idle",
        None,
        False,
        None,
        1,
        2,
        None,
        None,
        None,
        3,
        4,
        None,
        5,
        "c",
        None,
        None,
        False,
    )
    assert status.as_dict() == dataclasses.asdict(status)
    view = NotesView("s", "/n", None, "t", True, None, status)
    assert view.as_dict() == dataclasses.asdict(view)
    stats = NotesStatistics(True, "", "auto", 0, 1, 2, (status,))
    assert stats.as_dict() == {**dataclasses.asdict(stats), "sessions": [status.as_dict()]}


def test_last_activity_is_iso_utc_and_a_planted_mtime_does_not_fail_the_listing() -> None:
    from datetime import UTC, datetime

    from memd.clock import iso_utc as _iso

    for ts in (1.0, 1_763_800_000.7, 4_102_444_800.0, -1.5, 1_763_800_000.7):  # twice: cached
        assert _iso(ts) == datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")
    assert _iso(0.0) == ""
    assert _iso(1e20) == "" and _iso(float("nan")) == ""  # touch -d far future, or garbage
