"""Scanning the memory dir (R-M4) and the selector manifest (R-M5)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memd import confined
from memd.confined import Area, Refused
from memd.memory.frontmatter import Frontmatter, render_document
from memd.memory.scan import (
    HEAD_MAX_BYTES,
    Head,
    HeaderCache,
    format_manifest,
    iso_mtime,
    list_topic_stats,
    manifest_line,
    read_head,
    scan_memories,
)

T0_MS = 1_700_000_000_000


def _memory(path: Path, *, mtime_ms: int, kind: str = "project", description: str = "d") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = Frontmatter(path.stem, description, kind)  # type: ignore[arg-type]
    path.write_text(render_document(meta, "body line\n"), encoding="utf-8")
    os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))


def _head(path: Path) -> Head:
    with Area.open(path.parent) as area:
        return read_head(area, path.name)


def _rchar() -> int | None:
    """Bytes this process has read through read(2) so far (Linux), else None."""
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return None


def test_only_the_first_30_lines_are_read_even_when_the_tail_is_enormous(tmp_path: Path) -> None:
    path = tmp_path / "big.md"
    head = "---\nname: big\ndescription: huge tail\ntype: reference\n---\n" + "".join(
        f"line {i}\n" for i in range(6, 31)
    )
    with path.open("wb") as f:
        f.write(head.encode())
        f.write(b"line 31 and beyond\n" * 1000)
        f.truncate(4 * 1024**3)  # 4 GiB, sparse: reading it whole would not finish in time
    before = _rchar()
    result = _head(path)
    after = _rchar()
    assert result.text == head
    assert result.bytes_read <= len(head) + 4096  # one buffer past line 30, at most
    if before is not None and after is not None:
        assert after - before < 64 * 1024
    [header] = scan_memories(tmp_path)
    assert header.description == "huge tail" and header.type == "reference"


def test_a_file_without_newlines_is_read_only_up_to_the_byte_cap(tmp_path: Path) -> None:
    path = tmp_path / "oneline.md"
    with path.open("wb") as f:
        f.truncate(1024**3)  # 1 GiB of NUL bytes, no line breaks
    result = _head(path)
    assert result.text == "\0" * HEAD_MAX_BYTES
    assert result.bytes_read <= HEAD_MAX_BYTES + 4096


def test_mtime_comes_with_the_head(tmp_path: Path) -> None:
    path = tmp_path / "a.md"
    _memory(path, mtime_ms=T0_MS + 123)
    assert _head(path).mtime_ms == T0_MS + 123


def test_250_files_keep_the_200_newest_newest_first(tmp_path: Path) -> None:
    for i in range(250):
        _memory(tmp_path / f"m{i:03}.md", mtime_ms=T0_MS + i * 1000)
    headers = scan_memories(tmp_path)
    assert len(headers) == 200
    assert [h.relative for h in headers] == [f"m{i:03}.md" for i in range(249, 49, -1)]
    assert [h.mtime_ms for h in headers] == sorted((h.mtime_ms for h in headers), reverse=True)


def test_index_files_hidden_folders_and_other_files_are_not_memories(tmp_path: Path) -> None:
    _memory(tmp_path / "a.md", mtime_ms=T0_MS)
    _memory(tmp_path / "team" / "ci.md", mtime_ms=T0_MS + 1)
    (tmp_path / "MEMORY.md").write_text("- [A](a.md)\n")
    (tmp_path / "team" / "MEMORY.md").write_text("- [CI](ci.md)\n")
    _memory(tmp_path / ".snapshots" / "old.md", mtime_ms=T0_MS)
    (tmp_path / ".a.md.123.tmp").write_text("temp")
    (tmp_path / ".draft.md").write_text("swap")
    (tmp_path / "notes.txt").write_text("not markdown")
    (tmp_path / ".consolidate-lock").write_text("42")
    assert [h.relative for h in scan_memories(tmp_path)] == ["team/ci.md", "a.md"]


def test_a_missing_dir_scans_as_empty(tmp_path: Path) -> None:
    assert scan_memories(tmp_path / "nope") == []


def test_broken_frontmatter_is_carried_as_problems_not_raised(tmp_path: Path) -> None:
    (tmp_path / "bad.md").write_text("---\nname: [unclosed\ntype: feedback\n")
    [header] = scan_memories(tmp_path)
    assert header.problems and header.type == "feedback"


def test_manifest_lines_follow_the_format(tmp_path: Path) -> None:
    _memory(
        tmp_path / "team" / "deploy.md",
        mtime_ms=T0_MS + 5,
        kind="project",
        description="Argo CD deploys",
    )
    (tmp_path / "loose.md").write_text("no frontmatter here\n")
    os.utime(tmp_path / "loose.md", ns=(T0_MS * 1_000_000, T0_MS * 1_000_000))
    headers = scan_memories(tmp_path)
    assert format_manifest(headers).splitlines() == [
        "- [project] team/deploy.md (2023-11-14T22:13:20.005Z): Argo CD deploys",
        "- loose.md (2023-11-14T22:13:20.000Z)",
    ]


@pytest.mark.parametrize(
    ("ms", "iso"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (1_999, "1970-01-01T00:00:01.999Z"),
        (T0_MS, "2023-11-14T22:13:20.000Z"),
    ],
)
def test_iso_mtime_is_utc_with_milliseconds(ms: int, iso: str) -> None:
    assert iso_mtime(ms) == iso


def test_manifest_line_without_type_or_description(tmp_path: Path) -> None:
    (tmp_path / "x.md").write_text("---\nname: x\n---\n")
    [header] = scan_memories(tmp_path)
    assert manifest_line(header).startswith("- x.md (")
    assert manifest_line(header).endswith(")")


def test_a_fifo_named_md_does_not_hang_the_scan(tmp_path: Path) -> None:
    """Regression: read_head opened a FIFO without O_NONBLOCK and the scan hung in open()."""
    (tmp_path / "a.md").write_text("---\nname: a\ndescription: d\ntype: user\n---\n")
    os.mkfifo(tmp_path / "b.md")
    assert [h.relative for h in scan_memories(tmp_path)] == ["a.md"]


def test_the_cached_scan_skips_links_hard_links_and_linked_folders(tmp_path: Path) -> None:
    """Recall's stat pass: only one-link regular files of the user's are headers; each
    planted entry is recorded for status with its own path."""
    outside = tmp_path / "outside"
    (outside / "team").mkdir(parents=True)
    for path in (outside / "key.md", outside / "hard.md", outside / "team" / "t.md"):
        path.write_text("---\nname: canary\ndescription: CANARY\ntype: user\n---\n")
    memory = tmp_path / "memory"
    _memory(memory / "a.md", mtime_ms=T0_MS)
    (memory / "link.md").symlink_to(outside / "key.md")
    (memory / "team").symlink_to(outside / "team")
    os.link(outside / "hard.md", memory / "hard.md")
    cache = HeaderCache(refresh_s=0.0)
    for _ in range(2):
        assert [h.relative for h in cache.scan(memory)] == ["a.md"]
        assert [h.relative for h in scan_memories(memory)] == ["a.md"]
    kinds = {f.path: f.kind for f in confined.findings.items()}
    assert kinds[str(memory / "link.md")] == "a symbolic link"
    assert kinds[str(memory / "team")] == "a symbolic link"
    assert kinds[str(memory / "hard.md")] == "a file with 2 hard links"


def test_a_file_that_becomes_a_hard_link_after_the_listing_is_not_read(tmp_path: Path) -> None:
    """The check is made on the opened descriptor, not on the listing."""
    memory = tmp_path / "memory"
    _memory(memory / "a.md", mtime_ms=T0_MS)
    with Area.open(memory) as area:
        listed = list_topic_stats(area)
        os.link(memory / "a.md", tmp_path / "elsewhere.md")
        with pytest.raises(Refused):
            read_head(area, listed[0][1])
