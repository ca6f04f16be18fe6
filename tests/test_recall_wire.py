"""The ``recall`` reply on the wire (issue 35 item 2): recall's answer is typed inside the
daemon (:class:`memd.memory.reads.RecallAnswer`, rows :class:`memd.memory.recall.
RecalledMemory`) and turned into the wire form only at the IPC boundary. Clients read the
same bytes as before: every key, in the same order, of the same msgpack kind; a linked
memory's row ends with ``via``, a teammate's carries ``team``, no row carries what only the
daemon uses (``recorded_citations``)."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memd.ipc.handlers import method_table
from memd.ipc.server import Handler
from tests.wire_support import built_daemon, packs_back

pytestmark = pytest.mark.anyio

DAY_S = 86_400
REPLY_KEYS = [
    "memory_dir",
    "opted_out",
    "memories",
    "method",
    "reason",
    "caveat",
    "candidates",
    "elapsed_ms",
]
ROW_KEYS = [
    "path",
    "relative",
    "name",
    "type",
    "description",
    "content",
    "content_truncated",
    "mtime",
    "mtime_ms",
    "age",
    "age_days",
    "warning",
    "citations",
    "checks",
    "verified",
    "team",
]
DEPLOY = (
    "---\nname: deploy steps\ndescription: how the zebra service deploys\ntype: project\n---\n\n"
    "Zebra deploys go through the canary first. See [[canary board]].\n"
)
CANARY = (
    "---\nname: canary board\ndescription: where to watch a rollout\ntype: reference\n---\n\n"
    "The canary board is at grafana/canary.\n"
)
TEAM = (
    "---\nname: zebra owners\ndescription: who owns the zebra service\ntype: project\n"
    "author: ana\nagent: codex\n---\n\nThe zebra service belongs to the platform team.\n"
)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[dict[str, Handler], Path, Path]]:
    daemon = await built_daemon(tmp_path)
    cwd = tmp_path / "repo"
    cwd.mkdir()
    mdir = (await daemon.memory.locate(str(cwd))).memory_dir
    (mdir / "team").mkdir(parents=True)
    (mdir / "deploy.md").write_text(DEPLOY)
    (mdir / "canary.md").write_text(CANARY)
    (mdir / "team" / "owners.md").write_text(TEAM)
    old = time.time() - 3 * DAY_S  # a stale memory carries its warning
    os.utime(mdir / "team" / "owners.md", (old, old))
    yield method_table(daemon), cwd, mdir


async def test_the_recall_reply_keeps_its_wire_form(
    world: tuple[dict[str, Handler], Path, Path],
) -> None:
    table, cwd, mdir = world
    reply = await table["recall"]({"query": "zebra service deploys", "cwd": str(cwd)})
    assert list(reply) == REPLY_KEYS
    assert (reply["memory_dir"], reply["opted_out"]) == (str(mdir), None)
    assert reply["method"] == "lexical"
    assert isinstance(reply["elapsed_ms"], float) and reply["candidates"] == 3
    rows = {row["relative"]: row for row in reply["memories"]}
    assert set(rows) == {"deploy.md", "team/owners.md", "canary.md"}
    assert reply["memories"][-1]["relative"] == "canary.md"  # linked after recall's picks
    for relative, row in rows.items():
        linked = relative == "canary.md"
        assert list(row) == ROW_KEYS + (["via"] if linked else []), relative
        assert (row["path"], row["mtime_ms"]) == (str(mdir / relative), _ms(mdir / relative))
        assert all(isinstance(row[key], tuple | list) for key in ("citations", "checks"))
    assert rows["canary.md"]["via"] == "deploy.md"
    assert rows["team/owners.md"]["team"] == {"author": "ana", "agent": "codex"}
    assert rows["deploy.md"]["team"] is None
    owners = rows["team/owners.md"]
    assert (owners["age"], owners["age_days"]) == ("3 days ago", 3) and owners["warning"]
    assert (rows["deploy.md"]["age"], rows["deploy.md"]["warning"]) == ("today", "")
    assert packs_back(reply)


async def test_an_opted_out_recall_keeps_its_wire_form(
    world: tuple[dict[str, Handler], Path, Path],
) -> None:
    table, cwd, _ = world
    (cwd / ".memd-ignore").write_text("")
    reply = await table["recall"]({"query": "zebra", "cwd": str(cwd)})
    assert list(reply) == REPLY_KEYS
    assert reply["memories"] == [] and reply["method"] == "none"
    assert reply["opted_out"] and reply["reason"].startswith("memory is off: ")
    assert (reply["candidates"], reply["elapsed_ms"]) == (0, 0.0)


def _ms(path: Path) -> int:
    return path.stat().st_mtime_ns // 1_000_000
