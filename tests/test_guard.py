"""The cost guard: budgets, backoff, parking, and waiting without dropping work."""

from __future__ import annotations

import random
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.clock import FakeClock
from memd.config_llm import BudgetConfig
from memd.errors import (
    AuthenticationFailed,
    BadRequest,
    LLMDisabled,
    Overloaded,
    PromptTooLong,
    QuotaExceeded,
    RateLimited,
    Unavailable,
)
from memd.llm.client import Usage
from memd.llm.guard import (
    JITTER_FRACTION,
    BlockAccount,
    CostGuard,
    FailureState,
    Go,
    Parked,
    ParkJob,
    Retry,
    Wait,
    after_failure,
    backoff_delay,
    classify,
    shrink_input,
)
from memd.llm.ledger import LEDGER_FILE, Ledger
from memd.llm.windows import HOUR_S

START = 1_700_000_000.0
BUDGET = BudgetConfig(
    tokens_per_hour=10_000, tokens_per_day=30_000, backoff_initial_s=30.0, backoff_max_s=600.0
)


class NoJitter(random.Random):
    def random(self) -> float:
        return 0.0


def make(
    tmp_path: Path, budget: BudgetConfig = BUDGET, rng: random.Random | None = None
) -> tuple[CostGuard, Ledger, FakeClock]:
    clock = FakeClock(START)
    ledger = Ledger(tmp_path / LEDGER_FILE, clock)
    guard = CostGuard(budget, ledger, clock, rng=rng or NoJitter())
    return guard, ledger, clock


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (Overloaded("529"), Retry()),
        (Unavailable("500"), Retry()),
        (RateLimited("429", retry_after=12.0), Retry(12.0)),
        (RateLimited("429"), Retry(None)),
        (OSError("disk full"), Retry()),
        (PromptTooLong("too long", actual=10, limit=5), ParkJob()),
        (BadRequest("400"), ParkJob()),
        (LLMDisabled("no key"), ParkJob()),
        (AuthenticationFailed("401"), BlockAccount()),
        (QuotaExceeded("credit"), BlockAccount()),
    ],
)
def test_classify(error: Exception, expected: object) -> None:
    assert classify(error) == expected


def test_backoff_doubles_up_to_the_cap_and_jitter_only_shortens() -> None:
    delays = [backoff_delay(n, BUDGET, 0.0) for n in range(1, 8)]
    assert delays == [30.0, 60.0, 120.0, 240.0, 480.0, 600.0, 600.0]
    assert backoff_delay(3, BUDGET, 0.999) >= 120.0 * (1 - JITTER_FRACTION)
    assert backoff_delay(10_000, BUDGET, 0.0) == 600.0  # no overflow on long storms


def test_retry_after_is_the_least_delay() -> None:
    state = after_failure(FailureState(), RateLimited("x", retry_after=500.0), 0.0, BUDGET, 0.0)
    assert state.retry_at == 500.0
    assert state.consecutive == 1
    short = after_failure(FailureState(), RateLimited("x", retry_after=1.0), 0.0, BUDGET, 0.0)
    assert short.retry_at == 30.0


_retryable = st.sampled_from(
    [Overloaded("529"), Unavailable("500"), RateLimited("429"), RateLimited("429", retry_after=5.0)]
)


@given(st.lists(st.tuples(_retryable, st.floats(0, 1, exclude_max=True)), min_size=1, max_size=40))
def test_each_retry_waits_between_the_shortest_jittered_delay_and_the_cap(
    failures: list[tuple[Exception, float]],
) -> None:
    state = FailureState()
    now = 0.0
    for n, (error, jitter) in enumerate(failures, start=1):
        state = after_failure(state, error, now, BUDGET, jitter)
        assert state.retry_at is not None
        delay = state.retry_at - now
        full = min(BUDGET.backoff_max_s, BUDGET.backoff_initial_s * 2 ** (n - 1))
        assert full * (1 - JITTER_FRACTION) - 1e-6 <= delay <= max(full, 5.0) + 1e-6
        assert state.consecutive == state.total == n
        now = state.retry_at


def test_parking_errors_do_not_grow_the_backoff() -> None:
    state = after_failure(FailureState(), PromptTooLong("x"), 5.0, BUDGET, 0.0)
    assert state == FailureState(0, 1, "PromptTooLong: x", 5.0, None)


def test_overload_backs_off_that_kind_only(tmp_path: Path) -> None:
    guard, _, clock = make(tmp_path)
    assert guard.check("session_notes") == Go()
    guard.record_failure("session_notes", Overloaded("busy"))
    decision = guard.check("session_notes")
    assert isinstance(decision, Wait)
    assert decision.until == START + 30.0
    assert "Overloaded" in decision.reason
    assert guard.check("memory_extract") == Go()

    guard.record_failure("session_notes", Overloaded("busy"))
    stats = {k.kind: k for k in guard.statistics().kinds}["session_notes"]
    assert stats.consecutive_failures == 2
    assert stats.total_failures == 2
    assert stats.last_error == "Overloaded: busy"
    assert stats.next_retry_at == START + 60.0

    clock.advance(60.0)
    assert guard.check("session_notes") == Go()
    guard.record_success("session_notes")
    stats = {k.kind: k for k in guard.statistics().kinds}["session_notes"]
    assert (stats.consecutive_failures, stats.total_failures, stats.next_retry_at) == (0, 2, None)


def test_rate_limit_retry_after_holds_every_kind(tmp_path: Path) -> None:
    guard, _, clock = make(tmp_path)
    guard.record_failure("dream", RateLimited("slow down", retry_after=90.0))
    other = guard.check("memory_extract")
    assert isinstance(other, Wait)
    assert other.until == START + 90.0
    assert guard.statistics().hold_until == START + 90.0
    clock.advance(90.0)
    assert guard.check("memory_extract") == Go()
    assert guard.statistics().hold_until is None


def test_prompt_too_long_parks_the_job_with_backoff_whatever_the_input(tmp_path: Path) -> None:
    guard, _, clock = make(tmp_path)
    guard.record_failure("session_notes", PromptTooLong("huge"), subject="s1", input_key="v1")
    parked = guard.check("session_notes", subject="s1", input_key="v1")
    assert isinstance(parked, Parked) and parked.until == START + 30.0
    assert "PromptTooLong" in parked.error
    # other sessions and kinds go on
    assert guard.check("session_notes", subject="s2", input_key="v1") == Go()
    (kind,) = [k for k in guard.statistics().kinds if k.kind == "session_notes"]
    assert [p.subject for p in kind.parked] == ["s1"]
    # new input (the transcript grew) does not unpark it: only the back-off's end does
    for key in ("v2", "v3", None):
        assert isinstance(guard.check("session_notes", subject="s1", input_key=key), Parked)
    clock.advance(30.0)
    assert guard.check("session_notes", subject="s1", input_key="v9") == Go()
    # failing again parks it twice as long; a success clears it
    guard.record_failure("session_notes", PromptTooLong("huge"), subject="s1")
    again = guard.check("session_notes", subject="s1")
    assert isinstance(again, Parked) and again.until == clock.now() + 60.0
    park = guard.parked("session_notes", subject="s1")
    assert park is not None and park.count == 2
    guard.record_success("session_notes", subject="s1")
    assert guard.check("session_notes", subject="s1") == Go()
    assert guard.parked("session_notes", subject="s1") is None


def test_bad_request_backs_off_per_job_and_a_release_lifts_it(tmp_path: Path) -> None:
    guard, _, clock = make(tmp_path)
    guard.record_failure("dream", BadRequest("schema"), subject="proj")
    assert isinstance(guard.check("dream", subject="proj"), Parked)
    guard.release("dream", subject="proj")
    assert guard.check("dream", subject="proj") == Go()
    for n in range(1, 8):  # time retries it, ever more rarely, up to the cap
        guard.record_failure("dream", BadRequest("schema"), subject="proj")
        decision = guard.check("dream", subject="proj")
        assert isinstance(decision, Parked) and decision.until is not None
        assert decision.until - clock.now() == min(600.0, 30.0 * 2 ** (n - 1))
        clock.advance(decision.until - clock.now())


def test_prompt_too_long_remembers_the_gap(tmp_path: Path) -> None:
    guard, _, _ = make(tmp_path)
    error = PromptTooLong("too long", actual=12_000, limit=10_000)
    guard.record_failure("memory_extract", error, subject="p")
    park = guard.parked("memory_extract", subject="p")
    assert park is not None and park.gap == 2_000


@given(st.integers(0, 10**7), st.none() | st.integers(0, 10**7))
def test_shrink_input_always_sends_less(tokens: int, gap: int | None) -> None:
    kept = shrink_input(tokens, gap)
    assert 0 <= kept <= max(0, tokens - 1)
    if gap is None:
        assert kept <= tokens - tokens // 5
    else:
        assert kept <= max(0, tokens - gap)


def test_runs_per_hour_bound_a_job_whatever_the_cause(tmp_path: Path) -> None:
    budget = BudgetConfig(tokens_per_hour=0, tokens_per_day=0, max_runs_per_hour=3)
    guard, _, clock = make(tmp_path, budget)

    async def start() -> Go | Parked:
        return await guard.wait_until_allowed("session_notes", subject="s")

    for _ in range(3):
        assert anyio.run(start) == Go()
        clock.advance(60.0)
    held = guard.check("session_notes", subject="s")
    assert isinstance(held, Wait) and "max_runs_per_hour" in held.reason
    assert held.until == START + HOUR_S
    assert guard.check("session_notes", subject="other") == Go()
    assert guard.check("compact", subject="s") == Go()  # a waiting client is never held
    clock.advance(held.until - clock.now())
    assert guard.check("session_notes", subject="s") == Go()


@pytest.mark.anyio
async def test_a_worker_can_sleep_through_a_park(tmp_path: Path) -> None:
    guard, _, clock = make(tmp_path)
    guard.record_failure("session_notes", PromptTooLong("big"), subject="s")
    with anyio.fail_after(5):
        decision = await _advancing(guard, clock)
    assert decision == Go() and clock.now() == START + 30.0


async def _advancing(guard: CostGuard, clock: FakeClock) -> Go | Parked:
    result: list[Go | Parked] = []

    async def wait() -> None:
        result.append(
            await guard.wait_until_allowed("session_notes", subject="s", wait_parked=True)
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await clock.wait_for_sleepers()
        clock.advance(30.0)
    return result[0]


@pytest.mark.parametrize("error", [AuthenticationFailed("401"), QuotaExceeded("no credit")])
def test_account_errors_block_every_job_until_released(tmp_path: Path, error: Exception) -> None:
    guard, _, clock = make(tmp_path)
    guard.record_failure("memory_extract", error, subject="p", input_key="a")
    clock.advance(86_400)
    for kind in ("session_notes", "memory_extract", "dream"):
        assert isinstance(guard.check(kind, subject="x", input_key="other"), Parked)
    assert guard.statistics().account_blocked is not None
    guard.release()
    assert guard.check("dream") == Go()
    assert guard.statistics().account_blocked is None


def test_reload_lifts_an_account_block_and_applies_the_new_budget(tmp_path: Path) -> None:
    guard, ledger, _ = make(tmp_path)
    guard.record_failure("dream", AuthenticationFailed("401"))
    ledger.record("dream", Usage(input_tokens=5_000), project="p")
    guard.reconfigure(BudgetConfig(tokens_per_hour=1_000, tokens_per_day=0))
    decision = guard.check("dream")
    assert isinstance(decision, Wait)
    assert "budget" in decision.reason


def test_spent_hourly_budget_pauses_background_kinds_until_the_window_frees(
    tmp_path: Path,
) -> None:
    guard, ledger, clock = make(tmp_path)
    ledger.record("session_notes", Usage(input_tokens=4_000), project="p")
    clock.advance(600)
    ledger.record("memory_extract", Usage(input_tokens=6_000), project="p")
    decision = guard.check("dream")
    assert isinstance(decision, Wait)
    assert decision.until == START + HOUR_S  # the first call leaves the window then
    assert guard.statistics().budget.paused_until == START + HOUR_S
    assert guard.statistics().budget.hour_spent == 10_000
    # a client waiting for a compaction or a recall is not held up by the budget
    assert guard.check("compact") == Go()
    assert guard.check("recall") == Go()
    clock.advance(HOUR_S - 600)
    assert guard.check("dream") == Go()


def test_spent_daily_budget_waits_longer_than_the_hour(tmp_path: Path) -> None:
    guard, ledger, clock = make(tmp_path)
    for _ in range(4):
        ledger.record("dream", Usage(input_tokens=8_000), project="p")
        clock.advance(HOUR_S)
    decision = guard.check("dream")
    assert isinstance(decision, Wait)
    assert decision.until == START + 86_400  # the first call must age out of the day
    assert guard.statistics().budget.day_spent == 32_000


def test_zero_means_unlimited(tmp_path: Path) -> None:
    guard, ledger, _ = make(tmp_path, BudgetConfig(tokens_per_hour=0, tokens_per_day=0))
    ledger.record("dream", Usage(input_tokens=10**9), project="p")
    assert guard.check("dream") == Go()


def test_jitter_comes_from_the_injected_rng(tmp_path: Path) -> None:
    def retry_times(seed: int) -> list[float]:
        guard, _, _ = make(tmp_path, rng=random.Random(seed))
        times = []
        for _ in range(5):
            guard.record_failure("dream", Unavailable("500"))
            decision = guard.check("dream")
            assert isinstance(decision, Wait)
            times.append(decision.until - START)
        return times

    first = retry_times(7)
    assert first == retry_times(7)
    assert first != retry_times(8)
    for n, delay in enumerate(first, start=1):
        full = min(600.0, 30.0 * 2 ** (n - 1))
        assert full * (1 - JITTER_FRACTION) <= delay <= full


@pytest.mark.anyio
async def test_waiting_job_sleeps_until_the_budget_frees(tmp_path: Path) -> None:
    guard, ledger, clock = make(tmp_path)
    ledger.record("session_notes", Usage(input_tokens=10_000), project="p")
    result: list[object] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:

            async def job() -> None:
                result.append(await guard.wait_until_allowed("session_notes", subject="s"))
                result.append(clock.now())

            tg.start_soon(job)
            await clock.wait_for_sleepers()
            assert clock.next_deadline() == START + HOUR_S
            clock.advance_to_next()
    assert result == [Go(), START + HOUR_S]


@pytest.mark.anyio
async def test_a_release_wakes_a_backing_off_job_early(tmp_path: Path) -> None:
    guard, _, clock = make(tmp_path)
    guard.record_failure("memory_extract", Overloaded("busy"))
    done = anyio.Event()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:

            async def job() -> None:
                assert await guard.wait_until_allowed("memory_extract") == Go()
                done.set()

            tg.start_soon(job)
            await clock.wait_for_sleepers()
            guard.release("memory_extract")
            await done.wait()
    assert clock.now() == START
    assert clock.sleepers == 0


@pytest.mark.anyio
async def test_waiting_returns_parked_instead_of_dropping_the_job(tmp_path: Path) -> None:
    guard, _, _ = make(tmp_path)
    guard.record_failure("session_notes", PromptTooLong("big"), subject="s", input_key="k")
    with anyio.fail_after(5):
        decision = await guard.wait_until_allowed("session_notes", subject="s", input_key="k")
    assert isinstance(decision, Parked)


def test_statistics_as_dict_is_plain_data(tmp_path: Path) -> None:
    guard, _, _ = make(tmp_path)
    guard.record_failure("dream", Overloaded("busy"), subject="p")
    guard.record_failure("session_notes", PromptTooLong("big"), subject="s")
    data = guard.statistics().as_dict()
    assert data["kinds"]["dream"]["next_retry_at"] == START + 30.0
    assert data["kinds"]["session_notes"]["parked"][0]["subject"] == "s"
    # status lists only the kinds with something to say; the quiet ones cost bytes on every call
    assert set(data["kinds"]) == {"dream", "session_notes"}
    assert data["budget"]["hour"]["limit"] == 10_000


def test_a_refused_key_holds_back_only_the_jobs_its_backend_serves(tmp_path: Path) -> None:
    clock = FakeClock(1_000_000.0)
    guard = CostGuard(BudgetConfig(), Ledger(tmp_path / "l.json", clock), clock)
    serves = {"session_notes": "local", "memory_extract": "local", "dream": "gemini"}
    guard.backend_of = lambda kind: serves.get(kind, "")
    guard.record_failure("dream", AuthenticationFailed("401"), subject="p")
    assert isinstance(guard.check("dream", subject="p"), Parked)
    assert isinstance(guard.check("session_notes", subject="s"), Go)
    guard.record_failure("session_notes", RateLimited("429", retry_after=60), subject="s")
    assert isinstance(guard.check("memory_extract", subject="m"), Wait)  # same backend holds
    assert guard.statistics().account_blocked == "gemini: AuthenticationFailed: 401"
