"""Notes files, budgets and reminders (R-S1, R-S5, R-S10), prompts (R-S4) and the persisted
extraction records."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.config import SessionNotesConfig
from memd.confined import Refused
from memd.session.notes import (
    analyze_budget,
    budget_reminder,
    ensure_notes,
    notes_path,
    read_notes,
    write_notes,
)
from memd.session.prompts import DEFAULT_PROMPT, load_prompt, prompt_path, render_prompt
from memd.session.store import RECORDS_DIR, ExtractionRecord, ExtractionStore
from memd.session.template import DEFAULT_TEMPLATE
from memd.tokens import estimate_text

CONFIG = SessionNotesConfig()


def with_body(section: str, body: str, notes: str = DEFAULT_TEMPLATE) -> str:
    header = f"# {section}\n"
    start = notes.index(header)
    line_end = notes.index("\n", start + len(header)) + 1
    return notes[:line_end] + body + "\n" + notes[line_end:]


def test_the_notes_live_beside_the_transcript(tmp_path: Path) -> None:
    path = notes_path(tmp_path, "-work-project", "abc-123")
    assert path == tmp_path / "-work-project" / "abc-123" / "session-memory" / "summary.md"
    assert read_notes(path) is None
    text, created = ensure_notes(path, DEFAULT_TEMPLATE)
    assert created and text == DEFAULT_TEMPLATE == path.read_text()
    assert path.stat().st_mode & 0o777 == 0o600
    write_notes(path, text + "more\n")
    assert ensure_notes(path, DEFAULT_TEMPLATE) == (text + "more\n", False)
    leftovers = [p.name for p in path.parent.iterdir() if p.name != "summary.md"]
    assert leftovers == []  # atomic writes leave no temp files


def test_within_budget_there_is_no_reminder() -> None:
    notes = with_body("Current State", "Fixing the parser. " * 20)
    budget = analyze_budget(notes, DEFAULT_TEMPLATE, CONFIG, estimate_text)
    assert [s.name for s in budget.sections][:2] == ["Session Title", "Current State"]
    assert budget.oversize == () and not budget.over_total
    assert budget_reminder(budget) == ""


def test_oversize_sections_are_named_in_the_reminder() -> None:
    notes = with_body("Worklog", "step done " * 1_500)
    notes = with_body("Learnings", "lesson learned " * 1_200, notes)
    budget = analyze_budget(notes, DEFAULT_TEMPLATE, CONFIG, estimate_text)
    assert {s.name for s in budget.oversize} == {"Worklog", "Learnings"}
    reminder = budget_reminder(budget)
    assert '"Worklog"' in reminder and '"Learnings"' in reminder
    assert '"Current State"' not in reminder and "URGENT" not in reminder


def test_over_the_total_the_reminder_demands_a_hard_cut_keeping_two_sections() -> None:
    notes = DEFAULT_TEMPLATE
    for section in ("Worklog", "Learnings", "Key results", "Workflow", "Current State"):
        notes = with_body(section, "detail " * 2_600, notes)
    budget = analyze_budget(notes, DEFAULT_TEMPLATE, CONFIG, estimate_text)
    assert budget.over_total
    reminder = budget_reminder(budget)
    assert "URGENT" in reminder and "12000-token limit" in reminder
    assert 'Keep "Current State" and "Errors & Corrections" complete' in reminder


@given(
    st.dictionaries(
        st.sampled_from(["Worklog", "Learnings", "Workflow", "Key results"]),
        st.integers(0, 4_000),
    )
)
def test_the_reminder_names_exactly_the_sections_over_their_budget(sizes: dict[str, int]) -> None:
    notes = DEFAULT_TEMPLATE
    for section, words in sizes.items():
        notes = with_body(section, "word " * words, notes)
    config = SessionNotesConfig(total_tokens=10**9)
    budget = analyze_budget(notes, DEFAULT_TEMPLATE, config, estimate_text)
    reminder = budget_reminder(budget)
    for size in budget.sections:
        assert (f'"{size.name}"' in reminder) == (size.tokens > config.section_tokens)


def test_the_prompt_fills_its_placeholders_once(tmp_path: Path) -> None:
    notes = "# Current State\n_x_\nThe literal text {{notesPath}} stays as written.\n"
    rendered = render_prompt(DEFAULT_PROMPT, notes=notes, notes_path="/n/summary.md", reminder="!R")
    assert rendered.endswith("!R")
    assert notes in rendered and "{{currentNotes}}" not in rendered
    assert rendered.count("/n/summary.md") == DEFAULT_PROMPT.count("{{notesPath}}")
    path = prompt_path(tmp_path)
    assert path == tmp_path / "session-memory" / "config" / "prompt.md"
    assert load_prompt(path) == DEFAULT_PROMPT
    path.parent.mkdir(parents=True)
    path.write_text("   \n")
    assert load_prompt(path) == DEFAULT_PROMPT
    path.write_text("Mine: {{notesPath}} / {{currentNotes}}")
    assert render_prompt(load_prompt(path), notes="N", notes_path="P") == "Mine: P / N"


def test_records_survive_a_restart(tmp_path: Path) -> None:
    store = ExtractionStore.load(tmp_path)
    record = ExtractionRecord(
        "abc-123",
        "-work-project",
        last_summarized_id="u-9",
        covered_id="u-10",
        tokens_at_extraction=24_000,
        extracted_at=1_700_000_000.5,
        extractions=2,
        last_cost_tokens=9_000,
        total_cost_tokens=20_000,
        pending=True,
        pending_since=1_700_000_100.0,
    )
    store.put_sync(record)
    again = ExtractionStore.load(tmp_path)
    assert again.get("abc-123") == record
    assert again.pending() == (record,)
    names = os.listdir(tmp_path / RECORDS_DIR)
    assert names == ["abc-123.json"]


def test_an_unreadable_record_is_moved_aside(tmp_path: Path) -> None:
    directory = tmp_path / RECORDS_DIR
    directory.mkdir()
    (directory / "bad.json").write_text("{not json")
    (directory / "wrong.json").write_text(json.dumps({"version": 1, "session_id": 3}))
    good = ExtractionRecord("good", "p", extractions=1)
    (directory / "good.json").write_text(json.dumps(good.to_json()))
    hostile = {"extracted_at": "1e400", "tokens_at_extraction": "NaN", "extractions": 2**64}
    for name, value in hostile.items():  # numbers json reads that no status can show
        text = json.dumps({**good.to_json(), "session_id": name, name: 1})
        (directory / f"{name}.json").write_text(text.replace(f'"{name}": 1', f'"{name}": {value}'))
    store = ExtractionStore.load(tmp_path)
    assert store.records() == (good,)
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        ["bad.json.corrupt", "good.json", "wrong.json.corrupt"]
        + [f"{name}.json.corrupt" for name in hostile]
    )


@pytest.mark.parametrize(
    "session_id",
    ["../escape", "..", "session-2026-11-26T06-48-\udcff", "café", "a b", "x" * 300, "\ud800"],
)
def test_any_session_id_gets_a_record_inside_the_records_folder(
    tmp_path: Path, session_id: str
) -> None:
    """A session id is the name an agent gave its file (any bytes): the record of one that is
    no plain short name is named by its hash, inside the folder, and read back whole."""
    store = ExtractionStore.load(tmp_path)
    record = ExtractionRecord(session_id, "p", extractions=2)
    store.put_sync(record)
    (name,) = os.listdir(tmp_path / RECORDS_DIR)
    assert name.startswith("_") and name.endswith(".json") and len(name) < 80
    assert ExtractionStore.load(tmp_path).records() == (record,)
    store.put_sync(ExtractionRecord("plain-id", "p"))
    assert sorted(os.listdir(tmp_path / RECORDS_DIR)) == [name, "plain-id.json"]


def test_notes_behind_a_link_are_neither_read_nor_written(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "summary.md").write_text("CANARY\n")
    path = notes_path(tmp_path, "-work-project", "abc-123")
    path.parent.parent.mkdir(parents=True)
    path.parent.symlink_to(outside)  # session-memory -> somewhere else
    assert read_notes(path) is None
    with pytest.raises(Refused, match="a symbolic link"):
        ensure_notes(path, DEFAULT_TEMPLATE)
    assert (outside / "summary.md").read_text() == "CANARY\n"
    assert sorted(p.name for p in outside.iterdir()) == ["summary.md"]
    path.parent.unlink()
    path.parent.mkdir()
    os.link(outside / "summary.md", path)
    assert read_notes(path) is None
    with pytest.raises(Refused, match="2 hard links"):
        write_notes(path, "mine\n")
    assert (outside / "summary.md").read_text() == "CANARY\n"
