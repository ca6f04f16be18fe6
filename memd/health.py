"""Health at a glance (R-B8): recent errors, and whether background work is moving.

A pipeline is *stalled* when work is queued or running and nothing has completed for longer
than ``daemon.stall_after_minutes``; *paused* when the cost guard holds background work; a
stall is what a user needs to hear about, since a pause explains itself.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from memd.changes import CHANGES

PipelineState = Literal["idle", "working", "paused", "stalled"]


@dataclass
class Health:
    """Errors seen by background work, kept for an hour."""

    errors: list[tuple[float, str]] = field(default_factory=list)
    last_progress_at: float | None = None

    def record(self, message: str) -> None:
        now = time.time()
        self.errors = [(t, m) for t, m in self.errors if now - t < 3600.0][-99:]
        self.errors.append((now, message))
        CHANGES.bump()

    def progressed(self, at: float | None = None) -> None:
        self.last_progress_at = time.time() if at is None else at
        CHANGES.bump()

    def last_hour(self) -> list[tuple[float, str]]:
        now = time.time()
        return [(t, m) for t, m in self.errors if now - t < 3600.0]


def pipeline_state(
    *,
    pending: int,
    last_progress_at: float | None,
    started_at: float,
    paused_until: float | None,
    now: float,
    stall_after_s: float,
) -> PipelineState:
    """Pure: what ``status`` says about background work."""
    if pending == 0:
        return "idle"
    if paused_until is not None and paused_until > now:
        return "paused"
    since = last_progress_at if last_progress_at is not None else started_at
    return "stalled" if now - since > stall_after_s else "working"


def latest(times: Iterable[float | None]) -> float | None:
    present = [t for t in times if t is not None]
    return max(present) if present else None


def pipeline_report(
    *,
    notes: dict[str, Any],
    memory: dict[str, Any],
    ingest_pending: int,
    health: Health,
    started_at: float,
    paused_until: float | None,
    stall_after_s: float,
) -> dict[str, Any]:
    """The ``pipeline`` part of status from the notes and memory statistics."""
    pending = (
        notes.get("queued", 0)
        + notes.get("running", 0)
        + memory.get("queued", 0)
        + memory.get("running", 0)
        + ingest_pending
    )
    done = latest(
        [
            health.last_progress_at,
            *(s.get("last_extracted_at") for s in notes.get("sessions", [])),
            *((p.get("last_run") or {}).get("at") for p in memory.get("projects", {}).values()),
        ]
    )
    now = time.time()
    state = pipeline_state(
        pending=pending,
        last_progress_at=done,
        started_at=started_at,
        paused_until=paused_until,
        now=now,
        stall_after_s=stall_after_s,
    )
    return {"state": state, "pending": pending, "last_progress_at": done}
