"""memd's own records, read back at start, never keep it from starting nor lose their bytes.

A sessions' state file nested a million deep ended the daemon's start in ``RecursionError``
(Python's JSON parser recurses); a FIFO at a record's name would have blocked the start
forever; a disk that refused the move aside raised out of the loader. Each record now goes
through :func:`memd.records.load_record`: capped, never blocking, set aside whole.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memd.clock import FakeClock
from memd.daemon.service import SESSIONS_FILE
from memd.llm.ledger import LEDGER_FILE, Ledger
from memd.memory import archive, usage
from memd.memory.cursors import CURSOR_FILE, CursorStore
from memd.records import load_record
from memd.session.store import RECORDS_DIR, ExtractionStore
from memd.state import load_sessions
from tests.conftest import PROFILE_SUPPRESSED
from tests.daemon_harness import fake_home, read_log, start_memd, stop_memd, wait_features

DEEP = b"[" * 200_000 + b"]" * 200_000


def _sessions(state: Path) -> object:
    return load_sessions(state / SESSIONS_FILE)


def _ledger(state: Path) -> object:
    return Ledger.load(state, FakeClock(1_000_000.0)).usage()


def _cursors(state: Path) -> object:
    return CursorStore.load(state).pending()


def _notes(state: Path) -> object:
    return ExtractionStore.load(state).records()


def _usage(state: Path) -> object:
    return usage._load(state / usage.USAGE_FILE)


def _archive(state: Path) -> object:
    return archive._load(state / archive.ARCHIVE_FILE)


LOADERS: dict[str, tuple[str, Callable[[Path], object]]] = {
    "sessions": (SESSIONS_FILE, _sessions),
    "ledger": (LEDGER_FILE, _ledger),
    "cursors": (CURSOR_FILE, _cursors),
    "notes": (f"{RECORDS_DIR}/s.json", _notes),
    "usage": (usage.USAGE_FILE, _usage),
    "archive": (archive.ARCHIVE_FILE, _archive),
}

# JSON-shaped values of every kind, as a hand edit or another version could leave them.
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
_SHAPES = st.one_of(
    st.binary(max_size=64),
    _JSON.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(
        st.sampled_from(["version", "sessions", "records", "buckets", "totals", "memories"]),
        _JSON,
    ).map(lambda v: json.dumps(v).encode()),
    st.integers(1, 100_000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 100_000).map(lambda n: b'{"version": 1, "sessions": ' + b"[" * n),
)


@pytest.mark.parametrize("name", sorted(LOADERS))
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[*PROFILE_SUPPRESSED, HealthCheck.function_scoped_fixture],
)
@given(content=_SHAPES)
def test_any_bytes_load_as_empty_or_as_they_are_never_lost(
    tmp_path_factory: pytest.TempPathFactory, name: str, content: bytes
) -> None:
    state = tmp_path_factory.mktemp("state")
    relative, load = LOADERS[name]
    path = state / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    load(state)  # never raises
    aside = path.with_name(path.name + ".corrupt")
    if aside.exists():
        assert aside.read_bytes() == content and not path.exists()
    else:
        assert path.read_bytes() == content  # it was read as a record: left as it is


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_a_fifo_or_a_folder_at_a_record_is_set_aside_without_waiting(
    tmp_path: Path, name: str
) -> None:
    relative, load = LOADERS[name]
    for kind in ("fifo", "folder"):
        state = tmp_path / kind
        path = state / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "fifo":
            os.mkfifo(path)  # an open that blocked would wait here for a writer forever
        else:
            path.mkdir()
        load(state)
        assert path.with_name(path.name + ".corrupt").exists() and not path.exists()


def test_a_record_past_its_cap_is_not_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    with open(path, "wb") as file:
        file.truncate(1 << 40)  # sparse: a terabyte that reading would take the machine for
    decoded: list[bytes] = []
    assert load_record(path, 1024, "a record", decoded.append) is None
    assert decoded == [] and (tmp_path / "record.json.corrupt").stat().st_size == 1 << 40


def test_a_record_that_cannot_be_moved_aside_still_loads_as_empty(tmp_path: Path) -> None:
    """The move aside refused (here: a folder with a file in it holds the name, which no
    rename can replace, root's included): the load goes on from empty, the bytes stay."""
    path = tmp_path / "record.json"
    path.write_bytes(DEEP)
    (tmp_path / "record.json.corrupt").mkdir()
    (tmp_path / "record.json.corrupt" / "keep").write_bytes(b"")

    def decode(raw: bytes) -> Any:
        return json.loads(raw)

    assert load_record(path, len(DEEP), "a record", decode) is None
    assert path.read_bytes() == DEEP


def test_memd_starts_over_broken_records_and_keeps_their_bytes(tmp_path: Path) -> None:
    """The records read at start: the sessions' state (before the socket), the ledger and
    the notes records (with the features). Each broken one: memd answers, the bytes kept."""
    with fake_home(tmp_path) as home:
        state = home.state_dir
        (state / RECORDS_DIR).mkdir(parents=True)
        (state / SESSIONS_FILE).write_bytes(DEEP)
        os.mkfifo(state / LEDGER_FILE)
        (state / RECORDS_DIR / "s.json").write_bytes(b'{"version": 1, "session_id": ' + DEEP)
        proc = start_memd(home)
        try:
            wait_features(home)
        finally:
            assert stop_memd(proc) == 0, read_log(home)
        assert (state / (SESSIONS_FILE + ".corrupt")).read_bytes() == DEEP
        assert (state / (LEDGER_FILE + ".corrupt")).exists()
        kept = (state / RECORDS_DIR / "s.json.corrupt").read_bytes()
        assert kept.endswith(DEEP)
        assert "RecursionError" in read_log(home)
