"""The memory service: index, manifest and recall for clients, and background extraction on
turn ends (transcript counter, Stop hook, quiet timer) through the real SDK against the
loopback Messages-API server."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio
import anyio.abc
import pytest

from memd.clock import FakeClock
from memd.config import Config, MemoryConfig, PrivacyConfig
from memd.errors import NotFound
from memd.llm.backends import CLAUDE
from memd.llm.client import LLM, Disabled
from memd.llm.guard import CostGuard
from memd.llm.ledger import Ledger
from memd.llm.models import models_of
from memd.memory.cursors import CursorStore
from memd.memory.paths import memory_dir
from memd.memory.service import MemoryService
from memd.memory.turns import STOP_WAIT_S
from memd.state import SessionState
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_replies import When
from memd.transcript.conversation import Conversation
from tests.session_support import TranscriptBuilder

EXTRACT_MODEL = CLAUDE["memory_extract"]
TOPIC = (
    "---\nname: Real database in integration tests\n"
    "description: Never mock Postgres in integration tests\ntype: feedback\n"
    "---\n\nUse make test-db.\n"
)


def scripted_extractor(api: LoopbackAPI) -> None:
    api.add_rule(
        When(model=EXTRACT_MODEL, turn="first"),
        replies.tool_use("Write", {"file_path": "feedback_testing.md", "content": TOPIC}),
    )
    api.add_rule(When(model=EXTRACT_MODEL, turn="after_tool"), replies.text("Saved."))


@dataclass
class World:
    """A project folder, its transcripts in memory, and a service over them."""

    tmp: Path
    llm: LLM | Disabled | None
    clock: FakeClock = field(default_factory=FakeClock)
    # Claude Code's own auto memory is on by default: memd extracts beside it in these tests.
    config: Config = field(
        default_factory=lambda: Config(
            memory=MemoryConfig(extract_beside_claude_code=True, beside_wait_s=0)
        )
    )
    builders: dict[str, TranscriptBuilder] = field(default_factory=dict)
    states: dict[str, SessionState] = field(default_factory=dict)
    conversations_read: int = 0

    def __post_init__(self) -> None:
        self.cwd = self.tmp / "work" / "proj"
        self.cwd.mkdir(parents=True, exist_ok=True)
        self.memory = memory_dir(self.tmp / "projects", self.cwd)
        self.ledger = Ledger.load(self.tmp / "state", self.clock)
        self.guard = CostGuard(self.config.budget, self.ledger, self.clock)
        self.service = self.new_service()

    def new_service(self) -> MemoryService:
        return MemoryService(
            self.tmp / "projects",
            self.tmp / "state",
            self.config,
            self.clock,
            self.ledger,
            self.guard,
            lambda: models_of(self.llm),
            self.conversation,
            session_of=self.states.get,
        )

    async def conversation(self, state: SessionState) -> Conversation:
        self.conversations_read += 1
        builder = self.builders.get(state.session_id)
        if builder is None:
            raise NotFound(f"no transcript for {state.session_id}")
        return builder.conversation()

    def session(self, session_id: str = "s1") -> TranscriptBuilder:
        return self.builders.setdefault(session_id, TranscriptBuilder(session_id=session_id))

    def state(self, session_id: str = "s1", *, turn_ends: int = 0) -> SessionState:
        builder = self.builders[session_id]
        state = SessionState(
            session_id,
            "-work-proj",
            f"/transcripts/{session_id}.jsonl",
            cwd=str(self.cwd),
            mtime=self.clock.now(),
            turn_ends=turn_ends,
            last_uuid=builder.lines[-1]["uuid"],
        )
        self.states[session_id] = state
        return state

    def cursor(self, session_id: str = "s1") -> tuple[str | None, bool]:
        record = CursorStore.load(self.tmp / "state").get(session_id)
        assert record is not None
        return record.cursor, record.pending


def feedback_turn(builder: TranscriptBuilder) -> None:
    builder.user("Please never mock the database in integration tests.")
    builder.assistant("Understood, I will use the real test database.")


async def start(tg: anyio.abc.TaskGroup, service: MemoryService) -> None:
    await tg.start(service.run)


async def settle(service: MemoryService) -> None:
    with anyio.fail_after(30):
        await service.wait_idle()


@pytest.mark.anyio
async def test_a_turn_end_extracts_once_and_moves_the_cursor(
    api: LoopbackAPI, llm: LLM, tmp_path: Path
) -> None:
    scripted_extractor(api)
    world = World(tmp_path, llm)
    feedback_turn(world.session())
    async with anyio.create_task_group() as tg:
        await start(tg, world.service)
        assert await world.service.on_turn_end(world.state())
        await settle(world.service)
        assert (world.memory / "feedback_testing.md").read_text() == TOPIC
        assert "feedback_testing.md" in (world.memory / "MEMORY.md").read_text()
        assert world.cursor() == (world.builders["s1"].lines[-1]["uuid"], False)
        assert len(api.requests) == 2
        assert await world.service.on_turn_end(world.state())  # nothing new: no model call
        await settle(world.service)
        assert len(api.requests) == 2
        stats = world.service.statistics()
        assert stats["enabled"] and stats["runs"] == {"extracted": 1, "skipped": 1}
        row = stats["projects"][str(world.memory)]
        assert row["last_run"]["outcome"] == "skipped" and row["pending_sessions"] == []
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_turn_where_the_agent_wrote_memories_itself_is_not_extracted(
    api: LoopbackAPI, llm: LLM, tmp_path: Path
) -> None:
    world = World(tmp_path, llm)
    builder = world.session()
    builder.user("Remember that deploys happen on Tuesdays.")
    _, ids = builder.assistant(
        "", (("Write", {"file_path": str(world.memory / "project_deploy.md"), "content": "x"}),)
    )
    builder.results(ids)
    builder.assistant("Saved to memory.")
    async with anyio.create_task_group() as tg:
        await start(tg, world.service)
        await world.service.on_turn_end(world.state())
        await settle(world.service)
        tg.cancel_scope.cancel()
    assert api.requests == [] and world.cursor() == (builder.lines[-1]["uuid"], False)
    assert (
        "wrote" in world.service.statistics()["projects"][str(world.memory)]["last_run"]["detail"]
    )


@pytest.mark.anyio
async def test_an_opted_out_project_gets_no_index_recall_or_extraction(
    api: LoopbackAPI, llm: LLM, tmp_path: Path
) -> None:
    world = World(tmp_path, llm)
    world.memory.mkdir(parents=True)
    (world.memory / "MEMORY.md").write_text("- [Secret project](user_x.md) — hush\n")
    (world.memory / "user_x.md").write_text("---\nname: x\ndescription: hush\ntype: user\n---\n")
    (world.cwd / ".memd-ignore").write_text("")
    feedback_turn(world.session())
    service = world.service
    index = await service.index(str(world.cwd))
    assert index.opted_out and index.text == ""
    recalled = await service.recall("hush", str(world.cwd), "s1")
    assert recalled.memories == () and "off" in recalled.result.reason
    assert (await service.memories(cwd=str(world.cwd)))["memories"] == []
    assert not await service.on_turn_end(world.state())
    assert service.statistics()["queued"] == 0 and api.requests == []
    (world.cwd / ".memd-ignore").unlink()
    world.config = replace(
        Config(), privacy=PrivacyConfig(ignore_projects=(f"{world.tmp}/work/*",))
    )
    globbed = world.new_service()
    assert (await globbed.index(str(world.cwd))).opted_out
    assert not await globbed.on_turn_end(world.state())


@pytest.mark.anyio
async def test_pending_work_survives_a_restart(api: LoopbackAPI, llm: LLM, tmp_path: Path) -> None:
    scripted_extractor(api)
    world = World(tmp_path, None)  # the model client is still loading
    feedback_turn(world.session())
    async with anyio.create_task_group() as tg:
        await start(tg, world.service)
        await world.service.on_turn_end(world.state())
        await settle(world.service)
        assert world.service.statistics()["pending_sessions"] == 1
        tg.cancel_scope.cancel()
    assert world.cursor() == (None, True)
    world.llm = llm
    restarted = world.new_service()
    async with anyio.create_task_group() as tg:
        await start(tg, restarted)
        await settle(restarted)
        tg.cancel_scope.cancel()
    assert (world.memory / "feedback_testing.md").exists()
    assert world.cursor() == (world.builders["s1"].lines[-1]["uuid"], False)


@pytest.mark.anyio
async def test_llm_changed_runs_what_waited_for_the_model(
    api: LoopbackAPI, llm: LLM, tmp_path: Path
) -> None:
    scripted_extractor(api)
    world = World(tmp_path, None)
    feedback_turn(world.session())
    async with anyio.create_task_group() as tg:
        await start(tg, world.service)
        await world.service.on_turn_end(world.state())
        await settle(world.service)
        world.llm = llm
        world.service.llm_changed()
        await settle(world.service)
        tg.cancel_scope.cancel()
    assert (world.memory / "feedback_testing.md").exists()


@pytest.mark.anyio
async def test_a_failed_extraction_is_retried_after_the_backoff(
    api: LoopbackAPI, llm: LLM, tmp_path: Path
) -> None:
    scripted_extractor(api)
    api.fail_next(1, status=529)
    world = World(tmp_path, llm)
    feedback_turn(world.session())
    async with anyio.create_task_group() as tg:
        await start(tg, world.service)
        await world.service.on_turn_end(world.state())
        with anyio.fail_after(30):
            await world.clock.wait_for_sleepers(1)  # the guard backs off
        stats = world.service.statistics()
        assert stats["runs"] == {"failed": 1} and "Overloaded" in stats["last_error"]["message"]
        assert world.cursor() == (None, True)
        world.clock.advance_to_next()
        await settle(world.service)
        tg.cancel_scope.cancel()
    assert (world.memory / "feedback_testing.md").exists()
    assert world.cursor() == (world.builders["s1"].lines[-1]["uuid"], False)


@pytest.mark.anyio
async def test_turn_ends_come_from_the_counter_and_from_a_quiet_pause(
    api: LoopbackAPI, llm: LLM, tmp_path: Path
) -> None:
    scripted_extractor(api)
    world = World(tmp_path, llm)
    builder = world.session()
    builder.user("Run the tests please.")
    builder.assistant("", (("Bash", {"command": "pytest"}),))
    async with anyio.create_task_group() as tg:
        await start(tg, world.service)
        world.service.notify_growth(world.state())  # ends with a tool call: no pause
        with anyio.fail_after(30):
            await world.clock.wait_for_sleepers(1)
        world.clock.advance(world.config.memory.extraction_quiet_s)
        await anyio.wait_all_tasks_blocked()
        assert world.service.statistics()["pending_sessions"] == 0 and api.requests == []
        feedback_turn(builder)
        world.service.notify_growth(world.state())  # an answer without tools, then quiet
        with anyio.fail_after(30):
            await world.clock.wait_for_sleepers(1)
        world.clock.advance(world.config.memory.extraction_quiet_s)
        await anyio.to_thread.run_sync(api.wait_requests, 2)
        await settle(world.service)
        assert (world.memory / "feedback_testing.md").exists()
        builder.user("Also: commits use the imperative mood.")
        builder.assistant("Noted.")
        world.service.notify_growth(world.state(turn_ends=1))  # the counter grew: at once
        await anyio.to_thread.run_sync(api.wait_requests, 4)
        await settle(world.service)
        tg.cancel_scope.cancel()
    assert world.service.statistics()["runs"] == {"extracted": 2}


ANSWER = "Understood, I will use the real test database."


@pytest.mark.anyio
async def test_a_stop_before_its_transcript_exists_waits_for_it_then_queues(
    tmp_path: Path,
) -> None:
    """Print mode: the Stop hook fires ~50 ms before the transcript file is created."""
    world = World(tmp_path, Disabled("no API key"))
    transcript = tmp_path / "-work-proj" / "s1.jsonl"
    async with anyio.create_task_group() as tg:
        await start(tg, world.service)
        assert world.service.on_stop("s1", str(transcript), str(world.cwd), ANSWER)
        await anyio.wait_all_tasks_blocked()
        stats = world.service.statistics()
        assert stats["queued"] == 0 and stats["last_error"] is None
        transcript.parent.mkdir()
        transcript.write_text("{}\n")
        feedback_turn(world.session())
        world.service.notify_growth(replace(world.state(), path=str(transcript)))
        with anyio.fail_after(10):
            while not world.service.statistics()["pending_sessions"]:
                await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    stats = world.service.statistics()
    assert stats["disabled_reason"] == "disabled: no API key" and stats["last_error"] is None
    # Another agent's Stop for a session not read yet is kept for its first growth (Codex's
    # Stop comes before memd reads its rollout); with no session at all there is nothing.
    assert world.service.on_stop("unknown", "", str(world.cwd))
    assert not world.service.on_stop("", "", str(world.cwd))


@pytest.mark.anyio
async def test_a_stop_whose_transcript_never_appears_is_dropped_without_an_error(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, Disabled("no API key"))
    transcript = tmp_path / "-work-proj" / "never.jsonl"
    async with anyio.create_task_group() as tg:
        await start(tg, world.service)
        assert world.service.on_stop("never", str(transcript), str(world.cwd), ANSWER)
        await anyio.wait_all_tasks_blocked()
        world.clock.advance(STOP_WAIT_S)
        await anyio.wait_all_tasks_blocked()
        assert world.service.statistics()["quiet_timers"] == 0
        tg.cancel_scope.cancel()
    stats = world.service.statistics()
    assert stats["queued"] == 0 and stats["last_error"] is None


@pytest.mark.anyio
async def test_beside_claude_codes_own_auto_memory_a_turn_waits_for_it(tmp_path: Path) -> None:
    """The defaults, Claude Code's auto memory on: the turn waits for that memory (judged on
    the memory dir: tests/test_beside_wait.py) instead of being queued; its auto memory off:
    queued at once; ``extract_beside_claude_code: false``: left to Claude Code."""
    world = World(tmp_path / "on", Disabled("no API key"), config=Config())
    waits = world.service.waits
    feedback_turn(world.session())
    assert await world.service.on_turn_end(world.state())
    assert waits.waiting == 1 and world.cursor() == (None, True)  # a restart takes it up
    (tmp_path / "on" / "settings.json").write_text(json.dumps({"autoMemoryEnabled": False}))
    feedback_turn(world.session("s2"))
    assert await world.service.on_turn_end(world.state("s2"))
    assert waits.waiting == 1 and world.cursor("s2") == (None, True)  # queued, not waiting
    off = Config(memory=MemoryConfig(extract_beside_claude_code=False))
    apart = World(tmp_path / "off", Disabled("no API key"), config=off)
    feedback_turn(apart.session())
    assert not await apart.service.on_turn_end(apart.state())


@pytest.mark.anyio
async def test_index_is_cut_with_a_notice_and_memories_lists_rows(tmp_path: Path) -> None:
    world = World(tmp_path, Disabled("no API key"))
    world.memory.mkdir(parents=True)
    lines = "".join(f"- [Memory {n}](m{n}.md) — hook {n}\n" for n in range(250))
    (world.memory / "MEMORY.md").write_text(lines)
    (world.memory / "feedback_testing.md").write_text(TOPIC)
    index = await world.service.index(str(world.cwd))
    assert index.truncated and index.cut == "lines" and index.total_lines == 250
    assert "- [Memory 199]" in index.text and "- [Memory 200]" not in index.text
    assert "over its line limit" in index.text
    rows = (await world.service.memories(project=world.memory.parent.name))["memories"]
    assert [(r["relative"], r["type"], r["age"]) for r in rows] == [
        ("feedback_testing.md", "feedback", "today")
    ]
    by_path = await world.service.memories(project=str(world.memory.parent))
    assert by_path["memories"] == rows
    assert (await world.service.memories(cwd=str(world.cwd)))["memories"] == rows
    json.dumps(index.as_dict()), json.dumps(rows)
    with pytest.raises(ValueError):
        await world.service.index("relative/path")


@pytest.mark.anyio
@pytest.mark.parametrize("project", ["..", ".", "proj/.."])
async def test_a_project_name_that_is_no_folder_of_its_own_is_refused(
    tmp_path: Path, project: str
) -> None:
    """``..`` named the memory dir beside the projects root (``~/.claude/memory``), outside
    every project; the manifest refuses it as dream does."""
    world = World(tmp_path, Disabled("no API key"))
    outside = world.service.projects_root.parent / "memory"
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "feedback_testing.md").write_text(TOPIC)
    with pytest.raises(ValueError, match="not a project"):
        await world.service.memories(project=project)


@pytest.mark.anyio
async def test_recall_leaves_out_what_the_session_was_shown(tmp_path: Path) -> None:
    world = World(tmp_path, Disabled("no API key"))
    world.memory.mkdir(parents=True)
    (world.memory / "feedback_testing.md").write_text(TOPIC)
    first = await world.service.recall("mock postgres in integration tests?", str(world.cwd), "s1")
    assert first.result.method == "lexical" and len(first.memories) == 1
    world.service.mark_surfaced("s1", [first.memories[0].path])
    again = await world.service.recall("mock postgres in integration tests?", str(world.cwd), "s1")
    other = await world.service.recall("mock postgres in integration tests?", str(world.cwd), "s2")
    assert again.memories == () and len(other.memories) == 1
    assert world.service.statistics()["recalls"] == {"lexical": 2, "none": 1}


@pytest.mark.anyio
async def test_recent_tools_come_from_the_sessions_last_answers(tmp_path: Path) -> None:
    world = World(tmp_path, None, config=replace(Config(), memory=MemoryConfig(auto_memory=True)))
    builder = world.session()
    builder.user("check the PR")
    _, ids = builder.assistant("", (("mcp__github__get_pr", {"n": 1}), ("Bash", {"command": "ls"})))
    builder.results(ids)
    builder.assistant("Done.")
    world.state()
    assert await world.service.recent_tools("s1") == ["mcp__github__get_pr", "Bash"]
    assert await world.service.recent_tools("nobody") == []


@pytest.mark.anyio
async def test_status_says_which_recall_stages_are_on(tmp_path: Path) -> None:
    """Issue 27: the lexical ranker over every memory, the model only with a key."""
    world = World(tmp_path, Disabled("no API key"))
    world.memory.mkdir(parents=True)
    (world.memory / "feedback_testing.md").write_text(TOPIC)
    await world.service.recall("mock postgres in integration tests?", str(world.cwd), "s1")
    stages = world.service.statistics()["recall_stages"]
    related = stages["lexical"].pop("related")  # read by this recall: its terms counted
    assert related["read"] and related["terms"] > 5_000 and related["off_reason"] is None
    assert stages["lexical"] == {"on": True, "indexed_dirs": 1, "indexed_memories": 1}
    assert stages["model"]["on"] is False and "no API key" in stages["model"]["off_reason"]
    assert stages["semantic"]["on"] is False
    json.dumps(stages)
