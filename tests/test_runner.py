"""The sub-agent runner, through the real SDK over HTTP against the loopback server."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.agent.permissions import EditOnlyFile
from memd.agent.runner import (
    AgentProgress,
    AgentSpec,
    Completed,
    Failed,
    TimedOut,
    TurnLimit,
    run_agent,
    with_cache_breakpoints,
)
from memd.agent.tools import Tool, ToolResult, make_tools
from memd.clock import FakeClock
from memd.errors import Overloaded, WriteFailed
from memd.llm.client import LLM
from memd.llm.ledger import LEDGER_FILE, Ledger
from memd.testing import loopback_replies as replies
from memd.testing.api_rules import count_cache_breakpoints
from memd.testing.loopback import LoopbackAPI
from tests.disk_support import faulty_disk

START = 1_700_000_000.0
SYSTEM = "You keep the notes file of a coding session up to date. " * 40


@dataclass(frozen=True)
class BrokenTool:
    """A tool with a bug: it raises instead of returning a result."""

    name: str = "Read"
    description: str = "Read a file."

    @property
    def input_schema(self) -> dict[str, Any]:
        return {"type": "object", "properties": {"file_path": {"type": "string"}}}

    async def run(self, args: Mapping[str, Any]) -> ToolResult:
        raise RuntimeError("disk on fire")


def edit_only(path: Path) -> dict[str, Tool]:
    return make_tools(EditOnlyFile(path), ["Edit"], cwd=path.parent)


@pytest.fixture
def api() -> Iterator[LoopbackAPI]:
    with LoopbackAPI(min_cache_tokens=256) as server:
        yield server


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    path = tmp_path.resolve() / "summary.md"
    path.write_text("# Current State\n_What is being worked on now._\n\nnothing yet\n")
    return path


def spec_for(tools: Mapping[str, Tool], **overrides: Any) -> AgentSpec:
    values: dict[str, Any] = {
        "kind": "session_notes",
        "model": "claude-sonnet-4-6",
        "system": SYSTEM,
        "tools": tools,
        "max_turns": 6,
        "timeout_s": 30.0,
        "max_tokens": 1024,
        "project": "proj",
        "session": "sess",
    }
    values.update(overrides)
    return AgentSpec(**values)


def conversation() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Fix the failing test in parser.py. " * 60},
        {"role": "assistant", "content": "I fixed the off-by-one in parse_line."},
        {"role": "user", "content": "Update the notes file with what happened."},
    ]


def last_user(body: Any) -> dict[str, Any]:
    message = body["messages"][-1]
    assert message["role"] == "user"
    return dict(message)


def edit(path: Path, old: str, new: str) -> tuple[str, dict[str, Any]]:
    return ("Edit", {"file_path": str(path), "old_string": old, "new_string": new})


@pytest.mark.anyio
async def test_edit_on_the_allowed_file_succeeds(
    api: LoopbackAPI, llm: LLM, notes: Path, tmp_path: Path
) -> None:
    api.push(
        replies.tool_uses([edit(notes, "nothing yet", "parser fixed")], preamble="Updating."),
        replies.text("The notes are up to date."),
    )
    clock = FakeClock(START)
    ledger = Ledger(tmp_path / LEDGER_FILE, clock)
    progress: list[AgentProgress] = []
    with anyio.fail_after(30):
        run = await run_agent(
            llm,
            spec_for(edit_only(notes)),
            conversation(),
            ledger=ledger,
            clock=clock,
            on_progress=progress.append,
        )
    assert run.outcome == Completed()
    assert "parser fixed" in await anyio.Path(notes).read_text()
    assert run.turns == 2
    assert run.files_touched == (str(notes),)
    assert [(c.name, c.allowed, c.is_error) for c in run.tool_calls] == [("Edit", True, False)]
    assert run.final_text == "The notes are up to date."
    assert [p.turns for p in progress] == [1, 2]
    assert progress[0].latest_text == "Updating."
    assert progress[0].files_touched == (str(notes),)
    # every call's usage is in the run and in the ledger, by kind, project and session
    assert run.usage == api.totals().usage
    records = ledger.records()
    assert [(r.kind, r.project, r.session) for r in records] == [
        ("session_notes", "proj", "sess")
    ] * 2
    assert ledger.statistics().total.input == api.totals().input_tokens


@pytest.mark.anyio
async def test_denied_call_comes_back_as_an_error_result_in_the_next_request(
    api: LoopbackAPI, llm: LLM, notes: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "src.py"
    await anyio.Path(outside).write_text("x = 1\n")
    api.push(replies.tool_uses([edit(outside, "x = 1", "x = 2")]), replies.text("Sorry."))
    clock = FakeClock(START)
    with anyio.fail_after(30):
        run = await run_agent(
            llm,
            spec_for(edit_only(notes)),
            conversation(),
            ledger=Ledger(tmp_path / LEDGER_FILE, clock),
            clock=clock,
        )
    assert await anyio.Path(outside).read_text() == "x = 1\n"
    assert run.outcome == Completed()
    assert [(c.name, c.allowed) for c in run.denied_calls] == [("Edit", False)]
    assert run.files_touched == ()
    second = api.requests[1].body
    (result,) = last_user(second)["content"]
    assert result["type"] == "tool_result"
    assert result["is_error"] is True
    assert str(notes) in str(result["content"])
    first_use = api.requests[0].response["content"][0]
    assert result["tool_use_id"] == first_use["id"]


@pytest.mark.anyio
async def test_unknown_tool_and_crashing_tool_become_error_results(
    api: LoopbackAPI, llm: LLM, notes: Path, tmp_path: Path
) -> None:
    api.push(
        replies.tool_uses([("Bash", {"command": "rm -rf /"}), ("Read", {"file_path": "/x"})]),
        replies.text("Giving up."),
    )
    clock = FakeClock(START)
    tools: dict[str, Tool] = {**edit_only(notes), "Read": BrokenTool()}
    with anyio.fail_after(30):
        run = await run_agent(
            llm, spec_for(tools), conversation(), ledger=Ledger(tmp_path / "l", clock), clock=clock
        )
    assert run.outcome == Completed()
    unknown, crashed = last_user(api.requests[1].body)["content"]
    assert unknown["is_error"] and crashed["is_error"]
    assert "Bash" in unknown["content"] and "Edit, Read" in unknown["content"]
    assert "disk on fire" in crashed["content"]
    assert [(c.name, c.allowed, c.is_error) for c in run.tool_calls] == [
        ("Bash", False, True),
        ("Read", True, True),
    ]


@pytest.mark.anyio
async def test_parallel_tool_uses_are_answered_in_order_in_one_message(
    api: LoopbackAPI, llm: LLM, notes: Path, tmp_path: Path
) -> None:
    await anyio.Path(notes).write_text("alpha beta gamma\n")
    calls = [
        edit(notes, "alpha", "ALPHA"),
        edit(tmp_path / "other.md", "a", "b"),
        edit(notes, "gamma", "GAMMA"),
        edit(notes, "missing", "x"),
    ]
    api.push(replies.tool_uses(calls), replies.text("Done."))
    clock = FakeClock(START)
    with anyio.fail_after(30):
        run = await run_agent(
            llm,
            spec_for(edit_only(notes)),
            conversation(),
            ledger=Ledger(tmp_path / "l", clock),
            clock=clock,
        )
    assert await anyio.Path(notes).read_text() == "ALPHA beta GAMMA\n"
    asked = [b["id"] for b in api.requests[0].response["content"] if b["type"] == "tool_use"]
    answered = last_user(api.requests[1].body)["content"]
    assert [r["tool_use_id"] for r in answered] == asked
    assert [bool(r.get("is_error")) for r in answered] == [False, True, False, True]
    assert [c.allowed for c in run.tool_calls] == [True, False, True, True]
    assert run.files_touched == (str(notes),)


@pytest.mark.anyio
async def test_turn_limit_stops_a_model_that_never_finishes(
    api: LoopbackAPI, llm: LLM, notes: Path, tmp_path: Path
) -> None:
    api.add_rule(replies.When(tool="Edit"), replies.tool_use("Edit", {"file_path": "/nope"}))
    clock = FakeClock(START)
    with anyio.fail_after(30):
        run = await run_agent(
            llm,
            spec_for(edit_only(notes), max_turns=3),
            conversation(),
            ledger=Ledger(tmp_path / "l", clock),
            clock=clock,
        )
    assert run.outcome == TurnLimit()
    assert run.turns == 3
    assert len(api.requests) == 3
    assert len(run.tool_calls) == 3  # the last turn's call ran, its result was not sent
    with pytest.raises(Exception, match="3 turns"):
        run.raise_for_outcome()


@pytest.mark.anyio
async def test_overall_timeout_with_a_slow_server(
    api: LoopbackAPI, llm: LLM, notes: Path, tmp_path: Path
) -> None:
    api.push(replies.tool_uses([edit(notes, "nothing yet", "step one")]))
    api.delay_next(1, seconds=0.0)
    api.delay_next(1, seconds=60.0)  # the second call hangs far beyond the run's timeout
    clock = FakeClock(START)
    with anyio.fail_after(20):
        run = await run_agent(
            llm,
            spec_for(edit_only(notes), timeout_s=1.0),
            conversation(),
            ledger=Ledger(tmp_path / "l", clock),
            clock=clock,
        )
    assert run.outcome == TimedOut()
    assert run.turns == 1
    assert run.files_touched == (str(notes),)  # what happened before the timeout is kept


@pytest.mark.anyio
async def test_model_error_ends_the_run_as_failed_with_the_memd_error(
    api: LoopbackAPI, llm: LLM, notes: Path, tmp_path: Path
) -> None:
    api.push(replies.tool_uses([edit(notes, "nothing yet", "half done")]), replies.overloaded())
    clock = FakeClock(START)
    ledger = Ledger(tmp_path / "l", clock)
    with anyio.fail_after(30):
        run = await run_agent(
            llm, spec_for(edit_only(notes)), conversation(), ledger=ledger, clock=clock
        )
    assert isinstance(run.outcome, Failed)
    assert isinstance(run.outcome.error, Overloaded)
    assert run.files_touched == (str(notes),)
    assert len(ledger.records()) == 1  # the failed call billed nothing
    with pytest.raises(Overloaded):
        run.raise_for_outcome()


@pytest.mark.parametrize("kind", ["ENOSPC", "EROFS"])
@pytest.mark.anyio
async def test_a_write_the_disk_refuses_ends_the_run_as_failed_not_as_done(
    api: LoopbackAPI, llm: LLM, tmp_path: Path, kind: str
) -> None:
    """The job fails (and is tried again by its scheduling) rather than being told a file
    it never wrote is up to date; no further turn is spent on a disk no turn can fix."""
    with faulty_disk(tmp_path / "notes", in_process=True) as disk:
        notes = (tmp_path / "notes").resolve() / "summary.md"
        notes.write_text("# Current State\nnothing yet\n")
        api.push(
            replies.tool_uses([edit(notes, "nothing yet", "parser fixed")]),
            replies.text("The notes are up to date."),
        )
        clock = FakeClock(START)
        disk.fault(kind)
        with anyio.fail_after(30):
            run = await run_agent(
                llm,
                spec_for(edit_only(notes)),
                conversation(),
                ledger=Ledger(tmp_path / "l", clock),
                clock=clock,
            )
        assert isinstance(run.outcome, Failed)
        assert isinstance(run.outcome.error, WriteFailed)
        assert str(notes) in str(run.outcome.error)
        assert len(api.requests) == 1
        assert notes.read_text() == "# Current State\nnothing yet\n"
        with pytest.raises(WriteFailed):
            run.raise_for_outcome()
        disk.heal()


class JournalRefused(WriteFailed):
    """A write failure of a job's own kind (as a dream's refused record is)."""


@dataclass(frozen=True)
class RefusingTool(BrokenTool):
    """A tool whose write the disk refused, saying so with an error of its own kind."""

    async def run(self, args: Mapping[str, Any]) -> ToolResult:
        raise JournalRefused("/state/journal.jsonl", OSError(28, "No space left on device"))


@pytest.mark.anyio
async def test_a_write_failure_of_a_kind_of_its_own_ends_the_run_as_it_was_raised(
    api: LoopbackAPI, llm: LLM, tmp_path: Path
) -> None:
    """The run keeps the tool's own kind of write failure (a dream says "the state disk
    refused the record" by it), rather than re-wrapping it as a plain WriteFailed."""
    api.push(replies.tool_uses([("Read", {"file_path": "/x"})]), replies.text("Done."))
    clock = FakeClock(START)
    with anyio.fail_after(30):
        run = await run_agent(
            llm,
            spec_for({"Read": RefusingTool()}),
            conversation(),
            ledger=Ledger(tmp_path / "l", clock),
            clock=clock,
        )
    assert isinstance(run.outcome, Failed)
    assert type(run.outcome.error) is JournalRefused, repr(run.outcome.error)
    assert len(api.requests) == 1


@pytest.mark.anyio
async def test_cache_breakpoints_are_placed_and_the_prefix_is_read_from_cache(
    api: LoopbackAPI, llm: LLM, notes: Path, tmp_path: Path
) -> None:
    await anyio.Path(notes).write_text("one two three\n")
    api.push(
        replies.tool_uses([edit(notes, "one", "1")]),
        replies.tool_uses([edit(notes, "two", "2")]),
        replies.text("Done."),
    )
    messages = conversation()
    messages[0] = {  # a caller's own breakpoint must not push the request over the limit
        "role": "user",
        "content": [{"type": "text", "text": "old " * 400, "cache_control": {"type": "ephemeral"}}],
    }
    before = copy.deepcopy(messages)
    clock = FakeClock(START)
    with anyio.fail_after(30):
        run = await run_agent(
            llm,
            spec_for(edit_only(notes)),
            messages,
            ledger=Ledger(tmp_path / "l", clock),
            clock=clock,
        )
    assert run.outcome == Completed()
    assert messages == before
    bodies = [r.body for r in api.requests]
    assert all(r.status == 200 for r in api.requests)
    for body in bodies:
        assert 2 <= count_cache_breakpoints(body) <= 4
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["messages"][2]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        assert last_user(body)["content"][-1]["cache_control"] == {"type": "ephemeral"}
        assert "cache_control" not in body["messages"][0]["content"][0]
    assert count_cache_breakpoints(bodies[-1]) == 3
    usages = [r.usage for r in api.requests]
    assert usages[0] is not None and usages[0].cache_creation_input_tokens > 0
    assert all(u is not None and u.cache_read_input_tokens > 0 for u in usages[1:])
    assert run.usage.cache_read_input_tokens > 0


_text = st.text(min_size=0, max_size=5)
_block = st.fixed_dictionaries(
    {"type": st.just("text"), "text": _text},
    optional={"cache_control": st.just({"type": "ephemeral"})},
)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]), "content": st.one_of(_text, st.lists(_block))}
)


@given(st.lists(_message, max_size=8), st.integers(0, 9), _text)
def test_breakpoints_never_exceed_the_limit_nor_touch_the_input(
    messages: list[dict[str, Any]], prefix_len: int, system: str
) -> None:
    before = copy.deepcopy(messages)
    blocks, out = with_cache_breakpoints(system, messages, prefix_len)
    assert messages == before
    body = {"system": blocks, "messages": out}
    assert count_cache_breakpoints(body) <= 3
    assert len(out) == len(messages)
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    if users and isinstance(out[users[-1]]["content"], list) and out[users[-1]]["content"]:
        last = out[users[-1]]["content"][-1]
        assert ("cache_control" in last) == bool(last.get("text"))
