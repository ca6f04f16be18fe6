"""What a failed model call means for retrying (R-B1, R-A5). Pure.

:func:`classify` sorts an error into :class:`Retry` (back off, per job kind),
:class:`ParkJob` (this one job waits out a back-off of its own and then tries with less) or
:class:`BlockAccount` (nothing runs until a user acts). :func:`after_failure` and
:func:`park` compute the next state; :func:`shrink_input` and :func:`keep_newest` say how much
a job sends after a prompt-too-long. :mod:`memd.llm.guard` holds the state and the waiting.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar, assert_never

from memd.config_llm import BudgetConfig
from memd.errors import (
    AuthenticationFailed,
    BadRequest,
    LLMError,
    PromptTooLong,
    QuotaExceeded,
    RateLimited,
)
from memd.llm.ledger import JobKind

JITTER_FRACTION = 0.2
_T = TypeVar("_T")


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
    until: float = 0.0  # wall seconds: the back-off ends
    count: int = 1  # parks in a row
    gap: int | None = None  # tokens over the limit, when a prompt-too-long said so


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


def park_reason(parked: ParkedJob) -> str:
    return (
        f"parked after {parked.count} failure(s) in a row that retrying at once cannot fix; "
        "the next attempt sends less, after the back-off"
    )


def park(
    previous: ParkedJob | None,
    kind: JobKind,
    subject: str,
    input_key: str | None,
    error: BaseException,
    now: float,
    delay: Callable[[int], float],
) -> ParkedJob:
    """The park after ``error``: one more in a row than ``previous``, backing off longer."""
    count = previous.count + 1 if previous is not None else 1
    gap = error.gap if isinstance(error, PromptTooLong) else None
    return ParkedJob(kind, subject, input_key, describe(error), now, now + delay(count), count, gap)


def shrink_input(tokens: int, gap: int | None, *, margin: float = 0.1) -> int:
    """How many tokens of the droppable input to keep after a prompt-too-long (pure).

    ``tokens`` is what the failed request sent of it. With the gap the error stated, drop
    that much and a ``margin`` more (estimates are not the server's count); without it, drop
    a fifth. Never below zero.
    """
    if gap is None:
        return max(0, tokens - max(1, tokens // 5))
    return max(0, tokens - int(gap * (1.0 + margin)) - 1)


def keep_newest(items: Sequence[_T], budget: int, size: Callable[[_T], int]) -> tuple[_T, ...]:
    """The newest ``items`` whose sizes add up to at most ``budget`` (at least the last one):
    the oldest part is what goes when a request was too long (R-B1, like R-C4)."""
    total = 0
    start = len(items)
    while start > 0:
        total += size(items[start - 1])
        if total > budget and start < len(items):
            break
        start -= 1
    return tuple(items[start:])
