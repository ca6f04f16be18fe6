"""``memdctl memories`` ages a memory as the hook does and shows pins (issue 36, item 6).

A memory copied, checked out or synced gets a new mtime; the ``modified`` Claude Code stamps in
it keeps when it was written. The listing said "today" for a memory whose ``modified`` was 694
days old, which recall and the hook age right; and it did not say which memories are pinned.
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memd.memory.paths import memory_dir
from memd.memory.reads import manifest_rows
from memd.memory.scan import scan_memories
from memd_client.render import render_memories
from tests.daemon_harness import call, fake_home, memdctl, start_memd, stop_memd

DAY_MS = 86_400_000


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


def write_memories(mdir: Path, now_ms: int) -> None:
    """``copied.md``: written 694 days ago, copied today, pinned; ``edited.md``: stamped 2 days
    ago, edited by hand 30 days ago (the older of the two ages it); ``plain.md``: no stamp."""
    mdir.mkdir(parents=True, exist_ok=True)
    stamped = _iso(now_ms - 694 * DAY_MS)
    (mdir / "copied.md").write_text(
        "---\nname: copied\ndescription: Deploys go through the release train\ntype: project\n"
        f"metadata:\n  modified: {stamped}\n  pinned: true\n---\n\nBody.\n"
    )
    (mdir / "edited.md").write_text(
        "---\nname: edited\ndescription: The user prefers terse answers\ntype: user\n"
        f"modified: {_iso(now_ms - 2 * DAY_MS)}\n---\n\nBody.\n"
    )
    old = (now_ms - 30 * DAY_MS) / 1000
    os.utime(mdir / "edited.md", (old, old))
    (mdir / "plain.md").write_text("---\nname: plain\ndescription: Plain\ntype: user\n---\n")


def test_rows_age_from_modified_when_older_and_carry_pins(tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000)
    write_memories(tmp_path, now_ms)
    rows = {r["relative"]: r for r in manifest_rows(scan_memories(tmp_path), now_ms)}
    assert rows["copied.md"]["age"] == "694 days ago"
    assert "694 days ago" in rows["copied.md"]["warning"]
    assert rows["copied.md"]["written"].startswith(_iso(now_ms - 694 * DAY_MS)[:10])
    assert rows["copied.md"]["mtime"][:10] == _iso(now_ms)[:10]  # the file's own time, kept
    assert rows["edited.md"]["age"] == "30 days ago"  # its mtime is the older
    assert rows["plain.md"]["age"] == "today" and rows["plain.md"]["warning"] == ""
    assert [r["pinned"] for r in (rows["copied.md"], rows["edited.md"], rows["plain.md"])] == [
        True,
        False,
        False,
    ]
    text = render_memories({"memory_dir": str(tmp_path), "memories": list(rows.values())})
    copied = next(line for line in text.splitlines() if "copied.md" in line)
    assert "694 d ago" in copied and "pinned" in copied
    edited = next(line for line in text.splitlines() if "edited.md" in line)
    assert "30 d ago" in edited and "pinned" not in edited


@pytest.mark.slow
def test_memdctl_memories_through_the_daemon(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        cwd = tmp_path / "repo"
        cwd.mkdir()
        now_ms = int(time.time() * 1000)
        write_memories(memory_dir(home.projects, cwd), now_ms)
        proc = start_memd(home)
        try:
            rows = call(home, "memories", {"cwd": str(cwd)})["memories"]
            by_name = {r["relative"]: r for r in rows}
            assert by_name["copied.md"]["age"] == "694 days ago"
            assert by_name["copied.md"]["pinned"] is True
            done = memdctl(home, "memories", str(cwd))
            assert done.returncode == 0, done.stderr
            copied = next(line for line in done.stdout.splitlines() if "copied.md" in line)
            assert "694 d ago" in copied and "pinned" in copied
            done = memdctl(home, "memories", str(cwd), "--json")
            listed = {r["relative"]: r for r in json.loads(done.stdout)["memories"]}
            assert listed["copied.md"]["pinned"] is True
            assert listed["plain.md"]["pinned"] is False
            # The hook's recall ages it the same way.
            recalled = call(home, "recall", {"query": "release train deploys", "cwd": str(cwd)})
            assert [m["age"] for m in recalled["memories"]] == ["694 days ago"]
        finally:
            assert stop_memd(proc) == 0
