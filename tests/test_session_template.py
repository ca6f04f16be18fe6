"""The notes template and its invariant (R-S2): headers and italic lines never change."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from memd.session.template import (
    DEFAULT_TEMPLATE,
    Broken,
    Intact,
    check_skeleton,
    is_empty_template,
    load_template,
    parse_sections,
    skeleton_of,
    template_path,
)

HEADERS = [
    "# Session Title",
    "# Current State",
    "# Task specification",
    "# Files and Functions",
    "# Workflow",
    "# Errors & Corrections",
    "# Codebase and System Documentation",
    "# Learnings",
    "# Key results",
    "# Worklog",
]


def test_the_default_template_has_the_ten_sections_in_order_each_with_an_italic_line() -> None:
    lines = DEFAULT_TEMPLATE.split("\n")
    headers = [line for line in lines if line.startswith("# ")]
    assert headers == HEADERS
    for header in HEADERS:
        following = lines[lines.index(header) + 1]
        assert following.startswith("_") and following.endswith("_") and len(following) > 10
    assert is_empty_template(DEFAULT_TEMPLATE, DEFAULT_TEMPLATE)
    assert check_skeleton(DEFAULT_TEMPLATE, DEFAULT_TEMPLATE) == Intact()


bodies = st.lists(
    st.text(st.characters(exclude_categories=["Cs"]), max_size=200), min_size=10, max_size=10
)


def fill(template: str, texts: list[str]) -> str:
    """Put a body under every description line."""
    lines = template.split("\n")
    out: list[str] = []
    k = 0
    for i, line in enumerate(lines):
        out.append(line)
        if i > 0 and lines[i - 1].startswith("# "):
            out.append(texts[k])
            k += 1
    return "\n".join(out)


@given(bodies)
def test_filled_bodies_keep_the_skeleton_and_parse_back(texts: list[str]) -> None:
    # Bodies may hold anything except a line equal to a template header or description.
    skeleton_lines = {line for h in skeleton_of(DEFAULT_TEMPLATE).headers for line in h}
    texts = ["\n".join(x for x in t.split("\n") if x not in skeleton_lines) for t in texts]
    notes = fill(DEFAULT_TEMPLATE, texts)
    assert check_skeleton(notes, DEFAULT_TEMPLATE) == Intact()
    sections = parse_sections(notes, DEFAULT_TEMPLATE)
    assert [s.header for s in sections] == HEADERS
    for section, text in zip(sections, texts, strict=True):
        assert section.body.startswith(text)
    assert is_empty_template(notes, DEFAULT_TEMPLATE) == all(not t.strip() for t in texts)


@given(st.integers(0, len(HEADERS) * 2 - 1), st.sampled_from(["", " ", "x", "_"]))
def test_any_change_to_a_header_or_description_line_is_caught(index: int, extra: str) -> None:
    notes = fill(DEFAULT_TEMPLATE, ["some content"] * 10)
    lines = notes.split("\n")
    skeleton = [i for i, line in enumerate(lines) if line.startswith(("# ", "_"))]
    target = skeleton[index]
    lines[target] = lines[target] + extra if extra else lines[target][:-1]
    changed = "\n".join(lines)
    assert isinstance(check_skeleton(changed, DEFAULT_TEMPLATE), Broken)
    assert not is_empty_template(changed, DEFAULT_TEMPLATE)


def test_removed_moved_and_duplicated_headers_are_caught() -> None:
    notes = fill(DEFAULT_TEMPLATE, ["content"] * 10)
    removed = notes.replace("# Workflow\n", "")
    assert "missing" in " ".join(_problems(removed))
    swapped = notes.replace("# Learnings", "# TMP").replace("# Worklog", "# Learnings")
    assert isinstance(
        check_skeleton(swapped.replace("# TMP", "# Worklog"), DEFAULT_TEMPLATE), Broken
    )
    doubled = notes + "\n# Current State\n"
    assert "more than once" in " ".join(_problems(doubled))


def _problems(notes: str) -> tuple[str, ...]:
    result = check_skeleton(notes, DEFAULT_TEMPLATE)
    assert isinstance(result, Broken)
    return result.problems


def test_a_hash_line_inside_a_body_is_content_not_a_section() -> None:
    notes = fill(DEFAULT_TEMPLATE, ["```sh\n# run the tests\npytest -q\n```"] + ["x"] * 9)
    sections = parse_sections(notes, DEFAULT_TEMPLATE)
    assert len(sections) == 10 and "# run the tests" in sections[0].body
    assert check_skeleton(notes, DEFAULT_TEMPLATE) == Intact()


def test_a_user_template_replaces_the_default(tmp_path: Path) -> None:
    path = template_path(tmp_path)
    assert path == tmp_path / "session-memory" / "config" / "template.md"
    assert load_template(path) == DEFAULT_TEMPLATE  # missing: the default
    path.parent.mkdir(parents=True)
    path.write_text("no headers at all")
    assert load_template(path) == DEFAULT_TEMPLATE  # unusable: the default
    custom = "Preamble kept.\n\n# Goal\n_What we want._\n\n# Log\n"
    path.write_text(custom)
    assert load_template(path) == custom
    skeleton = skeleton_of(custom)
    assert skeleton.headers == (("# Goal", "_What we want._"), ("# Log", ""))
    assert check_skeleton(custom + "entry\n", custom) == Intact()
    assert isinstance(check_skeleton(custom.replace("Preamble", "Changed"), custom), Broken)
    assert is_empty_template(custom, custom) and not is_empty_template(custom + "entry\n", custom)
