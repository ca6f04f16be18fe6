"""MEMORY.md: the 200-line / 25,000-byte load cap (R-M2) and index entries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memd.memory.index import (
    IndexEntry,
    load_index,
    loaded_content,
    parse_entry,
    parse_index,
    render_entry,
    upsert_entry,
)


def _lines(count: int, width: int) -> str:
    """``count`` lines of exactly ``width`` bytes each, newline included."""
    return "".join(f"- [m{i:04}](m{i:04}.md) ".ljust(width - 1, "x") + "\n" for i in range(count))


def test_an_index_within_both_limits_is_returned_untouched() -> None:
    raw = _lines(200, 100)  # 200 lines, 20,000 bytes
    loaded = load_index(raw)
    assert loaded.text is raw and not loaded.truncated
    exactly_bytes = _lines(125, 200)  # 125 lines, exactly 25,000 bytes
    assert load_index(exactly_bytes).text is exactly_bytes


def test_line_limit_cuts_after_line_200_with_the_warning() -> None:
    raw = _lines(201, 100)
    loaded = load_index(raw)
    assert loaded.cut == "lines"
    assert loaded.body == raw[: 200 * 100]
    assert loaded.kept_lines == 200
    assert loaded.text.startswith(loaded.body)
    notice = loaded.text[len(loaded.body) :]
    assert "too large" in notice or "over its" in notice
    assert "short" in notice


def test_byte_limit_cuts_at_the_last_whole_line_under_25000_bytes() -> None:
    raw = _lines(180, 150)  # 27,000 bytes in 180 lines: bytes run out first
    loaded = load_index(raw)
    assert loaded.cut == "bytes"
    assert loaded.kept_bytes == 166 * 150 == len(loaded.body.encode())
    assert loaded.body.endswith("\n") and raw.startswith(loaded.body)
    assert "size limit" in loaded.text


def test_whichever_limit_comes_first_wins() -> None:
    assert load_index(_lines(300, 50)).cut == "lines"  # 15,000 bytes, 300 lines
    assert load_index(_lines(199, 130)).cut == "bytes"  # 25,870 bytes, 199 lines


def test_bytes_are_counted_in_utf8() -> None:
    line = "- [ü](u.md) " + "é" * 60 + "\n"  # 134 bytes, 74 characters
    raw = line * 190
    loaded = load_index(raw)
    assert loaded.cut == "bytes"
    assert len(loaded.body.encode("utf-8")) <= 25_000
    assert loaded.kept_lines == 25_000 // len(line.encode())


def test_trailing_blank_lines_past_the_limit_do_not_trigger_the_warning() -> None:
    raw = _lines(200, 50) + "\n\n\n"
    loaded = load_index(raw)
    assert not loaded.truncated and loaded.text == _lines(200, 50)


def test_a_single_giant_line_is_cut_at_a_character_boundary() -> None:
    loaded = load_index("é" * 20_000)  # 40,000 bytes, no newline
    assert loaded.truncated
    assert len(loaded.body.encode("utf-8")) == 25_000


@given(
    lines=st.lists(
        st.text(st.characters(codec="utf-8", blacklist_characters="\n"), max_size=30),
        max_size=12,
    ),
    max_lines=st.integers(1, 8),
    max_bytes=st.integers(40, 200),
)
def test_cut_is_a_maximal_line_prefix_within_both_limits(
    lines: list[str], max_lines: int, max_bytes: int
) -> None:
    raw = "".join(line + "\n" for line in lines)
    loaded = load_index(raw, max_lines=max_lines, max_bytes=max_bytes)
    body = loaded.body
    assert raw.startswith(body)
    if loaded.text is raw:
        return
    kept = body.count("\n")
    if body and body.endswith("\n"):
        assert kept <= max_lines and len(body.encode()) <= max_bytes
        rest = raw[len(body) :]
        if rest.strip():
            nxt = rest.split("\n", 1)[0] + "\n"
            assert kept == max_lines or len((body + nxt).encode()) > max_bytes
            assert loaded.truncated and loaded.text.startswith(body)


def test_entries_render_and_parse() -> None:
    entry = IndexEntry("Testing [rules]", "feedback testing.md", "use the real DB")
    line = render_entry(entry)
    assert line == "- [Testing [rules\\]](feedback%20testing.md) — use the real DB"
    assert parse_entry(line) == entry


def test_entry_variants_in_the_wild_are_understood() -> None:
    assert parse_entry("- [build.md](build.md): npm run build") == IndexEntry(
        "build.md", "build.md", "npm run build"
    )
    assert parse_entry("* [A](a.md)") == IndexEntry("A", "a.md", "")
    assert parse_entry("# Memory Index") is None
    assert parse_entry("some prose") is None


def test_long_hooks_are_shortened_to_keep_the_line_short() -> None:
    line = render_entry(IndexEntry("T", "t.md", "word " * 100))
    assert len(line) <= 150 and line.endswith("…")


def test_upsert_replaces_the_line_for_the_same_file_and_keeps_everything_else() -> None:
    index = "# Memory Index\n\n## Project\n- [Old](deploy.md) — old hook\n- [B](b.md) — b\n"
    updated = upsert_entry(index, IndexEntry("Deploy", "./deploy.md", "argo"))
    assert (
        updated == "# Memory Index\n\n## Project\n- [Deploy](./deploy.md) — argo\n- [B](b.md) — b\n"
    )
    appended = upsert_entry("# Memory Index", IndexEntry("C", "c.md", "c"))
    assert appended == "# Memory Index\n- [C](c.md) — c\n"
    assert [e.file for e in parse_index(appended)] == ["c.md"]


@given(
    title=st.text(
        st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=40
    ),
    file=st.from_regex(r"[a-z0-9_/() %-]{1,20}\.md", fullmatch=True),
    hook=st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=40),
)
def test_rendered_entries_parse_back(title: str, file: str, hook: str) -> None:
    entry = IndexEntry(title, file, hook)
    parsed = parse_entry(render_entry(entry, max_chars=10_000))
    assert parsed is not None
    assert parsed.file == file
    assert parsed.title == " ".join(title.split())
    assert parsed.hook == " ".join(hook.split())


def test_the_limits_count_what_claude_code_loads_without_frontmatter_and_comments() -> None:
    """2.1.211 on (measured with 2.1.331): a frontmatter block and HTML comment blocks are
    not loaded, so they neither count against 200 lines / 25 KB nor reach the context; a
    comment inside an entry's line stays."""
    entries = _lines(200, 100)
    comment = "<!--\n" + "a note for whoever edits this file\n" * 60 + "-->\n"
    raw = "---\nname: index\ndescription: d\n---\n\n" + comment + entries
    loaded = load_index(raw)
    assert not loaded.truncated and loaded.text == entries and loaded.total_lines == 200
    inline = "- [a](a.md) — hook <!-- kept -->\n"
    assert load_index(inline + comment).text == inline
    over = load_index(comment + _lines(201, 100))
    assert over.cut == "lines" and over.kept_lines == 200 and "a note" not in over.text


@given(st.text(alphabet="-<!>\n ab", max_size=300))
def test_loaded_content_keeps_only_whole_lines_of_the_index_in_order(raw: str) -> None:
    kept = loaded_content(raw).splitlines(keepends=True)
    lines = raw.splitlines(keepends=True)
    at = 0
    for line in kept:  # a subsequence of the file's own lines
        at = lines.index(line, at) + 1
