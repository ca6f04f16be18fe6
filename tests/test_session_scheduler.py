"""The notes scheduler: triggers, one run per session, coalescing, the global limit, waiting,
manual runs, the cost guard, and redoing interrupted runs after a restart."""

from __future__ import annotations

import random
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from memd.clock import FakeClock
from memd.config_llm import BudgetConfig
from memd.errors import LLMDisabled, NotFound
from memd.llm.client import LLM, Disabled, Usage
from memd.llm.guard import CostGuard
from memd.llm.ledger import Ledger
from memd.llm.models import models_of
from memd.session.runs import SessionSource
from memd.session.scheduler import NotesScheduler, run_notes_scheduler
from memd.session.store import ExtractionRecord, ExtractionStore
from memd.state import SessionState
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_replies import Reply
from memd.transcript.conversation import Conversation
from tests.session_support import (
    FakeSessions,
    TranscriptBuilder,
    edit_current_state,
    scripted_agent,
    settings_for,
    work_session,
)

T = TypeVar("T")


class NoJitter(random.Random):
    def random(self) -> float:
        return 0.0


@pytest.fixture
def api() -> Iterator[LoopbackAPI]:
    with LoopbackAPI() as server:
        server.set_handler(scripted_agent(edit_current_state("Working on the parser.")))
        yield server


@dataclass
class Env:
    tmp: Path
    clock: FakeClock
    ledger: Ledger
    guard: CostGuard
    sessions: FakeSessions
    store: ExtractionStore

    def scheduler(
        self,
        llm: LLM | Disabled | None,
        *,
        source: SessionSource | None = None,
        get_llm: Callable[[], LLM | Disabled | None] | None = None,
        **config: Any,
    ) -> NotesScheduler:
        return NotesScheduler(
            settings_for(self.tmp, **config),
            lambda: models_of((get_llm or (lambda: llm))()),
            store=self.store,
            source=self.sessions if source is None else source,
            guard=self.guard,
            ledger=self.ledger,
            clock=self.clock,
            started_at=0.0,
        )


@pytest.fixture
def env(tmp_path: Path) -> Env:
    clock = FakeClock()
    ledger = Ledger.load(tmp_path / "state", clock)
    budget = BudgetConfig(backoff_initial_s=30.0, backoff_max_s=600.0)
    guard = CostGuard(budget, ledger, clock, rng=NoJitter())
    return Env(
        tmp_path,
        clock,
        ledger,
        guard,
        FakeSessions(),
        ExtractionStore.load(tmp_path / "state"),
    )


@asynccontextmanager
async def running(scheduler: NotesScheduler) -> AsyncIterator[None]:
    async with anyio.create_task_group() as tg:
        await tg.start(run_notes_scheduler, scheduler)
        try:
            yield
        finally:  # a failed assertion must not leave a worker asleep on the fake clock
            tg.cancel_scope.cancel()


def grow(builder: TranscriptBuilder, *, to: int, tool_calls: int = 0) -> None:
    """Another turn; the context reaches ``to`` tokens."""
    builder.user("Next, the tokenizer.")
    if tool_calls:
        _, ids = builder.assistant(
            "Reading.", tuple(("Read", {"file_path": f"/f{k}"}) for k in range(tool_calls))
        )
        builder.results(ids)
    builder.assistant("Done with that.", prompt_tokens=to)


@pytest.mark.anyio
async def test_without_a_model_nothing_runs_and_status_says_why(env: Env) -> None:
    scheduler = env.scheduler(Disabled("no API key: set ANTHROPIC_API_KEY"))
    builder = TranscriptBuilder()
    work_session(builder, turns=3, context=50_000)
    async with running(scheduler):
        scheduler.notify_growth(env.sessions.publish(builder))
        await scheduler.wait_idle()
        with pytest.raises(LLMDisabled):
            await scheduler.extract(builder.session_id)
    stats = scheduler.statistics([builder.session_id])
    assert not stats.enabled and stats.reason == "disabled: no API key: set ANTHROPIC_API_KEY"
    assert stats.sessions[0].extractions == 0
    assert env.store.get(builder.session_id) is None


@pytest.mark.anyio
async def test_growth_seen_while_the_model_client_loads_is_checked_when_it_is_ready(
    env: Env, llm: LLM, api: LoopbackAPI
) -> None:
    model: list[LLM | Disabled | None] = [None]  # the SDK is still loading
    scheduler = env.scheduler(None, get_llm=lambda: model[0])
    builder = TranscriptBuilder()
    work_session(builder, turns=3, context=50_000)
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_notes_scheduler, scheduler)
        scheduler.notify_growth(env.sessions.publish(builder))  # past the threshold, early
        reason = scheduler.disabled_reason
        assert reason is not None and reason.startswith("starting")
        await anyio.wait_all_tasks_blocked()
        assert env.store.get(builder.session_id) is None and api.requests == []
        model[0] = llm
        scheduler.llm_changed()  # ready: no further growth is needed
        with anyio.fail_after(20):
            while env.store.get(builder.session_id) is None:
                await anyio.wait_all_tasks_blocked()
            await scheduler.wait_idle()
        tg.cancel_scope.cancel()
    record = env.store.get(builder.session_id)
    assert record is not None and record.extractions == 1


@pytest.mark.anyio
async def test_a_model_that_comes_after_a_reload_runs_notes(
    env: Env, llm: LLM, api: LoopbackAPI
) -> None:
    """Started without a key, then a key and a reload: status said the model was on and no
    notes run ever started (the run task had gone to sleep for good)."""
    model: list[LLM | Disabled | None] = [Disabled("no API key")]
    scheduler = env.scheduler(None, get_llm=lambda: model[0])
    builder = TranscriptBuilder()
    work_session(builder, turns=3, context=50_000)
    async with running(scheduler):
        scheduler.notify_growth(env.sessions.publish(builder))
        await scheduler.wait_idle()
        assert api.requests == [] and scheduler.statistics().reason.startswith("disabled")
        model[0] = llm
        scheduler.llm_changed()
        await anyio.wait_all_tasks_blocked()
        assert scheduler.statistics().enabled
        grow(builder, to=60_000, tool_calls=3)
        scheduler.notify_growth(env.sessions.publish(builder))
        with anyio.fail_after(20):
            await scheduler.wait_idle()
    record = env.store.get(builder.session_id)
    assert record is not None and record.extractions == 1 and len(api.requests) > 0


@pytest.mark.anyio
async def test_notes_start_at_the_init_threshold_and_update_after_enough_growth(
    env: Env, llm: LLM, api: LoopbackAPI
) -> None:
    scheduler = env.scheduler(llm)
    builder = TranscriptBuilder()
    work_session(builder, turns=2, context=9_000)
    async with running(scheduler):
        scheduler.notify_growth(env.sessions.publish(builder))
        await scheduler.wait_idle()
        assert api.requests == []  # below 10,000 tokens

        grow(builder, to=12_000)
        scheduler.notify_growth(env.sessions.publish(builder))
        await scheduler.wait_idle()
        record = env.store.get(builder.session_id)
        assert record is not None and record.extractions == 1
        assert record.tokens_at_extraction == 12_050
        assert record.last_summarized_id == builder.lines[-1]["uuid"]
        assert not record.pending
        first_run = len(api.requests)

        grow(builder, to=16_000)  # +4,000: not enough
        scheduler.notify_growth(env.sessions.publish(builder))
        await scheduler.wait_idle()
        assert len(api.requests) == first_run

        grow(builder, to=17_500, tool_calls=1)  # +5,450, and the last turn called no tool
        scheduler.notify_growth(env.sessions.publish(builder))
        await scheduler.wait_idle()
    record = env.store.get(builder.session_id)
    assert record is not None and record.extractions == 2
    assert len(api.requests) > first_run
    status = scheduler.status(builder.session_id)
    assert status is not None and status.next_trigger_tokens == 17_550 + 5_000
    # the second run sent only what was new since the first (the delta strategy)
    second = replies.message_text(api.requests[first_run].body["messages"][0])
    assert "Next, the tokenizer." in second and "Step 0:" not in second


@pytest.mark.anyio
async def test_an_update_waits_while_the_model_is_mid_tool_use(
    env: Env, llm: LLM, api: LoopbackAPI
) -> None:
    scheduler = env.scheduler(llm)
    builder = TranscriptBuilder()
    work_session(builder, turns=2, context=12_000)
    async with running(scheduler):
        scheduler.notify_growth(env.sessions.publish(builder))
        await scheduler.wait_idle()
        done = len(api.requests)
        builder.user("Now run everything.")
        _, ids = builder.assistant(
            "Running.", (("Bash", {"command": "make"}),), prompt_tokens=20_000
        )
        scheduler.notify_growth(env.sessions.publish(builder))
        await scheduler.wait_idle()
        assert len(api.requests) == done  # grown, but 1 tool call and still calling tools
        builder.results(ids)
        _, ids = builder.assistant(
            "More.", (("Bash", {"command": "a"}), ("Bash", {"command": "b"})), prompt_tokens=20_500
        )
        scheduler.notify_growth(env.sessions.publish(builder))
        await scheduler.wait_idle()
    assert len(api.requests) > done  # 3 tool calls since the last extraction


@pytest.mark.anyio
async def test_triggers_during_a_run_coalesce_into_one_follow_up(
    env: Env, llm: LLM, api: LoopbackAPI
) -> None:
    scheduler = env.scheduler(llm)
    builder = TranscriptBuilder()
    work_session(builder, turns=2, context=12_000)
    in_flight = 0
    most = 0
    lock = threading.Lock()
    agent = scripted_agent(edit_current_state("Working."))

    def handler(body: dict[str, Any]) -> Reply | None:
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        try:
            return agent(body)
        finally:
            with lock:
                in_flight -= 1

    api.set_handler(handler)
    api.hold()
    async with running(scheduler):
        scheduler.notify_growth(env.sessions.publish(builder))
        await anyio.to_thread.run_sync(api.wait_held, 1)
        for k in range(5):
            grow(builder, to=20_000 + k * 1_000, tool_calls=3)
            scheduler.notify_growth(env.sessions.publish(builder))
        status = scheduler.status(builder.session_id)
        assert status is not None and status.phase == "running" and status.follow_up
        api.release()
        await scheduler.wait_idle()
    record = env.store.get(builder.session_id)
    assert record is not None and record.extractions == 2  # the run and one follow-up
    assert record.tokens_at_extraction == 24_050
    assert most == 1


@pytest.mark.anyio
async def test_sessions_run_concurrently_up_to_the_global_limit(
    env: Env, llm: LLM, api: LoopbackAPI
) -> None:
    scheduler = env.scheduler(llm, max_concurrent=2)
    builders = [TranscriptBuilder(session_id=f"sess-{k}") for k in range(3)]
    api.hold()
    async with running(scheduler):
        for builder in builders:
            work_session(builder, turns=2, context=12_000)
            scheduler.notify_growth(env.sessions.publish(builder))
        await anyio.to_thread.run_sync(api.wait_held, 2)
        await anyio.wait_all_tasks_blocked()
        stats = scheduler.statistics([b.session_id for b in builders])
        assert (stats.running, stats.queued) == (2, 1)
        api.release()
        await scheduler.wait_idle()
    for builder in builders:
        record = env.store.get(builder.session_id)
        assert record is not None and record.extractions == 1


@pytest.mark.anyio
async def test_wait_extraction_waits_at_most_15_s_and_never_for_a_stale_run(
    env: Env, llm: LLM, api: LoopbackAPI
) -> None:
    scheduler = env.scheduler(llm)
    builder = TranscriptBuilder()
    work_session(builder, turns=2, context=12_000)
    assert await scheduler.wait_extraction(builder.session_id) == "idle"
    api.hold()
    async with running(scheduler):
        scheduler.notify_growth(env.sessions.publish(builder))
        await anyio.to_thread.run_sync(api.wait_held, 1)

        results: list[str] = []

        async def waiter() -> None:
            results.append(await scheduler.wait_extraction(builder.session_id))

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await env.clock.wait_for_sleepers()
            env.clock.advance(15.0)
        assert results == ["timeout"]

        env.clock.advance(50.0)  # the run is now 65 s old
        with anyio.fail_after(5):
            assert await scheduler.wait_extraction(builder.session_id) == "stale"

        api.release()
        await scheduler.wait_idle()
        assert await scheduler.wait_extraction(builder.session_id) == "idle"


@pytest.mark.anyio
async def test_wait_extraction_returns_when_the_run_ends(
    env: Env, llm: LLM, api: LoopbackAPI
) -> None:
    scheduler = env.scheduler(llm)
    builder = TranscriptBuilder()
    work_session(builder, turns=2, context=12_000)
    api.hold()
    async with running(scheduler):
        scheduler.notify_growth(env.sessions.publish(builder))
        await anyio.to_thread.run_sync(api.wait_held, 1)
        results: list[str] = []

        async def waiter() -> None:
            results.append(await scheduler.wait_extraction(builder.session_id))

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await env.clock.wait_for_sleepers()
            api.release()
        assert results == ["finished"]
    record = env.store.get(builder.session_id)
    assert record is not None and record.extractions == 1


@pytest.mark.anyio
async def test_a_manual_extraction_ignores_the_thresholds(
    env: Env, llm: LLM, api: LoopbackAPI
) -> None:
    scheduler = env.scheduler(llm)
    builder = TranscriptBuilder()
    work_session(builder, turns=1, context=2_000)
    env.sessions.publish(builder)
    async with running(scheduler):
        with pytest.raises(NotFound):
            await scheduler.extract("no-such-session")
        status = await scheduler.extract(builder.session_id, wait_s=30.0)
    assert status.extractions == 1 and status.phase == "idle" and status.last_error is None
    view = await scheduler.read_notes(builder.session_id)
    assert view.text is not None and "Working on the parser." in view.text and not view.empty


class GatedSessions(FakeSessions):
    """Sessions whose next read, once armed, waits for the gate (a slow or locked read)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: anyio.Event | None = None
        self.waiting = anyio.Event()

    async def read(self, state: SessionState, fn: Callable[[Conversation], T]) -> T:
        if (gate := self.gate) is not None:
            self.gate = None
            self.waiting.set()
            await gate.wait()
        return await super().read(state, fn)


@pytest.mark.anyio
async def test_a_manual_extraction_asked_while_the_worker_checks_a_trigger_runs(
    env: Env, llm: LLM, api: LoopbackAPI
) -> None:
    """``extract`` landed while the session's worker was deciding whether its follow-up was
    due (reading the figures): the worker said "not due" and ended, the forced run with it,
    and ``extract`` returned at once with no run. On a busy machine that is the test's
    reload-then-extract (tests/test_cli_backends_e2e.py, the hang fault): no call, no
    failure to see."""
    sessions = GatedSessions()
    scheduler = env.scheduler(llm, source=sessions)
    builder = TranscriptBuilder()
    work_session(builder, turns=2, context=12_000)
    api.hold()
    async with running(scheduler):
        scheduler.notify_growth(sessions.publish(builder))
        await anyio.to_thread.run_sync(api.wait_held, 1)
        grow(builder, to=12_500)  # a follow-up, below the update threshold
        scheduler.notify_growth(sessions.publish(builder))
        gate = sessions.gate = anyio.Event()
        api.release()
        await sessions.waiting.wait()  # the worker reads the figures for its follow-up
        asked: list[int] = []

        async def forced() -> None:
            asked.append((await scheduler.extract(builder.session_id, wait_s=30.0)).extractions)

        async with anyio.create_task_group() as tg:
            tg.start_soon(forced)
            await anyio.wait_all_tasks_blocked()
            gate.set()
        await scheduler.wait_idle()
    assert asked == [2]  # the forced run ran, and extract waited for it
    record = env.store.get(builder.session_id)
    assert record is not None and record.tokens_at_extraction == 12_550


@pytest.mark.anyio
async def test_a_worker_that_fails_outside_its_run_says_so_in_the_status(
    env: Env, llm: LLM, api: LoopbackAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure no run handles (here the record's write itself) was only logged: the
    status said nothing, so ``memdctl extract`` reported success with no notes."""
    scheduler = env.scheduler(llm)
    builder = TranscriptBuilder()
    work_session(builder, turns=1, context=2_000)
    env.sessions.publish(builder)

    async def broken(record: ExtractionRecord) -> None:
        raise RuntimeError("the disk went away")

    monkeypatch.setattr(env.store, "put", broken)
    async with running(scheduler):
        status = await scheduler.extract(builder.session_id, wait_s=30.0)
    assert status.extractions == 0 and status.last_error_at is not None
    assert status.last_error == "RuntimeError: the disk went away"
    assert scheduler.statistics([builder.session_id]).failures == 1


@pytest.mark.anyio
async def test_an_overloaded_api_is_retried_after_the_backoff(
    env: Env, llm: LLM, api: LoopbackAPI
) -> None:
    scheduler = env.scheduler(llm)
    builder = TranscriptBuilder()
    work_session(builder, turns=2, context=12_000)
    api.fail_next(1, status=529)
    async with running(scheduler):
        scheduler.notify_growth(env.sessions.publish(builder))
        await env.clock.wait_for_sleepers()  # the guard holds the retry back
        record = env.store.get(builder.session_id)
        assert record is not None and record.last_error is not None
        assert "Overloaded" in record.last_error
        assert record.pending  # the owed run survives a restart while it waits
        status = scheduler.status(builder.session_id)
        assert status is not None and status.phase == "waiting"
        assert status.waiting_reason is not None and "backing off" in status.waiting_reason
        env.clock.advance(30.0)
        await scheduler.wait_idle()
    record = env.store.get(builder.session_id)
    assert record is not None and record.extractions == 1 and record.last_error is None


@pytest.mark.anyio
async def test_a_refused_request_is_parked_with_backoff_however_the_session_grows(
    env: Env, llm: LLM, api: LoopbackAPI
) -> None:
    scheduler = env.scheduler(llm)
    builder = TranscriptBuilder()
    work_session(builder, turns=2, context=12_000)
    api.fail_next(1, status=400, message="bad request")
    async with running(scheduler):
        scheduler.notify_growth(env.sessions.publish(builder))
        await env.clock.wait_for_sleepers()  # parked: the worker sleeps through the back-off
        for k in range(10):  # every append is new input; none of it unparks the job
            grow(builder, to=13_000 + 6_000 * k)
            scheduler.notify_growth(env.sessions.publish(builder))
            await anyio.wait_all_tasks_blocked()
        assert len(api.requests) == 1
        record = env.store.get(builder.session_id)
        assert record is not None and record.last_error is not None
        assert record.last_error.startswith("BadRequest") and record.pending
        status = scheduler.status(builder.session_id)
        assert status is not None and status.phase == "waiting"
        assert status.waiting_reason is not None
        assert status.waiting_reason.startswith("parked: BadRequest")
        assert "next attempt after" in status.waiting_reason
        env.clock.advance(30.0)
        await scheduler.wait_idle()
    record = env.store.get(builder.session_id)
    assert record is not None and record.extractions == 1 and record.last_error is None


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("message", "most"),
    [
        ("prompt is too long", 0.85),  # no figures: a fifth goes
        ("prompt is too long: 9000 tokens > 8800 maximum", 0.95),  # the gap, and a margin
    ],
)
async def test_after_a_prompt_too_long_the_next_attempt_sends_less(
    env: Env, llm: LLM, api: LoopbackAPI, message: str, most: float
) -> None:
    scheduler = env.scheduler(llm)
    builder = TranscriptBuilder()
    work_session(builder, turns=20, context=12_000)
    api.fail_next(1, status=400, message=message)
    async with running(scheduler):
        scheduler.notify_growth(env.sessions.publish(builder))
        await env.clock.wait_for_sleepers()  # parked, sleeping through its back-off
        assert len(api.requests) == 1
        env.clock.advance(30.0)
        await scheduler.wait_idle()
    failed, *rest = [r for r in api.requests if r.body is not None]
    assert failed.status == 400 and rest and all(r.status == 200 for r in rest)
    first_try = _conversation_chars(failed.body)
    assert _conversation_chars(rest[0].body) < first_try * most
    record = env.store.get(builder.session_id)
    assert record is not None and record.extractions == 1 and record.last_error is None
    assert record.covered_id == builder.parent  # nothing was skipped


def _conversation_chars(body: Any) -> int:
    first = body["messages"][0]["content"][0]
    return len(first["text"]) if isinstance(first, dict) else 0


@pytest.mark.anyio
async def test_a_run_killed_mid_way_is_redone_after_a_restart(
    env: Env, llm: LLM, api: LoopbackAPI
) -> None:
    scheduler = env.scheduler(llm)
    builder = TranscriptBuilder()
    work_session(builder, turns=2, context=12_000)
    api.hold()
    async with running(scheduler):
        scheduler.notify_growth(env.sessions.publish(builder))
        await anyio.to_thread.run_sync(api.wait_held, 1)
    # cancelled mid-run, as by kill -9: the mark stays on disk
    reloaded = ExtractionStore.load(env.tmp / "state")
    record = reloaded.get(builder.session_id)
    assert record is not None and record.pending and record.extractions == 0
    api.release()
    env.store = reloaded
    restarted = env.scheduler(llm)
    async with running(restarted):
        await restarted.wait_idle()
    record = ExtractionStore.load(env.tmp / "state").get(builder.session_id)
    assert record is not None and not record.pending and record.extractions == 1


@pytest.mark.anyio
async def test_growth_counts_again_from_a_compacted_context(
    env: Env, llm: LLM, api: LoopbackAPI
) -> None:
    env.store.put_sync(
        ExtractionRecord("sess-1", "proj", tokens_at_extraction=150_000, extractions=3)
    )
    scheduler = env.scheduler(llm)
    builder = TranscriptBuilder()
    work_session(builder, turns=2, context=30_000)  # after a compaction
    async with running(scheduler):
        scheduler.notify_growth(env.sessions.publish(builder))
        await scheduler.wait_idle()
        assert api.requests == []
        grow(builder, to=36_000)
        scheduler.notify_growth(env.sessions.publish(builder))
        await scheduler.wait_idle()
    record = env.store.get("sess-1")
    assert record is not None and record.extractions == 4
    assert record.tokens_at_extraction == 36_050


@pytest.mark.anyio
async def test_sessions_idle_since_before_the_start_are_not_extracted_automatically(
    env: Env, llm: LLM, api: LoopbackAPI
) -> None:
    scheduler = NotesScheduler(
        settings_for(env.tmp),
        lambda: models_of(llm),
        store=env.store,
        source=env.sessions,
        guard=env.guard,
        ledger=env.ledger,
        clock=env.clock,
        started_at=1_000.0,
    )
    builder = TranscriptBuilder()
    work_session(builder, turns=2, context=50_000)
    async with running(scheduler):
        scheduler.notify_growth(env.sessions.publish(builder, mtime=999.0))
        await scheduler.wait_idle()
        assert api.requests == []
        scheduler.notify_growth(env.sessions.publish(builder, mtime=1_001.0))
        await scheduler.wait_idle()
    assert len(api.requests) == 2


@pytest.mark.anyio
async def test_a_spent_budget_holds_runs_back_until_it_frees(
    env: Env, llm: LLM, api: LoopbackAPI
) -> None:
    env.guard = CostGuard(
        BudgetConfig(tokens_per_hour=50_000, tokens_per_day=0), env.ledger, env.clock
    )
    env.ledger.record("memory_extract", Usage(input_tokens=60_000), project="other")
    scheduler = env.scheduler(llm)
    builder = TranscriptBuilder()
    work_session(builder, turns=2, context=12_000)
    async with running(scheduler):
        scheduler.notify_growth(env.sessions.publish(builder))
        await env.clock.wait_for_sleepers()
        status = scheduler.status(builder.session_id)
        assert status is not None and status.phase == "waiting" and status.pending
        assert status.waiting_reason is not None and "budget" in status.waiting_reason
        assert api.requests == []
        env.clock.advance(3_600.0)
        await scheduler.wait_idle()
    record = env.store.get(builder.session_id)
    assert record is not None and record.extractions == 1 and not record.pending


@pytest.mark.anyio
async def test_wired_to_the_real_session_registry(env: Env, llm: LLM, api: LoopbackAPI) -> None:
    from memd.config import TranscriptsConfig
    from memd.daemon.sessions import SessionRegistry
    from memd.sources.claude_code import ClaudeCode

    root = env.tmp / "projects"
    transcript = root / "-work-project" / "sess-1.jsonl"
    transcript.parent.mkdir(parents=True)
    registry = SessionRegistry([ClaudeCode(root)], TranscriptsConfig(), {}, started_at=0.0)
    scheduler = env.scheduler(llm, source=registry)  # the registry is a SessionSource
    registry.add_listener(scheduler.notify_growth)
    builder = TranscriptBuilder()
    work_session(builder, turns=3, context=12_000)
    transcript.write_bytes(builder.jsonl())
    async with running(scheduler):
        await registry.ingest(transcript)
        await scheduler.wait_idle()
    notes = root / "-work-project" / "sess-1" / "session-memory" / "summary.md"
    assert "Working on the parser." in notes.read_text()
    record = env.store.get("sess-1")
    assert record is not None and record.last_summarized_id == builder.lines[-1]["uuid"]
