"""Living beside Claude Code 2.1 (issue 10): its settings and environment, both frontmatter
forms, what a transcript says is already in context, and the cached header scan."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.memory.claude_code import (
    Settings,
    decide,
    frontmatter_form,
    read_json_object,
    read_settings,
)
from memd.memory.frontmatter import Frontmatter, parse_document, render_document
from memd.memory.scan import HeaderCache
from memd.memory.session_context import INDEX_MARK, scan_transcript
from tests.conftest import CORPUS

SAMPLES = CORPUS / "claude-code-2.1.197"


def write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_settings_merge_in_precedence_order_and_project_cannot_move_the_memory_dir(
    tmp_path: Path,
) -> None:
    claude, project = tmp_path / "claude", tmp_path / "repo"
    write(claude / "settings.json", {"autoMemoryEnabled": True, "autoMemoryDirectory": "~/mem"})
    write(
        project / ".claude" / "settings.json",
        {"autoMemoryEnabled": False, "autoMemoryDirectory": "/etc/evil"},
    )
    settings = read_settings(str(claude), str(project))
    assert settings.auto_memory is False and settings.auto_memory_from == "project settings"
    assert settings.memory_directory == "~/mem"
    assert any("ignored in project settings" in p for p in settings.problems)
    write(project / ".claude" / "settings.local.json", {"autoMemoryDirectory": "/srv/mem"})
    assert read_settings(str(claude), str(project)).memory_directory == "/srv/mem"


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"[1, 2]", b"\xff\xfe", b"[" * 100_000, b'{"autoMemoryEnabled": "yes"}'],
)
def test_hostile_settings_files_count_as_absent(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "settings.json").write_bytes(content)
    settings = read_settings(str(tmp_path), None)
    assert settings.auto_memory is None and settings.problems


def test_a_fifo_or_a_huge_file_is_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    done: list[object] = []
    reader = threading.Thread(target=lambda: done.append(read_json_object(str(fifo))))
    reader.start()
    reader.join(timeout=10)
    assert done and done[0] == (
        None,
        f"{fifo} is a FIFO, not a regular file; replace it with a file, or remove it",
    )
    huge = tmp_path / "huge.json"
    huge.write_bytes(b" " * (2 * 1024 * 1024) + b"{}")
    assert read_json_object(str(huge))[1] == (
        f"{huge} is larger than 1,048,576 bytes, more than memd reads of it; "
        "shrink it (look at what wrote it), or remove it"
    )


def test_environment_wins_over_settings_and_the_default_is_on() -> None:
    assert decide(Settings(), {}, "2.1.197").auto_memory
    off = Settings(auto_memory=False, auto_memory_from="user settings")
    assert not decide(off, {}, None).auto_memory
    assert decide(off, {"CLAUDE_CODE_DISABLE_AUTO_MEMORY": "0"}, None).auto_memory
    assert not decide(Settings(), {"CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1"}, None).auto_memory
    simple = decide(Settings(), {"CLAUDE_CODE_SIMPLE": "true"}, None)
    assert not simple.auto_memory and not simple.auto_dream
    assert not decide(Settings(), {}, "1.0.88").auto_memory


def test_the_frontmatter_form_follows_the_version() -> None:
    assert frontmatter_form("2.1.197") == "metadata" and frontmatter_form(None) == "metadata"
    assert frontmatter_form("2.0.5") == "top-level"


def test_both_frontmatter_forms_are_typed_and_written_as_asked() -> None:
    nested = "---\nname: Tests\ndescription: run them\nmetadata:\n  type: feedback\n---\nbody\n"
    doc = parse_document(nested)
    assert doc.meta.type == "feedback" and doc.problems == ()
    meta = Frontmatter("Tests", "run them", "feedback", (("metadata", {"owner": "me"}),))
    written = render_document(meta, "body\n", form="metadata")
    assert "metadata:\n  owner: me\n  type: feedback\n" in written
    assert "\ntype:" not in written
    assert parse_document(written).meta == meta
    top = render_document(meta, "body\n", form="top-level")
    assert "\ntype: feedback\n" in top and parse_document(top).meta == meta


def test_a_sample_transcript_shows_memds_index_recall_and_version() -> None:
    path = SAMPLES / "86acba00-9dae-410d-b3e7-1e329492a82b.jsonl"
    found = scan_transcript(str(path), 0, 0)
    assert found is not None and found.version == "2.1.197" and found.index_injected
    assert {Path(p).name for p in found.memd_surfaced} == {"deploy.md", "testing.md"}
    again = scan_transcript(str(path), found.ino, found.offset)
    assert again is not None and not again.memd_surfaced and again.offset == found.offset


def test_a_scan_skips_bad_lines_and_rereads_a_replaced_file(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    good = {"attachment": {"type": "hook_additional_context", "content": [INDEX_MARK]}}
    path.write_bytes(b'\xff{"attachment": [\n' + json.dumps(good).encode() + b"\n{partial")
    found = scan_transcript(str(path), 0, 0)
    assert found is not None and found.index_injected
    assert found.offset == path.stat().st_size - len(b"{partial")
    replacement = tmp_path / "new.jsonl"
    replacement.write_text(json.dumps(good) + "\n")
    os.replace(replacement, path)
    assert (rescan := scan_transcript(str(path), found.ino, found.offset)) and rescan.index_injected
    assert scan_transcript(str(tmp_path / "missing.jsonl"), 0, 0) is None


def test_the_header_cache_reads_only_new_or_changed_heads_and_excludes_before_the_cut(
    tmp_path: Path,
) -> None:
    for n in range(5):
        path = tmp_path / f"m{n}.md"
        path.write_text(f"---\nname: M{n}\ndescription: d{n}\nmetadata:\n  type: user\n---\n")
        os.utime(path, (1_000 + n, 1_000 + n))
    cache = HeaderCache(refresh_s=0.0)  # every scan stats every file
    first = cache.scan(tmp_path, max_files=3)
    assert [h.relative for h in first] == ["m4.md", "m3.md", "m2.md"]
    assert cache.heads_read == 3 and all(h.type == "user" for h in first)
    shown = {str(tmp_path / "m4.md")}
    assert [h.relative for h in cache.scan(tmp_path, exclude=shown, max_files=3)] == [
        "m3.md",
        "m2.md",
        "m1.md",
    ]
    assert cache.heads_read == 4
    (tmp_path / "m3.md").write_text("---\nname: changed\ndescription: x\ntype: project\n---\n")
    os.utime(tmp_path / "m3.md", (1_003, 1_003))
    again = cache.scan(tmp_path, max_files=3)
    assert cache.heads_read == 5 and again[1].name == "changed"
    os.mkfifo(tmp_path / "fifo.md")
    assert len(cache.scan(tmp_path, max_files=10)) == 5


def test_the_stat_pass_is_reused_for_a_second_unless_the_dir_changed(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("---\nname: A\ndescription: a\ntype: user\n---\n")
    cache = HeaderCache(refresh_s=3600.0)
    assert [h.relative for h in cache.scan(tmp_path)] == ["a.md"]
    (tmp_path / "b.md").write_text("---\nname: B\ndescription: b\ntype: user\n---\n")
    os.utime(tmp_path, ns=(1, 1))  # the dir changed (a new file): listed again at once
    assert sorted(h.relative for h in cache.scan(tmp_path)) == ["a.md", "b.md"]
    (tmp_path / "a.md").write_text("---\nname: A2\ndescription: a\ntype: user\n---\n")
    os.utime(tmp_path, ns=(1, 1))  # an edit in place leaves the dir as it was
    assert {h.name for h in cache.scan(tmp_path)} == {"A", "B"}  # seen after refresh_s


@given(
    st.lists(
        st.tuples(st.integers(0, 9), st.sampled_from(["get", "on", "off", "stale"])),
        max_size=60,
    )
)
def test_status_counts_follow_the_kept_sessions(ops: list[tuple[int, str]]) -> None:
    """``status`` reads the counts of sessions seen through hooks without walking them:
    they must equal a walk whatever is decided, re-decided or dropped past the limit."""
    from memd.memory.claude_code import ClaudeCodeFacts
    from memd.memory.session_context import SessionContexts

    contexts = SessionContexts(max_sessions=4)
    held = {}
    for n, op in ops:
        sid = f"s{n}"
        if op == "get":
            held[sid] = contexts.get(sid)  # may drop the least recently used
        elif (record := held.get(sid) if op == "stale" else contexts.get(sid)) is not None:
            facts = ClaudeCodeFacts(op == "on", "", False, None, None, "metadata")
            contexts.set_facts(record, facts)
        decided = [r.facts for r in contexts.records() if r.facts is not None]
        assert contexts.decided == len(decided)
        assert contexts.auto_memory_on == sum(f.auto_memory for f in decided)
