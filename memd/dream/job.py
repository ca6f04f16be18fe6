"""What one dream run is given: the model's settings and the job (the memory dir, the run's
folder, the sessions to search), shared by both ways of asking (the tool loop in
:mod:`memd.dream.consolidate`, one answer in :mod:`memd.dream.one_answer`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from memd.confined import ChangeGuard
from memd.dream import snapshot
from memd.sources.base import DreamScope


@dataclass(frozen=True)
class DreamSettings:
    model: str
    max_turns: int
    timeout_s: float
    max_tokens: int
    index_max_lines: int = 200
    index_max_bytes: int = 25_000
    redact_secrets: bool = True
    snapshot_max_bytes: int = snapshot.SNAPSHOT_MAX_BYTES


# Records what the given memory files cite (issue 26), each rewrite told to the guard first.
CiteRun = Callable[[Sequence[str], ChangeGuard], tuple[str, ...]]


@dataclass(frozen=True)
class Job:
    memory_dir: Path
    run_dir: Path
    transcripts: tuple[DreamScope, ...]  # the sessions TranscriptGrep searches
    sessions: tuple[str, ...]
    project: str
    today: str
    trigger_session: str = ""
    # Issue 26: memories whose citations have all failed memory.citation_retire_days.
    retire: tuple[str, ...] = ()
    # Issue 26: records what the files a kept run wrote cite (relative paths; the guard is
    # told each rewrite before it is made); the files rewritten.
    cite: CiteRun | None = None
