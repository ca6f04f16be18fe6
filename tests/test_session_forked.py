"""A forked session starts with the notes it was made from (issue 38): its record points at
its own messages, its growth baseline keeps the notes agent off until it has grown past its
thresholds since the fork, and the hook sees the notes in its summary. The real CLI runs it
in tests/test_claude_code_fork.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

from memd.compaction.prompts import NOTES_PREAMBLE
from memd.config import SessionNotesConfig
from memd.memory.session_context import scan_transcript
from memd.session import forked, notes
from memd.session.store import RECORDS_DIR, ExtractionRecord, ExtractionStore
from memd.session.triggers import TriggerInput, decide, rebase
from memd.sources.base import Fork

PROJECT = "-home-u-proj"


def a_fork(renamed: dict[str, str]) -> Fork:
    return Fork("f-1", b"", 0, 0, renamed, "summary-uuid")


def seeded(tmp_path: Path, old: ExtractionRecord | None, fork: Fork) -> ExtractionRecord:
    store = ExtractionStore(tmp_path / "state" / RECORDS_DIR)
    if old is not None:
        store.put_sync(old)
    forked.seed(
        store,
        tmp_path / "projects",
        source_id="s-1",
        project=PROJECT,
        fork=fork,
        notes_text="# Current State\nhalf done\n",
        tokens=150_000,
    )
    record = ExtractionStore.load(tmp_path / "state").get("f-1")  # on disk
    assert record is not None
    return record


def test_the_record_points_at_the_forks_own_messages(tmp_path: Path) -> None:
    old = ExtractionRecord("s-1", PROJECT, last_summarized_id="a3", covered_id="a5")
    record = seeded(tmp_path, old, a_fork({"a3": "n3", "a4": "n4", "a5": "n5"}))
    assert (record.last_summarized_id, record.covered_id) == ("n3", "n5")
    assert record.tokens_at_extraction == 150_000 and not record.pending
    path = notes.notes_path(tmp_path / "projects", PROJECT, "f-1")
    assert notes.read_notes(path) == "# Current State\nhalf done\n"
    # The notes cover every kept message, or none: the summary stands for what they cover.
    dropped = seeded(tmp_path, old, a_fork({"a9": "n9"}))
    assert (dropped.last_summarized_id, dropped.covered_id) == ("summary-uuid", "summary-uuid")
    unrecorded = seeded(tmp_path, None, a_fork({"a3": "n3"}))
    assert unrecorded.last_summarized_id == "summary-uuid"


def test_no_notes_run_until_the_fork_grows_past_its_thresholds(tmp_path: Path) -> None:
    """The fork's figure (the old session's last answer) cannot pass the baseline; once the
    resumed session answers (30K), growth counts from there."""
    config = SessionNotesConfig()
    record = seeded(tmp_path, None, a_fork({}))
    baseline = record.tokens_at_extraction
    for context, last_turn_tools, runs in (
        (150_000, False, False),  # the fork as written
        (30_000, False, False),  # the first resumed answer
        (30_000 + config.update_tokens - 1, False, False),
        (30_000 + config.update_tokens, False, True),
    ):
        baseline = rebase(baseline, context)
        snapshot = TriggerInput(context, baseline, 0, last_turn_tools)
        assert decide(snapshot, config).__class__.__name__ == ("Go" if runs else "Skip"), context


def test_a_fork_that_was_not_written_takes_its_notes_back(tmp_path: Path) -> None:
    store = ExtractionStore(tmp_path / "state" / RECORDS_DIR)
    projects = tmp_path / "projects"
    (projects / PROJECT).mkdir(parents=True)
    (projects / PROJECT / "other.jsonl").write_text("{}\n")
    forked.seed(
        store,
        projects,
        source_id="s-1",
        project=PROJECT,
        fork=a_fork({}),
        notes_text="x",
        tokens=1,
    )
    forked.unseed(store, projects, PROJECT, "f-1")
    assert store.get("f-1") is None and not store.path_for("f-1").exists()
    assert sorted(os.listdir(projects / PROJECT)) == ["other.jsonl"]


def line(**fields: object) -> str:
    return json.dumps(fields, separators=(",", ":"))


def test_the_hook_sees_the_notes_in_memds_fork_summary_only(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    notes_message = NOTES_PREAMBLE + "\n\n<session-notes>\nhalf done\n</session-notes>"
    theirs = line(type="user", isCompactSummary=True, message={"content": "A summary."})
    path.write_text(theirs + "\n")
    found = scan_transcript(str(path), 0, 0)
    assert found is not None and not found.notes_delivered  # Claude Code's own summary
    ours = line(type="user", isCompactSummary=True, message={"content": notes_message})
    with path.open("a") as f:
        f.write(ours + "\n")
    again = scan_transcript(str(path), found.ino, found.offset)
    assert again is not None and again.notes_delivered
