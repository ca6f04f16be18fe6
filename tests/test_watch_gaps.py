"""The pieces of the watcher on real files and a real inotify descriptor: the folder scan
that stands in for missing watches, the watch tree (depth, links, byte names) and the event
parser (the daemon end to end: tests/test_watch_limit.py, tests/test_watch_names.py)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.daemon.inotify import Event, Inotify, parse_events
from memd.daemon.watch_gaps import Gaps, project_folders
from memd.daemon.watch_tree import LINK, Tree
from memd.sources.base import Layout
from memd.sources.codex import LAYOUT as CODEX_LAYOUT


def inotify_watches() -> int:
    """How many inotify watches this process holds (its ``fdinfo`` lines)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify":
                count += Path(f"/proc/self/fdinfo/{fd}").read_text().count("inotify wd:")
        except OSError:
            continue
    return count


names = st.binary(min_size=1, max_size=40).filter(lambda b: b"\0" not in b)


@given(st.lists(st.tuples(st.integers(-1, 2**31 - 1), st.integers(0, 2**32 - 1), names)))
def test_events_parse_back_whatever_the_names(records: list[tuple[int, int, bytes]]) -> None:
    buf = b""
    for wd, mask, name in records:
        padded = name + b"\0" * (16 - len(name) % 16)
        buf += struct.pack("iIII", wd, mask, 0, len(padded)) + padded
    assert parse_events(buf) == [Event(wd, mask, name) for wd, mask, name in records]
    assert parse_events(buf[:-1]) == [Event(w, m, n) for w, m, n in records[:-1]]


def test_project_folders_are_folders_never_links_or_files(tmp_path: Path) -> None:
    (tmp_path / "-project").mkdir()
    (tmp_path / "README").write_text("a file")
    (tmp_path / "-link").symlink_to(tmp_path / "-project")
    assert project_folders(str(tmp_path)) == [str(tmp_path / "-project")]
    assert project_folders(str(tmp_path / "gone")) == []


def test_a_scan_reports_transcripts_that_appear_grow_or_go(tmp_path: Path) -> None:
    project = tmp_path / "-p"
    project.mkdir()
    first = project / "a.jsonl"
    first.write_bytes(b"{}\n")
    (project / "notes.md").write_text("not a transcript")
    (project / "s" / "subagents").mkdir(parents=True)
    (project / "s" / "subagents" / "agent-1.jsonl").write_bytes(b"{}\n")  # not a session
    gaps = Gaps()
    gaps.add([str(project)], quiet=False)
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
    (project / "s" / "subagents" / "agent-1.jsonl").unlink()
    for folder in ("s/subagents", "s", ""):
        (project / folder).rmdir()
    assert gaps.scan() == [first]
    assert gaps.unwatched == set()  # a folder that is gone is no longer scanned


def test_a_quiet_add_reports_only_what_changes_after_it(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_bytes(b"{}\n")
    gaps = Gaps()
    gaps.add([str(tmp_path)], quiet=True)  # the startup scan reads what is there
    assert gaps.scan() == []
    (tmp_path / "b.jsonl").write_bytes(b"{}\n")
    assert gaps.scan() == [tmp_path / "b.jsonl"]
    assert gaps.forget() == {str(tmp_path)}
    assert gaps.unwatched == set() and gaps.stamps == {}


def test_a_folder_replaced_by_a_link_is_no_longer_scanned(tmp_path: Path) -> None:
    project = tmp_path / "-p"
    project.mkdir()
    gaps = Gaps()
    gaps.add([str(project)], quiet=True)
    project.rmdir()
    project.symlink_to("/usr/bin")
    assert gaps.scan() == [] and gaps.unwatched == set()


@pytest.mark.skipif(not os.path.exists("/proc/self/fdinfo"), reason="needs Linux /proc")
def test_the_tree_watches_folders_down_to_subagents_and_never_through_a_link(
    tmp_path: Path,
) -> None:
    """A project folder linked to /usr costs no watch and is named as skipped; a project
    folder, session folder and subagents folder get one each, nothing deeper does."""
    root = tmp_path / "projects"
    deep = root / "-p" / "s" / "subagents" / "deeper"
    deep.mkdir(parents=True)
    (root / "-p" / "s.jsonl").write_bytes(b"{}\n")
    (root / "x").symlink_to("/usr")
    (root / "-p" / "memory").symlink_to("/usr/share")  # a link deeper down: the same
    before = inotify_watches()
    tree = Tree(Inotify(), str(root))
    try:
        tree.watch_root()
        found = tree.fill(report=True)
        assert inotify_watches() - before == 4  # root, -p, s, subagents
        assert found.transcripts == [root / "-p" / "s.jsonl"] and found.unwatched == []
        assert tree.skipped == {str(root / "x"): LINK, str(root / "-p" / "memory"): LINK}
    finally:
        tree.close()


@pytest.mark.skipif(not os.path.exists("/proc/self/fdinfo"), reason="needs Linux /proc")
def test_the_tree_reports_transcripts_whatever_bytes_name_them(tmp_path: Path) -> None:
    root = os.fsencode(tmp_path)
    tree = Tree(Inotify(), str(tmp_path))
    try:
        tree.watch_root()
        tree.fill(report=False)
        os.mkdir(root + b"/caf\xe9")  # a Latin-1 project folder, then its transcript
        os.mkdir(root + b"/caf\xe9/\xff\xfe")
        transcript = root + b"/caf\xe9/\xff\xfe.jsonl"
        Path(os.fsdecode(transcript)).write_bytes(b"")
        found = tree.handle(tree.inotify.read())
        assert [os.fsencode(p) for p in found.transcripts] == [transcript]
        with open(transcript, "ab") as f:
            f.write(b"{}\n")
        found = tree.handle(tree.inotify.read())
        assert [os.fsencode(p) for p in found.transcripts] == [transcript]
    finally:
        tree.close()


def test_a_folder_dropped_from_the_scan_takes_its_stamps_with_it(tmp_path: Path) -> None:
    kept, dropped = tmp_path / "-kept", tmp_path / "-dropped"
    for folder in (kept, dropped):
        folder.mkdir()
        (folder / "s.jsonl").write_bytes(b"{}\n")
    gaps = Gaps()
    gaps.add([str(kept), str(dropped)], quiet=True)
    gaps.drop(str(dropped))  # watched now
    assert gaps.unwatched == {str(kept)}
    assert list(gaps.stamps) == [kept / "s.jsonl"]
    assert gaps.scan() == []  # what the kept folder holds is still not news


def test_an_unwatched_folder_is_scanned_down_to_where_its_agent_keeps_sessions(
    tmp_path: Path,
) -> None:
    """Codex keeps its rollouts three folders down (year, month, day): a year folder out of
    watches (or every folder, while polling) is scanned to its day folders, not only for the
    files directly in it, which held none (issue 35: the layout is the agent's room's)."""
    root = tmp_path / "sessions"
    day = root / "2026" / "11" / "28"
    day.mkdir(parents=True)
    (root / "2026" / "stray.jsonl").write_bytes(b"{}\n")
    gaps = Gaps(root=str(root), layout=CODEX_LAYOUT)
    gaps.add([str(root / "2026")], quiet=True)
    rollout = day / "rollout-2026-11-28T06-50-03-01a220eb-073e-74b1-af7e-d21de4f940f9.jsonl"
    rollout.write_bytes(b"{}\n")
    assert gaps.scan() == [rollout]
    gaps.drop(str(root / "2026"))  # watched again: its day folders' stamps go with it
    assert gaps.stamps == {}


def test_the_tree_watches_as_deep_and_reports_the_names_its_agents_layout_says(
    tmp_path: Path,
) -> None:
    """An agent whose sessions are ``*.json`` two folders down: those are reported, a
    ``.jsonl`` is not, and no folder below the layout's depth gets a watch."""
    root = tmp_path / "root"
    (root / "p" / "chats" / "deeper").mkdir(parents=True)
    before = inotify_watches()
    tree = Tree(Inotify(), str(root), Layout(depth=2, sessions_at=2, suffix=".json"))
    try:
        tree.watch_root()
        tree.fill(report=False)
        assert inotify_watches() - before == 3  # root, p, chats
        chat = root / "p" / "chats" / "s1.json"
        chat.write_bytes(b"{}")
        (root / "p" / "chats" / "other.jsonl").write_bytes(b"{}\n")
        assert set(tree.handle(tree.inotify.read()).transcripts) == {chat}
    finally:
        tree.close()
