"""One dream run (R-D3, R-B3): snapshot, the consolidation agent, then keep or undo.

:func:`consolidate` copies the memory dir into the run folder, runs the agent through
:func:`memd.agent.runner.run_agent` with the tools of :mod:`memd.dream.tools` (every write
journaled), and settles:

* the agent finished and the wipe guard (:mod:`memd.dream.wipe`) finds nothing → the run's
  files are scrubbed of secrets and private spans, the change log is written: ``completed``;
* the model failed, the run timed out or used all its turns, or the wipe guard tripped → the
  change log is written, then the run's own changes are undone (:func:`memd.dream.journal.undo`):
  ``failed`` with the reason;
* ``abort`` was set → undone the same way: ``aborted``;
* the task is cancelled (shutdown) → undone under a shield, and the cancellation goes on.

Holding the consolidation lock and the record on disk are the caller's part.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, assert_never

import anyio
import anyio.to_thread

from memd.agent.runner import (
    AgentProgress,
    AgentRun,
    AgentSpec,
    Completed,
    Failed,
    TimedOut,
    TurnLimit,
    run_agent,
)
from memd.agent.tools import Tool
from memd.clock import Clock
from memd.dream import journal, prompts, snapshot, wipe
from memd.dream.journal import Change, Journal
from memd.dream.runs import SNAPSHOT
from memd.dream.tools import Written, dream_tools
from memd.errors import WriteFailed
from memd.llm.client import LLM, Usage
from memd.llm.ledger import Ledger
from memd.memory.extract import scrub_files
from memd.memory.paths import INDEX_FILENAME

log = logging.getLogger(__name__)


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


# Records what the given memory files cite, told each file before rewriting it (issue 26).
CiteRun = Callable[[Sequence[str], Callable[[str], None]], tuple[str, ...]]


@dataclass(frozen=True)
class Job:
    memory_dir: Path
    run_dir: Path
    transcript_dirs: tuple[Path, ...]
    sessions: tuple[str, ...]
    project: str
    today: str
    trigger_session: str = ""
    # Issue 26: memories whose citations have all failed memory.citation_retire_days.
    retire: tuple[str, ...] = ()
    # Issue 26: records what the files a kept run wrote cite (relative paths; the hook is
    # told each file before it is rewritten); the files rewritten.
    cite: CiteRun | None = None


@dataclass(frozen=True)
class DreamOutcome:
    state: str  # "completed", "failed", "aborted"
    reason: str
    changes: tuple[Change, ...]
    flagged: tuple[str, ...]
    turns: int = 0
    tool_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    summary: str = ""
    error: BaseException | None = None  # the model's error, for the cost guard
    undo_failed: tuple[str, ...] = ()  # files the disk would not let the undo put back


async def consolidate(
    llm: LLM,
    settings: DreamSettings,
    job: Job,
    *,
    ledger: Ledger,
    clock: Clock,
    abort: anyio.Event,
    on_progress: Callable[[AgentProgress], None] | None = None,
) -> DreamOutcome:
    """Run one dream on ``job`` (see the module docstring)."""
    snap = job.run_dir / SNAPSHOT
    try:
        before = await anyio.to_thread.run_sync(
            lambda: snapshot.take(job.memory_dir, snap, max_bytes=settings.snapshot_max_bytes)
        )
    except (snapshot.TooLarge, OSError) as exc:
        return DreamOutcome("failed", f"cannot snapshot the memory dir: {exc}", (), ())
    index = snapshot.saved_bytes(snap, INDEX_FILENAME) if INDEX_FILENAME in before.files else None
    tools, written = dream_tools(
        job.memory_dir, Journal(job.run_dir), job.transcript_dirs, secrets=settings.redact_secrets
    )
    spec, messages = _request(settings, job, tools, index)
    run: AgentRun | None = None
    try:
        async with anyio.create_task_group() as tg:

            async def watch_abort() -> None:
                await abort.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(watch_abort)
            run = await run_agent(
                llm, spec, messages, ledger=ledger, clock=clock, on_progress=on_progress
            )
            tg.cancel_scope.cancel()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_undo, job, "cancelled")
        raise
    if run is None:
        return await anyio.to_thread.run_sync(_give_up, job, "aborted", "aborted on request")
    return await anyio.to_thread.run_sync(_settle, job, settings, run, before, index, written)


def _request(
    settings: DreamSettings, job: Job, tools: Mapping[str, Tool], index: bytes | None
) -> tuple[AgentSpec, list[dict[str, Any]]]:
    """The agent's spec and its first message (scrubbed)."""
    spec = AgentSpec(
        kind="dream",
        model=settings.model,
        system=prompts.system_prompt(max_turns=settings.max_turns),
        tools=tools,
        max_turns=settings.max_turns,
        timeout_s=settings.timeout_s,
        max_tokens=settings.max_tokens,
        project=job.project,
        session=job.trigger_session,
    )
    text = prompts.task_message(
        memory_dir=str(job.memory_dir),
        today=job.today,
        sessions=job.sessions,
        index=(index or b"").decode("utf-8", "replace"),
        max_lines=settings.index_max_lines,
        max_bytes=settings.index_max_bytes,
        secrets=settings.redact_secrets,
        retire=job.retire,
    )
    return spec, [{"role": "user", "content": text}]


def _settle(
    job: Job,
    settings: DreamSettings,
    run: AgentRun,
    before: snapshot.Tree,
    index_before: bytes | None,
    written: Written,
) -> DreamOutcome:
    """Keep a good run or undo a bad one (blocking)."""
    reason = _run_problem(run)
    if reason is None:
        problems = wipe.problems(
            set(before.files),
            index_before,
            _after(job.memory_dir, written),
            wipe.Limits(settings.index_max_lines, settings.index_max_bytes),
        )
        reason = f"wipe guard: {'; '.join(problems)}" if problems else None
    if reason is not None:
        outcome = _give_up(job, "failed", reason)
    else:
        _scrub_written(job, written, settings.redact_secrets)
        _cite_written(job, written)
        changes = tuple(journal.changes(job.memory_dir, job.run_dir, job.run_dir / SNAPSHOT))
        outcome = DreamOutcome("completed", "", changes, ())
    return DreamOutcome(
        outcome.state,
        outcome.reason,
        outcome.changes,
        outcome.flagged,
        run.turns,
        len(run.tool_calls),
        run.usage,
        run.final_text.strip()[:500],
        run.outcome.error if isinstance(run.outcome, Failed) else None,
    )


def _run_problem(run: AgentRun) -> str | None:
    match run.outcome:
        case Completed():
            return None
        case TurnLimit():
            return f"the agent did not finish in {run.turns} turns"
        case TimedOut():
            return f"the agent timed out after {run.ended_at - run.started_at:.0f} s"
        case Failed(error=WriteFailed() as error):
            return str(error)
        case Failed(error=error):
            return f"the model call failed: {error}"
        case unreachable:
            assert_never(unreachable)


def _after(memory_dir: Path, written: Written) -> wipe.After:
    tree = snapshot.current_tree(memory_dir)
    index = snapshot.memory_bytes(memory_dir, INDEX_FILENAME)
    texts: dict[str, str | None] = {}
    for relative in written.paths:
        data = snapshot.memory_bytes(memory_dir, relative)
        if data is not None:
            try:
                texts[relative] = data.decode("utf-8")
            except UnicodeDecodeError:
                texts[relative] = None
    return wipe.After(set(tree.files), index, texts)


def _scrub_written(job: Job, written: Written, secrets: bool) -> None:
    book = Journal(job.run_dir)
    for relative in scrub_files(job.memory_dir, sorted(written.paths), secrets=secrets):
        data = snapshot.memory_bytes(job.memory_dir, relative)
        book.done(relative, snapshot.sha256(data) if data is not None else None)


def _cite_written(job: Job, written: Written) -> None:
    """Record the citations of the files the run wrote, journaled as the run's own writes
    (an undo puts each file back byte for byte)."""
    if job.cite is None:
        return
    book = Journal(job.run_dir)
    try:
        cited = job.cite(sorted(written.paths), book.intent)
    except Exception:  # a citation is a hint: the run is kept without one
        log.exception("recording the citations of %s crashed", job.memory_dir)
        return
    for relative in cited:
        data = snapshot.memory_bytes(job.memory_dir, relative)
        book.done(relative, snapshot.sha256(data) if data is not None else None)


def _give_up(job: Job, state: str, reason: str) -> DreamOutcome:
    """Write down what the run did, then undo it (blocking)."""
    changes = tuple(journal.changes(job.memory_dir, job.run_dir, job.run_dir / SNAPSHOT))
    undone = _undo(job, reason)
    return DreamOutcome(state, reason, changes, undone.flagged, undo_failed=undone.failed)


def _undo(job: Job, reason: str) -> journal.Undone:
    undone = journal.undo(job.memory_dir, job.run_dir, job.run_dir / SNAPSHOT)
    log.info(
        "dream in %s undone (%s): %d files put back, %d kept (changed by someone else), "
        "%d the disk refused (tried again later)",
        job.memory_dir,
        reason,
        len(undone.restored),
        len(undone.flagged),
        len(undone.failed),
    )
    return undone
