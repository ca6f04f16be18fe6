"""What the compaction service answers, typed (issue 35): ``should_compact``'s decision, a dry
run's plan, a compaction or why none ran, a fork or why none was written.

The service returns these; the IPC methods (:mod:`memd.ipc.compaction_methods`) and the
takeover read them by attribute, and each becomes its wire form (:meth:`as_dict`) at the IPC
boundary only, key for key as the replies always were (``tests/test_compaction_wire.py``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from memd.compaction.message import to_api
from memd.compaction.restore import RestoredFile
from memd.compaction.strategy import Outcome


@dataclass(frozen=True)
class ShouldCompact:
    """Whether the session is due, its threshold and window, and its circuit breaker."""

    compact: bool
    tokens: int
    threshold: int
    context_window: int
    window_source: str
    effective_window: int
    tokens_left: int
    percent_of_threshold: float
    circuit_open: bool
    consecutive_failures: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CutPlan:
    """Where level 1 would cut, and what it would leave."""

    tokens_after: int
    cut_index: int
    kept_messages: int
    dropped_messages: int
    truncated_sections: tuple[str, ...]


@dataclass(frozen=True)
class DryRun:
    """Which level would serve (``None``: none can, no model: ``disabled``), and level 1's
    cut or why level 1 cannot serve (``reason``); never a model call."""

    tokens_before: int
    threshold: int
    level: int | None
    cut: CutPlan | None = None
    reason: str = ""
    disabled: str | None = None
    context_tokens: int | None = None  # the session's live figure, when it names one

    def as_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "dry_run": True,
            "tokens_before": self.tokens_before,
            "threshold": self.threshold,
            "level": self.level,
        }
        if self.cut is not None:
            row |= {**asdict(self.cut), "truncated_sections": list(self.cut.truncated_sections)}
        else:
            row["reason"] = self.reason
            if self.level is None:
                row["disabled"] = self.disabled
        return row | {"context_tokens": self.context_tokens}


@dataclass(frozen=True)
class ContextFile:
    """A file that starts every session (a CLAUDE.md) or the session's plan, read now."""

    path: str
    content: str


@dataclass(frozen=True)
class Restore:
    """What the client puts back after a compaction (R-C5)."""

    files: tuple[RestoredFile, ...]
    claude_md: tuple[ContextFile, ...]
    plan: ContextFile | None
    memory_index: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "files": [asdict(f) for f in self.files],
            "claude_md": [asdict(f) for f in self.claude_md],
            "plan": asdict(self.plan) if self.plan is not None else None,
            "memory_index": self.memory_index,
        }


@dataclass(frozen=True)
class Compaction:
    """A compaction that ran: its outcome, and what to restore."""

    outcome: Outcome
    restore: Restore

    @property
    def level(self) -> int:
        return self.outcome.level

    def as_dict(self) -> dict[str, Any]:
        outcome = self.outcome
        skipped = outcome.skipped_level1
        return {
            "compacted": True,
            "level": outcome.level,
            "messages": to_api(outcome.messages),
            "boundary": outcome.boundary.as_dict(),
            "tokens_before": outcome.tokens_before,
            "tokens_after": outcome.tokens_after,
            "api_calls": outcome.spent.api_calls,
            "spent": asdict(outcome.spent),
            "level1_skipped": skipped.detail if skipped else None,
            "restore": self.restore.as_dict(),
        }


@dataclass(frozen=True)
class NotCompacted:
    """A compaction that did not run, and why (the circuit breaker is open)."""

    reason: str
    level: None = None

    def as_dict(self) -> dict[str, Any]:
        return {"compacted": False, "reason": self.reason}


@dataclass(frozen=True)
class Forked:
    """A fork written as a new session of its agent (no model call)."""

    session: str
    from_session: str
    path: str
    resume: str
    tokens_before: int
    tokens_after: int
    kept_messages: int
    dropped_messages: int

    def as_dict(self) -> dict[str, Any]:
        return {"forked": True, **asdict(self), "api_calls": 0}


@dataclass(frozen=True)
class NotForked:
    """Why no fork was written (``fall_through``: why level 1 could not serve, if that was
    the reason)."""

    reason: str
    fall_through: str | None = None

    def as_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {"forked": False, "reason": self.reason}
        if self.fall_through is not None:
            row["fall_through"] = self.fall_through
        return row


Compacted = Compaction | NotCompacted
ForkResult = Forked | NotForked
