"""memd.confined: nothing outside an area is read, entered or written through it.

Every case runs twice, through ``openat2`` and through the component walk that stands in for
it on kernels without it. Canaries outside the area hold a marker that must never come back.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd import confined
from memd.confined import Area, Refused, split_relative

CANARY = b"CANARY-outside-the-memory-dir"


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest) -> Iterator[str]:
    previous = confined.use_openat2(request.param == "openat2")
    if request.param == "openat2" and not confined._openat2.available:
        confined.use_openat2(previous)
        pytest.skip("this kernel has no openat2")
    yield str(request.param)
    confined.use_openat2(previous)


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "id_rsa").write_bytes(CANARY)
    (outside / "sub").mkdir()
    (outside / "sub" / "note.md").write_bytes(CANARY)
    area = tmp_path / "memory"
    area.mkdir()
    (area / "ok.md").write_bytes(b"inside")
    return area, outside


def every_read(area: Path) -> bytes:
    """What every read path of an Area returns for everything it lists or is asked for."""
    out = bytearray()
    with Area.open(area) as opened:
        for entry in opened.walk(hidden=True):
            out += opened.read(entry.relative, max_bytes=1 << 20)[0]
        for name in ("MEMORY.md", "link.md", "hard.md", "team/x.md", "team/note.md", "fifo.md"):
            text = opened.read_text(name, max_bytes=1 << 20)
            out += (text or "").encode()
    return bytes(out)


def test_links_hard_links_and_special_files_are_refused(
    resolver: str, world: tuple[Path, Path]
) -> None:
    area, outside = world
    (area / "MEMORY.md").symlink_to(outside / "id_rsa")
    (area / "link.md").symlink_to(outside / "id_rsa")
    os.link(outside / "id_rsa", area / "hard.md")
    (area / "team").symlink_to(outside / "sub")
    os.mkfifo(area / "fifo.md")
    data = every_read(area)
    assert CANARY not in data
    assert b"inside" in data
    kinds = {Path(f.path).name: f.kind for f in confined.findings.items()}
    assert "symbolic link" in kinds["MEMORY.md"]
    assert "2 hard links" in kinds["hard.md"]
    assert kinds["fifo.md"] == "a FIFO"


def test_a_file_of_another_user_is_refused(resolver: str, world: tuple[Path, Path]) -> None:
    if os.getuid() != 0:
        pytest.skip("chown to another uid needs root")
    area, _ = world
    theirs = area / "theirs.md"
    theirs.write_bytes(CANARY)
    os.chown(theirs, 65534, 65534)
    with Area.open(area) as opened:
        assert [e.relative for e in opened.walk()] == ["ok.md"]
        with pytest.raises(Refused, match="owned by uid 65534"):
            opened.read("theirs.md", max_bytes=100)


def test_writes_never_go_through_or_over_links(resolver: str, world: tuple[Path, Path]) -> None:
    area, outside = world
    (area / "MEMORY.md").symlink_to(outside / "id_rsa")
    os.link(outside / "id_rsa", area / "hard.md")
    (area / "team").symlink_to(outside / "sub")
    with Area.open(area) as opened:
        for name in ("MEMORY.md", "hard.md", "team/note.md", "team/new.md"):
            with pytest.raises(Refused):
                opened.write(name, b"overwritten")
        opened.write("fresh/deep.md", b"new")
    assert (outside / "id_rsa").read_bytes() == CANARY
    assert (outside / "sub" / "note.md").read_bytes() == CANARY
    assert sorted(p.name for p in (outside / "sub").iterdir()) == ["note.md"]
    assert (area / "MEMORY.md").is_symlink()
    assert (area / "fresh" / "deep.md").read_bytes() == b"new"
    assert stat.S_IMODE((area / "fresh" / "deep.md").stat().st_mode) == 0o600


def test_a_write_keeps_the_mode_and_leaves_no_temp_file(
    resolver: str, world: tuple[Path, Path]
) -> None:
    area, _ = world
    os.chmod(area / "ok.md", 0o644)
    with Area.open(area) as opened:
        opened.write("ok.md", b"replaced")
    assert (area / "ok.md").read_bytes() == b"replaced"
    assert stat.S_IMODE((area / "ok.md").stat().st_mode) == 0o644
    assert sorted(p.name for p in area.iterdir()) == ["ok.md"]


def test_unlink_removes_a_link_not_its_target(resolver: str, world: tuple[Path, Path]) -> None:
    area, outside = world
    (area / "link.md").symlink_to(outside / "id_rsa")
    (area / "team").symlink_to(outside / "sub")
    with Area.open(area) as opened:
        assert opened.unlink("link.md")
        with pytest.raises(Refused):
            opened.unlink("team/note.md")
    assert (outside / "id_rsa").read_bytes() == CANARY
    assert (outside / "sub" / "note.md").exists()


def test_the_root_may_be_reached_through_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.md").write_bytes(b"a")
    (tmp_path / "claude").symlink_to(real)
    with Area.open(tmp_path / "claude") as opened:
        assert [e.relative for e in opened.walk()] == ["a.md"]


def test_names_are_bytes(resolver: str, tmp_path: Path) -> None:
    name = os.fsdecode(b"caf\xe9.md")
    (tmp_path / name).write_bytes(b"latin")
    with Area.open(tmp_path) as opened:
        assert [e.relative for e in opened.walk()] == [name]
        assert opened.read(name, max_bytes=10)[0] == b"latin"
        opened.write(os.fsdecode(b"dir\xff/x.md"), b"y")
    assert (tmp_path / os.fsdecode(b"dir\xff") / "x.md").read_bytes() == b"y"


@given(st.text(alphabet="./ab\0", max_size=12))
def test_split_relative_never_yields_a_climbing_part(relative: str) -> None:
    try:
        parts = split_relative(relative)
    except ValueError:
        return
    assert all(p not in ("", ".", "..") and "/" not in p and "\0" not in p for p in parts)
    assert not relative.startswith("/")


def test_a_folder_flipping_to_a_link_never_leaks(resolver: str, world: tuple[Path, Path]) -> None:
    """Another process swaps ``team/`` for a link to the canaries and back, as fast as it can,
    while reads, listings and writes go on: none returns or changes an outside byte. Both
    sides of the race are met: some calls read the team's note, some are refused."""
    area, outside = world
    team = area / "team"
    team.mkdir()
    (team / "note.md").write_bytes(b"team note")
    parked = area / ".parked"
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            try:
                os.rename(team, parked)
                team.symlink_to(outside / "sub")
                team.unlink()
                os.rename(parked, team)
                time.sleep(0)  # the plain folder gets its share of the calls too
            except OSError:  # a write made team/ again while it was parked: put it back
                if team.is_symlink():
                    team.unlink()
                elif parked.exists():
                    shutil.rmtree(team, ignore_errors=True)
                with contextlib.suppress(OSError):
                    os.rename(parked, team)

    flipper = threading.Thread(target=flip)
    flipper.start()
    leaked = reached = refused = 0
    try:
        for i in range(2000):
            with Area.open(area) as opened:
                try:
                    if i % 3 == 0:
                        data = opened.read("team/note.md", max_bytes=100)[0]
                    elif i % 3 == 1:
                        data = b"".join(
                            opened.read(e.relative, max_bytes=100)[0]
                            for e in opened.walk()
                            if e.relative.startswith("team/")
                        )
                    else:
                        opened.write("team/note.md", b"team note")
                        data = b""
                except Refused:
                    refused += 1
                    continue
                except FileNotFoundError:
                    continue
                leaked += CANARY in data
                reached += data == b"team note"
    finally:
        stop.set()
        flipper.join()
    assert leaked == 0
    assert reached > 0 and refused > 0, (reached, refused)
    assert (outside / "sub" / "note.md").read_bytes() == CANARY
    assert sorted(p.name for p in (outside / "sub").iterdir()) == ["note.md"]


def test_a_finding_leaves_status_once_it_is_fixed_or_removed(
    resolver: str, world: tuple[Path, Path]
) -> None:
    """doctor's advice is to remove the entry or make it a plain file: either shows at once."""
    area, outside = world
    (area / "MEMORY.md").symlink_to(outside / "id_rsa")
    os.link(outside / "id_rsa", area / "hard.md")
    (area / "team").symlink_to(outside / "sub")

    def found() -> set[str]:
        with Area.open(area) as opened:
            list(opened.walk())
        return {
            Path(f.path).name for f in confined.findings.items() if f.path.startswith(str(area))
        }

    assert found() == {"MEMORY.md", "hard.md", "team"}
    (area / "MEMORY.md").unlink()
    (area / "MEMORY.md").write_text("- plain\n")
    (area / "hard.md").unlink()
    assert found() == {"team"}
    (area / "team").unlink()
    (area / "team").mkdir()
    assert found() == set()
    (area / "x.md").symlink_to(outside / "id_rsa")
    with Area.open(area) as opened, pytest.raises(Refused):
        opened.open_file("x.md")
    (area / "x.md").unlink()
    (area / "x.md").write_text("mine")
    with Area.open(area) as opened:
        assert opened.read_text("x.md", max_bytes=10) == "mine"
    assert str(area / "x.md") not in {f.path for f in confined.findings.items()}


def test_a_flipping_entry_is_logged_once_per_kind(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A folder flipped between a link and a folder logged one warning per read."""
    registry = confined.Findings()
    with caplog.at_level("WARNING", logger="memd.confined.findings"):
        for _ in range(50):
            registry.record(str(tmp_path / "team"), "a symbolic link")
            registry.clear(str(tmp_path / "team"))
            registry.record(str(tmp_path / "team"), "a FIFO")
    assert len(caplog.records) == 2
    registry.log_every_s = 0.0
    with caplog.at_level("WARNING", logger="memd.confined.findings"):
        registry.record(str(tmp_path / "team"), "a FIFO")
    assert len(caplog.records) == 3
