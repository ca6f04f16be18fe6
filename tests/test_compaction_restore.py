"""R-C5: which recently read files come back after compaction."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.compaction import prompts
from memd.compaction.message import Msg
from memd.compaction.restore import (
    ReadRecord,
    RestoredFile,
    load_restore_files,
    plan_restore,
    recently_read,
    visible_paths,
)
from memd.compaction.results import ContextFile
from memd.compaction.service import CONTEXT_FILE_MAX_BYTES, plan_file, session_start_context
from memd.config import CompactionConfig
from tests.compaction_support import words_estimate

CFG = CompactionConfig()


def read(ident: str, path: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": ident, "name": "Read", "input": {"file_path": path}}


def result(ident: str, content: str = "1\tcode") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": ident, "content": content}


def reads(*pairs: tuple[str, str]) -> list[Msg]:
    msgs = [Msg.of("user", "go")]
    for ident, path in pairs:
        msgs.append(Msg.of("assistant", [read(ident, path)]))
        msgs.append(Msg.of("user", [result(ident)]))
    return msgs


def test_recent_reads_are_listed_newest_first_once_per_path() -> None:
    msgs = reads(("1", "/a"), ("2", "/b"), ("3", "/a"), ("4", "/c"))
    msgs.append(Msg.of("assistant", [{"type": "tool_use", "id": "5", "name": "Bash", "input": {}}]))
    assert [r.path for r in recently_read(msgs)] == ["/c", "/a", "/b"]


def test_a_read_is_visible_only_with_its_uncleared_result_kept() -> None:
    msgs = reads(("1", "/a"), ("2", "/b"), ("3", "/c"))
    assert visible_paths(msgs[3:]) == {"/b", "/c"}
    cleared = list(msgs)
    cleared[6] = Msg.of("user", [result("3", prompts.CLEARED_TOOL_RESULT)])
    assert visible_paths(cleared) == {"/a", "/b"}


def candidate(path: str, order: int, tokens: int) -> RestoredFile:
    return RestoredFile(path, order, "x", tokens)


def test_plan_takes_at_most_five_newest_within_the_budget() -> None:
    files = [candidate(f"/f{i}", i, 9_000) for i in range(8)]
    chosen = plan_restore(files, {"/f7"}, CFG)
    assert [c.path for c in chosen] == ["/f6", "/f5", "/f4", "/f3", "/f2"]
    big = [candidate("/new", 9, 45_000), candidate("/mid", 8, 10_000), candidate("/old", 1, 4_000)]
    assert [c.path for c in plan_restore(big, set(), CFG)] == ["/new", "/old"]


@settings(max_examples=150, deadline=None)
@given(
    files=st.lists(
        st.tuples(st.sampled_from("abcdefghij"), st.integers(0, 30_000)),
        max_size=12,
        unique_by=lambda f: f[0],
    ),
    visible=st.sets(st.sampled_from("abcdefghij")),
)
def test_plan_rules(files: list[tuple[str, int]], visible: set[str]) -> None:
    candidates = [candidate(p, i, t) for i, (p, t) in enumerate(files)]
    chosen = plan_restore(candidates, visible, CFG)
    assert len(chosen) <= 5
    assert sum(c.tokens for c in chosen) <= 50_000
    assert not {c.path for c in chosen} & visible
    assert [c.order for c in chosen] == sorted((c.order for c in chosen), reverse=True)
    eligible = sorted((c for c in candidates if c.path not in visible), key=lambda c: -c.order)
    top = eligible[:5]
    assert all(c in top for c in chosen)
    # Greedy, newest first: a file of the top five is left out only when it did not fit.
    used = 0
    for c in top:
        if c in chosen:
            used += c.tokens
        else:
            assert used + c.tokens > 50_000


@pytest.mark.anyio
async def test_loading_reads_current_contents_and_skips_what_cannot_be_read(
    tmp_path: Path,
) -> None:
    (tmp_path / "new.py").write_text("print('now')\n")
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe\x00binary")
    (tmp_path / "rel.md").write_text("# notes\n")
    (tmp_path / "shown.py").write_text("shown\n")
    records = [
        ReadRecord(str(tmp_path / "new.py"), 9),
        ReadRecord(str(tmp_path / "gone.py"), 8),
        ReadRecord(str(tmp_path / "blob.bin"), 7),
        ReadRecord(str(tmp_path / "shown.py"), 6),
        ReadRecord("rel.md", 5),
    ]
    files = await load_restore_files(
        records, {str(tmp_path / "shown.py")}, estimate=words_estimate, cfg=CFG, cwd=tmp_path
    )
    assert [(f.path, f.content) for f in files] == [
        (str(tmp_path / "new.py"), "print('now')\n"),
        ("rel.md", "# notes\n"),
    ]
    assert files[0].tokens == words_estimate("print('now')\n")


@pytest.mark.anyio
async def test_loading_stops_after_five_readable_files(tmp_path: Path) -> None:
    records = []
    for i in range(8):
        (tmp_path / f"f{i}.txt").write_text(f"file {i}\n")
        records.append(ReadRecord(str(tmp_path / f"f{i}.txt"), i))
    files = await load_restore_files(records, set(), estimate=words_estimate, cfg=CFG)
    assert [Path(f.path).name for f in files] == ["f7.txt", "f6.txt", "f5.txt", "f4.txt", "f3.txt"]


@pytest.mark.anyio
async def test_context_files_that_are_fifos_devices_or_huge_are_skipped_never_waited_on(
    tmp_path: Path,
) -> None:
    home, project = tmp_path / "home", tmp_path / "repo"
    (home / ".claude" / "plans").mkdir(parents=True)
    (project / ".claude").mkdir(parents=True)
    os.mkfifo(home / ".claude" / "CLAUDE.md")  # would block a plain open() forever
    (project / "AGENTS.md").write_text("shared rules\n")
    (project / "CLAUDE.md").symlink_to(project / "AGENTS.md")  # a link the user made: followed
    (project / ".claude" / "CLAUDE.md").symlink_to("/dev/zero")  # a device: skipped
    (project / "CLAUDE.local.md").write_bytes(b"x" * (CONTEXT_FILE_MAX_BYTES + 1))
    os.mkfifo(home / ".claude" / "plans" / "my-plan.md")
    with anyio.fail_after(10):
        context = await anyio.to_thread.run_sync(session_start_context, project, home)
        plan = await anyio.to_thread.run_sync(plan_file, home / ".claude", "my-plan")
    assert context == [ContextFile(str(project / "CLAUDE.md"), "shared rules\n")]
    assert plan is None
