"""The usage ledger: what every model call cost, by job kind, project and session (R-A4).

Billed-equivalent tokens
    The budget (R-B1) counts one number per call, weighted roughly like the API's price list
    relative to plain input tokens:

    ====================  ======  ================================================
    input_tokens          x 1     uncached prompt tokens
    cache_creation        x 1.25  writing a prompt-cache entry costs a quarter more
    cache_read            x 0.1   a cache hit costs a tenth
    output_tokens         x 1     counted as itself, so a budget reads as "tokens"
    ====================  ======  ================================================

    Fractions round up per call, so a call never counts as cheaper than it was.

Bounded history
    Calls of the last :data:`RAW_KEEP_S` seconds are kept one by one (so the hourly window is
    exact); older ones are folded into hourly buckets per (hour, kind, project), and buckets
    older than :data:`RETENTION_S` are dropped. A bucket counts in a window while its newest
    call does, which can only over-count, never under-count, what was spent. Lifetime totals
    per (kind, project) are kept apart and never dropped.

The pure functions (:func:`billed_tokens`, :func:`window_spent`, :func:`window_frees_at`,
:func:`fold_old_records`, :func:`encode`/:func:`decode`) hold the logic; :class:`Ledger` is the
in-memory shell, persisted as JSON with an atomic replace.
"""

from __future__ import annotations

import json
import logging
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc
import anyio.to_thread

from memd.atomic import persist
from memd.changes import CHANGES
from memd.clock import Clock
from memd.config_llm import BudgetConfig
from memd.llm.client import LLMReply, TokenCounts
from memd.llm.windows import (
    DAY_S,
    HOUR_S,
    BudgetStatus,
    Remembered,
    SpendPoint,
    budget_status,
    window_spent,
    windows_valid_until,
)
from memd.records import load_record

log = logging.getLogger(__name__)

JobKind = Literal["session_notes", "memory_extract", "recall", "compact", "dream"]
JOB_KINDS: tuple[JobKind, ...] = typing.get_args(JobKind)

RAW_KEEP_S = 2 * HOUR_S
MAX_RAW_RECORDS = 5_000
# The records, a week of hourly buckets and the totals come to a few MB; more is not a ledger.
MAX_LEDGER_BYTES = 64 * 1024 * 1024
RETENTION_S = 8 * DAY_S
LEDGER_FILE = "usage-ledger.json"
FORMAT_VERSION = 2  # 2: time per call and totals per backend (format 1 is read too)


@dataclass(frozen=True)
class Tokens:
    """Token figures summed over one or more calls."""

    input: int = 0
    output: int = 0
    cache_creation: int = 0
    cache_read: int = 0
    billed: int = 0  # billed-equivalent, see the module docstring
    calls: int = 0
    ms: int = 0  # time the calls took (a local model costs no money, but this)

    @classmethod
    def of(cls, usage: TokenCounts, *, priced: bool = True, seconds: float = 0.0) -> Tokens:
        """One call's figures; an unpriced call (a local server) bills nothing."""
        return cls(
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_creation_input_tokens,
            usage.cache_read_input_tokens,
            billed_tokens(usage) if priced else 0,
            1,
            max(0, min(int(seconds * 1000), 10**12)),
        )

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            self.input + other.input,
            self.output + other.output,
            self.cache_creation + other.cache_creation,
            self.cache_read + other.cache_read,
            self.billed + other.billed,
            self.calls + other.calls,
            self.ms + other.ms,
        )


@dataclass(frozen=True)
class UsageRecord:
    at: float  # wall seconds
    kind: JobKind
    project: str
    session: str
    model: str
    tokens: Tokens
    backend: str = ""


@dataclass(frozen=True)
class HourBucket:
    hour: float  # wall seconds at the start of the hour
    last_at: float  # the newest call folded in
    kind: JobKind
    project: str
    tokens: Tokens


@dataclass(frozen=True)
class Totals:
    """One row of a breakdown: a job kind or a project, and what it spent."""

    name: str
    tokens: Tokens


@dataclass(frozen=True)
class LedgerStatistics:
    """Immutable snapshot for ``memdctl status``."""

    at: float
    last_hour: Tokens
    last_day: Tokens
    by_kind: tuple[Totals, ...]  # lifetime, by job kind
    by_project: tuple[Totals, ...]  # lifetime, by project
    by_backend: tuple[Totals, ...]  # lifetime, by backend (issue 34)
    total: Tokens
    since: float | None  # the oldest call still on record

    def as_dict(self) -> dict[str, Any]:
        def rows(items: tuple[Totals, ...]) -> dict[str, dict[str, int]]:
            return {t.name: _tokens_dict(t.tokens) for t in items}

        return {
            "at": self.at,
            "last_hour": _tokens_dict(self.last_hour),
            "last_day": _tokens_dict(self.last_day),
            "by_kind": rows(self.by_kind),
            "by_project": rows(self.by_project),
            "by_backend": rows(self.by_backend),
            "total": _tokens_dict(self.total),
            "since": self.since,
        }


@dataclass
class LedgerState:
    records: list[UsageRecord] = field(default_factory=list)
    buckets: list[HourBucket] = field(default_factory=list)
    totals: dict[tuple[JobKind, str], Tokens] = field(default_factory=dict)
    backends: dict[str, Tokens] = field(default_factory=dict)  # lifetime, by backend


# ---------------------------------------------------------------------------------------------
# Pure core


def billed_tokens(usage: TokenCounts) -> int:
    """Billed-equivalent tokens of one call (weights in the module docstring)."""
    cache_write = -(-usage.cache_creation_input_tokens * 5 // 4)
    cache_read = -(-usage.cache_read_input_tokens // 10)
    return usage.input_tokens + usage.output_tokens + cache_write + cache_read


def hour_start(at: float) -> float:
    return at - at % HOUR_S


def fold_old_records(
    state: LedgerState, now: float, *, keep_s: float, max_records: int, retention_s: float
) -> LedgerState:
    """Fold records older than ``keep_s`` (or beyond ``max_records``) into hourly buckets."""
    records = sorted(state.records, key=lambda r: r.at)
    cut = len(records) - max_records if len(records) > max_records else 0
    while cut < len(records) and records[cut].at <= now - keep_s:
        cut += 1
    buckets = {(b.hour, b.kind, b.project): b for b in state.buckets}
    for record in records[:cut]:
        key = (hour_start(record.at), record.kind, record.project)
        old = buckets.get(key)
        if old is None:
            buckets[key] = HourBucket(key[0], record.at, record.kind, record.project, record.tokens)
        else:
            last = max(old.last_at, record.at)
            buckets[key] = HourBucket(
                key[0], last, old.kind, old.project, old.tokens + record.tokens
            )
    kept = sorted(
        (b for b in buckets.values() if b.last_at > now - retention_s),
        key=lambda b: (b.hour, b.kind, b.project),
    )
    return LedgerState(records[cut:], kept, dict(state.totals), dict(state.backends))


def spend_points(state: LedgerState) -> list[SpendPoint]:
    points = [(r.at, r.tokens.billed) for r in state.records]
    points.extend((b.last_at, b.tokens.billed) for b in state.buckets)
    return points


def statistics_of(state: LedgerState, now: float) -> LedgerStatistics:
    def window(seconds: float) -> Tokens:
        total = Tokens()
        for r in state.records:
            if r.at > now - seconds:
                total += r.tokens
        for b in state.buckets:
            if b.last_at > now - seconds:
                total += b.tokens
        return total

    by_kind: dict[str, Tokens] = {}
    by_project: dict[str, Tokens] = {}
    for (kind, project), tokens in state.totals.items():
        by_kind[kind] = by_kind.get(kind, Tokens()) + tokens
        by_project[project] = by_project.get(project, Tokens()) + tokens
    times = [r.at for r in state.records] + [b.hour for b in state.buckets]
    return LedgerStatistics(
        at=now,
        last_hour=window(HOUR_S),
        last_day=window(DAY_S),
        by_kind=tuple(Totals(k, by_kind[k]) for k in sorted(by_kind)),
        by_project=tuple(Totals(p, by_project[p]) for p in sorted(by_project)),
        by_backend=tuple(Totals(b, state.backends[b]) for b in sorted(state.backends)),
        total=sum(by_kind.values(), Tokens()),
        since=min(times) if times else None,
    )


def _tokens_dict(t: Tokens) -> dict[str, int]:
    return {
        "input": t.input,
        "output": t.output,
        "cache_creation": t.cache_creation,
        "cache_read": t.cache_read,
        "billed": t.billed,
        "calls": t.calls,
        "ms": t.ms,
    }


def _tokens_from(raw: Mapping[str, Any]) -> Tokens:
    values = [
        raw[k] for k in ("input", "output", "cache_creation", "cache_read", "billed", "calls")
    ]
    values.append(raw.get("ms", 0))  # format 1 kept no time
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise ValueError(f"bad token figures: {raw!r}")
    return Tokens(*values)


def _kind(raw: Any) -> JobKind:
    if raw not in JOB_KINDS:
        raise ValueError(f"unknown job kind {raw!r}")
    return typing.cast(JobKind, raw)


def encode(state: LedgerState) -> dict[str, Any]:
    return {
        "version": FORMAT_VERSION,
        "records": [
            [r.at, r.kind, r.project, r.session, r.model, _tokens_dict(r.tokens), r.backend]
            for r in state.records
        ],
        "buckets": [
            [b.hour, b.last_at, b.kind, b.project, _tokens_dict(b.tokens)] for b in state.buckets
        ],
        "totals": [[k, p, _tokens_dict(t)] for (k, p), t in state.totals.items()],
        "backends": [[b, _tokens_dict(t)] for b, t in state.backends.items()],
    }


def _record_from(row: Any) -> UsageRecord:
    at, kind, project, session, model, tokens = row[:6]
    backend = row[6] if len(row) > 6 else ""  # format 1 named no backend
    return UsageRecord(
        float(at),
        _kind(kind),
        str(project),
        str(session),
        str(model),
        _tokens_from(tokens),
        str(backend),
    )


def _decode_ledger(raw: bytes) -> LedgerState:
    return decode(json.loads(raw))


def decode(data: Any) -> LedgerState:
    """Parse :func:`encode`'s output; raise ValueError (or Key/TypeError) on anything else."""
    if not isinstance(data, dict) or data.get("version") not in (1, FORMAT_VERSION):
        raise ValueError("not a usage ledger of a known version")
    records = [_record_from(row) for row in data["records"]]
    buckets = [
        HourBucket(float(h), float(last), _kind(k), str(p), _tokens_from(t))
        for h, last, k, p, t in data["buckets"]
    ]
    totals = {(_kind(k), str(p)): _tokens_from(t) for k, p, t in data["totals"]}
    backends = {str(b): _tokens_from(t) for b, t in data.get("backends", [])}
    return LedgerState(records, buckets, totals, backends)


# ---------------------------------------------------------------------------------------------
# Shell


class Ledger:
    """In-memory ledger with JSON persistence. Create it with :meth:`load`."""

    def __init__(self, path: Path, clock: Clock, state: LedgerState | None = None) -> None:
        self.path = path
        self._clock = clock
        self._state = state if state is not None else LedgerState()
        self._dirty = False
        # Bumped on every change: status and every guard decision read the windows, and
        # recomputing them is O(records) (up to MAX_RAW_RECORDS).
        self._version = 0
        self._usage: Remembered | None = None
        self._budget: Remembered | None = None

    @classmethod
    def load(cls, state_dir: Path, clock: Clock) -> Ledger:
        """Read the ledger under ``state_dir``; a missing file is an empty ledger.

        An unreadable file is moved aside (``*.corrupt``) with a warning and the ledger starts
        empty: losing usage history must not keep the daemon from starting.
        """
        path = state_dir / LEDGER_FILE
        state = load_record(path, MAX_LEDGER_BYTES, "the usage ledger", _decode_ledger)
        if state is None:
            return cls(path, clock)
        return cls(path, clock, state)

    def record(
        self,
        kind: JobKind,
        usage: TokenCounts,
        *,
        project: str,
        session: str = "",
        model: str = "",
        at: float | None = None,
        backend: str = "",
        priced: bool = True,
        seconds: float = 0.0,
    ) -> UsageRecord:
        """Add one call's usage (``priced=False``: a local server's, billed as nothing)."""
        tokens = Tokens.of(usage, priced=priced, seconds=seconds)
        now = self._clock.now() if at is None else at
        entry = UsageRecord(now, kind, project, session, model, tokens, backend)
        self._state.records.append(entry)
        key = (kind, project)
        self._state.totals[key] = self._state.totals.get(key, Tokens()) + entry.tokens
        if backend:
            self._state.backends[backend] = self._state.backends.get(backend, Tokens()) + tokens
        self._dirty = True
        self._version += 1
        CHANGES.bump()
        if len(self._state.records) > MAX_RAW_RECORDS:
            self.compact()
        return entry

    def record_reply(
        self, kind: JobKind, reply: LLMReply, *, project: str, session: str = ""
    ) -> UsageRecord:
        """Add one answered call: its usage, model, backend, time and whether it is priced."""
        return self.record(
            kind,
            reply.usage,
            project=project,
            session=session,
            model=reply.model,
            backend=reply.backend,
            priced=reply.priced,
            seconds=reply.seconds,
        )

    def spend_points(self) -> list[SpendPoint]:
        return spend_points(self._state)

    def spent(self, window_s: float, now: float | None = None) -> int:
        now = self._clock.now() if now is None else now
        return window_spent(spend_points(self._state), now, window_s)

    def records(self) -> Sequence[UsageRecord]:
        """The calls still kept one by one, oldest first."""
        return tuple(sorted(self._state.records, key=lambda r: r.at))

    def statistics(self, now: float | None = None) -> LedgerStatistics:
        return statistics_of(self._state, self._clock.now() if now is None else now)

    def usage(self, now: float | None = None) -> dict[str, Any]:
        """``statistics(now).as_dict()``, remembered until the ledger or a window changes
        (the caller must not modify it)."""
        now = self._clock.now() if now is None else now
        memo = self._usage
        if memo is None or not memo.holds(self._version, now, None):
            until = windows_valid_until(spend_points(self._state), now)
            value = statistics_of(self._state, now).as_dict()
            memo = self._usage = Remembered(self._version, now, until, None, value)
        return {**memo.value, "at": now}

    def budget(self, budget: BudgetConfig, now: float) -> BudgetStatus:
        """The spend against ``budget``'s hourly and daily limits at ``now``, remembered until
        the ledger or a window changes."""
        memo = self._budget
        if memo is None or not memo.holds(self._version, now, budget):
            points = spend_points(self._state)
            value = budget_status(budget, points, now)
            until = windows_valid_until(points, now)
            memo = self._budget = Remembered(self._version, now, until, budget, value)
        status: BudgetStatus = memo.value
        return status

    def compact(self, now: float | None = None) -> None:
        """Fold old records into hourly buckets and drop expired buckets."""
        self._state = fold_old_records(
            self._state,
            self._clock.now() if now is None else now,
            keep_s=RAW_KEEP_S,
            max_records=MAX_RAW_RECORDS,
            retention_s=RETENTION_S,
        )
        self._dirty = True
        self._version += 1
        CHANGES.bump()

    def save(self) -> None:
        """Compact and write the file atomically (blocking; see :meth:`flush`)."""
        self.compact()
        persist(self.path, self._encoded())
        self._dirty = False

    async def flush(self) -> None:
        """Write the file off the event loop if anything changed since the last write."""
        if not self._dirty:
            return
        self.compact()
        data = self._encoded()
        self._dirty = False
        try:
            await anyio.to_thread.run_sync(persist, self.path, data)
        except BaseException:
            self._dirty = True
            raise

    def _encoded(self) -> bytes:
        return json.dumps(encode(self._state), separators=(",", ":")).encode("utf-8")


async def run_ledger_flusher(
    ledger: Ledger,
    clock: Clock,
    interval_s: float,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Flush the ledger every ``interval_s`` until cancelled, then once more (shielded)."""
    task_status.started()
    try:
        while True:
            await clock.sleep(interval_s)
            await ledger.flush()
    finally:
        with anyio.CancelScope(shield=True):
            await ledger.flush()
