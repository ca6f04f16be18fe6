"""Topic-file frontmatter: tolerant parsing, problems reported as values, round trips."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memd.memory.frontmatter import (
    MEMORY_TYPES,
    Frontmatter,
    links,
    normalize_line,
    parse_document,
    parse_memory_type,
    render_document,
)

GOOD = """---
name: Debugging patterns
description: Token rotation and DB connection troubleshooting
type: reference
owner: ops
---

## Auth token issues
- rotation invalidates the old token
"""


def test_a_complete_file_parses_without_problems() -> None:
    doc = parse_document(GOOD)
    assert doc.has_frontmatter and doc.problems == ()
    assert doc.meta.name == "Debugging patterns"
    assert doc.meta.description == "Token rotation and DB connection troubleshooting"
    assert doc.meta.type == "reference"
    assert doc.meta.extra == (("owner", "ops"),)
    assert doc.body.startswith("## Auth token issues")


def test_unknown_type_is_reported_and_left_empty() -> None:
    doc = parse_document(GOOD.replace("type: reference", "type: note"))
    assert doc.meta.type is None
    assert any("'note'" in p and "user" in p for p in doc.problems)
    assert doc.meta.name == "Debugging patterns"  # the rest is still read


def test_type_is_case_insensitive_and_exactly_the_four_kinds() -> None:
    assert MEMORY_TYPES == ("user", "feedback", "project", "reference")
    assert parse_memory_type(" Feedback ") == "feedback"
    assert parse_memory_type("feedbacks") is None
    assert parse_memory_type(3) is None


def test_a_file_without_frontmatter_is_all_body() -> None:
    doc = parse_document("# Notes\nplain text\n")
    assert not doc.has_frontmatter
    assert doc.body == "# Notes\nplain text\n"
    assert doc.problems == ("no frontmatter",)


def test_an_unquoted_colon_falls_back_to_plain_key_value_lines() -> None:
    text = (
        "---\nname: Mac builds\n"
        "description: Apple M2: build images for linux/amd64\ntype: user\n---\nbody\n"
    )
    doc = parse_document(text)
    assert doc.meta.description == "Apple M2: build images for linux/amd64"
    assert doc.meta.type == "user"
    assert any("not valid YAML" in p for p in doc.problems)


def test_an_unclosed_block_is_reported_and_its_fields_kept() -> None:
    doc = parse_document("---\nname: Half\ntype: project\ndescription: cut by the 30-line head\n")
    assert doc.meta.name == "Half" and doc.meta.type == "project"
    assert any("not closed" in p for p in doc.problems)


def test_frontmatter_that_is_not_a_mapping_or_has_lists_is_reported() -> None:
    assert any("mapping" in p for p in parse_document("---\n- a\n- b\n---\n").problems)
    doc = parse_document("---\nname: [a, b]\ndescription: d\ntype: user\n---\n")
    assert doc.meta.name is None
    assert any("name should be a single line" in p for p in doc.problems)


def test_missing_description_and_type_are_reported() -> None:
    doc = parse_document("---\nname: only a name\n---\n")
    assert "no description" in doc.problems
    assert any(p.startswith("no type") for p in doc.problems)


def test_python_tags_are_not_constructed() -> None:
    doc = parse_document("---\nname: !!python/object/apply:os.system ['echo hi']\n---\n")
    assert any("not valid YAML" in p for p in doc.problems)


def test_crlf_and_bom_are_accepted() -> None:
    text = "\ufeff---\r\nname: Win\r\ndescription: d\r\ntype: user\r\n---\r\nbody\r\n"
    doc = parse_document(text)
    assert doc.meta.name == "Win" and doc.meta.type == "user"
    assert doc.body == "body\r\n"


_line = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=80).map(normalize_line)


@given(
    name=st.none() | _line.filter(bool),
    description=st.none() | _line.filter(bool),
    kind=st.none() | st.sampled_from(MEMORY_TYPES),
    body=st.text(st.characters(codec="utf-8"), max_size=200),
)
def test_render_then_parse_gives_back_the_same_fields_and_body(
    name: str | None, description: str | None, kind: str | None, body: str
) -> None:
    meta = Frontmatter(name, description, parse_memory_type(kind))
    doc = parse_document(render_document(meta, body))
    assert (doc.meta.name, doc.meta.description, doc.meta.type) == (name, description, meta.type)
    assert doc.body == body
    assert not any("YAML" in p or "closed" in p for p in doc.problems)


@given(st.text(max_size=400))
def test_parsing_never_raises(text: str) -> None:
    doc = parse_document(text)
    assert isinstance(doc.problems, tuple)
    assert parse_document("---\n" + text).has_frontmatter


def test_a_number_too_long_for_python_is_a_problem_not_a_crash() -> None:
    """An integer of 5,000 digits (Python reads at most 4,300) in any field: the file's other
    fields are still read, as with any YAML that does not load."""
    digits = "1" + "0" * 5_000
    for field in ("type", "name", "priority"):
        text = f"---\nname: n\ndescription: d\ntype: user\n{field}: {digits}\n---\nbody\n"
        doc = parse_document(text)
        assert doc.meta.description == "d"
        assert any("not valid YAML" in p for p in doc.problems)
        assert doc.body == "body\n"


def test_the_forms_claude_code_2_1_331_writes_are_read() -> None:
    """modified and pinned under metadata (2.1.331) or at the top level; a date alone or
    text that is no time is no modified; links are the names [[…]] point at."""
    nested = parse_document(
        "---\nname: deploy-flow\ndescription: d\nmetadata:\n  type: project\n  pinned: true\n"
        "  originSessionId: e3\n  modified: 2026-11-26T09:03:25.005Z\n---\n\nSee [[canary]].\n"
    )
    assert nested.problems == ()
    assert (nested.meta.pinned, nested.meta.modified) == (True, "2026-11-26T09:03:25.005Z")
    top = parse_document(
        "---\nname: x\ndescription: d\ntype: user\nmodified: '2026-01-02T03:04:05+01:00'\n---\n"
    )
    assert top.meta.modified == "2026-01-02T02:04:05.000Z" and not top.meta.pinned
    for bad in ("2026-01-02", "soon", "12"):
        doc = parse_document(f"---\nname: x\ndescription: d\ntype: user\nmodified: {bad}\n---\n")
        assert doc.meta.modified is None
    assert links("a [[one]] b [[two|label]] [[one]] [[]] [[three#part]]") == (
        "one",
        "two",
        "three",
    )
    again = parse_document(render_document(nested.meta, nested.body))
    assert again.meta == nested.meta  # the stamp goes back as the text Claude Code wrote
