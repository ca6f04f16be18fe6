"""The memory store: atomic, scrubbed writes; safe paths; the index kept in step."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memd.confined import Refused
from memd.errors import NotFound
from memd.memory.frontmatter import Frontmatter
from memd.memory.index import IndexEntry
from memd.memory.store import MemoryStore


def _meta(name: str = "Deploy", description: str = "Argo CD promotes staging") -> Frontmatter:
    return Frontmatter(name, description, "project")


def test_write_then_read_round_trips_and_creates_the_dir_lazily(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "memory")
    assert not store.root.exists() and store.list_topics() == [] and store.read_index() == ""
    path = store.write("team/deploy.md", _meta(), "Promote after smoke tests.\n")
    assert path == tmp_path / "memory" / "team" / "deploy.md"
    got = store.read("team/deploy.md")
    assert got.document.meta == _meta() and got.document.body == "Promote after smoke tests.\n"
    assert got.mtime_ms == os.stat(path).st_mtime_ns // 1_000_000
    assert store.list_topics() == ["team/deploy.md"]


def test_a_rewrite_replaces_the_file_and_leaves_no_temp_files(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    store.write("a.md", _meta(), "one\n")
    inode = os.stat(tmp_path / "a.md").st_ino
    store.write("a.md", _meta(), "two\n")
    assert store.read("a.md").document.body == "two\n"
    assert os.stat(tmp_path / "a.md").st_ino != inode  # replaced by rename, not rewritten in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.md"]


def test_secrets_and_private_spans_never_reach_the_disk(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    secret = "sk-ant-api03-" + "k" * 32
    store.save(
        "creds.md",
        Frontmatter("Creds", f"key {secret}", "reference"),
        "password=hunter2hunter2 <private>my diary</private>\n",
    )
    on_disk = (tmp_path / "creds.md").read_text() + (tmp_path / "MEMORY.md").read_text()
    assert secret not in on_disk and "hunter2hunter2" not in on_disk and "diary" not in on_disk
    assert "[REDACTED:anthropic_key]" in on_disk
    raw = MemoryStore(tmp_path / "raw", redact=False)
    raw.write("x.md", _meta(), f"{secret}\n")
    assert secret in (tmp_path / "raw" / "x.md").read_text()


@pytest.mark.parametrize(
    "relative",
    [
        "../escape.md",
        "/etc/passwd.md",
        "a/../../b.md",
        ".hidden.md",
        "x/.git/y.md",
        "notes.txt",
        "MEMORY.md",
        "",
        "team/MEMORY.md",
    ],
)
def test_paths_outside_the_topic_files_are_refused(tmp_path: Path, relative: str) -> None:
    store = MemoryStore(tmp_path / "memory")
    with pytest.raises(ValueError):
        store.write(relative, _meta(), "x")
    assert not (tmp_path / "escape.md").exists()


def test_a_symlink_out_of_the_memory_dir_is_refused(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (memory / "link").symlink_to(outside)
    with pytest.raises(Refused, match="a symbolic link"):
        MemoryStore(memory).write("link/evil.md", _meta(), "x")
    assert list(outside.iterdir()) == []


def test_reading_a_missing_memory_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        MemoryStore(tmp_path).read("ghost.md")


def test_save_points_the_index_at_the_file_and_updates_in_place(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    (tmp_path / "MEMORY.md").write_text("# Memory Index\n\n- [Other](other.md) — keep me\n")
    store.save("deploy.md", _meta(), "body\n")
    store.save("deploy.md", _meta(description="now via Argo CD rollouts"), "body 2\n")
    assert store.read_index() == (
        "# Memory Index\n\n- [Other](other.md) — keep me\n"
        "- [Deploy](deploy.md) — now via Argo CD rollouts\n"
    )
    store.update_index(IndexEntry("Other", "other.md", "new hook"))
    assert "- [Other](other.md) — new hook\n" in store.read_index()


def test_load_index_applies_the_cap(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    (tmp_path / "MEMORY.md").write_text("".join(f"- [m{i}](m{i}.md)\n" for i in range(250)))
    loaded = store.load_index()
    assert loaded.truncated and loaded.kept_lines == 200
    assert store.load_index(max_lines=300).truncated is False


def test_the_store_has_no_way_to_delete_a_memory() -> None:
    assert not [name for name in dir(MemoryStore) if "delete" in name or "remove" in name]


def test_a_linked_index_reads_as_none_and_nothing_is_written_beside_it(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    outside = tmp_path / "id_rsa"
    outside.write_text("CANARY private key\n")
    (memory / "MEMORY.md").symlink_to(outside)
    store = MemoryStore(memory)
    assert store.read_index() == "" and store.load_index().text == ""
    with pytest.raises(Refused, match="a symbolic link"):
        store.save("deploy.md", _meta(), "body\n")
    with pytest.raises(Refused, match="a symbolic link"):
        store.update_index(IndexEntry("Deploy", "deploy.md", "d"))
    assert sorted(p.name for p in memory.iterdir()) == ["MEMORY.md"]
    assert (memory / "MEMORY.md").is_symlink() and outside.read_text() == "CANARY private key\n"


def test_a_hard_linked_topic_is_not_read_listed_or_written(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    outside = tmp_path / "token.md"
    outside.write_text("---\nname: token\n---\nCANARY\n")
    os.link(outside, memory / "token.md")
    store = MemoryStore(memory)
    with pytest.raises(NotFound, match="2 hard links"):
        store.read("token.md")
    assert store.list_topics() == []
    with pytest.raises(Refused, match="2 hard links"):
        store.write("token.md", _meta(), "x")
    assert outside.read_text() == "---\nname: token\n---\nCANARY\n"
