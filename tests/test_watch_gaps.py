"""The pieces that find and scan the project folders inotify does not watch, on real files and
a real inotify descriptor (the daemon end to end: tests/test_watch_limit.py)."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
import watchfiles
from hypothesis import given
from hypothesis import strategies as st

from memd.daemon.watch_gaps import (
    Gaps,
    folder_inode,
    missing_watches,
    root_and_projects,
    watched_inodes,
)


@given(st.lists(st.integers(min_value=1, max_value=2**63), max_size=50))
def test_watched_inodes_reads_every_watch_line_and_nothing_else(inodes: list[int]) -> None:
    lines = ["pos:\t0", "flags:\t02004000", "mnt_id:\t17", "ino:\t1038"]
    for wd, ino in enumerate(inodes, 1):
        lines.append(
            f"inotify wd:{wd:x} ino:{ino:x} sdev:fe00000 mask:3ee ignored_mask:0 "
            "fhandle-bytes:8 fhandle-type:1 f_handle:7e40240021f64ccf"
        )
    assert watched_inodes("\n".join(lines) + "\n") == set(inodes)


@pytest.mark.anyio
async def test_missing_watches_reads_this_process_s_inotify_descriptors(tmp_path: Path) -> None:
    watched = tmp_path / "watched"
    (watched / "inside").mkdir(parents=True)
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.mkdir()
    inodes = {p.stat().st_ino for p in (watched, watched / "inside")}
    stop = anyio.Event()
    with anyio.fail_after(20):
        async for _ in watchfiles.awatch(watched, stop_event=stop, yield_on_timeout=True):
            # the watcher is up (its first timeout): its watches are in /proc/self/fdinfo
            assert missing_watches(inodes) == set()
            assert missing_watches(inodes | {elsewhere.stat().st_ino}) == {elsewhere.stat().st_ino}
            stop.set()
    os.rmdir(elsewhere)


def test_missing_watches_cannot_tell_without_an_inotify_descriptor(tmp_path: Path) -> None:
    assert missing_watches({tmp_path.stat().st_ino}) is None


def test_only_folders_count_never_files_or_links(tmp_path: Path) -> None:
    (tmp_path / "-project").mkdir()
    (tmp_path / "README").write_text("a file without a dot")
    (tmp_path / "-link").symlink_to(tmp_path / "-project")
    assert folder_inode(str(tmp_path / "README")) is None
    assert folder_inode(str(tmp_path / "-link")) is None
    assert folder_inode(str(tmp_path / "gone")) is None
    assert root_and_projects(str(tmp_path)) == {
        tmp_path.stat().st_ino: str(tmp_path),
        (tmp_path / "-project").stat().st_ino: str(tmp_path / "-project"),
    }


def test_a_scan_reports_transcripts_that_appear_grow_or_go(tmp_path: Path) -> None:
    project = tmp_path / "-p"
    project.mkdir()
    first = project / "a.jsonl"
    first.write_bytes(b"{}\n")
    (project / "notes.md").write_text("not a transcript")
    (project / "s" / "subagents").mkdir(parents=True)
    (project / "s" / "subagents" / "agent-1.jsonl").write_bytes(b"{}\n")  # not a session
    gaps = Gaps()
    gaps.unwatched[str(project)] = project.stat().st_ino
    assert gaps.scan() == [first]  # everything is new to the first scan
    assert gaps.scan() == []  # nothing changed: nothing to read
    second = project / "b.jsonl"
    second.write_bytes(b"{}\n")
    with first.open("ab") as f:
        f.write(b"{}\n")
    assert sorted(gaps.scan()) == [first, second]
    second.unlink()
    assert gaps.scan() == [second]  # a deletion is passed on: ingest forgets the session
    first.unlink()
    project.joinpath("notes.md").unlink()
    for leftover in ("s/subagents/agent-1.jsonl",):
        (project / leftover).unlink()
    for folder in ("s/subagents", "s", ""):
        (project / folder).rmdir()
    assert gaps.scan() == [first]
    assert gaps.unwatched == {}  # a folder that is gone is no longer scanned


@pytest.mark.parametrize("raised", [False, True])
def test_forget_hands_back_the_folders_to_look_up_again(tmp_path: Path, raised: bool) -> None:
    gaps = Gaps()
    gaps.unwatched[str(tmp_path)] = tmp_path.stat().st_ino
    if raised:
        gaps.scan()
    assert gaps.forget() == {str(tmp_path): tmp_path.stat().st_ino}
    assert gaps.unwatched == {} and gaps.stamps == {}
