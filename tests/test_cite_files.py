"""Citations recorded in the files an agent's run wrote (issue 26): only the frontmatter
changes, a dream's rewrite is journaled so its undo puts the file back byte for byte, and a
memory whose claims did not change keeps its baseline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memd.dream import journal, snapshot
from memd.dream.journal import Journal
from memd.memory.cite_files import record_citations
from memd.memory.frontmatter import parse_document

MEMORY = (
    "---\n# a comment the writer left\nname: retry\ndescription: 'where: retries'\n"
    "type: project\n---\n\nThe backoff is `backoff()` in src/retry.py:1-2.\n"
)
ROWS = [{"path": "src/retry.py", "lines": "1-2", "commit": "ab" * 20, "hash": "cd" * 8}]


def cite(body: str) -> list[dict[str, Any]]:
    assert "backoff" in body
    return ROWS


def test_only_the_frontmatter_gains_the_citations(tmp_path: Path) -> None:
    (tmp_path / "project_retry.md").write_text(MEMORY)
    assert record_citations(tmp_path, ["project_retry.md", "MEMORY.md"], cite) == (
        "project_retry.md",
    )
    text = (tmp_path / "project_retry.md").read_text()
    head, _, tail = MEMORY.partition("---\n\n")
    assert text.startswith(head) and text.endswith("---\n\n" + tail)  # every byte kept
    document = parse_document(text)
    assert dict(document.meta.extra)["citations"] == ROWS and not document.problems
    assert record_citations(tmp_path, ["project_retry.md"], cite) == ()  # the same claims


def test_a_changed_claim_is_cited_again_and_a_broken_file_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "project_retry.md").write_text(MEMORY)
    record_citations(tmp_path, ["project_retry.md"], cite)
    moved = (tmp_path / "project_retry.md").read_text().replace("py:1-2", "py:3-4")
    (tmp_path / "project_retry.md").write_text(moved)
    assert record_citations(tmp_path, ["project_retry.md"], cite) == ("project_retry.md",)
    assert parse_document((tmp_path / "project_retry.md").read_text()).meta.extra
    broken = "---\nname: [unclosed\n---\n\n`backoff()` in src/retry.py\n"
    (tmp_path / "feedback_x.md").write_text(broken)
    assert record_citations(tmp_path, ["feedback_x.md", "gone.md", "../x.md"], cite) == ()
    assert (tmp_path / "feedback_x.md").read_text() == broken


def test_a_dreams_citations_are_journaled_and_undone_byte_for_byte(tmp_path: Path) -> None:
    mdir, run = tmp_path / "memory", tmp_path / "run"
    mdir.mkdir()
    run.mkdir()
    (mdir / "project_retry.md").write_text(MEMORY)
    snap = run / "snapshot"
    snapshot.take(mdir, snap, max_bytes=1 << 20)
    book = Journal(run)
    cited = record_citations(mdir, ["project_retry.md"], cite, book.intent)
    for relative in cited:
        data = snapshot.memory_bytes(mdir, relative)
        assert data is not None
        book.done(relative, snapshot.sha256(data))
    assert "citations:" in (mdir / "project_retry.md").read_text()
    undone = journal.undo(mdir, run, snap)
    assert undone.restored == ("project_retry.md",) and undone.flagged == ()
    assert (mdir / "project_retry.md").read_bytes() == MEMORY.encode()


def test_a_memory_that_cites_nothing_is_left_as_it_is(tmp_path: Path) -> None:
    plain = "---\nname: tone\ndescription: terse\ntype: feedback\n---\n\nBe terse.\n"
    (tmp_path / "feedback_tone.md").write_text(plain)
    assert record_citations(tmp_path, ["feedback_tone.md"], lambda body: []) == ()
    assert (tmp_path / "feedback_tone.md").read_text() == plain
