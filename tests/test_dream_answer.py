"""A one-answer dream's answer is checked whole before anything changes (issue 34): the pure
checks of :mod:`memd.dream.answer` and what :mod:`memd.dream.gather` shows the model,
within its budgets."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.dream import answer, gather, snapshot, transcripts, wipe
from memd.dream.runs import SNAPSHOT
from memd.errors import MalformedAnswer
from memd.llm.client import LLMReply, Usage
from memd.sources.base import DreamScope, any_session


def note(name: str, body: str, kind: str = "project") -> str:
    return f"---\nname: {name}\ndescription: {name} notes\ntype: {kind}\n---\n\n{body}\n"


NOTES = {
    "a.md": note("alpha", "Alpha holds the first fact."),
    "b.md": note("alpha two", "Alpha also holds a second fact."),
    "c.md": note("gamma", "Gamma was seen yesterday."),
    "d.md": note("delta", "Delta."),
    "team/t.md": note("team rule", "Always review with a colleague."),
}
INDEX = "".join(f"- [{n}]({n}) — {n}\n" for n in NOTES)


def shown(**changes: Any) -> answer.Shown:
    whole = {name: text.encode() for name, text in NOTES.items()}
    files = {*NOTES, "MEMORY.md"}
    values: dict[str, Any] = {
        "whole": whole,
        "files": files,
        "index": INDEX.encode(),
        "limits": wipe.Limits(),
    }
    values.update(changes)
    return answer.Shown(**values)


def plan(*ops: dict[str, Any], seen: answer.Shown | None = None) -> answer.Plan:
    return answer.plan(list(ops), seen or shown())


def refused(*ops: dict[str, Any], seen: answer.Shown | None = None) -> str:
    with pytest.raises(MalformedAnswer) as info:
        plan(*ops, seen=seen)
    assert "nothing changed" in str(info.value)
    return str(info.value)


MERGE = {"op": "merge", "files": ["a.md", "b.md"], "text": note("alpha", "Alpha: two facts.")}


def test_a_merge_writes_the_first_deletes_the_rest_and_drops_their_index_lines() -> None:
    made = plan(MERGE, {"op": "edit", "file": "c.md", "old": "yesterday", "new": "on 2026-11-27"})
    assert list(made.writes) == ["a.md", "c.md"] and made.deletes == {"b.md": "a.md"}
    assert b"on 2026-11-27" in made.writes["c.md"]
    assert made.index is not None and b"(b.md)" not in made.index and b"(a.md)" in made.index
    assert [s.op for s in made.steps] == ["merge", "edit", "index"]


def test_nothing_to_change_is_a_plan_with_no_change() -> None:
    made = plan()
    assert made.writes == {} and made.deletes == {} and made.index is None


@pytest.mark.parametrize(
    "name",
    [
        "../outside.md",
        "/etc/passwd",
        "./a.md",
        "a.md/../b.md",
        "A.md",
        "MEMORY.md",
        ".consolidate-lock",
        "big.md",  # shown in part only, or not at all
        "new.md",
        7,
        None,
    ],
)
def test_only_a_note_shown_whole_named_exactly_may_be_changed(name: Any) -> None:
    why = refused({"op": "edit", "file": name, "text": note("x", "x")})
    assert "is not one of the notes shown whole" in why
    refused({**MERGE, "files": ["a.md", name]})
    refused({"op": "delete", "file": name, "merged_into": "a.md"}, MERGE)


def test_team_notes_are_never_deleted_or_merged_into_from_a_personal_note() -> None:
    assert "team memory" in refused({**MERGE, "files": ["a.md", "team/t.md"]})
    assert "team/" in refused({**MERGE, "files": ["team/t.md", "a.md"]})
    refused(MERGE, {"op": "delete", "file": "team/t.md", "merged_into": "a.md"})
    fixed = plan({"op": "edit", "file": "team/t.md", "old": "colleague", "new": "reviewer"})
    assert b"reviewer" in fixed.writes["team/t.md"]


COPY = "team/t.conflict-0a1b2c3d.md"


def with_conflict_copy() -> answer.Shown:
    """:func:`shown` with a team sync's conflict copy of team/t.md (issue 37)."""
    copy = note("team rule", "Always review with two colleagues.").replace(
        "type: project\n", 'type: project\nmetadata:\n  reconcile_with: "team/t.md"\n'
    )
    whole = {name: text.encode() for name, text in NOTES.items()}
    whole[COPY] = copy.encode()
    return shown(whole=whole, files={*whole, "MEMORY.md"})


def test_a_conflict_copy_is_deleted_once_merged_into_the_team_note_it_names() -> None:
    """A team sync keeps both sides of a conflict (issue 37): the copy's reconcile_with names
    its original, and the answer may merge it there, and nowhere else; no other team note."""
    seen = with_conflict_copy()
    text = note("team rule", "Always review with a colleague, two for releases.")
    both = ["team/t.md", COPY]
    made = plan({"op": "merge", "files": both, "text": text}, seen=seen)
    assert made.deletes == {"team/t.conflict-0a1b2c3d.md": "team/t.md"}
    elsewhere = {"op": "merge", "files": ["a.md", both[1]], "text": note("alpha", "x")}
    assert "team memory" in refused(elsewhere, seen=seen)
    other = {"op": "merge", "files": [both[1], "team/t.md"], "text": text}
    assert "never deletes" in refused(other, seen=seen)
    edit = {"op": "edit", "file": "team/t.md", "text": text}
    made = plan(edit, {"op": "delete", "file": both[1], "merged_into": "team/t.md"}, seen=seen)
    assert made.deletes == {"team/t.conflict-0a1b2c3d.md": "team/t.md"}


@pytest.mark.parametrize(
    ("op", "why"),
    [
        ({"op": "edit", "file": "a.md", "text": "no frontmatter"}, "no frontmatter"),
        ({"op": "edit", "file": "a.md", "text": note("a", "x", "secret")}, "no valid type"),
        ({"op": "edit", "file": "a.md", "text": note("a", "x" * 20_000)}, "bytes, over"),
        ({"op": "edit", "file": "a.md", "old": "a", "new": "x"}, "exactly once"),
        ({"op": "edit", "file": "c.md", "old": "Nope", "new": "x"}, "exactly once"),
        ({"op": "edit", "file": "c.md", "text": "x", "old": "a", "new": "b"}, "either text"),
        ({"op": "edit", "file": "a.md", "text": note("a", "\x00")}, "NUL"),
        ({"op": "edit", "file": "a.md", "text": note("a", "\ud800")}, "UTF-8"),
        ({"op": "rename", "file": "a.md"}, "none of merge"),
        ({"op": "merge", "files": ["a.md"], "text": "x"}, "two notes or more"),
        ({"op": "delete", "file": "d.md", "merged_into": "c.md"}, "does not merge into"),
        ({"op": "delete", "file": "d.md", "merged_into": "d.md"}, "merged_into must name"),
        ({"op": "index", "lines": ["- [gone](zzz.md) — x"]}, "points at no note"),
        ({"op": "index", "lines": ["just prose"]}, "no entry"),
        ({"op": "index", "lines": "- [a](a.md)"}, "must be a list"),
    ],
)
def test_an_operation_that_breaks_a_rule_refuses_the_whole_answer(
    op: dict[str, Any], why: str
) -> None:
    assert why in refused(op)


def test_a_note_written_in_place_of_a_long_one_keeps_a_third_of_it() -> None:
    long = {**NOTES, "a.md": note("alpha", "A fact worth keeping. " * 30)}
    seen = shown(whole={k: v.encode() for k, v in long.items()})
    assert "drops most" in refused({**MERGE, "text": note("alpha", "Short.")}, seen=seen)
    assert plan({**MERGE, "text": note("alpha", "A fact worth keeping. " * 12)}, seen=seen)


def test_the_index_stays_within_r_m2s_limits_and_the_wipe_guard_holds() -> None:
    lines = [f"- [a {n}](a.md) — x" for n in range(201)]
    assert "over R-M2's 200 lines" in refused({"op": "index", "lines": lines})
    assert "MEMORY.md is empty" in refused({"op": "index", "lines": []})
    wipe_all = [
        {"op": "edit", "file": "a.md", "old": "first", "new": "only"},
        *({"op": "delete", "file": n, "merged_into": "a.md"} for n in ("b.md", "c.md", "d.md")),
    ]
    assert "3 of 5 topic files deleted" in refused(*wipe_all)


def test_an_answer_cut_short_or_not_json_or_not_that_shape_is_refused() -> None:
    def reply(text: str, stop: str = "end_turn") -> LLMReply:
        return LLMReply("m", "x", [{"type": "text", "text": text}], stop, Usage())

    good = json.dumps({"summary": "s", "operations": [MERGE]})
    assert answer.operations_of(reply(f"ok ```json\n{good}\n```")) == ([MERGE], "s")
    for bad in (reply(good, "max_tokens"), reply(good[:-3]), reply('{"ops": []}')):
        with pytest.raises(MalformedAnswer):
            answer.operations_of(bad)
    with pytest.raises(MalformedAnswer, match="over 40"):
        answer.operations_of(reply(json.dumps({"operations": [{}] * 41})))


NAMES = st.sampled_from([*NOTES, COPY, "MEMORY.md", "big.md", "../x.md", "/tmp/x", "team/new.md"])
TEXTS = st.one_of(st.sampled_from(list(NOTES.values())), st.text(max_size=200))
OPS = st.one_of(
    st.fixed_dictionaries(
        {"op": st.just("merge"), "files": st.lists(NAMES, max_size=4), "text": TEXTS}
    ),
    st.fixed_dictionaries({"op": st.just("edit"), "file": NAMES, "text": TEXTS}),
    st.fixed_dictionaries(
        {
            "op": st.just("edit"),
            "file": NAMES,
            "old": st.text(max_size=10),
            "new": st.text(max_size=10),
        }
    ),
    st.fixed_dictionaries({"op": st.just("delete"), "file": NAMES, "merged_into": NAMES}),
    st.fixed_dictionaries(
        {
            "op": st.just("index"),
            "lines": st.lists(st.builds("- [x]({}) — y".format, NAMES), max_size=6),
        }
    ),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
)


@given(st.lists(OPS, max_size=8))
@settings(max_examples=300, deadline=None)
def test_no_answer_changes_anything_but_the_notes_shown_whole(ops: list[dict[str, Any]]) -> None:
    seen = with_conflict_copy()
    try:
        made = answer.plan(ops, seen)
    except MalformedAnswer:
        return
    assert set(made.writes) | set(made.deletes) <= set(seen.whole)
    team = {name: into for name, into in made.deletes.items() if name.startswith("team/")}
    assert team in ({}, {COPY: "team/t.md"}), team
    for data in made.writes.values():
        assert wipe.frontmatter_problem(data.decode()) is None
    after = wipe.After(
        (seen.files | set(made.writes)) - set(made.deletes),
        made.index or seen.index,
        {k: v.decode() for k, v in made.writes.items()},
    )
    assert wipe.problems(set(seen.files), seen.index, after, seen.limits) == []


# -- what memd gathers --------------------------------------------------------------------------


def test_gather_shows_whole_only_what_fits_and_names_the_rest(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    (memory / "MEMORY.md").write_text("".join(f"- [n{n}](n{n:03}.md) — x\n" for n in range(300)))
    for n in range(300):
        (memory / f"n{n:03}.md").write_text(note(f"note {n}", "x" * 900))
    (memory / "n000.md").write_text(note("huge", "y" * 2_000_000))
    (memory / "n001.md").write_bytes(b"---\nname: \xff\n---\n")
    (memory / "n150.md").write_text(note("long", "z").replace("long notes", "d" * 5_000))
    os.symlink("/etc/passwd", memory / "link.md")
    tree = snapshot.take(memory, tmp_path / "run" / SNAPSHOT)
    found = gather.gather(
        tmp_path / "run",
        tree.files,
        (memory / "MEMORY.md").read_bytes(),
        (),
        (),
        index_max_lines=200,
        index_max_bytes=25_000,
    )
    assert len(found.files) == gather.MAX_LISTED
    assert "link.md" not in found.topics() and "huge" not in found.whole()
    whole = found.whole()
    assert "n000.md" not in whole and "n001.md" not in whole and "n002.md" in whole
    assert sum(len(f.text.encode()) for f in found.files if f.whole is None) < 200 * 700
    assert sum(len(data) for data in whole.values()) <= gather.FILES_MAX_BYTES
    assert found.index.count("\n- [") < 200 and "over its line limit" in found.index
    named = [f for f in found.files if f.named]
    assert "n150.md" in found.topics() and all(len(f.text) <= gather.NAMED_CHARS for f in named)
    smaller = gather.Budget().shrunk(found, actual=10_000, limit=2_000)
    assert smaller.files_bytes <= gather.FILES_MAX_BYTES * 0.16
    cut = gather.gather(
        tmp_path / "run",
        tree.files,
        (memory / "MEMORY.md").read_bytes(),
        (),
        (),
        index_max_lines=200,
        index_max_bytes=25_000,
        budget=smaller,
    )
    assert sum(len(data) for data in cut.whole().values()) <= smaller.files_bytes
    assert sum(len(f.relative) + len(f.text) for f in cut.files if f.named) <= smaller.named_bytes
    assert len(cut.files) < len(found.files)


def test_transcript_excerpts_are_few_short_and_scrubbed(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    secret = "sk-ant-api03-" + "Q" * 80
    line = json.dumps({"content": f"deploy failed; key {secret} " + "z" * 5_000_000}) + "\n"
    (folder / "big.jsonl").write_text(line * 3 + "deploy again\n" * 100)
    found = transcripts.excerpts(
        [DreamScope(folder, any_session)], ["deploy", "missing", "x"], sessions=("big",)
    )
    assert 0 < len(found) <= transcripts.GATHER_PER_TERM
    assert sum(len(x) for x in found) <= transcripts.GATHER_MAX_CHARS
    assert all(len(x) < transcripts.EXCERPT_CHARS + 40 for x in found)
    assert not any("QQQQ" in x for x in found)
    assert (
        transcripts.excerpts([DreamScope(folder, any_session)], ["deploy"], sessions=("other",))
        == []
    )
