"""The ``session`` method finds a session that is on disk but not reported yet.

Claude Code writes a new session's transcript before the watcher reports it (and under load
the report can take a while): ``memdctl session <id>`` right after a session must not answer
that it does not exist. An in-process daemon runs no watcher and no startup scan, so every
session here is one the registry has not heard of.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memd.config import load_config
from memd.daemon.service import Daemon
from memd.errors import NotFound
from memd.ipc.handlers import method_table
from memd.ipc.server import Handler, InvalidParams
from tests.conftest import CORPUS, PROFILE_SUPPRESSED
from tests.test_daemon_e2e import expected_figures

pytestmark = pytest.mark.anyio

SOURCE = CORPUS / "spotter" / "short.jsonl"
SID = "0ddba11e-0000-4000-8000-000000000001"


@pytest.fixture
async def table(tmp_path: Path) -> AsyncIterator[dict[str, Handler]]:
    project = tmp_path / ".claude" / "projects" / "-home-u-p"
    project.mkdir(parents=True)
    data = SOURCE.read_bytes().replace(SOURCE.stem.encode(), SID.encode())
    (project / f"{SID}.jsonl").write_bytes(data)
    (tmp_path / ".claude" / "projects" / "not-a-folder.jsonl").write_bytes(data)
    env = {"HOME": str(tmp_path), "MEMD_RUNTIME_DIR": str(tmp_path / "run")}
    daemon = Daemon.load(load_config(env=env), env=env)
    await daemon.build_features()
    yield method_table(daemon)


async def test_a_session_on_disk_is_read_when_asked_for(table: dict[str, Handler]) -> None:
    assert await table["sessions"]({}) == []  # nothing reported it
    row = await table["session"]({"session": SID})
    expected = expected_figures(SOURCE.read_bytes())
    assert (row["message_count"], row["context_tokens"]) == expected
    assert [r["session_id"] for r in await table["sessions"]({})] == [SID]


async def test_what_is_not_on_disk_stays_not_found(table: dict[str, Handler]) -> None:
    for ident in (SID[:8], "0ddba11e-0000-4000-8000-000000000002", "not-a-folder"):
        with pytest.raises(NotFound):
            await table["session"]({"session": ident})


@settings(
    max_examples=60,
    suppress_health_check=[*PROFILE_SUPPRESSED, HealthCheck.function_scoped_fixture],
)
@given(
    st.one_of(
        st.sampled_from(["..", ".", "../-home-u-p/" + SID, "-home-u-p/" + SID, "*", SID + "\0"]),
        st.text(min_size=1, max_size=300),
    )
)
async def test_any_id_is_found_or_not_found(table: dict[str, Handler], ident: str) -> None:
    try:
        row = await table["session"]({"session": ident})
    except NotFound:
        return
    except InvalidParams:  # a prefix of more than one known session
        return
    assert row["session_id"] == SID  # only the one transcript there is
