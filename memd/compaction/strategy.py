"""The compaction ladder: level 1 (notes) if it applies, else level 2 (summary call), which
turns into level 3 (dropping old rounds) when the summary request itself is too long.

The daemon owns everything around it: waiting for an in-flight notes extraction first (R-S8),
the per-session :class:`memd.compaction.threshold.BreakerState` (check ``allows`` before,
``after_success``/``after_failure`` after), and the session-start context and plan file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memd.compaction.boundaries import CompactBoundary
from memd.compaction.full import (
    DEFAULT_SUMMARY_MAX_TOKENS,
    Spent,
    compact_full,
)
from memd.compaction.message import Msg, TokenEstimator
from memd.compaction.restore import (
    RestoredFile,
    load_restore_files,
    recently_read,
    visible_paths,
)
from memd.compaction.session_memory import FallThrough, SessionMemoryOutcome, compact_with_notes
from memd.compaction.threshold import Trigger
from memd.config import CompactionConfig
from memd.errors import LLMDisabled
from memd.llm.client import LLM


@dataclass(frozen=True)
class NotesInput:
    """The session's notes as level 1 needs them (``notes`` None: no notes file)."""

    notes: str | None
    template: str
    last_summarized_uuid: str | None
    notes_path: str | None = None

    def level1(
        self,
        msgs: Sequence[Msg],
        *,
        threshold: int,
        cfg: CompactionConfig,
        estimate: TokenEstimator,
        trigger: Trigger,
        transcript_path: str | None,
    ) -> SessionMemoryOutcome:
        """Level 1 of ``msgs`` from these notes (:func:`compact_with_notes`)."""
        return compact_with_notes(
            msgs,
            notes=self.notes,
            template=self.template,
            last_summarized_uuid=self.last_summarized_uuid,
            threshold=threshold,
            cfg=cfg,
            estimate=estimate,
            trigger=trigger,
            notes_path=self.notes_path,
            transcript_path=transcript_path,
        )


@dataclass(frozen=True)
class Outcome:
    """A finished compaction. ``skipped_level1`` says why the notes were not used."""

    level: int
    messages: tuple[Msg, ...]
    boundary: CompactBoundary
    tokens_before: int
    tokens_after: int
    spent: Spent
    skipped_level1: FallThrough | None


async def compact(
    msgs: Sequence[Msg],
    *,
    notes: NotesInput | None,
    llm: LLM | None,
    model: str,
    threshold: int,
    cfg: CompactionConfig,
    estimate: TokenEstimator,
    trigger: Trigger = "auto",
    custom_instructions: str | None = None,
    transcript_path: str | None = None,
    summary_max_tokens: int = DEFAULT_SUMMARY_MAX_TOKENS,
    call_timeout: float | None = None,
) -> Outcome:
    """Compact ``msgs`` at the cheapest level that works.

    Custom instructions (a manual ``/compact <text>``) skip level 1: notes cannot follow
    them. Raises :class:`memd.errors.LLMDisabled` when level 1 does not apply and there is no
    model, :class:`memd.errors.CompactionFailed` when the summary cannot be made.
    """
    skipped = _skip_reason(notes, custom_instructions)
    if skipped is None:
        assert notes is not None
        level1 = _with_notes(msgs, notes, threshold, cfg, estimate, trigger, transcript_path)
        if isinstance(level1, Outcome):
            return level1
        skipped = level1
    if llm is None:
        raise LLMDisabled(f"full compaction needs a model; notes not usable: {skipped.detail}")
    full = await compact_full(
        llm,
        model,
        msgs,
        cfg=cfg,
        estimate=estimate,
        trigger=trigger,
        custom_instructions=custom_instructions,
        max_tokens=summary_max_tokens,
        call_timeout=call_timeout,
        transcript_path=transcript_path,
    )
    return Outcome(
        full.level,
        full.messages,
        full.boundary,
        full.tokens_before,
        full.tokens_after,
        full.spent,
        skipped,
    )


def _with_notes(
    msgs: Sequence[Msg],
    notes: NotesInput,
    threshold: int,
    cfg: CompactionConfig,
    estimate: TokenEstimator,
    trigger: Trigger,
    transcript_path: str | None,
) -> Outcome | FallThrough:
    level1 = notes.level1(
        msgs,
        threshold=threshold,
        cfg=cfg,
        estimate=estimate,
        trigger=trigger,
        transcript_path=transcript_path,
    )
    if isinstance(level1, FallThrough):
        return level1
    return Outcome(
        1,
        level1.messages,
        level1.boundary,
        level1.tokens_before,
        level1.tokens_after,
        Spent(),
        None,
    )


def _skip_reason(notes: NotesInput | None, custom_instructions: str | None) -> FallThrough | None:
    if custom_instructions and custom_instructions.strip():
        return FallThrough("custom_instructions", "custom instructions need a full summary")
    if notes is None:
        return FallThrough("no_notes", "the session has no notes")
    return None


async def files_to_restore(
    before: Sequence[Msg],
    outcome: Outcome,
    *,
    estimate: TokenEstimator,
    cfg: CompactionConfig,
    cwd: Path | None = None,
) -> list[RestoredFile]:
    """The recently read files the client should put back after ``outcome`` (R-C5)."""
    return await load_restore_files(
        recently_read(before),
        visible_paths(outcome.messages),
        estimate=estimate,
        cfg=cfg,
        cwd=cwd,
    )
