"""Safe dream (R-B3): snapshots, the journal's exact undo, the change log, the wipe guard."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.confined import Area
from memd.dream import changelog, journal, snapshot, wipe
from memd.dream.lock import FLOCK_NAME, LOCK_NAME
from memd.dream.recorder import Recorder
from memd.dream.runs import RunRecord, RunStore
from memd.dream.undo import undo
from tests.dream_support import recorder_for

NOTE = "---\nname: n\ndescription: d\ntype: user\n---\nbody\n"


def memory(tmp_path: Path) -> Path:
    mdir = tmp_path / "memory"
    (mdir / "team").mkdir(parents=True)
    (mdir / "MEMORY.md").write_text("- [n](a.md) — d\n")
    (mdir / "a.md").write_text(NOTE)
    (mdir / "b.md").write_text(NOTE.replace("body", "other"))
    (mdir / "team" / "t.md").write_bytes(b"\xff\xfe binary \x00")
    (mdir / LOCK_NAME).write_text("123")
    (mdir / FLOCK_NAME).write_text("")
    return mdir


def write(book: Recorder, mdir: Path, relative: str, data: bytes | None) -> None:
    """One change as a dream's tools make it: through an area the run's recorder guards."""
    with Area.open(mdir, guard=book) as area:
        if data is None:
            area.unlink(relative)
        else:
            area.write(relative, data)


def test_snapshot_skips_locks_links_and_fifos_and_restores_byte_for_byte(tmp_path: Path) -> None:
    mdir = memory(tmp_path)
    (mdir / "link.md").symlink_to(tmp_path)
    os.mkfifo(mdir / "pipe")
    (mdir / ".git").mkdir()
    (mdir / ".git" / "HEAD").write_text("x")
    saved = snapshot.take(mdir, tmp_path / "snap")
    assert set(saved.files) == {"MEMORY.md", "a.md", "b.md", "team/t.md"}
    assert set(saved.skipped) == {"link.md", "pipe"}
    before = snapshot.current_tree(mdir).files
    (mdir / "a.md").write_text("changed")
    (mdir / "b.md").unlink()
    (mdir / "new.md").write_text("new")
    (mdir / "made" / "by").mkdir(parents=True)
    (mdir / "made" / "by" / "run.md").write_text("x")
    changed = snapshot.restore_tree(mdir, tmp_path / "snap")
    assert sorted(changed) == ["a.md", "b.md", "made/by/run.md", "new.md"]
    assert not (mdir / "made").exists()
    assert snapshot.current_tree(mdir).files == before
    assert (mdir / LOCK_NAME).read_text() == "123"


def test_snapshot_refuses_a_tree_over_budget(tmp_path: Path) -> None:
    mdir = memory(tmp_path)
    with pytest.raises(snapshot.TooLarge):
        snapshot.take(mdir, tmp_path / "snap", max_bytes=20)


def test_undo_touches_only_the_runs_own_changes(tmp_path: Path) -> None:
    mdir = memory(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    snap = run / "snapshot"
    saved = snapshot.take(mdir, snap)
    before = snapshot.current_tree(mdir).files
    book = recorder_for(mdir, run, saved.files)
    write(book, mdir, "a.md", b"merged")
    write(book, mdir, "b.md", None)
    write(book, mdir, "c.md", b"created")
    write(book, mdir, "new/deeper/d.md", b"created in a new folder")
    write(book, mdir, "MEMORY.md", b"index by the run")
    with Area.open(mdir) as area:  # killed inside this write: its temp file is left
        book.before_change(area, "write", "team/t.md", b"whole")
    (mdir / "team" / ".t.md.memd-0123abcd.tmp").write_bytes(b"wh")
    (mdir / "MEMORY.md").write_text("edited by a person since")  # someone else's change
    (mdir / "theirs.md").write_text("written by another process")
    undone = undo(mdir, run, snap)
    assert undone.flagged == ("MEMORY.md",)
    assert sorted(undone.restored) == ["a.md", "b.md", "c.md", "new/deeper/d.md"]
    assert not (mdir / "new").exists() and (mdir / "team").is_dir()
    assert sorted(os.listdir(mdir / "team")) == ["t.md"]
    now = snapshot.current_tree(mdir).files
    assert now.pop("theirs.md") and now.pop("MEMORY.md") != before["MEMORY.md"]
    assert now == {k: v for k, v in before.items() if k != "MEMORY.md"}


def test_change_log_has_diffs_and_merges(tmp_path: Path) -> None:
    mdir = memory(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    saved = snapshot.take(mdir, run / "snapshot")
    book = recorder_for(mdir, run, saved.files)
    write(book, mdir, "a.md", NOTE.replace("body", "body, dated 2026-11-21").encode())
    book.merges["b.md"] = "a.md"
    write(book, mdir, "b.md", None)
    write(book, mdir, "c.md", b"new\n")
    changes = {c.relative: c for c in changelog.changes(mdir, run, run / "snapshot")}
    assert changes["a.md"].action == "modified"
    assert "+body, dated 2026-11-21" in changes["a.md"].diff
    assert changes["b.md"].action == "deleted" and changes["b.md"].merged_into == "a.md"
    assert changes["c.md"].action == "created" and changes["c.md"].diff.startswith("--- /dev/null")


@given(st.lists(st.binary(max_size=300), max_size=30))
def test_a_hostile_journal_never_raises(lines: list[bytes]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        (run / "journal.jsonl").write_bytes(b"\n".join(lines))
        steps = journal.read(run, {}).steps
        assert all(snapshot.safe_relative(s.relative) for s in steps)


def test_journal_paths_that_escape_are_ignored(tmp_path: Path) -> None:
    lines: list[object] = [
        [[[[]]]],
        {"op": "intent", "path": "../outside"},
        {"op": "intent", "path": "/etc/passwd"},
        {"op": "done", "path": "ok.md", "after": 5},
    ]
    raw = "\n".join(json.dumps(x) for x in lines) + "\n" + "[" * 60_000
    (tmp_path / "journal.jsonl").write_text(raw)
    assert [s.relative for s in journal.read(tmp_path, {}).steps] == ["ok.md"]


LIMITS = wipe.Limits(200, 25_000)
TOPICS = {"MEMORY.md", "a.md", "b.md", "c.md", "d.md"}


def after(
    files: set[str], index: bytes | None = b"- [a](a.md)\n", **written: str | None
) -> wipe.After:
    return wipe.After(files, index, written)


def test_wipe_guard() -> None:
    idx = b"- [a](a.md)\n"
    assert wipe.problems(TOPICS, idx, after(TOPICS), LIMITS) == []
    assert wipe.problems(TOPICS, idx, after(TOPICS, b"  \n"), LIMITS) == [
        "MEMORY.md is empty or missing"
    ]
    assert wipe.problems(TOPICS, idx, after(TOPICS - {"MEMORY.md"}, None), LIMITS)
    three_gone = {"MEMORY.md", "a.md"}
    assert wipe.problems(TOPICS, idx, after(three_gone), LIMITS) == ["3 of 4 topic files deleted"]
    assert wipe.problems(TOPICS, idx, after({"MEMORY.md", "a.md", "b.md"}), LIMITS) == []
    big = b"- [x](x.md)\n" * 201
    assert "grew to 201 lines" in wipe.problems(TOPICS, idx, after(TOPICS, big), LIMITS)[0]
    assert wipe.problems(TOPICS, big, after(TOPICS, big), LIMITS) == []  # not made larger
    broken = wipe.After(TOPICS, idx, {"a.md": "no frontmatter here"})
    assert wipe.problems(TOPICS, idx, broken, LIMITS) == ["a.md: no frontmatter"]
    assert wipe.problems(set(), None, after(set(), None), LIMITS) == []  # nothing ever there


@pytest.mark.parametrize(
    "text",
    [
        NOTE,
        "---\nname: n\ndescription: has: a colon\ntype: user\n---\nbody\n",
        "---\nname: n\ndescription: d\nmetadata:\n  type: project\n---\nbody\n",
    ],
)
def test_both_frontmatter_forms_are_valid(text: str) -> None:
    assert wipe.frontmatter_problem(text) is None


@pytest.mark.parametrize(
    "text",
    ["---\nname: n\n", "---\nname: n\ndescription: d\ntype: nonsense\n---\n", None, "plain"],
)
def test_broken_frontmatter_is_caught(text: str | None) -> None:
    assert wipe.frontmatter_problem(text)


def test_run_records_from_garbage_are_skipped(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    folder = store.run_dir("proj", "20261122T120000-000001-dream")
    folder.mkdir(parents=True)
    for garbage in (b"\xff", b"[]", b'{"run_id": 5}', b'{"run_id": "../x"}', b"[" * 100_000):
        (folder / "run.json").write_bytes(garbage)
        assert store.runs("proj") == []
    good = RunRecord("20261122T120000-000001-dream", "dream", "proj", str(tmp_path))
    store.save(good)
    assert [r.run_id for r in store.runs("proj")] == [good.run_id]
    assert store.load("proj", "../../etc") is None


def test_names_that_are_not_utf8_stay_encodable(tmp_path: Path) -> None:
    import msgpack

    from memd.dream.status import printable

    mdir = memory(tmp_path)
    odd = os.fsdecode(b"caf\xe9.md")  # a Latin-1 name: a lone surrogate in Python
    (mdir / odd).write_text(NOTE)
    run = tmp_path / "run"
    run.mkdir()
    saved = snapshot.take(mdir, run / "snapshot")
    assert odd in saved.files
    book = recorder_for(mdir, run, saved.files)
    write(book, mdir, odd, b"changed")
    changes = [c.as_dict() for c in changelog.changes(mdir, run, run / "snapshot")]
    assert msgpack.packb(printable({"changes": changes}), use_bin_type=True)
    assert undo(mdir, run, run / "snapshot").restored == (odd,)
    assert (mdir / odd).read_text() == NOTE


def test_hard_links_and_linked_folders_are_not_copied_and_a_link_is_never_written_over(
    tmp_path: Path,
) -> None:
    mdir = memory(tmp_path)
    outside = tmp_path / "outside"
    (outside / "team2").mkdir(parents=True)
    (outside / "key").write_bytes(b"CANARY key")
    (outside / "team2" / "x.md").write_bytes(b"CANARY team")
    os.link(outside / "key", mdir / "hard.md")
    (mdir / "team2").symlink_to(outside / "team2")
    saved = snapshot.take(mdir, tmp_path / "snap")
    assert set(saved.files) == {"MEMORY.md", "a.md", "b.md", "team/t.md"}
    assert set(saved.skipped) == {"hard.md", "team2"}
    copies = [p.read_bytes() for p in (tmp_path / "snap").rglob("*") if p.is_file()]
    assert not [c for c in copies if b"CANARY" in c]
    (mdir / "a.md").unlink()
    (mdir / "a.md").symlink_to(outside / "key")  # swapped for a link during the run
    changed = snapshot.restore_tree(mdir, tmp_path / "snap")
    assert "a.md" not in changed and os.readlink(mdir / "a.md") == str(outside / "key")
    assert (outside / "key").read_bytes() == b"CANARY key"
    assert (mdir / "hard.md").stat().st_nlink == 2 and (mdir / "team2").is_symlink()


def test_an_undo_the_disk_refuses_is_pending_and_done_once_the_disk_heals(tmp_path: Path) -> None:
    """A read-only memory dir made the undo call the dream's own edits "changed by someone
    else" and close the run: the edits stayed for good. Now they wait, and go when it heals."""
    from memd.dream.restore import recover_run
    from memd.dream.runs import UNDO_PENDING
    from tests.disk_support import faulty_disk

    with faulty_disk(tmp_path / "disk", in_process=True) as disk:
        mdir = tmp_path / "disk" / "memory"
        mdir.mkdir()
        (mdir / "a.md").write_text(NOTE)
        store = RunStore(tmp_path / "state")
        record = RunRecord("20261122T120000-000001-dream", "dream", "proj", str(mdir))
        run = store.run_dir("proj", record.run_id)
        run.mkdir(parents=True)
        saved = snapshot.take(mdir, run / "snapshot")
        book = recorder_for(mdir, run, saved.files)
        write(book, mdir, "a.md", b"merged by the dream")
        write(book, mdir, "c.md", b"created by the dream")
        disk.fault("EROFS")
        undone = undo(mdir, run, run / "snapshot")
        assert undone.failed == ("a.md", "c.md") and undone.flagged == ()
        record.state, record.reason = "failed", "the model failed"
        store.save(record)
        record.state = UNDO_PENDING
        assert recover_run(store, record).state == UNDO_PENDING
        assert "undo pending" in record.reason and "a.md, c.md" in record.reason
        assert (mdir / "a.md").read_bytes() == b"merged by the dream"  # kept, not lost
        disk.heal()
        healed = recover_run(store, record)
        assert healed.state == "failed" and "undone once the disk let it" in healed.reason
        assert (mdir / "a.md").read_text() == NOTE and not (mdir / "c.md").exists()
        assert store.load("proj", record.run_id).state == "failed"  # type: ignore[union-attr]
