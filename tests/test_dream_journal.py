"""A dream's write-ahead journal and its recorder (R-B3, issue 33 item 5): a change is made
only once its record is on disk; the undo puts back exactly the run's own changes, twice
over if need be; what the recorder cannot undo it refuses."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import anyio
import pytest

from memd.agent.permissions import MemoryDirPolicy
from memd.agent.tools import make_tools
from memd.confined import Area, Refused
from memd.dream import journal, snapshot
from memd.dream.journal import RecordRefused
from memd.dream.lock import LOCK_NAME
from memd.dream.recorder import Recorder
from memd.dream.undo import undo
from tests.disk_support import faulty_disk
from tests.dream_support import recorder_for

NOTE = "---\nname: n\ndescription: d\ntype: user\n---\nbody\n"


def memory(root: Path) -> Path:
    mdir = root / "memory"
    mdir.mkdir(parents=True)
    (mdir / "a.md").write_text(NOTE)
    (mdir / "b.md").write_text(NOTE.replace("body", "other"))
    os.chmod(mdir / "b.md", 0o644)
    return mdir


def started(mdir: Path, run: Path) -> Recorder:
    """A run's recorder, its snapshot taken (as a dream starts)."""
    run.mkdir(parents=True, exist_ok=True)
    saved = snapshot.take(mdir, run / "snapshot")
    return recorder_for(mdir, run, saved.files)


def test_a_refused_record_stops_its_change_and_every_later_one(tmp_path: Path) -> None:
    mdir = memory(tmp_path)
    with faulty_disk(tmp_path / "state", in_process=True) as disk:
        run = tmp_path / "state" / "run"
        book = started(mdir, run)
        with Area.open(mdir, guard=book) as area:
            area.write("a.md", b"first, recorded")
            disk.fault("EROFS")
            with pytest.raises(RecordRefused):
                area.unlink("b.md")
            with pytest.raises(RecordRefused):
                area.write("c/new.md", b"a folder and a file")
            disk.heal()
            with pytest.raises(RecordRefused):  # the journal takes nothing more this run
                area.write("b.md", b"after the refusal")
        assert (mdir / "b.md").read_text() == NOTE.replace("body", "other")
        assert not (mdir / "c").exists()
        assert [s.relative for s in journal.read(run, {}).steps] == ["a.md"]
        assert undo(mdir, run, run / "snapshot").restored == ("a.md",)
    assert (mdir / "a.md").read_text() == NOTE


def test_undoing_twice_changes_nothing_and_flags_nothing(tmp_path: Path) -> None:
    """A run's undo that was cut short, or that its record could not say was done, is done
    again at the next start: a file the run wrote twice is not taken for someone else's."""
    mdir = memory(tmp_path)
    run = tmp_path / "run"
    book = started(mdir, run)
    with Area.open(mdir, guard=book) as area:
        area.write("a.md", b"merged")
        area.write("a.md", b"merged, then scrubbed")
        area.unlink("b.md")
        area.write("notes/deep/n.md", b"new")
    first = undo(mdir, run, run / "snapshot")
    assert first.restored == ("a.md", "b.md", "notes/deep/n.md") and first.flagged == ()
    assert stat.S_IMODE(os.stat(mdir / "b.md").st_mode) == 0o644  # back with its mode
    assert not (mdir / "notes").exists()
    again = undo(mdir, run, run / "snapshot")
    assert again.restored == () and again.flagged == () and again.failed == ()
    assert (mdir / "a.md").read_text() == NOTE


def test_a_kill_after_the_record_and_an_edit_after_the_kill(tmp_path: Path) -> None:
    """Killed after recording a change, before making it (or after): someone edits the file
    before the next start. Their edit is kept, never taken for the run's."""
    mdir = memory(tmp_path)
    run = tmp_path / "run"
    book = started(mdir, run)
    with Area.open(mdir) as area:
        book.before_change(area, "write", "a.md", b"the run's version")  # then the kill
    (mdir / "a.md").write_text("theirs")
    done = undo(mdir, run, run / "snapshot")
    assert done.flagged == ("a.md",) and (mdir / "a.md").read_text() == "theirs"


def test_the_recorder_refuses_what_it_could_not_undo(tmp_path: Path) -> None:
    mdir = memory(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (mdir / LOCK_NAME).write_text("")
    os.link(mdir / "a.md", tmp_path / "a-link.md")  # a.md has two names now
    book = started(mdir, tmp_path / "run")
    with Area.open(outside, guard=book) as area, pytest.raises(Refused, match="outside"):
        area.write("x.md", b"x")
    with Area.open(mdir, guard=book) as area:
        with pytest.raises(Refused, match="lock"):
            area.write(LOCK_NAME, b"123")
        with pytest.raises(Refused):
            area.unlink("a.md")  # its bytes cannot be kept to undo it
    assert (mdir / "a.md").read_text() == NOTE and not (outside / "x.md").exists()
    assert journal.read(tmp_path / "run", {}).steps == ()


def test_an_earlier_versions_journal_is_still_undone(tmp_path: Path) -> None:
    """A run killed under the version before (an intent line before a write, a done line
    after, the snapshot holding what a file held) is undone by this one at its start."""
    mdir = memory(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    snapshot.take(mdir, run / "snapshot")
    (mdir / "a.md").write_text("merged")
    (mdir / "b.md").unlink()
    (mdir / "new").mkdir()
    (mdir / "new" / "c.md").write_text("created")
    lines = [
        {"op": "intent", "path": "a.md"},
        {"op": "done", "path": "a.md", "after": snapshot.sha256(b"merged")},
        {"op": "intent", "path": "b.md"},
        {"op": "done", "path": "b.md", "after": None, "merged_into": "a.md"},
        {"op": "intent", "path": "new/c.md"},  # killed before its done line
    ]
    (run / "journal.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    done = undo(mdir, run, run / "snapshot")
    assert done.restored == ("a.md", "b.md", "new/c.md") and done.flagged == ()
    assert (mdir / "a.md").read_text() == NOTE and not (mdir / "new").exists()


def test_a_recorded_tool_never_makes_a_memory_dir_that_is_gone(tmp_path: Path) -> None:
    mdir = memory(tmp_path)
    book = started(mdir, tmp_path / "run")
    policy = MemoryDirPolicy(mdir.resolve(), allow_delete=True)
    tools = make_tools(policy, ("Write",), cwd=mdir.resolve(), guard=book)
    for name in os.listdir(mdir):
        os.unlink(mdir / name)
    mdir.rmdir()

    async def write() -> str:
        result = await tools["Write"].run({"file_path": "a.md", "content": "x"})
        return result.content

    said = anyio.run(write)
    assert "does not exist" in said and not mdir.exists()
