"""The archive of unused memories (issue 36, item 3), in this process: which memories are due
(pure), a move out and back with its index lines, names taken on either side, links and hard
links left alone, a move found unfinished in the record finished from wherever it stopped or
dropped when its file is no longer the one recorded, and a record the disk refuses."""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.errors import WriteFailed
from memd.memory.archive import (
    ARCHIVE_FILE,
    DAY_S,
    MAX_NAMES,
    Archive,
    ArchiveState,
    Move,
    Standing,
    archive_dir,
    due,
)
from memd.memory.paths import TEAM_DIRNAME

NOW = 1_800_000_000.0
OLD = NOW - 40 * DAY_S


class Wall:
    def __init__(self, at: float = NOW) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def note(name: str, body: str, *, pinned: bool = False) -> str:
    pin = "metadata:\n  pinned: true\n" if pinned else ""
    return f"---\nname: {name}\ndescription: {name} notes\ntype: project\n{pin}---\n\n{body}\n"


INDEX = "# Memory\n\n- [Old](old.md) — old notes\n- [Kept](kept.md) — kept notes\n"


def world(tmp_path: Path) -> Path:
    memory = tmp_path / "projects" / "-repo" / "memory"
    memory.mkdir(parents=True)
    (memory / "old.md").write_text(note("old", "the old one"))
    (memory / "kept.md").write_text(note("kept", "the kept one"))
    (memory / "MEMORY.md").write_text(INDEX)
    return memory


def standing(relative: str, **times: float) -> Standing:
    return Standing(
        relative,
        bool(times.pop("pinned", False)),
        times.get("changed", OLD),
        times.get("used", 0.0),
        times.get("verified", 0.0),
    )


# -- which are due ---------------------------------------------------------------------------


def test_due_are_those_with_no_sign_of_life_for_the_days() -> None:
    recent = NOW - 3 * DAY_S
    standings = [
        standing("old.md"),
        standing("pinned.md", pinned=True),
        standing(f"{TEAM_DIRNAME}/shared.md"),
        standing("used.md", used=recent),
        standing("verified.md", verified=recent),
        standing("edited.md", changed=recent),
        standing("back.md"),
        standing("deep/older.md", changed=OLD - DAY_S),
    ]
    revived = {"back.md": recent}.get
    found = due(standings, now=NOW, days=28, since=OLD, revived=lambda r: revived(r, 0.0))
    assert found == ["deep/older.md", "old.md"]
    assert due(standings, now=NOW, days=0, since=OLD, revived=lambda r: 0.0) == []
    # memd's record of use is younger than the days: nothing can be judged unused yet
    assert due(standings, now=NOW, days=28, since=recent, revived=lambda r: 0.0) == []


stamps = st.floats(min_value=0, max_value=NOW)


@given(
    st.lists(
        st.tuples(st.booleans(), st.booleans(), stamps, stamps, stamps), min_size=0, max_size=30
    ),
    st.floats(min_value=0, max_value=400),
    stamps,
)
@settings(max_examples=200)
def test_due_never_names_a_pinned_team_or_living_memory(
    rows: list[tuple[bool, bool, float, float, float]], days: float, since: float
) -> None:
    standings = [
        Standing(f"{TEAM_DIRNAME}/m{i}.md" if team else f"m{i}.md", pinned, a, b, c)
        for i, (pinned, team, a, b, c) in enumerate(rows)
    ]
    found = set(due(standings, now=NOW, days=days, since=since, revived=lambda r: 0.0))
    cut = NOW - days * DAY_S
    for s in standings:
        alive = max(s.changed, s.used, s.verified, since) > cut
        exempt = s.pinned or s.relative.startswith(TEAM_DIRNAME + "/") or days <= 0
        assert (s.relative in found) == (not alive and not exempt), s


# -- moves -----------------------------------------------------------------------------------


def test_a_memory_goes_to_the_archive_and_back_with_its_index_line(tmp_path: Path) -> None:
    memory = world(tmp_path)
    body = (memory / "old.md").read_bytes()
    os.utime(memory / "old.md", (OLD, OLD))
    archive = Archive(tmp_path / "state", Wall())
    done = archive.archive(memory, "old.md")
    assert done is not None and (done.file, done.archived, done.index) == ("old.md", "old.md", True)
    out = archive_dir(memory)
    assert out == memory.parent / "memory-archive"
    assert not (memory / "old.md").exists() and (out / "old.md").read_bytes() == body
    assert (out / "old.md").stat().st_mtime == OLD  # a rename: the file itself, untouched
    assert (memory / "MEMORY.md").read_text() == "# Memory\n\n- [Kept](kept.md) — kept notes\n"
    (row,) = archive.listing(memory)
    assert (row["archived"], row["file"], row["name"], row["archived_at"]) == (
        "old.md",
        "old.md",
        "old",
        NOW,
    )
    back = Archive(tmp_path / "state", Wall(NOW + 60)).restore(memory, "old")  # by its name
    assert back is not None and back.index
    assert (memory / "old.md").read_bytes() == body and not (out / "old.md").exists()
    assert "- [Old](old.md) — old notes" in (memory / "MEMORY.md").read_text()
    again = Archive(tmp_path / "state", Wall())
    assert again.listing(memory) == []
    assert again.revived(memory)("old.md") == NOW + 60  # not due again for the days
    assert again.statistics() == {"archived": 0, "unfinished": 0}


def test_names_taken_on_the_other_side_get_a_number(tmp_path: Path) -> None:
    memory = world(tmp_path)
    archive = Archive(tmp_path / "state", Wall())
    assert archive.archive(memory, "old.md") is not None
    (memory / "old.md").write_text(note("old", "a second old one"))
    done = archive.archive(memory, "old.md")
    assert done is not None and done.archived == "old.2.md"
    assert {r["archived"] for r in archive.listing(memory)} == {"old.md", "old.2.md"}
    (memory / "old.md").write_text(note("old", "a third, written meanwhile"))
    back = archive.restore(memory, "old.2.md")
    assert back is not None and back.file == "old.2.md"
    assert (memory / "old.2.md").read_text() == note("old", "a second old one")
    assert (memory / "old.md").read_text() == note("old", "a third, written meanwhile")


def test_a_memory_without_an_index_line_comes_back_with_one_from_its_frontmatter(
    tmp_path: Path,
) -> None:
    memory = world(tmp_path)
    (memory / "loose.md").write_text(note("loose", "not in the index"))
    archive = Archive(tmp_path / "state", Wall())
    done = archive.archive(memory, "loose.md")
    assert done is not None and not done.index
    (archive.path).unlink()  # the record lost: the archive folder is still listed
    fresh = Archive(tmp_path / "state", Wall())
    (row,) = fresh.listing(memory)
    assert row["archived_at"] is None and row["file"] == "loose.md"
    back = fresh.restore(memory, "loose.md")
    assert back is not None and back.index
    assert "- [loose](loose.md) — loose notes" in (memory / "MEMORY.md").read_text()
    with pytest.raises(LookupError):
        fresh.restore(memory, "never-archived.md")


def test_links_and_hard_links_are_not_moved(tmp_path: Path) -> None:
    memory = world(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("token")
    (memory / "link.md").symlink_to(secret)
    os.link(memory / "kept.md", tmp_path / "second-name.md")
    archive = Archive(tmp_path / "state", Wall())
    assert archive.archive(memory, "link.md") is None
    assert archive.archive(memory, "kept.md") is None
    assert (memory / "link.md").is_symlink() and (memory / "kept.md").exists()
    assert not archive_dir(memory).exists() and archive.statistics()["unfinished"] == 0


def test_an_archive_folder_that_is_a_link_is_not_written_through(tmp_path: Path) -> None:
    """``memory-archive`` made a link to a folder elsewhere: nothing moves there, nothing is
    lost, the move is not left open (links are outside)."""
    memory = world(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    archive_dir(memory).symlink_to(elsewhere)
    archive = Archive(tmp_path / "state", Wall())
    assert archive.archive(memory, "old.md") is None
    assert list(elsewhere.iterdir()) == [] and (memory / "old.md").exists()
    assert (memory / "MEMORY.md").read_text() == INDEX
    assert archive.statistics() == {"archived": 0, "unfinished": 0}
    assert archive.listing(memory) == []


def test_a_memory_whose_names_are_all_taken_stays(tmp_path: Path) -> None:
    memory = world(tmp_path)
    out = archive_dir(memory)
    out.mkdir()
    for number in range(1, MAX_NAMES + 1):
        (out / ("old.md" if number == 1 else f"old.{number}.md")).write_text("taken")
    archive = Archive(tmp_path / "state", Wall())
    assert archive.archive(memory, "old.md") is None  # not an error a sweep retries
    assert (memory / "old.md").exists() and (memory / "MEMORY.md").read_text() == INDEX
    assert archive.statistics()["unfinished"] == 0


# -- a move found unfinished -------------------------------------------------------------------


def unfinished(tmp_path: Path, memory: Path, op: str = "archive") -> Move:
    """The record as a stop right after it was written left it: the move of old.md."""
    info = (memory / "old.md").stat() if op == "archive" else None
    assert info is not None
    step = Move(
        "archive",
        str(memory),
        "old.md",
        "old.md",
        (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns),
        ["- [Old](old.md) — old notes"],
        NOW,
    )
    (tmp_path / "state").mkdir(exist_ok=True)
    state = ArchiveState(moves=[step])
    (tmp_path / "state" / ARCHIVE_FILE).write_bytes(msgspec.json.encode(state))
    return step


@pytest.mark.parametrize("stopped", ["before the move", "after the move", "after the index"])
def test_a_move_left_unfinished_is_finished_once(tmp_path: Path, stopped: str) -> None:
    memory = world(tmp_path)
    body = (memory / "old.md").read_bytes()
    unfinished(tmp_path, memory)
    out = archive_dir(memory)
    if stopped != "before the move":
        out.mkdir()
        os.rename(memory / "old.md", out / "old.md")
    if stopped == "after the index":
        (memory / "MEMORY.md").write_text("# Memory\n\n- [Kept](kept.md) — kept notes\n")
    archive = Archive(tmp_path / "state", Wall())
    assert archive.recover() == 0
    assert (out / "old.md").read_bytes() == body and not (memory / "old.md").exists()
    assert sorted(p.name for p in out.iterdir()) == ["old.md"]  # once, under its name
    assert (memory / "MEMORY.md").read_text() == "# Memory\n\n- [Kept](kept.md) — kept notes\n"
    saved = json.loads((tmp_path / "state" / ARCHIVE_FILE).read_text())
    assert saved["moves"] == [] and list(saved["kept"][str(memory)]) == ["old.md"]


def test_a_move_whose_file_was_replaced_meanwhile_is_dropped(tmp_path: Path) -> None:
    memory = world(tmp_path)
    unfinished(tmp_path, memory)
    (memory / "old.md").unlink()  # its inode may well be reused: the new file is not it
    (memory / "old.md").write_text(note("old", "written again after the stop"))
    archive = Archive(tmp_path / "state", Wall())
    assert archive.recover() == 0
    assert (memory / "old.md").read_text() == note("old", "written again after the stop")
    assert not archive_dir(memory).exists()
    assert (memory / "MEMORY.md").read_text() == INDEX


def test_a_record_the_disk_refuses_moves_nothing(tmp_path: Path) -> None:
    memory = world(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    # The record's name taken by a folder, and the name it would be set aside under too
    # (a folder with a file in it, which no rename replaces): every write of it fails.
    (state / ARCHIVE_FILE).mkdir()
    (state / (ARCHIVE_FILE + ".corrupt")).mkdir()
    (state / (ARCHIVE_FILE + ".corrupt") / "keep").write_bytes(b"")
    archive = Archive(state, Wall())
    with pytest.raises(WriteFailed if os.geteuid() else OSError):
        archive.archive(memory, "old.md")
    assert (memory / "old.md").exists() and (memory / "MEMORY.md").read_text() == INDEX
    assert archive.statistics() == {"archived": 0, "unfinished": 0}


def test_an_unreadable_record_is_set_aside_and_the_archive_still_listed(tmp_path: Path) -> None:
    memory = world(tmp_path)
    Archive(tmp_path / "state", Wall()).archive(memory, "old.md")
    (tmp_path / "state" / ARCHIVE_FILE).write_bytes(b"\x00not json")
    fresh = Archive(tmp_path / "state", Wall())
    assert (tmp_path / "state" / (ARCHIVE_FILE + ".corrupt")).exists()
    assert [r["archived"] for r in fresh.listing(memory)] == ["old.md"]
