"""What ``memdctl status`` and the IPC ``notes`` method show about session notes (R-I5, R-B8).

Immutable snapshots built from a session's figures, its extraction record and the
scheduler's live view of its worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from memd.config import SessionNotesConfig
from memd.session.store import ExtractionRecord
from memd.session.triggers import TriggerInput, next_trigger
from memd.state import SessionState

Phase = Literal["idle", "queued", "waiting", "running"]


@dataclass(frozen=True)
class SessionNotesStatus:
    session_id: str
    project: str
    notes_path: str
    phase: Phase  # idle, queued (worker about to check), waiting (guard/limit), running
    waiting_reason: str | None
    follow_up: bool  # another run is due after the current one
    running_for_s: float | None
    context_tokens: int
    extractions: int
    last_extracted_at: float | None
    tokens_at_extraction: int | None
    last_duration_s: float | None
    last_cost_tokens: int
    total_cost_tokens: int
    last_summarized_id: str | None
    next_trigger_tokens: int
    next_trigger_condition: str
    last_error: str | None
    last_error_at: float | None
    pending: bool  # a run was interrupted and will be redone

    def as_dict(self) -> dict[str, Any]:
        # Every field is a scalar: a shallow copy is the whole answer, without the deep
        # copy ``dataclasses.asdict`` makes (``status`` builds one per listed session).
        return self.__dict__.copy()


@dataclass(frozen=True)
class NotesView:
    """A session's notes as the IPC ``notes`` method and level-1 compaction need them."""

    session_id: str
    path: str
    text: str | None  # None: no notes file yet
    template: str
    empty: bool  # no file, or nothing beyond the template
    last_summarized_id: str | None
    status: SessionNotesStatus

    def as_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "path": self.path,
            "text": self.text,
            "template": self.template,
            "empty": self.empty,
            "last_summarized_id": self.last_summarized_id,
            "status": self.status.as_dict(),
        }


@dataclass(frozen=True)
class NotesStatistics:
    enabled: bool
    reason: str  # why not, e.g. "disabled: no API key: set ANTHROPIC_API_KEY …"
    strategy: str
    running: int
    queued: int
    failures: int  # failed runs since the daemon started
    sessions: tuple[SessionNotesStatus, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "reason": self.reason,
            "strategy": self.strategy,
            "running": self.running,
            "queued": self.queued,
            "failures": self.failures,
            "sessions": [s.as_dict() for s in self.sessions],
        }


_NO_RECORD = ExtractionRecord("", "")  # a session never extracted (one shared value)


def session_status(
    state: SessionState,
    record: ExtractionRecord | None,
    config: SessionNotesConfig,
    *,
    notes_path: str,
    phase: Phase,
    waiting_reason: str | None,
    follow_up: bool,
    running_for_s: float | None,
) -> SessionNotesStatus:
    record = record or _NO_RECORD  # its ids are never read: they come from ``state``
    upcoming = next_trigger(
        TriggerInput(state.context_tokens, record.tokens_at_extraction, 0, True), config
    )
    return SessionNotesStatus(
        session_id=state.session_id,
        project=state.project,
        notes_path=notes_path,
        phase=phase,
        waiting_reason=waiting_reason,
        follow_up=follow_up,
        running_for_s=running_for_s,
        context_tokens=state.context_tokens,
        extractions=record.extractions,
        last_extracted_at=record.extracted_at,
        tokens_at_extraction=record.tokens_at_extraction,
        last_duration_s=record.last_duration_s,
        last_cost_tokens=record.last_cost_tokens,
        total_cost_tokens=record.total_cost_tokens,
        last_summarized_id=record.last_summarized_id,
        next_trigger_tokens=upcoming.at_tokens,
        next_trigger_condition=upcoming.condition,
        last_error=record.last_error,
        last_error_at=record.last_error_at,
        pending=record.pending,
    )
