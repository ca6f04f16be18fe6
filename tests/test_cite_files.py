"""Citations recorded in the files an agent's run wrote (issue 26): only the frontmatter
changes, a dream's rewrite is journaled so its undo puts the file back byte for byte, and a
memory whose claims did not change keeps its baseline."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from memd.config import MemoryConfig
from memd.dream import snapshot
from memd.dream.undo import undo
from memd.memory.cite_files import WRITE_ATTEMPTS, Recorded, record_citations
from memd.memory.frontmatter import parse_document
from memd.memory.trust import CitationChecks
from memd_client.render_status import render_status
from tests.dream_support import recorder_for
from tests.uid_support import NOBODY, import_readable, readable_code

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
    assert record_citations(tmp_path, ["project_retry.md", "MEMORY.md"], cite).changed == (
        "project_retry.md",
    )
    text = (tmp_path / "project_retry.md").read_text()
    head, _, tail = MEMORY.partition("---\n\n")
    assert text.startswith(head) and text.endswith("---\n\n" + tail)  # every byte kept
    document = parse_document(text)
    assert dict(document.meta.extra)["citations"] == ROWS and not document.problems
    assert record_citations(tmp_path, ["project_retry.md"], cite).changed == ()  # same claims


def test_a_changed_claim_is_cited_again_and_a_broken_file_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "project_retry.md").write_text(MEMORY)
    record_citations(tmp_path, ["project_retry.md"], cite)
    moved = (tmp_path / "project_retry.md").read_text().replace("py:1-2", "py:3-4")
    (tmp_path / "project_retry.md").write_text(moved)
    assert record_citations(tmp_path, ["project_retry.md"], cite).changed == ("project_retry.md",)
    assert parse_document((tmp_path / "project_retry.md").read_text()).meta.extra
    broken = "---\nname: [unclosed\n---\n\n`backoff()` in src/retry.py\n"
    (tmp_path / "feedback_x.md").write_text(broken)
    assert record_citations(tmp_path, ["feedback_x.md", "gone.md", "../x.md"], cite).changed == ()
    assert (tmp_path / "feedback_x.md").read_text() == broken


def test_a_dreams_citations_are_journaled_and_undone_byte_for_byte(tmp_path: Path) -> None:
    mdir, run = tmp_path / "memory", tmp_path / "run"
    mdir.mkdir()
    run.mkdir()
    (mdir / "project_retry.md").write_text(MEMORY)
    snap = run / "snapshot"
    saved = snapshot.take(mdir, snap, max_bytes=1 << 20)
    cited = record_citations(mdir, ["project_retry.md"], cite, recorder_for(mdir, run, saved.files))
    assert cited.changed == ("project_retry.md",)
    assert "citations:" in (mdir / "project_retry.md").read_text()
    undone = undo(mdir, run, snap)
    assert undone.restored == ("project_retry.md",) and undone.flagged == ()
    assert (mdir / "project_retry.md").read_bytes() == MEMORY.encode()


def test_a_memory_that_cites_nothing_is_left_as_it_is(tmp_path: Path) -> None:
    plain = "---\nname: tone\ndescription: terse\ntype: feedback\n---\n\nBe terse.\n"
    (tmp_path / "feedback_tone.md").write_text(plain)
    assert record_citations(tmp_path, ["feedback_tone.md"], lambda body: []).changed == ()
    assert (tmp_path / "feedback_tone.md").read_text() == plain


def as_nobody(work: Path) -> list[Any]:
    """What recording the memory's citations gives in a child process run as ``nobody``
    (forked: no interpreter to find), and what status then says."""
    readable = readable_code()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns to pytest
        code = 1
        try:
            os.close(read)
            import_readable(readable)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            checks = CitationChecks(work / "state", MemoryConfig)
            cited = checks.record(str(work / "proj"), work / "memory", ["project_retry.md"])
            answer = [list(cited), checks.statistics()["unrecorded"]]
            os.write(write, json.dumps(answer).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    result: list[Any] = json.loads(data)
    return result


def test_citations_the_disk_refuses_are_shown_in_status(tmp_path: Path) -> None:
    """Run as another user (root writes anyway) over a memory dir it cannot write: the file
    is kept as it was, and status names it with why."""
    work = Path(tempfile.mkdtemp(prefix="memd-cite-"))
    try:
        (work / "proj" / "src").mkdir(parents=True)
        (work / "proj" / "src" / "retry.py").write_text("def backoff(n):\n    return n\n")
        (work / "memory").mkdir()
        (work / "memory" / "project_retry.md").write_text(MEMORY)
        (work / "state").mkdir()
        for path in (work, *work.rglob("*")):
            os.chown(path, NOBODY, NOBODY)
        (work / "memory").chmod(0o555)
        cited, unrecorded = as_nobody(work)
        assert cited == [] and (work / "memory" / "project_retry.md").read_text() == MEMORY
        assert [(r["file"], r["reason"]) for r in unrecorded] == [
            (f"{work}/memory/project_retry.md", "Permission denied")
        ]
        shown = render_status({"memory": {"citations": {"unrecorded": unrecorded}}})
        assert "1 memory files' citations could not be written" in shown
        assert f"{work}/memory/project_retry.md: Permission denied" in shown
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_a_write_by_another_program_while_citing_is_never_overwritten(tmp_path: Path) -> None:
    """Claude Code edits the memory (in place, the same size: a stat could miss it) while
    memd makes its citations: memd's rewrite of what it read would lose that edit, so it
    reads the file again and records the citations in what Claude Code wrote."""
    path = tmp_path / "project_retry.md"
    path.write_text(MEMORY)
    theirs = MEMORY.replace("The backoff", "Our backoff")
    edits = [theirs]

    def cite_while_they_write(body: str) -> list[dict[str, Any]]:
        if edits:
            with open(path, "r+", encoding="utf-8") as file:  # the same inode and size
                file.write(edits.pop())
        return cite(body)

    done = record_citations(tmp_path, ["project_retry.md"], cite_while_they_write)
    assert done.changed == ("project_retry.md",)
    text = path.read_text()
    assert "Our backoff is `backoff()`" in text
    assert dict(parse_document(text).meta.extra)["citations"] == ROWS


def test_a_file_that_keeps_changing_is_left_as_its_writer_left_it(tmp_path: Path) -> None:
    path = tmp_path / "project_retry.md"
    path.write_text(MEMORY)
    writes = [0]

    def cite_while_they_keep_writing(body: str) -> list[dict[str, Any]]:
        writes[0] += 1
        path.write_text(MEMORY.replace("src/retry.py:1-2", f"src/retry.py:{writes[0]}"))
        return cite(body)

    done = record_citations(tmp_path, ["project_retry.md"], cite_while_they_keep_writing)
    assert done == Recorded((), ())
    assert path.read_text() == MEMORY.replace("src/retry.py:1-2", f"src/retry.py:{writes[0]}")
    assert writes[0] == WRITE_ATTEMPTS
    assert not [p.name for p in tmp_path.iterdir() if p.name != "project_retry.md"]  # no temp
