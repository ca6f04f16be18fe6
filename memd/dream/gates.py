"""The dream gates (R-D1), cheapest first, as a pure function of what was observed.

:func:`evaluate` looks at one :class:`Observed` and answers

* :class:`Skip` — a gate is closed; ``gate`` names it and ``reason`` gives the numbers
  ("time: 7.2 h of 24 h");
* :class:`NeedScan` — enabled, time and throttle are open but the transcripts have not been
  counted yet: the caller stats them (:func:`memd.dream.scan.count_sessions`) and asks again
  with ``sessions`` filled in;
* :class:`Go` — every gate before the lock is open; the lock is the caller's next step.

``force`` skips time, throttle and sessions, never ``enabled`` nor the lock. So the
expensive scan runs only after the cheap gates have said yes, and a caller that follows the
answers can prove it (the stat-counting test does).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, assert_never

# "state": not one of R-D1's gates; every gate was open but memd's state disk refused the
# run's record, so it did not start (shown apart from the lock, which nobody holds then).
GateName = Literal["enabled", "time", "throttle", "sessions", "lock", "state"]
GATE_ORDER: tuple[GateName, ...] = ("enabled", "time", "throttle", "sessions", "lock")


@dataclass(frozen=True)
class Thresholds:
    min_hours: float = 24.0
    scan_throttle_minutes: float = 10.0
    min_sessions: int = 5


@dataclass(frozen=True)
class Observed:
    """What the caller saw. ``lock_mtime`` is ``None`` when there is no lock file (never
    consolidated); ``last_scan_at`` is ``None`` when this dir was never scanned;
    ``sessions`` is ``None`` until the transcripts were counted."""

    now: float
    disabled: str | None  # why dreaming is off (config, memory off, opted out), or None
    lock_mtime: float | None
    last_scan_at: float | None
    sessions: tuple[str, ...] | None = None  # transcripts modified after the lock, trigger out
    force: bool = False


@dataclass(frozen=True)
class Go:
    sessions: tuple[str, ...]  # what the dream reviews (may be empty when forced)
    forced: bool = False


@dataclass(frozen=True)
class Skip:
    gate: GateName
    reason: str


@dataclass(frozen=True)
class NeedScan:
    since: float  # count transcripts modified after this (the lock's mtime, 0 if none)


Verdict = Go | Skip | NeedScan


def evaluate(seen: Observed, limits: Thresholds) -> Verdict:
    """The gates in order; see the module docstring."""
    if seen.disabled:
        return Skip("enabled", f"enabled: no ({seen.disabled})")
    since = seen.lock_mtime or 0.0
    if seen.force:
        return Go(seen.sessions or (), forced=True)
    hours = (seen.now - since) / 3600.0 if seen.lock_mtime is not None else None
    if hours is not None and hours < limits.min_hours:
        return Skip("time", f"time: {max(hours, 0.0):.1f} h of {limits.min_hours:g} h")
    if seen.sessions is None:
        if seen.last_scan_at is not None:
            minutes = (seen.now - seen.last_scan_at) / 60.0
            if minutes < limits.scan_throttle_minutes:
                wait = limits.scan_throttle_minutes
                return Skip(
                    "throttle",
                    f"throttle: last scan {max(minutes, 0):.1f} min ago, waits {wait:g} min",
                )
        return NeedScan(since)
    count = len(seen.sessions)
    if count < limits.min_sessions:
        when = describe_time(since) if seen.lock_mtime is not None else "ever"
        return Skip("sessions", f"sessions: {count} of {limits.min_sessions} since {when}")
    return Go(seen.sessions)


def describe_time(ts: float) -> str:
    """``2026-11-21 09:12`` (UTC) for a reason text."""
    if ts <= 0:
        return "ever"
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M")
    except (OverflowError, OSError, ValueError):
        return "an unreadable time"


def verdict_row(verdict: Verdict | None, at: float | None) -> dict[str, object]:
    """The gate state for ``status`` (plain data)."""
    if verdict is None:
        return {"state": "unchecked", "gate": None, "reason": "not checked since start", "at": at}
    match verdict:
        case Go(sessions=sessions, forced=forced):
            reason = f"open: {len(sessions)} sessions to review" + (" (forced)" if forced else "")
            return {"state": "open", "gate": None, "reason": reason, "at": at}
        case Skip(gate=gate, reason=reason):
            return {"state": "closed", "gate": gate, "reason": reason, "at": at}
        case NeedScan():
            return {"state": "scanning", "gate": "sessions", "reason": "counting", "at": at}
        case unreachable:
            assert_never(unreachable)
