"""The cost guard: may a background job call the model now? (R-B1, R-A5)

Before a job runs, the job layer asks :meth:`CostGuard.check` (or waits with
:meth:`CostGuard.wait_until_allowed`); after it ran, it reports :meth:`CostGuard.record_success`
or :meth:`CostGuard.record_failure`. The answer is one of:

- :class:`Go` — run it;
- :class:`Wait` ``(until, reason)`` — keep the job queued until ``until`` (wall seconds): the
  hourly or daily token budget is spent, or this job kind is backing off after failures, or
  the API asked everyone to hold off (``retry-after``);
- :class:`Parked` ``(error, reason, until)`` — this job failed in a way retrying at once cannot
  fix. Keep it, and do not run it again before ``until`` (or, for an account block, until a
  user acts).

Failures are classified once (:func:`classify`):

- rate limits, overload, unavailability and errors that are not model errors back off
  exponentially per job kind (``backoff_initial_s`` doubling up to ``backoff_max_s``, each delay
  shortened by up to :data:`JITTER_FRACTION` at random); a ``retry-after`` is honoured as the
  least delay, for every kind;
- ``PromptTooLong`` and ``BadRequest`` (any 4xx that is not a rate limit, and any other model
  error that is not retryable) park that one job (kind + subject) with an exponential back-off
  of its own: the n-th park in a row lasts ``backoff_initial_s * 2**(n-1)`` (capped, jittered).
  New input does not unpark it — a transcript that grows by a line a second would otherwise
  retry a hopeless request on every line — and the caller is expected to send less on the
  next attempt (see :func:`shrink_input`). A success or a manual trigger clears the park;
- ``AuthenticationFailed`` and ``QuotaExceeded`` block every job: no input change can fix
  them. :meth:`CostGuard.release` (a manual trigger) or :meth:`CostGuard.reconfigure` (config
  reload) lifts the block, and so does any successful call.

Budgets gate the background kinds (:data:`BACKGROUND_KINDS`) only: a client that asks for a
compaction or a recall is waiting for the answer. Their spend still counts against the budget.
A job that started before the budget ran out finishes; the next one waits.

Whatever the cause, a background job (kind + subject) starts at most ``max_runs_per_hour``
times in any hour: the guard counts the starts it allows, so a bug upstream (a trigger that
fires on every append, failures that cost no tokens) still cannot turn into a loop of calls.

The decisions are pure functions of (failure state, parking, budget status, now); the
:class:`CostGuard` class holds the state and does the waiting.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, assert_never

import anyio

from memd.changes import CHANGES
from memd.clock import Clock
from memd.config_llm import BudgetConfig
from memd.errors import MalformedAnswer
from memd.llm.failures import (
    JITTER_FRACTION,
    BlockAccount,
    FailureClass,
    FailureState,
    ParkedJob,
    ParkJob,
    Retry,
    after_failure,
    after_success,
    backoff_delay,
    classify,
    describe,
    keep_newest,
    park,
    park_reason,
    shrink_input,
)
from memd.llm.ledger import JOB_KINDS, JobKind, Ledger
from memd.llm.windows import HOUR_S, BudgetStatus, budget_status

__all__ = [
    "BACKGROUND_KINDS",
    "JITTER_FRACTION",
    "BlockAccount",
    "BudgetStatus",
    "CostGuard",
    "Decision",
    "FailureClass",
    "FailureState",
    "Go",
    "GuardStatistics",
    "KindStatus",
    "ParkJob",
    "Parked",
    "ParkedJob",
    "Retry",
    "Wait",
    "after_failure",
    "after_success",
    "backoff_delay",
    "budget_status",
    "classify",
    "decide",
    "describe",
    "keep_newest",
    "shrink_input",
]

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
    until: float | None = None  # wall seconds; None: until a user acts (an account block)


Decision = Go | Wait | Parked


_NO_FAILURES = FailureState()


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
    kinds: tuple[KindStatus, ...]  # the kinds that ever failed or have parked jobs
    malformed: tuple[tuple[JobKind, int], ...] = ()  # whole answers memd could not use

    def as_dict(self) -> dict[str, Any]:
        """The snapshot as ``status`` sends it; ``kinds`` names only the job kinds that have
        failed or have parked jobs."""
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
            "malformed_answers": dict(self.malformed),
            "kinds": {
                k.kind: {
                    "consecutive_failures": k.consecutive_failures,
                    "total_failures": k.total_failures,
                    "last_error": k.last_error,
                    "last_error_at": k.last_error_at,
                    "next_retry_at": k.next_retry_at,
                    "parked": [
                        {
                            "subject": p.subject,
                            "error": p.error,
                            "at": p.at,
                            "until": p.until,
                            "count": p.count,
                        }
                        for p in k.parked
                    ],
                }
                for k in self.kinds
                if k.total_failures or k.consecutive_failures or k.parked or k.next_retry_at
            },
        }


# ---------------------------------------------------------------------------------------------
# Pure decisions


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
    starts: Sequence[float] = (),
    max_runs_per_hour: int = 0,
) -> Decision:
    """May this job run now? Blocks that waiting cannot lift come first.

    ``starts`` are the wall times this job was allowed to start (oldest first); with
    ``max_runs_per_hour`` (0: no limit) they bound how often it runs. ``input_key`` is kept for
    callers and records; it no longer decides anything.
    """
    del input_key
    if account_blocked is not None:
        return Parked(account_blocked, "the API refused this account; fix it, then trigger a run")
    if parked is not None and parked.until > now:
        return Parked(parked.error, park_reason(parked), parked.until)
    waits: list[Wait] = []
    recent = [t for t in starts if t > now - HOUR_S]
    if budgeted and max_runs_per_hour and len(recent) >= max_runs_per_hour:
        frees = recent[len(recent) - max_runs_per_hour] + HOUR_S
        what = f"{len(recent)} runs of this job in the last hour (budget.max_runs_per_hour)"
        waits.append(Wait(frees, what))
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
        backend_of: Callable[[JobKind], str] = lambda kind: "",
        on_failure: Callable[[JobKind, str, BaseException], None] | None = None,
    ) -> None:
        self._budget = budget
        self._ledger = ledger
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._budgeted = budgeted_kinds
        self._failures: dict[JobKind, FailureState] = {}
        self._parked: dict[tuple[JobKind, str], ParkedJob] = {}
        self._starts: dict[tuple[JobKind, str], collections.deque[float]] = {}
        # By backend (issue 34): a key refused or a quota spent on one backend holds back the
        # jobs it serves, not those another backend serves; "" when no backend is known.
        self._account_blocked: dict[str, str] = {}
        self._hold_until: dict[str, float] = {}
        # Which backend serves a job kind (the daemon's routes say).
        self.backend_of = backend_of
        self._malformed: collections.Counter[JobKind] = collections.Counter()
        self._changed: anyio.Event | None = None
        # Told of every failed run (the daemon counts them in status's errors).
        self.on_failure = on_failure

    def check(self, kind: JobKind, *, subject: str = "", input_key: str | None = None) -> Decision:
        """Decide for one job (no side effects: status may call it freely)."""
        now = self._clock.now()
        backend = self.backend_of(kind)
        return decide(
            now=now,
            failure=self._failures.get(kind, FailureState()),
            parked=self._parked.get((kind, subject)),
            input_key=input_key,
            account_blocked=self._account_blocked.get(backend),
            hold_until=self._hold_until.get(backend),
            budget=self._ledger.budget(self._budget, now),
            budgeted=kind in self._budgeted,
            starts=self._starts.get((kind, subject), ()),
            max_runs_per_hour=self._budget.max_runs_per_hour,
        )

    def parked(self, kind: JobKind, *, subject: str = "") -> ParkedJob | None:
        """The job's park, if it is parked or was when it last ran (cleared by a success)."""
        return self._parked.get((kind, subject))

    async def wait_until_allowed(
        self,
        kind: JobKind,
        *,
        subject: str = "",
        input_key: str | None = None,
        wait_parked: bool = False,
    ) -> Go | Parked:
        """Sleep through every :class:`Wait`; return :class:`Go`, or :class:`Parked`.

        With ``wait_parked`` a park with a back-off is slept through too (a per-job worker
        can afford to wait); otherwise the caller keeps the job and asks again later: nothing
        is dropped here. An account block is always returned. Any change of the guard's state
        (a success, a release, a reload) wakes the waiters early so they decide again. A
        :class:`Go` counts as a start of the job (see ``max_runs_per_hour``).
        """
        while True:
            decision = self.check(kind, subject=subject, input_key=input_key)
            match decision:
                case Go():
                    self._started(kind, subject)
                    return decision
                case Parked(until=until) if wait_parked and until is not None:
                    await self._sleep_or_change(until)
                case Parked():
                    return decision
                case Wait(until=until):
                    await self._sleep_or_change(until)
                case unreachable:
                    assert_never(unreachable)

    def _started(self, kind: JobKind, subject: str) -> None:
        now = self._clock.now()
        starts = self._starts.setdefault((kind, subject), collections.deque())
        starts.append(now)
        limit = max(1, self._budget.max_runs_per_hour)
        while starts and (starts[0] <= now - HOUR_S or len(starts) > limit):
            starts.popleft()
        for key in [k for k, q in self._starts.items() if not q or q[-1] <= now - HOUR_S]:
            del self._starts[key]
        CHANGES.bump()

    def record_success(self, kind: JobKind, *, subject: str = "") -> None:
        self._failures[kind] = after_success(self._failures.get(kind, FailureState()))
        self._parked.pop((kind, subject), None)
        self._account_blocked.pop(self.backend_of(kind), None)
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
        if isinstance(error, MalformedAnswer):
            self._malformed[kind] += 1
        if self.on_failure is not None:
            self.on_failure(kind, subject, error)
        match failure:
            case Retry(after=after):
                if after is not None:
                    backend = self.backend_of(kind)
                    self._hold_until[backend] = max(self._hold_until.get(backend, 0.0), now + after)
            case ParkJob():
                jitter = self._rng.random()
                self._parked[(kind, subject)] = park(
                    self._parked.get((kind, subject)),
                    kind,
                    subject,
                    input_key,
                    error,
                    now,
                    lambda n: backoff_delay(n, self._budget, jitter),
                )
            case BlockAccount():
                self._account_blocked[self.backend_of(kind)] = describe(error)
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
        self._account_blocked.clear()
        self._hold_until.clear()
        self._notify()

    def reconfigure(self, budget: BudgetConfig) -> None:
        """New budget settings (config reload); also lifts an account block."""
        self._budget = budget
        self._account_blocked.clear()
        self._notify()

    def statistics(self) -> GuardStatistics:
        now = self._clock.now()
        parked_of: dict[JobKind, list[ParkedJob]] = {}
        for (kind, _), job in sorted(self._parked.items()):  # one sort, not one per kind
            parked_of.setdefault(kind, []).append(job)
        kinds = []
        for kind in JOB_KINDS:
            if kind not in self._failures and kind not in parked_of:
                continue  # never failed, nothing parked: ``status`` leaves it out anyway
            state = self._failures.get(kind, _NO_FAILURES)
            parked = tuple(parked_of.get(kind, ()))
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
        holds = [t for t in self._hold_until.values() if t > now]
        blocked = "; ".join(
            f"{name}: {why}" if name else why for name, why in sorted(self._account_blocked.items())
        )
        return GuardStatistics(
            at=now,
            budget=self._ledger.budget(self._budget, now),
            hold_until=max(holds) if holds else None,
            account_blocked=blocked or None,
            kinds=tuple(kinds),
            malformed=tuple(sorted(self._malformed.items())),
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
        CHANGES.bump()  # a success, failure, park, release or reload: ``status`` shows it
        if self._changed is not None:
            self._changed.set()
            self._changed = None


def _matches(key: tuple[JobKind, str], kind: JobKind | None, subject: str | None) -> bool:
    return (kind is None or key[0] == kind) and (subject is None or key[1] == subject)
