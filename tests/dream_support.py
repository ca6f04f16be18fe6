"""Building a real DreamService for tests (real lock files, real transcripts dir)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from memd.clock import SystemClock
from memd.config import Config
from memd.dream.exclusion import DirExclusion
from memd.dream.gates import Verdict
from memd.dream.lock import LOCK_NAME
from memd.dream.service import DreamService
from memd.llm.backends import Protocol
from memd.llm.guard import CostGuard
from memd.llm.ledger import LEDGER_FILE, Ledger
from memd.llm.models import Models, models_of
from memd.memory.location import Location

if TYPE_CHECKING:
    from memd.dream.recorder import Recorder


def make_service(
    tmp_path: Path,
    llm: Any,
    config: Config | None = None,
    *,
    retire_candidates: Callable[[Path], list[str]] | None = None,
    protocol: Protocol = "tools",
) -> DreamService:
    """``protocol``: how the dream asks ``llm`` (``whole``: one answer, as a local server's
    small model is asked)."""
    clock = SystemClock()
    cfg = config or Config()
    ledger = Ledger(tmp_path / LEDGER_FILE, clock)
    projects = tmp_path / "projects"

    async def locate(cwd: str) -> Location:
        directory = projects / "proj" / "memory"
        return Location(directory, (str(directory),), None)

    return DreamService(
        projects,
        tmp_path / "state",
        cfg,
        clock,
        ledger,
        CostGuard(cfg.budget, ledger, clock),
        lambda: models_of(llm) if protocol == "tools" else Models.single(llm, protocol=protocol),
        locate,
        DirExclusion(),
        retire_candidates=retire_candidates,
    )


def check_once(tmp_path: Path, closed: str) -> Verdict:
    """One gate check with the time gate (a fresh lock) or the throttle (a scan just now)
    closed, over a project folder holding transcripts."""
    service = make_service(tmp_path, object())
    memory = tmp_path / "projects" / "proj" / "memory"
    memory.mkdir(parents=True)
    for n in range(3 if closed == "none" else 8):
        (memory.parent / f"s{n}.jsonl").write_text("{}\n")
    found = service.find_dir(memory)
    if closed == "time":
        (memory / LOCK_NAME).write_text("")
    elif closed == "throttle":
        old = time.time() - 2 * 86400
        (memory / LOCK_NAME).write_text("")
        os.utime(memory / LOCK_NAME, (old, old))
        found.last_scan_at = time.time() - 60
    else:  # every cheap gate open: the scan runs (3 sessions close the session gate)
        old = time.time() - 2 * 86400
        (memory / LOCK_NAME).write_text("")
        os.utime(memory / LOCK_NAME, (old, old))

    async def main() -> Verdict:
        verdict, _ = await service._check(found, force=False, trigger="", auto=True)
        return verdict

    return anyio.run(main)


def recorder_for(memory: Path, run_dir: Path, saved: dict[str, str] | None = None) -> Recorder:
    """A run's recorder over ``memory``, its journal made in ``run_dir`` (as a run makes it)."""
    from memd.dream.journal import Journal
    from memd.dream.recorder import Recorder

    run_dir.mkdir(parents=True, exist_ok=True)
    book = Journal(run_dir)
    book.create()
    return Recorder(memory, book, saved or {})
