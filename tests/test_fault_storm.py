"""Acceptance for the cost guard (R-B1, R-A5): an hour of API failures, then a tight budget.

Two background job kinds keep work queued against a loopback server that fails every call
(529, 500, 429 with retry-after, in turn for each kind) for one simulated hour. Time is a
FakeClock that jumps to the next deadline whenever every worker sleeps, so no real time is
spent waiting. The real SDK talks HTTP to the server; the server stamps each request with the
fake time.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from memd.agent.runner import AgentSpec, Completed, Failed, run_agent
from memd.clock import FakeClock
from memd.config_llm import BudgetConfig, LLMConfig
from memd.errors import AgentError
from memd.llm.backends import open_llm
from memd.llm.client import LLM, Disabled, close_llm
from memd.llm.guard import JITTER_FRACTION, CostGuard, GuardStatistics, Parked
from memd.llm.ledger import LEDGER_FILE, JobKind, Ledger
from memd.llm.windows import HOUR_S
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_replies import Reply, message_text

START = 1_700_000_000.0
STORM_END = START + HOUR_S
KINDS: tuple[JobKind, ...] = ("session_notes", "memory_extract")
JOBS_PER_KIND = 6
BUDGET = BudgetConfig(
    tokens_per_hour=3_000, tokens_per_day=1_000_000, backoff_initial_s=30.0, backoff_max_s=600.0
)


def most_calls_in(seconds: float, budget: BudgetConfig) -> int:
    """The most calls one job kind can make in ``seconds`` of failures: each retry comes after
    the shortest delay jitter allows (a retry-after only lengthens it)."""
    calls, at, failures = 1, 0.0, 0
    while True:
        failures += 1
        base = min(budget.backoff_max_s, budget.backoff_initial_s * 2 ** (failures - 1))
        at += base * (1 - JITTER_FRACTION)
        if at >= seconds:
            return calls
        calls += 1


@dataclass
class Storm:
    clock: FakeClock
    guard: CostGuard
    ledger: Ledger
    llm: LLM
    active: int = len(KINDS)
    request_times: list[float] = field(default_factory=list)
    completed: list[tuple[JobKind, int, float]] = field(default_factory=list)
    mid_storm: GuardStatistics | None = None
    budget_paused: GuardStatistics | None = None
    exited: anyio.Event = field(default_factory=anyio.Event)
    statuses: dict[JobKind, Iterator[int]] = field(
        default_factory=lambda: {k: itertools.cycle([529, 500, 429]) for k in KINDS}
    )

    def answer(self, body: dict[str, Any]) -> Reply | None:
        """The server's handler: fail every call until the storm ends."""
        now = self.clock.now()
        self.request_times.append(now)
        if now >= STORM_END:
            return None  # the default reply: a short text
        kind = next(k for k in KINDS if f"of {k}:" in message_text(body["messages"][0]))
        status = next(self.statuses[kind])
        if status == 429:
            return replies.rate_limited(retry_after=45)
        return replies.api_error(status)

    async def worker(self, kind: JobKind) -> None:
        """A queue of jobs of one kind, run the way the job layer must: never dropped."""
        spec = AgentSpec(
            kind=kind,
            model="claude-haiku-4-5",
            system="Summarize what happened.",
            tools={},
            max_turns=2,
            timeout_s=30.0,
            max_tokens=64,
            project="proj",
        )
        try:
            for job in range(JOBS_PER_KIND):
                while True:
                    decision = await self.guard.wait_until_allowed(kind, subject=f"s{job}")
                    assert not isinstance(decision, Parked), decision
                    text = f"job {job} of {kind}: " + "what happened next " * 150
                    messages = [{"role": "user", "content": text}]
                    run = await run_agent(
                        self.llm, spec, messages, ledger=self.ledger, clock=self.clock
                    )
                    match run.outcome:
                        case Completed():
                            self.guard.record_success(kind, subject=f"s{job}")
                            self.completed.append((kind, job, self.clock.now()))
                            break
                        case Failed(error=error):
                            self.guard.record_failure(kind, error, subject=f"s{job}")
                        case other:
                            self.guard.record_failure(kind, AgentError(str(other)))
        finally:
            self.active -= 1
            self.exited.set()

    async def drive(self) -> None:
        """Move the fake clock to the next deadline whenever every worker sleeps on it."""
        while self.active:
            if self.clock.sleepers >= self.active:
                self.observe()
                self.clock.advance_to_next()
            self.exited = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(_cancel_after, tg, self.clock.wait_for_sleepers, self.active)
                tg.start_soon(_cancel_after, tg, self.exited.wait)

    def observe(self) -> None:
        now = self.clock.now()
        if self.mid_storm is None and now >= START + HOUR_S / 2:
            self.mid_storm = self.guard.statistics()
        stats = self.guard.statistics()
        if self.budget_paused is None and stats.budget.paused_until is not None:
            self.budget_paused = stats


async def _cancel_after(
    tg: anyio.abc.TaskGroup, wait: Callable[..., Awaitable[None]], *args: object
) -> None:
    await wait(*args)
    tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_an_hour_of_failures_stays_within_backoff_and_budget(
    api: LoopbackAPI, tmp_path: Path
) -> None:
    clock = FakeClock(START)
    ledger = Ledger(tmp_path / LEDGER_FILE, clock)
    guard = CostGuard(BUDGET, ledger, clock, rng=random.Random(3))
    llm = open_llm(LLMConfig(base_url=api.url, timeout_s=30.0), {"ANTHROPIC_API_KEY": "test"})
    assert not isinstance(llm, Disabled)
    storm = Storm(clock, guard, ledger, llm)
    api.set_handler(storm.answer)
    try:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for kind in KINDS:
                    tg.start_soon(storm.worker, kind)
                tg.start_soon(storm.drive)
    finally:
        await close_llm(llm)

    # 1. During the storm, no more calls than backoff allows (the SDK does not retry on its own).
    storm_calls = [t for t in storm.request_times if t < STORM_END]
    bound = len(KINDS) * most_calls_in(HOUR_S, BUDGET)
    assert len(KINDS) * 3 <= len(storm_calls) <= bound
    assert len(api.requests) == len(storm.request_times)

    # 2. Mid-storm, status shows the failures and when each kind tries next.
    assert storm.mid_storm is not None
    for status in (k for k in storm.mid_storm.kinds if k.kind in KINDS):
        assert status.total_failures >= 3
        assert status.consecutive_failures == status.total_failures
        assert status.next_retry_at is not None and status.next_retry_at > storm.mid_storm.at
        assert status.last_error is not None
        assert status.last_error.split(":")[0] in {"Overloaded", "Unavailable", "RateLimited"}

    # 3. Every queued job ran once the server recovered: nothing was dropped.
    assert sorted((k, j) for k, j, _ in storm.completed) == sorted(
        (k, j) for k in KINDS for j in range(JOBS_PER_KIND)
    )
    first_success = min(t for _, _, t in storm.completed)
    assert STORM_END <= first_success <= STORM_END + BUDGET.backoff_max_s
    final = {k.kind: k for k in guard.statistics().kinds}
    for kind in KINDS:
        assert final[kind].consecutive_failures == 0
        assert final[kind].total_failures >= 3

    # 4. After recovery the hourly budget paced the work: visible in status, and no hour
    #    held more calls than the budget lets start (plus one already running per worker).
    assert storm.budget_paused is not None
    paused_until = storm.budget_paused.budget.paused_until
    assert paused_until is not None and paused_until > storm.budget_paused.at
    records = ledger.records()
    assert len(records) == len(KINDS) * JOBS_PER_KIND
    cheapest = min(r.tokens.billed for r in records)
    assert cheapest > 0
    per_hour = math.ceil(BUDGET.tokens_per_hour / cheapest) + len(KINDS) - 1
    times = sorted(r.at for r in records)
    assert len(times) > per_hour  # the budget really had to hold work back
    for start in times:
        assert sum(1 for t in times if start <= t < start + HOUR_S) <= per_hour
    assert times[-1] - times[0] >= HOUR_S
