"""Citations read from hostile text and frontmatter (pure): what a memory cites is found in
its words, round-trips through the frontmatter, and no input makes reading them raise or grow
past its bounds."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from memd.mcp.render import render_recall
from memd.memory.citations import (
    MAX_CITATIONS,
    MAX_SYMBOLS,
    Citation,
    clean_path,
    from_frontmatter,
    infer,
    symbol_in,
    to_frontmatter,
)
from memd.memory.frontmatter import Frontmatter, parse_document, render_document
from memd.memory.hook_context import render_memory
from tests.recall_support import recalled


def test_paths_lines_and_ticked_symbols_are_read_from_a_memorys_words() -> None:
    text = (
        "The retry logic lives in `src/retry.py`; `backoff()` caps at 60 s (src/retry.py:10-24)."
        " Config: memd/config.py#L97-L112 and `memory.recall_max`; see README.md line 5, "
        "https://example.com/x/y.py and e.g. nothing else."
    )
    found = {c.label: c.symbols for c in infer(text)}
    assert found == {
        "src/retry.py:10-24": ("backoff", "memory.recall_max"),
        "memd/config.py:97-112": ("backoff", "memory.recall_max"),
        "README.md:5": ("backoff", "memory.recall_max"),
    }


def test_a_path_outside_the_work_tree_is_no_citation() -> None:
    for bad in ("/etc/passwd", "../x.py", "a/../../x.py", ".git/config", "a//b.py", "a\\b.py"):
        assert clean_path(bad) is None, bad
    assert clean_path("./src/a.py") == "src/a.py"


def test_citations_round_trip_through_a_memorys_frontmatter() -> None:
    cited = (
        Citation("src/a.py", (3, 9), ("alpha",), "ab" * 20, "main", "0123456789abcdef"),
        Citation("docs/b.md"),
    )
    meta = Frontmatter("n", "d", "project", (("citations", to_frontmatter(cited)),))
    document = parse_document(render_document(meta, "body\n"))
    assert document.problems == ()
    assert from_frontmatter(document.meta.extra) == cited
    assert from_frontmatter(()) is None  # no key: infer from the text


def test_a_symbol_is_found_as_a_whole_word_only() -> None:
    assert symbol_in("backoff", b"def backoff(n):")
    assert not symbol_in("backoff", b"def backoff_max(n):")
    assert symbol_in("retry.max_s", b"[retry]\nmax_s = 3\n")
    assert not symbol_in("off", b"backoff")


_yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=30,
)


@settings(max_examples=300)
@given(_yaml_values)
def test_any_frontmatter_value_reads_as_citations_or_none_without_raising(value: Any) -> None:
    cited = from_frontmatter((("citations", value),))
    if value is None:  # ``citations:`` with nothing: as if absent, inferred from the text
        assert cited is None
        return
    assert cited is not None and len(cited) <= MAX_CITATIONS
    for c in cited:
        assert clean_path(c.path) == c.path and len(c.symbols) <= MAX_SYMBOLS


@settings(max_examples=300)
@given(st.text(max_size=2000))
def test_any_text_infers_bounded_citations_inside_the_work_tree(text: str) -> None:
    cited = infer(text)
    assert len(cited) <= MAX_CITATIONS
    for c in cited:
        assert clean_path(c.path) == c.path
        assert c.lines is None or 1 <= c.lines[0] <= c.lines[1]


def test_mcp_recall_and_the_injected_text_carry_each_check() -> None:
    memory = recalled(
        relative="project_retry.md",
        name="retry",
        type="project",
        path="/m/project_retry.md",
        age="today",
        content="The backoff is in src/retry.py:1-2.",
        checks=("backoff is no longer in src/retry.py",),
    )
    row = {**memory.as_dict(), "checks": [*memory.checks, 7]}  # the wire, as a client reads it
    shown = render_recall({"memories": [row], "reason": "lexical", "caveat": ""}, 5)
    assert "checked against the code now: backoff is no longer in src/retry.py" in shown
    injected = render_memory(memory)
    assert "Checked against the code now: backoff is no longer in src/retry.py" in injected
