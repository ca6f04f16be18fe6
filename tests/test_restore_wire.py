"""The ``restore_memory`` reply on the wire (issue 35 item 2): the restore is typed inside the
daemon (:class:`memd.memory.archive_service.Restored`) and turned into the wire form only at
the IPC boundary. Clients read the same keys, in the same order, of the same msgpack kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from memd.ipc.handlers import method_table
from tests.wire_support import built_daemon, packs_back

pytestmark = pytest.mark.anyio

OLD = "---\nname: old steps\ndescription: how it used to deploy\ntype: project\n---\n\nGone.\n"


async def test_the_restore_reply_keeps_its_wire_form(tmp_path: Path) -> None:
    daemon = await built_daemon(tmp_path)
    cwd = tmp_path / "repo"
    cwd.mkdir()
    mdir = (await daemon.memory.locate(str(cwd))).memory_dir
    mdir.mkdir(parents=True, exist_ok=True)
    (mdir / "old.md").write_text(OLD)
    (mdir / "MEMORY.md").write_text("- [old steps](old.md) — how it used to deploy\n")
    assert daemon.memory.archive.archive.archive(mdir, "old.md") is not None
    reply = await method_table(daemon)["restore_memory"]({"cwd": str(cwd), "memory": "old.md"})
    assert list(reply) == ["memory_dir", "restored", "path", "archived", "index"]
    assert reply["memory_dir"] == str(mdir)
    assert (reply["restored"], reply["path"]) == ("old.md", str(mdir / "old.md"))
    assert isinstance(reply["archived"], str) and reply["index"] is True
    assert (mdir / "old.md").read_text() == OLD
    assert packs_back(reply)
