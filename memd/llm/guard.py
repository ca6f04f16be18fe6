"""The cost guard: may a background job call the model now? (R-B1, R-A5)

Before a job runs, the job layer asks :meth:`CostGuard.check` (or waits with
:meth:`CostGuard.wait_until_allowed`); after it ran, it reports :meth:`CostGuard.record_success`
or :meth:`CostGuard.record_failure`. The answer is one of:

- :class:`Go` — run it;
- :class:`Wait` ``(until, reason)`` — keep the job queued until ``until`` (wall seconds): the
  hourly or daily token budget is spent, or this job kind is backing off after failures, or
  the API asked everyone to hold off (``retry-after``);
- :class:`Parked` ``(error, reason)`` — a failure that waiting cannot fix. Keep the job, but
  do not run it again until its input changes or a user asks for it.

Failures are classified once (:func:`classify`):

- rate limits, overload, unavailability and errors that are not model errors back off
  exponentially per job kind (``backoff_initial_s`` doubling up to ``backoff_max_s``, each delay
  shortened by up to :data:`JITTER_FRACTION` at random); a ``retry-after`` is honoured as the
  least delay, for every kind;
- ``PromptTooLong`` and ``BadRequest`` (and any other model error that is not retryable) park
  that one job (kind + subject) with the ``input_key`` it ran on; asking again with a
  different ``input_key`` is the sign that the input changed and unparks it;
- ``AuthenticationFailed`` and ``QuotaExceeded`` block every job: no input change can fix
  them. :meth:`CostGuard.release` (a manual trigger) or :meth:`CostGuard.reconfigure` (config
  reload) lifts the block, and so does any successful call.

Budgets gate the background kinds (:data:`BACKGROUND_KINDS`) only: a client that asks for a
compaction or a recall is waiting for the answer. Their spend still counts against the budget.
A job that started before the budget ran out finishes; the next one waits.

The decisions are pure functions of (failure state, parking, budget status, now); the
:class:`CostGuard` class holds the state and does the waiting.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, assert_never

import anyio

from memd.clock import Clock
from memd.config import BudgetConfig
from memd.errors import (
    AuthenticationFailed,
    BadRequest,
    LLMError,
    PromptTooLong,
    QuotaExceeded,
    RateLimited,
)
from memd.llm.ledger import (
    DAY_S,
    HOUR_S,
    JOB_KINDS,
    JobKind,
    Ledger,
    SpendPoint,
    window_frees_at,
    window_spent,
)

JITTER_FRACTION = 0.2
BACKGROUND_KINDS: frozenset[JobKind] = frozenset({"session_notes", "memory_extract", "dream"})


# ---------------------------------------------------------------------------------------------
# Values


@dataclass(frozen=True)
class Go:
    pass


@dataclass(frozen=True)
class Wait:
    until: float  # wall seconds
    reason: str


@dataclass(frozen=True)
class Parked:
    error: str
    reason: str


Decision = Go | Wait | Parked


@dataclass(frozen=True)
class Retry:
    """Back off; ``after`` is the server's ``retry-after`` when it sent one."""

    after: float | None = None


@dataclass(frozen=True)
class ParkJob:
    pass


@dataclass(frozen=True)
class BlockAccount:
    pass


FailureClass = Retry | ParkJob | BlockAccount


@dataclass(frozen=True)
class FailureState:
    """One job kind's failure record."""

    consecutive: int = 0
    total: int = 0
    last_error: str | None = None
    last_error_at: float | None = None
    retry_at: float | None = None  # backing off until then


@dataclass(frozen=True)
class ParkedJob:
    kind: JobKind
    subject: str
    input_key: str | None
    error: str
    at: float


@dataclass(frozen=True)
class BudgetStatus:
    hour_limit: int
    hour_spent: int
    hour_frees_at: float | None  # None: not exhausted
    day_limit: int
    day_spent: int
    day_frees_at: float | None

    @property
    def paused_until(self) -> float | None:
        """When background work may run again, or None when the budget allows it now."""
        times = [t for t in (self.hour_frees_at, self.day_frees_at) if t is not None]
        return max(times) if times else None


@dataclass(frozen=True)
class KindStatus:
    kind: JobKind
    consecutive_failures: int
    total_failures: int
    last_error: str | None
    last_error_at: float | None
    next_retry_at: float | None
    parked: tuple[ParkedJob, ...]


@dataclass(frozen=True)
class GuardStatistics:
    """Immutable snapshot for ``memdctl status``."""

    at: float
    budget: BudgetStatus
    hold_until: float | None  # the API's retry-after, for every kind
    account_blocked: str | None  # the error that blocks every job
    kinds: tuple[KindStatus, ...]

    def as_dict(self) -> dict[str, Any]:
        b = self.budget
        return {
            "at": self.at,
            "budget": {
                "hour": {"limit": b.hour_limit, "spent": b.hour_spent, "frees_at": b.hour_frees_at},
                "day": {"limit": b.day_limit, "spent": b.day_spent, "frees_at": b.day_frees_at},
                "paused_until": b.paused_until,
            },
            "hold_until": self.hold_until,
            "account_blocked": self.account_blocked,
            "kinds": {
                k.kind: {
                    "consecutive_failures": k.consecutive_failures,
                    "total_failures": k.total_failures,
                    "last_error": k.last_error,
                    "last_error_at": k.last_error_at,
                    "next_retry_at": k.next_retry_at,
                    "parked": [
                        {"subject": p.subject, "error": p.error, "at": p.at} for p in k.parked
                    ],
                }
                for k in self.kinds
            },
        }


# ---------------------------------------------------------------------------------------------
# Pure decisions


def classify(error: BaseException) -> FailureClass:
    """What a failure means for retrying (see the module docstring)."""
    match error:
        case AuthenticationFailed() | QuotaExceeded():
            return BlockAccount()
        case PromptTooLong() | BadRequest():
            return ParkJob()
        case RateLimited(retry_after=after):
            return Retry(after)
        case LLMError() if not error.retryable:
            return ParkJob()
        case _:
            return Retry()


def describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def backoff_delay(consecutive: int, budget: BudgetConfig, jitter: float) -> float:
    """Delay after the ``consecutive``-th failure in a row (>= 1); ``jitter`` in [0, 1)."""
    exponent = min(consecutive - 1, 60)
    base = min(budget.backoff_max_s, budget.backoff_initial_s * 2.0**exponent)
    return base * (1.0 - JITTER_FRACTION * jitter)


def after_failure(
    state: FailureState,
    error: BaseException,
    now: float,
    budget: BudgetConfig,
    jitter: float,
) -> FailureState:
    """The kind's failure state after ``error``; only retryable failures move ``retry_at``."""
    noted = replace(state, total=state.total + 1, last_error=describe(error), last_error_at=now)
    match classify(error):
        case Retry(after=after):
            consecutive = state.consecutive + 1
            delay = backoff_delay(consecutive, budget, jitter)
            if after is not None:
                delay = max(delay, after)
            return replace(noted, consecutive=consecutive, retry_at=now + delay)
        case ParkJob() | BlockAccount():
            return noted
        case unreachable:
            assert_never(unreachable)


def after_success(state: FailureState) -> FailureState:
    return replace(state, consecutive=0, retry_at=None)


def budget_status(budget: BudgetConfig, points: list[SpendPoint], now: float) -> BudgetStatus:
    return BudgetStatus(
        hour_limit=budget.tokens_per_hour,
        hour_spent=window_spent(points, now, HOUR_S),
        hour_frees_at=window_frees_at(points, now, HOUR_S, budget.tokens_per_hour),
        day_limit=budget.tokens_per_day,
        day_spent=window_spent(points, now, DAY_S),
        day_frees_at=window_frees_at(points, now, DAY_S, budget.tokens_per_day),
    )


def decide(
    *,
    now: float,
    failure: FailureState,
    parked: ParkedJob | None,
    input_key: str | None,
    account_blocked: str | None,
    hold_until: float | None,
    budget: BudgetStatus,
    budgeted: bool,
) -> Decision:
    """May this job run now? Blocks that waiting cannot lift come first."""
    if account_blocked is not None:
        return Parked(account_blocked, "the API refused this account; fix it, then trigger a run")
    if parked is not None and parked.input_key == input_key:
        return Parked(parked.error, "this job failed on this input; it runs again when it changes")
    waits: list[Wait] = []
    if failure.retry_at is not None and failure.retry_at > now:
        what = f"{failure.consecutive} failure(s) in a row, last {failure.last_error}"
        waits.append(Wait(failure.retry_at, f"backing off after {what}"))
    if hold_until is not None and hold_until > now:
        waits.append(Wait(hold_until, "the API asked to hold off (retry-after)"))
    paused = budget.paused_until if budgeted else None
    if paused is not None and paused > now:
        waits.append(Wait(paused, "the token budget for background work is spent"))
    if waits:
        return max(waits, key=lambda w: w.until)
    return Go()


# ---------------------------------------------------------------------------------------------
# Shell


class CostGuard:
    """The stateful guard the job layer asks before each background run."""

    def __init__(
        self,
        budget: BudgetConfig,
        ledger: Ledger,
        clock: Clock,
        *,
        rng: random.Random | None = None,
        budgeted_kinds: frozenset[JobKind] = BACKGROUND_KINDS,
    ) -> None:
        self._budget = budget
        self._ledger = ledger
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._budgeted = budgeted_kinds
        self._failures: dict[JobKind, FailureState] = {}
        self._parked: dict[tuple[JobKind, str], ParkedJob] = {}
        self._account_blocked: str | None = None
        self._hold_until: float | None = None
        self._changed: anyio.Event | None = None
        # Told of every failed run (the daemon counts them in status's errors).
        self.on_failure: Callable[[JobKind, str, BaseException], None] | None = None

    def check(self, kind: JobKind, *, subject: str = "", input_key: str | None = None) -> Decision:
        """Decide for one job. A parked job whose ``input_key`` changed is unparked here."""
        now = self._clock.now()
        parked = self._parked.get((kind, subject))
        if parked is not None and parked.input_key != input_key:
            del self._parked[(kind, subject)]
            parked = None
        return decide(
            now=now,
            failure=self._failures.get(kind, FailureState()),
            parked=parked,
            input_key=input_key,
            account_blocked=self._account_blocked,
            hold_until=self._hold_until,
            budget=budget_status(self._budget, self._ledger.spend_points(), now),
            budgeted=kind in self._budgeted,
        )

    async def wait_until_allowed(
        self, kind: JobKind, *, subject: str = "", input_key: str | None = None
    ) -> Go | Parked:
        """Sleep through every :class:`Wait`; return :class:`Go`, or :class:`Parked`.

        On :class:`Parked` the caller keeps the job and asks again when the input changes or a
        user triggers it; nothing is dropped here. Any change of the guard's state (a success,
        a release, a reload) wakes the waiters early so they decide again.
        """
        while True:
            decision = self.check(kind, subject=subject, input_key=input_key)
            match decision:
                case Go() | Parked():
                    return decision
                case Wait(until=until):
                    await self._sleep_or_change(until)
                case unreachable:
                    assert_never(unreachable)

    def record_success(self, kind: JobKind, *, subject: str = "") -> None:
        self._failures[kind] = after_success(self._failures.get(kind, FailureState()))
        self._parked.pop((kind, subject), None)
        self._account_blocked = None
        self._notify()

    def record_failure(
        self,
        kind: JobKind,
        error: BaseException,
        *,
        subject: str = "",
        input_key: str | None = None,
    ) -> FailureClass:
        """Note a failed run of ``kind``; returns how it was classified."""
        now = self._clock.now()
        state = self._failures.get(kind, FailureState())
        self._failures[kind] = after_failure(state, error, now, self._budget, self._rng.random())
        failure = classify(error)
        if self.on_failure is not None:
            self.on_failure(kind, subject, error)
        match failure:
            case Retry(after=after):
                if after is not None:
                    self._hold_until = max(self._hold_until or 0.0, now + after)
            case ParkJob():
                self._parked[(kind, subject)] = ParkedJob(
                    kind, subject, input_key, describe(error), now
                )
            case BlockAccount():
                self._account_blocked = describe(error)
            case unreachable:
                assert_never(unreachable)
        self._notify()
        return failure

    def release(self, kind: JobKind | None = None, *, subject: str | None = None) -> None:
        """The manual trigger: forget parking and backoff of matching jobs, lift a block.

        ``kind=None`` matches every kind, ``subject=None`` every subject of the kind.
        """
        for key in [k for k in self._parked if _matches(k, kind, subject)]:
            del self._parked[key]
        for k in list(self._failures) if kind is None else [kind]:
            self._failures[k] = after_success(self._failures.get(k, FailureState()))
        self._account_blocked = None
        self._hold_until = None
        self._notify()

    def reconfigure(self, budget: BudgetConfig) -> None:
        """New budget settings (config reload); also lifts an account block."""
        self._budget = budget
        self._account_blocked = None
        self._notify()

    def statistics(self) -> GuardStatistics:
        now = self._clock.now()
        kinds = []
        for kind in JOB_KINDS:
            state = self._failures.get(kind, FailureState())
            parked = tuple(p for (k, _), p in sorted(self._parked.items()) if k == kind)
            retry_at = (
                state.retry_at if state.retry_at is not None and state.retry_at > now else None
            )
            kinds.append(
                KindStatus(
                    kind,
                    state.consecutive,
                    state.total,
                    state.last_error,
                    state.last_error_at,
                    retry_at,
                    parked,
                )
            )
        hold = self._hold_until if self._hold_until is not None and self._hold_until > now else None
        return GuardStatistics(
            at=now,
            budget=budget_status(self._budget, self._ledger.spend_points(), now),
            hold_until=hold,
            account_blocked=self._account_blocked,
            kinds=tuple(kinds),
        )

    async def _sleep_or_change(self, until: float) -> None:
        if self._changed is None:
            self._changed = anyio.Event()
        changed = self._changed
        async with anyio.create_task_group() as tg:

            async def sleeper() -> None:
                await self._clock.sleep(until - self._clock.now())
                tg.cancel_scope.cancel()

            async def watcher() -> None:
                await changed.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(sleeper)
            tg.start_soon(watcher)

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None


def _matches(key: tuple[JobKind, str], kind: JobKind | None, subject: str | None) -> bool:
    return (kind is None or key[0] == kind) and (subject is None or key[1] == subject)
