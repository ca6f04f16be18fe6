"""What the hook injects (R-I4, R-B5): the budgeting core, and each event shape end to end
over a memory service (no model: the lexical ranker answers recalls)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.clock import FakeClock
from memd.config import Config, HookConfig, MemoryConfig
from memd.llm.client import Disabled
from memd.llm.guard import CostGuard
from memd.llm.ledger import Ledger
from memd.llm.models import models_of
from memd.memory.hook_context import (
    CUT_NOTE,
    NotesFor,
    fit,
    hook_context,
    hook_recall_timeout,
    render_memory,
)
from memd.memory.paths import memory_dir
from memd.memory.service import MemoryService
from memd.sources.hooks import head_lines, utf8_len
from memd.sources.registry import room_named
from memd.state import SessionState
from memd.transcript.conversation import Conversation
from tests.recall_support import recalled

DAY = 86_400.0
BUDGET = 8_192

# ---------------------------------------------------------------------------------------------
# fit (pure)

NO_LINE_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # str.splitlines splits on these
lines = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters=NO_LINE_BREAKS),
    max_size=60,
)
sections = st.lists(st.lists(lines, min_size=1, max_size=12).map("\n".join), max_size=6)


@given(sections, st.integers(min_value=0, max_value=2_000))
def test_fit_never_exceeds_the_budget_and_keeps_priority_order(
    parts: list[str], budget: int
) -> None:
    fitted = fit(parts, budget)
    assert utf8_len(fitted.text) <= budget
    assert list(fitted.included) == list(range(len(fitted.included)))  # a prefix, in order
    whole = "\n\n".join(parts)
    if utf8_len(whole) <= budget:
        assert fitted.text == whole and not fitted.cut
    elif parts and utf8_len(parts[0]) + utf8_len(CUT_NOTE) + 40 <= budget:
        assert fitted.text.startswith(parts[0]) and fitted.cut  # the first section comes first
    if not fitted.included:
        assert fitted.text == ""  # never a note on its own


@given(lines.filter(bool), st.lists(lines, min_size=1, max_size=20), st.integers(0, 400))
def test_a_cut_section_ends_on_one_of_its_line_boundaries(
    first: str, rest: list[str], budget: int
) -> None:
    section = "\n".join([first, *rest])
    head = head_lines(section, budget)
    assert utf8_len(head) <= budget
    kept = head.split("\n") if head else []
    assert kept == section.split("\n")[: len(kept)] or head == section.rstrip("\n")


def test_fit_cuts_the_first_section_that_does_not_fit_and_counts_the_rest() -> None:
    index = "INDEX\n" + "\n".join(f"- [m{n}](m{n}.md) — hook" for n in range(5))
    big = "MEMORY A\n" + "\n".join(f"line {n}" for n in range(200))
    fitted = fit([index, big, "MEMORY B"], 400)
    assert fitted.text.startswith(index + "\n\nMEMORY A\nline 0")
    assert fitted.text.endswith("[memd: cut to fit the 400-byte injection budget; 1 more left out]")
    assert fitted.included == (0, 1) and fitted.cut and utf8_len(fitted.text) <= 400


def test_render_memory_shows_age_warning_and_path() -> None:
    text = render_memory(
        recalled(
            name="Real DB",
            type="feedback",
            age="3 days ago",
            path="/m/feedback.md",
            warning="This memory was last updated 3 days ago.",
            content="Use make test-db.",
            content_truncated=True,
        )
    )
    assert text.splitlines() == [
        "## Real DB (feedback memory, updated 3 days ago) — /m/feedback.md",
        "Note: This memory was last updated 3 days ago.",
        "Use make test-db.",
        "[… the rest is in the file]",
    ]


def test_the_recall_inside_a_hook_fits_the_hooks_own_deadline() -> None:
    assert hook_recall_timeout(Config()) == pytest.approx(1.2)
    slow_hook = replace(Config(), hook=HookConfig(timeout_ms=10_000))
    assert hook_recall_timeout(slow_hook) == 3.0
    assert hook_recall_timeout(replace(Config(), hook=HookConfig(timeout_ms=100))) == 0.2


# ---------------------------------------------------------------------------------------------
# Events over a service


async def injected(
    name: str,
    data: dict[str, Any],
    service: MemoryService,
    *,
    budget_bytes: int,
    env: dict[str, str] | None = None,
    notes_for: NotesFor | None = None,
    agent: str = "claude_code",
) -> dict[str, str | None]:
    """What the hook method injects for the agent's event (its room parses it)."""
    room = room_named(agent)
    assert room is not None
    event = room.hooks.parse(name, data, env)
    text = await hook_context(
        event,
        service,
        notes_for=notes_for,
        budget_bytes=budget_bytes,
        own_index=room.memory_per_session,
    )
    return {"additionalContext": text}


class Fixture:
    def __init__(
        self, tmp: Path, config: Config | None = None, *, claude_auto_memory: bool = False
    ) -> None:
        # Claude Code's user settings (the service's claude dir is the projects root's parent)
        (tmp / "settings.json").write_text(json.dumps({"autoMemoryEnabled": claude_auto_memory}))
        self.clock = FakeClock(start=time.time())
        self.cwd = tmp / "work" / "proj"
        self.cwd.mkdir(parents=True)
        self.memory = memory_dir(tmp / "projects", self.cwd)
        self.memory.mkdir(parents=True)
        ledger = Ledger.load(tmp / "state", self.clock)
        config = config or Config()
        self.turn_ends: list[str] = []
        self.service = MemoryService(
            tmp / "projects",
            tmp / "state",
            config,
            self.clock,
            ledger,
            CostGuard(config.budget, ledger, self.clock),
            lambda: models_of(Disabled("no API key")),
            self.conversation,
        )

    async def conversation(self, state: SessionState) -> Conversation:
        return Conversation()

    def memory_file(self, name: str, title: str, description: str, body: str, days: int) -> None:
        kind = name.split("_")[0]
        path = self.memory / name
        path.write_text(
            f"---\nname: {title}\ndescription: {description}\ntype: {kind}\n---\n\n{body}\n"
        )
        stamp = self.clock.now() - days * DAY - 60
        os.utime(path, (stamp, stamp))

    def event(self, name: str, **fields: Any) -> dict[str, Any]:
        return {"hook_event_name": name, "session_id": "s1", "cwd": str(self.cwd), **fields}


@pytest.mark.anyio
async def test_session_start_injects_the_index_and_on_resume_the_notes(tmp_path: Path) -> None:
    world = Fixture(tmp_path)
    (world.memory / "MEMORY.md").write_text("- [Real DB](feedback_db.md) — never mock Postgres\n")

    async def notes_for(session_id: str) -> str | None:
        return f"# Current State\nworking on {session_id}\n"

    start = await injected(
        "SessionStart",
        world.event("SessionStart", source="startup"),
        world.service,
        notes_for=notes_for,
        budget_bytes=BUDGET,
    )
    text = start["additionalContext"]
    assert text is not None and "- [Real DB](feedback_db.md)" in text and str(world.memory) in text
    assert "working on" not in text
    resumed = await injected(
        "SessionStart",
        world.event("SessionStart", source="compact"),
        world.service,
        notes_for=notes_for,
        budget_bytes=BUDGET,
    )
    both = resumed["additionalContext"]
    assert both is not None and both.index("Real DB") < both.index("working on s1")
    resumed = await injected(
        "SessionStart",
        world.event("SessionStart", source="resume"),
        world.service,
        notes_for=notes_for,
        budget_bytes=BUDGET,
    )
    assert resumed == {"additionalContext": None}  # index and notes are in the conversation
    prompt = world.event("UserPromptSubmit", prompt="zzz unrelated")
    held = await injected(
        "UserPromptSubmit", prompt, world.service, notes_for=notes_for, budget_bytes=BUDGET
    )
    assert held == {"additionalContext": None}
    other = {"session_id": "s2"}
    resumed = await injected(
        "SessionStart",
        {**world.event("SessionStart", source="resume"), **other},
        world.service,
        notes_for=notes_for,
        budget_bytes=BUDGET,
    )
    assert "working on" not in str(resumed["additionalContext"])  # never at SessionStart
    owed = await injected(
        "UserPromptSubmit",
        {**prompt, **other},
        world.service,
        notes_for=notes_for,
        budget_bytes=BUDGET,
    )
    assert owed["additionalContext"] is not None and "working on s2" in owed["additionalContext"]
    again = await injected(
        "UserPromptSubmit",
        {**prompt, **other},
        world.service,
        notes_for=notes_for,
        budget_bytes=BUDGET,
    )
    assert again == {"additionalContext": None}  # the notes once per resume


@pytest.mark.anyio
async def test_auto_memory_directory_moves_the_memory_dir_but_not_from_a_repository(
    tmp_path: Path,
) -> None:
    world = Fixture(tmp_path)
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    (moved / "MEMORY.md").write_text("- [Moved](moved.md) — lives elsewhere\n")
    repo_settings = world.cwd / ".claude" / "settings.json"
    repo_settings.parent.mkdir()
    repo_settings.write_text(json.dumps({"autoMemoryDirectory": str(tmp_path / "evil")}))
    assert (await world.service.locate(str(world.cwd))).memory_dir == world.memory
    (tmp_path / "settings.json").write_text(
        json.dumps({"autoMemoryEnabled": False, "autoMemoryDirectory": str(moved)})
    )
    assert (await world.service.locate(str(world.cwd))).memory_dir == moved
    event = world.event("SessionStart", source="startup")
    text = (await injected("SessionStart", event, world.service, budget_bytes=BUDGET))[
        "additionalContext"
    ]
    assert text is not None and "- [Moved](moved.md)" in text and str(moved) in text


@pytest.mark.anyio
async def test_index_is_cut_to_the_budget_with_a_note(tmp_path: Path) -> None:
    world = Fixture(tmp_path)
    (world.memory / "MEMORY.md").write_text(
        "".join(f"- [Memory {n}](m{n}.md) — hook {n}\n" for n in range(40))
    )
    event = world.event("SessionStart", source="startup")
    cut = (await injected("SessionStart", event, world.service, budget_bytes=600))[
        "additionalContext"
    ]
    assert cut is not None and utf8_len(cut) <= 600 and "Memory 0" in cut
    assert cut.endswith("injection budget]")
    nothing = await injected("SessionStart", event, world.service, budget_bytes=40)
    assert nothing == {"additionalContext": None}


@pytest.mark.anyio
async def test_no_index_when_claude_code_loads_its_own(tmp_path: Path) -> None:
    world = Fixture(tmp_path, claude_auto_memory=True)
    (world.memory / "MEMORY.md").write_text("- [Real DB](feedback_db.md) — never mock Postgres\n")
    event = world.event("SessionStart", source="startup")
    assert await injected("SessionStart", event, world.service, budget_bytes=BUDGET) == {
        "additionalContext": None
    }
    off = {**event, "session_id": "s2"}
    forced_off = await injected(
        "SessionStart",
        off,
        world.service,
        budget_bytes=BUDGET,
        env={"CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1"},
    )
    assert "Real DB" in str(forced_off["additionalContext"])


@pytest.mark.anyio
async def test_the_first_prompt_brings_the_index_when_no_session_start_did(tmp_path: Path) -> None:
    """install-hooks runs no SessionStart hook at a startup (one hook process fewer before
    ``claude -p`` answers): the first prompt's hook brings the index, after the memories it
    recalls (they matter more when the budget is tight), once; after a SessionStart that
    brought it, a prompt does not repeat it; and none when Claude Code loads MEMORY.md
    itself."""
    for auto_memory in (False, True):
        (tmp_path / str(auto_memory)).mkdir()
        world = Fixture(tmp_path / str(auto_memory), claude_auto_memory=auto_memory)
        world.memory_file("feedback_db.md", "Real DB", "Never mock Postgres", "make test-db", 0)
        (world.memory / "MEMORY.md").write_text("- [Real DB](feedback_db.md) — never mock\n")
        event = world.event("UserPromptSubmit", prompt="can I mock postgres here?")
        first = str(
            (await injected("UserPromptSubmit", event, world.service, budget_bytes=BUDGET))[
                "additionalContext"
            ]
        )
        assert ("- [Real DB](feedback_db.md)" in first) is not auto_memory
        assert "make test-db" in first
        if not auto_memory:
            assert first.index("make test-db") < first.index("- [Real DB](feedback_db.md)")
        later = {**event, "prompt": "and postgres again?"}
        again = await injected("UserPromptSubmit", later, world.service, budget_bytes=BUDGET)
        assert again == {"additionalContext": None}
    (tmp_path / "started").mkdir()
    world = Fixture(tmp_path / "started")
    started = {**world.event("SessionStart", source="startup"), "session_id": "s2"}
    (world.memory / "MEMORY.md").write_text("- [Real DB](feedback_db.md) — never mock\n")
    start = await injected("SessionStart", started, world.service, budget_bytes=BUDGET)
    assert "Real DB" in str(start["additionalContext"])
    prompt = {**world.event("UserPromptSubmit", prompt="zzz"), "session_id": "s2"}
    after = await injected("UserPromptSubmit", prompt, world.service, budget_bytes=BUDGET)
    assert after == {"additionalContext": None}


@pytest.mark.anyio
async def test_session_start_without_memories_injects_nothing(tmp_path: Path) -> None:
    world = Fixture(tmp_path)
    result = await injected(
        "SessionStart",
        world.event("SessionStart", source="startup"),
        world.service,
        budget_bytes=BUDGET,
    )
    assert result == {"additionalContext": None}


@pytest.mark.anyio
async def test_prompt_submit_injects_recalled_memories_once_per_session(tmp_path: Path) -> None:
    world = Fixture(tmp_path)
    world.memory_file(
        "feedback_db.md",
        "Real DB in tests",
        "Never mock Postgres in integration tests",
        "Use make test-db.",
        5,
    )
    world.memory_file(
        "project_deploy.md", "Deploy day", "Deploys run on Tuesdays", "Frozen on Fridays.", 0
    )
    event = world.event("UserPromptSubmit", prompt="can I mock postgres in the integration tests?")
    first = await injected("UserPromptSubmit", event, world.service, budget_bytes=BUDGET)
    text = first["additionalContext"]
    assert text is not None and utf8_len(text) <= BUDGET
    assert "Real DB in tests (feedback memory, updated 5 days ago)" in text
    assert "5 days ago" in text and "file:line" in text and "Use make test-db." in text
    assert "stale" in text  # the general caveat
    again = await injected("UserPromptSubmit", event, world.service, budget_bytes=BUDGET)
    assert again == {"additionalContext": None}
    other = await injected(
        "UserPromptSubmit", {**event, "session_id": "s2"}, world.service, budget_bytes=BUDGET
    )
    assert other["additionalContext"] is not None


@pytest.mark.anyio
async def test_prompt_submit_degrades_to_the_best_memory_cut_under_a_small_budget(
    tmp_path: Path,
) -> None:
    world = Fixture(tmp_path)
    long_body = "\n".join(
        f"step {n}: run make test-db before the integration tests" for n in range(80)
    )
    world.memory_file(
        "feedback_db.md",
        "Real DB in tests",
        "Never mock Postgres in integration tests",
        long_body,
        2,
    )
    world.memory_file(
        "feedback_db_reset.md",
        "Reset the test DB",
        "Postgres integration tests need a reset",
        "make db-reset",
        2,
    )
    event = world.event("UserPromptSubmit", prompt="postgres integration tests")
    for budget in (1_400, 2_000, 3_000):
        result = await injected(
            "UserPromptSubmit",
            {**event, "session_id": f"s{budget}"},
            world.service,
            budget_bytes=budget,
        )
        text = result["additionalContext"]
        assert text is not None and utf8_len(text) <= budget
        assert "cut to fit" in text and "step 0:" in text and "step 79:" not in text
    squeezed = await injected(
        "UserPromptSubmit", {**event, "session_id": "tiny"}, world.service, budget_bytes=900
    )
    text = squeezed["additionalContext"]
    assert text is not None and utf8_len(text) <= 900 and "feedback_db.md" in text


@pytest.mark.anyio
async def test_stop_and_session_end_arm_a_turn_end_and_inject_nothing(tmp_path: Path) -> None:
    world = Fixture(tmp_path)
    for name in ("Stop", "SessionEnd"):
        event = world.event(name, transcript_path="/t/-work-proj/s1.jsonl", stop_hook_active=False)
        assert await injected(name, event, world.service, budget_bytes=BUDGET) == {
            "additionalContext": None
        }
        assert world.service.statistics()["quiet_timers"] == 1  # waiting for the transcript


@pytest.mark.anyio
@pytest.mark.parametrize(
    "event,fields",
    [
        ("UserPromptSubmit", {"prompt": "   "}),
        ("UserPromptSubmit", {"prompt": "postgres", "cwd": "relative/dir"}),
        ("SessionStart", {"cwd": None}),
        ("PreCompact", {"trigger": "auto"}),
    ],
)
async def test_other_events_and_bad_input_inject_nothing(
    tmp_path: Path, event: str, fields: dict[str, Any]
) -> None:
    world = Fixture(tmp_path)
    world.memory_file("feedback_db.md", "Real DB", "Never mock Postgres", "x", 0)
    (world.memory / "MEMORY.md").write_text("- [Real DB](feedback_db.md)\n")
    result = await injected(event, world.event(event, **fields), world.service, budget_bytes=BUDGET)
    assert result == {"additionalContext": None}


@pytest.mark.anyio
async def test_memory_off_means_no_injection(tmp_path: Path) -> None:
    config = replace(Config(), memory=MemoryConfig(auto_memory=False))
    world = Fixture(tmp_path, config)
    (world.memory / "MEMORY.md").write_text("- [Real DB](feedback_db.md)\n")
    world.memory_file("feedback_db.md", "Real DB", "Never mock Postgres", "x", 0)
    for event, fields in (
        ("SessionStart", {"source": "startup"}),
        ("UserPromptSubmit", {"prompt": "postgres"}),
    ):
        result = await injected(
            event, world.event(event, **fields), world.service, budget_bytes=BUDGET
        )
        assert result == {"additionalContext": None}


def pinned_file(world: Fixture, name: str, body: str, *, pinned: bool, days: int) -> None:
    path = world.memory / f"{name}.md"
    pin = "\n  pinned: true" if pinned else ""
    path.write_text(
        f"---\nname: {name}\ndescription: about {name}\nmetadata:\n  type: project{pin}\n---\n\n"
        f"{body}\n"
    )
    stamp = world.clock.now() - days * DAY - 60
    os.utime(path, (stamp, stamp))


@pytest.mark.anyio
async def test_pinned_memories_go_ahead_of_recall_at_most_four_once_a_session(
    tmp_path: Path,
) -> None:
    """metadata.pinned (Claude Code 2.1.331): the newest four pinned memories come first in
    the first prompt's context whatever the prompt, each once a session; recall follows."""
    world = Fixture(tmp_path)
    for n in range(5):
        pinned_file(world, f"pin-{n}", f"Pinned fact {n}.", pinned=True, days=n)
    pinned_file(world, "postgres-tests", "Never mock Postgres.", pinned=False, days=0)
    event = world.event("UserPromptSubmit", prompt="can I mock postgres in the tests?")
    first = await injected("UserPromptSubmit", event, world.service, budget_bytes=BUDGET)
    text = first["additionalContext"]
    assert text is not None
    shown = [text.find(f"Pinned fact {n}.") for n in range(5)]
    assert all(at >= 0 for at in shown[:4]) and shown[4] == -1  # at most four, newest first
    assert shown[:4] == sorted(shown[:4]) and text.find("Never mock Postgres.") > shown[3]
    again = await injected("UserPromptSubmit", event, world.service, budget_bytes=BUDGET)
    assert again["additionalContext"] is None or "Pinned fact" not in again["additionalContext"]


@pytest.mark.anyio
async def test_recall_follows_one_link_hop(tmp_path: Path) -> None:
    world = Fixture(tmp_path)
    pinned_file(
        world, "deploy-flow", "Deploys use the canary; see [[metrics-board]].", pinned=False, days=0
    )
    pinned_file(
        world, "metrics-board", "Graphs at grafana; see [[far-away]].", pinned=False, days=3
    )
    pinned_file(world, "far-away", "Two hops away.", pinned=False, days=3)
    result = await world.service.recall("how do deploys go out", str(world.cwd))
    by_file = {m.relative: m for m in result.memories}
    assert "deploy-flow.md" in by_file and by_file["metrics-board.md"].via == "deploy-flow.md"
    assert "far-away.md" not in by_file  # one hop, not two


@pytest.mark.anyio
async def test_a_pin_or_a_link_older_than_the_scan_cap_still_counts(tmp_path: Path) -> None:
    """The scan cap (the newest 200) bounds what a model's manifest shows, not what a pin or
    a ``[[name]]`` means: a memory pinned long ago, and one a recalled memory links to, come
    in behind 210 newer memories."""
    world = Fixture(tmp_path)
    pinned_file(world, "house-rules", "Always run the linter.", pinned=True, days=400)
    pinned_file(world, "metrics-board", "Graphs live at grafana.", pinned=False, days=400)
    for n in range(210):
        pinned_file(world, f"note-{n}", f"Unrelated fact number {n}.", pinned=False, days=2)
    pinned_file(
        world, "deploy-flow", "Deploys use the canary; see [[metrics-board]].", pinned=False, days=0
    )
    event = world.event("UserPromptSubmit", prompt="how do deploys go out")
    first = await injected("UserPromptSubmit", event, world.service, budget_bytes=BUDGET)
    text = first["additionalContext"]
    assert text is not None and "Always run the linter." in text
    assert "Deploys use the canary" in text and "Graphs live at grafana." in text


@pytest.mark.anyio
async def test_a_memory_copied_afresh_keeps_the_age_claude_code_stamped_in_it(
    tmp_path: Path,
) -> None:
    """A clone or a sync gives an old memory a new mtime; its ``modified`` (Claude Code
    2.1.214 on) still says when it was written, so recall dates it and warns from that. A
    ``modified`` later than the file (a hand edit after it) leaves the mtime in charge."""
    world = Fixture(tmp_path)
    now = datetime.fromtimestamp(world.clock.now(), tz=UTC)
    for name, days in (("copied-rule", 90), ("fresh-rule", -30)):
        stamp = (now - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        (world.memory / f"{name}.md").write_text(
            f"---\nname: {name}\ndescription: deploy rule\nmetadata:\n  type: project\n"
            f"  modified: {stamp}\n---\n\nDeploys go through the canary ({name}).\n"
        )
        os.utime(world.memory / f"{name}.md", (world.clock.now() - 60,) * 2)
    result = await world.service.recall("how do deploys go", str(world.cwd))
    by_file = {m.relative: m for m in result.memories}
    assert by_file["copied-rule.md"].age_days == 90 and by_file["copied-rule.md"].warning
    assert by_file["fresh-rule.md"].age_days == 0 and not by_file["fresh-rule.md"].warning


@pytest.mark.anyio
async def test_the_hook_env_moves_the_memory_dir_as_claude_code_does(tmp_path: Path) -> None:
    """CLAUDE_COWORK_MEMORY_PATH_OVERRIDE forwarded by the hook: memd reads (and would write)
    the memories where Claude Code keeps them; a later hook without it moves them back."""
    world = Fixture(tmp_path)
    cowork = tmp_path / "cowork"
    cowork.mkdir()
    (cowork / "MEMORY.md").write_text("- [Shared](shared.md) — in the cowork folder\n")
    env = {"CLAUDE_COWORK_MEMORY_PATH_OVERRIDE": str(cowork)}
    event = world.event("SessionStart", source="startup")
    answer = await injected("SessionStart", event, world.service, budget_bytes=BUDGET, env=env)
    text = answer["additionalContext"]
    assert text is not None and "- [Shared](shared.md)" in text and str(cowork) in text
    assert (await world.service.locate(str(world.cwd))).memory_dir == cowork
    await injected(
        "SessionStart", {**event, "session_id": "s2"}, world.service, budget_bytes=BUDGET, env={}
    )
    assert (await world.service.locate(str(world.cwd))).memory_dir == world.memory


@pytest.mark.anyio
async def test_without_memory_md_the_index_is_assembled_from_each_memory(tmp_path: Path) -> None:
    """The assembled-index mode: no MEMORY.md, so what loads is one entry per memory from
    its name and description, newest first, within the same limits."""
    world = Fixture(tmp_path)
    pinned_file(world, "older", "Old.", pinned=False, days=4)
    pinned_file(world, "newer", "New.", pinned=False, days=1)
    index = await world.service.index(str(world.cwd))
    assert index.assembled and not index.exists
    assert index.text == ("- [newer](newer.md) — about newer\n- [older](older.md) — about older\n")
    event = world.event("SessionStart", source="startup")
    text = (await injected("SessionStart", event, world.service, budget_bytes=BUDGET))[
        "additionalContext"
    ]
    assert text is not None and "- [newer](newer.md) — about newer" in text
