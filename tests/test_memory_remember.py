"""``remember``: file names from hostile names, validation, scrubbing, updates, index limits."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.errors import NotFound
from memd.memory.frontmatter import modified_ms, parse_document
from memd.memory.index import parse_index
from memd.memory.remember import (
    Limits,
    MemoryDraft,
    RememberRefused,
    find_memory,
    memory_file_name,
    plan_memory,
    read_memory,
    write_memory,
)

SAFE = re.compile(r"^(user|feedback|project|reference)_[a-z0-9_]{1,80}\.md$")
HOSTILE = [
    "../../etc/passwd",
    "..",
    "/abs/path",
    "a/b\\c",
    "CON",
    "nul",
    "Memory",
    "MEMORY.md",
    "日本語のメモ",
    "🙂🙂",
    "\x00\x01",
    "Café résumé",
    "x" * 10_000,
    ".hidden",
    "name\nwith\nnewlines",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_become_one_safe_file(name: str) -> None:
    file = memory_file_name("feedback", name)
    assert SAFE.match(file), file
    assert file.split("_", 1)[1] not in ("con.md", "nul.md", "memory.md")


@given(st.text())
def test_any_name_gives_a_safe_file_name(name: str) -> None:
    assert SAFE.match(memory_file_name("project", name))
    assert SAFE.match(memory_file_name("project", name, disambiguate=True))


def test_accents_fold_and_distinct_scripts_get_distinct_files() -> None:
    assert memory_file_name("user", "Café Résumé") == "user_cafe_resume.md"
    assert memory_file_name("user", "日本") != memory_file_name("user", "中文")


def draft(**fields: str) -> MemoryDraft:
    base = {
        "type": "feedback",
        "name": "Run the checks",
        "description": "How tests are run here",
        "content": "Use scripts/check, never bare pytest.",
        "agent": "codex-cli",
    }
    base.update(fields)
    return MemoryDraft(**base)


def test_plan_refuses_bad_fields_with_the_fix() -> None:
    with pytest.raises(RememberRefused, match="user, feedback, project, reference"):
        plan_memory(draft(type="note"), Limits())
    with pytest.raises(RememberRefused, match=r"mcp\.remember_max_bytes"):
        plan_memory(draft(content="é" * 2049), Limits())
    with pytest.raises(RememberRefused, match="name is empty"):
        plan_memory(draft(name=" \n\t"), Limits())
    with pytest.raises(RememberRefused, match="content is empty"):
        plan_memory(draft(content=" \n \x00"), Limits())
    assert plan_memory(draft(content="x" * 4096), Limits()).body.startswith("x")


def test_plan_scrubs_private_spans_and_secrets_everywhere() -> None:
    planned = plan_memory(
        draft(
            name="Deploy key <private>prod</private>",
            description="token ghp_" + "a" * 36,
            content="password=hunter2hunter2 and <private>my salary</private> and\x07 more",
        ),
        Limits(),
    )
    text = repr(planned)
    for leaked in ("prod", "ghp_aaaa", "hunter2", "salary", "\x07"):
        assert leaked not in text
    assert planned.redacted == {"private": 2, "github_token": 1, "password": 1}
    assert planned.meta.extra == (("agent", "codex-cli"),)


def test_write_creates_then_updates_by_name(tmp_path: Path) -> None:
    mdir = tmp_path / "memory"
    first = write_memory(mdir, draft(), Limits())
    assert first.created and first.relative == "feedback_run_the_checks.md"
    doc = parse_document(first.path.read_text())
    assert (doc.meta.name, doc.meta.type, doc.problems) == ("Run the checks", "feedback", ())
    assert dict(doc.meta.extra)["agent"] == "codex-cli"
    again = write_memory(mdir, draft(name="run  THE checks", content="Changed."), Limits())
    assert (again.created, again.relative) == (False, first.relative)
    assert "Changed." in first.path.read_text()
    entries = parse_index((mdir / "MEMORY.md").read_text())
    assert [e.file for e in entries] == [first.relative]


def test_a_different_name_with_the_same_slug_gets_its_own_file(tmp_path: Path) -> None:
    mdir = tmp_path / "memory"
    a = write_memory(mdir, draft(name="C++ tips"), Limits())
    b = write_memory(mdir, draft(name="C tips!"), Limits())
    assert a.relative != b.relative and b.created
    assert len(parse_index((mdir / "MEMORY.md").read_text())) == 2


def test_a_full_index_refuses_new_entries_and_writes_nothing(tmp_path: Path) -> None:
    mdir = tmp_path / "memory"
    limits = Limits(index_max_lines=2)
    write_memory(mdir, draft(name="one"), limits)
    write_memory(mdir, draft(name="two"), limits)
    before = sorted(p.name for p in mdir.iterdir())
    with pytest.raises(RememberRefused, match=r"MEMORY\.md is full"):
        write_memory(mdir, draft(name="three"), limits)
    assert sorted(p.name for p in mdir.iterdir()) == before
    write_memory(mdir, draft(name="two", content="updated"), limits)  # updates still fit


def test_find_and_read_by_file_or_name(tmp_path: Path) -> None:
    mdir = tmp_path / "memory"
    written = write_memory(mdir, draft(name="Weird/Name: ../x"), Limits())
    assert find_memory(mdir, written.relative) == written.relative
    assert find_memory(mdir, written.relative[:-3]) == written.relative
    assert find_memory(mdir, "weird/name: ../X") == written.relative
    for missing in ("../../etc/passwd", "/etc/passwd", "MEMORY.md", "nope", "\x00"):
        with pytest.raises(NotFound):
            find_memory(mdir, missing)
    # A file planted by hand with secrets comes back scrubbed.
    (mdir / "project_planted.md").write_text(
        "---\nname: planted\ndescription: d\ntype: project\n---\n\n"
        "key sk-ant-api03-abcdefghijklmnopqrstuvwxyz <private>mine</private>\n"
    )
    memory = read_memory(mdir, "planted", now_ms=0, secrets=True)
    assert "sk-ant-api03" not in memory["content"] and "mine" not in memory["content"]
    assert "[REDACTED:anthropic_key]" in memory["content"]


def test_read_memory_caps_a_huge_file_and_refuses_special_files(tmp_path: Path) -> None:
    mdir = tmp_path / "memory"
    mdir.mkdir()
    (mdir / "project_huge.md").write_text("---\nname: huge\ntype: project\n---\n" + "x" * 10**6)
    memory = read_memory(mdir, "project_huge.md", now_ms=0, secrets=True)
    assert len(memory["content"]) < 70_000 and "cut at 65,536 bytes" in memory["content"]
    os.mkfifo(mdir / "project_fifo.md")
    (mdir / "project_link.md").symlink_to("/etc/passwd")
    for name in ("project_fifo.md", "project_link.md"):
        with pytest.raises(NotFound):
            read_memory(mdir, name, now_ms=0, secrets=True)


def test_frontmatter_and_index_injection_stays_data(tmp_path: Path) -> None:
    mdir = tmp_path / "memory"
    name = "x\n---\ntype: user\n- [evil](../../x.md) — y"
    written = write_memory(
        mdir, draft(name=name, description="a: b # c ]( ) ---", agent="bot\n---\nx: 1"), Limits()
    )
    doc = parse_document(written.path.read_text())
    assert doc.problems == () and doc.meta.type == "feedback"
    assert doc.meta.name == "x --- type: user - [evil](../../x.md) — y"
    assert doc.meta.description == "a: b # c ]( ) ---"
    extra = dict(doc.meta.extra)
    assert extra.pop("metadata") == {"modified": doc.meta.modified}
    assert extra == {"agent": "bot --- x: 1"}
    [entry] = parse_index((mdir / "MEMORY.md").read_text())
    assert entry.file == written.relative and entry.title == doc.meta.name


def test_an_update_keeps_the_files_other_frontmatter_keys(tmp_path: Path) -> None:
    mdir = tmp_path / "memory"
    mdir.mkdir()
    (mdir / "project_x.md").write_text(
        "---\nname: Release day\ndescription: d\ntype: project\nsource: claude\n"
        "agent: old-agent\n---\n\nold body\n"
    )
    updated = write_memory(mdir, draft(name="release day", type="project"), Limits())
    assert (updated.relative, updated.created) == ("project_x.md", False)
    meta = parse_document((mdir / "project_x.md").read_text()).meta
    extra = dict(meta.extra)
    assert extra.pop("metadata") == {"modified": meta.modified}
    assert extra == {"source": "claude", "agent": "codex-cli"}


def test_remember_stamps_modified_and_keeps_what_claude_code_wrote(tmp_path: Path) -> None:
    """A memory as Claude Code 2.1.331 writes it (kebab-case name, type, pinned, its session
    and modified under metadata): an update by name stamps a new ISO ``modified`` and keeps
    the rest, so the memory stays pinned and Claude Code's own keys survive."""
    mdir = tmp_path / "memory"
    mdir.mkdir()
    (mdir / "deploy-flow.md").write_text(
        "---\nname: deploy-flow\ndescription: how deploys go\nmetadata:\n  node_type: memory\n"
        "  type: project\n  pinned: true\n  originSessionId: e37a8fb6\n"
        "  modified: 2020-01-02T03:04:05.006Z\n---\n\nDeploys use the canary.\n"
    )
    before = time.time() - 1
    updated = write_memory(mdir, draft(name="Deploy-Flow", type="project"), Limits())
    assert (updated.relative, updated.created) == ("deploy-flow.md", False)
    meta = parse_document((mdir / "deploy-flow.md").read_text()).meta
    assert meta.pinned and meta.type == "project" and meta.modified is not None
    stamped = modified_ms(meta)
    assert stamped is not None and stamped >= before * 1000
    nested = dict(meta.extra)["metadata"]
    assert (nested["node_type"], nested["originSessionId"]) == ("memory", "e37a8fb6")


def test_a_fifo_index_refuses_instead_of_hanging(tmp_path: Path) -> None:
    mdir = tmp_path / "memory"
    mdir.mkdir()
    os.mkfifo(mdir / "MEMORY.md")
    with pytest.raises(OSError, match="a FIFO"):
        write_memory(mdir, draft(), Limits())
    assert list(mdir.iterdir()) == [mdir / "MEMORY.md"]
