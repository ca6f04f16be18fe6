"""One dream run (R-D3, R-B3): snapshot, the consolidation agent, then keep or undo.

:func:`consolidate` makes the run's journal and copies the memory dir into the run folder,
both on disk for good before anything changes (a state disk that refuses either: the run
fails having changed nothing), then runs the agent through :func:`memd.agent.runner.run_agent`
with the tools of :mod:`memd.dream.tools`. Every change to the memory dir, the agent's and
this module's own, is recorded before it is made (:mod:`memd.dream.recorder`); a record the
state disk refuses stops the change and fails the run. It settles:

* the agent finished and the wipe guard (:mod:`memd.dream.wipe`) finds nothing → the run's
  files are scrubbed of secrets and private spans and their citations recorded, the change
  log is made: ``completed`` (the caller writes it down, or undoes the run when it cannot);
* the model failed, the run timed out or used all its turns, a record was refused, or the
  wipe guard tripped → the change log is made, then the run's own changes are undone
  (:func:`memd.dream.undo.undo`): ``failed`` with the reason;
* ``abort`` was set → undone the same way: ``aborted``;
* the task is cancelled (shutdown) → undone under a shield, and the cancellation goes on.

Holding the consolidation lock and the record on disk are the caller's part.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
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
from memd.confined import Area, Refused
from memd.dream import changelog, prompts, snapshot, wipe
from memd.dream.changelog import Change
from memd.dream.job import DreamSettings, Job
from memd.dream.journal import Journal, RecordRefused
from memd.dream.one_answer import dream_once
from memd.dream.recorder import Recorder
from memd.dream.runs import SNAPSHOT
from memd.dream.tools import Written, dream_tools
from memd.dream.undo import Undone, undo
from memd.errors import MalformedAnswer, WriteFailed
from memd.llm.backends import Protocol
from memd.llm.client import LLM, Usage
from memd.llm.ledger import Ledger
from memd.memory.paths import INDEX_FILENAME
from memd.privacy import scrub_text

log = logging.getLogger(__name__)


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
    protocol: Protocol = "tools",
) -> DreamOutcome:
    """Run one dream on ``job`` (see the module docstring); ``protocol``: the model drives
    the tools, or is asked for one answer (:mod:`memd.dream.one_answer`)."""
    snap = job.run_dir / SNAPSHOT
    book = Journal(job.run_dir)
    try:
        before = await anyio.to_thread.run_sync(
            partial(_prepare, job, book, settings.snapshot_max_bytes)
        )
    except (snapshot.TooLarge, OSError) as exc:
        why = f"cannot snapshot the memory dir or start the run's journal: {exc}; nothing changed"
        return DreamOutcome("failed", why, (), ())
    index = snapshot.saved_bytes(snap, INDEX_FILENAME) if INDEX_FILENAME in before.files else None
    recorder = Recorder(job.memory_dir, book, before.files)
    tools, written = dream_tools(
        job.memory_dir, recorder, job.transcripts, secrets=settings.redact_secrets
    )
    kept = Kept(before, index, written, recorder)
    run: AgentRun | None = None
    try:
        async with anyio.create_task_group() as tg:

            async def watch_abort() -> None:
                await abort.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(watch_abort)
            ask = Ask(llm, ledger, clock, on_progress)
            run = await _drive(ask, settings, job, protocol, tools, kept)
            tg.cancel_scope.cancel()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_undo, job, "cancelled")
        raise
    if run is None:
        return await anyio.to_thread.run_sync(_give_up, job, "aborted", "aborted on request")
    return await anyio.to_thread.run_sync(_settle, job, settings, run, kept)


def _prepare(job: Job, book: Journal, max_bytes: int) -> snapshot.Tree:
    """The run's journal and snapshot, both on disk for good (blocking)."""
    book.create()
    return snapshot.take(job.memory_dir, job.run_dir / SNAPSHOT, max_bytes=max_bytes)


@dataclass(frozen=True)
class Ask:
    """How a run asks its model: the client, and what counts and follows the calls."""

    llm: LLM
    ledger: Ledger
    clock: Clock
    on_progress: Callable[[AgentProgress], None] | None


async def _drive(
    ask: Ask,
    settings: DreamSettings,
    job: Job,
    protocol: Protocol,
    tools: Mapping[str, Tool],
    kept: Kept,
) -> AgentRun:
    """The model's part of a run: the tool loop, or one answer memd applies itself."""
    if protocol == "whole":
        return await dream_once(
            ask.llm,
            settings,
            job,
            kept.before,
            kept.index,
            kept.recorder,
            kept.written,
            ledger=ask.ledger,
            clock=ask.clock,
            on_progress=ask.on_progress,
        )
    spec, messages = _request(settings, job, tools, kept.index)
    return await run_agent(
        ask.llm, spec, messages, ledger=ask.ledger, clock=ask.clock, on_progress=ask.on_progress
    )


@dataclass(frozen=True)
class Kept:
    """What settling a run needs of its start: the snapshot, the index then, what it wrote."""

    before: snapshot.Tree
    index: bytes | None
    written: Written
    recorder: Recorder


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


def _settle(job: Job, settings: DreamSettings, run: AgentRun, kept: Kept) -> DreamOutcome:
    """Keep a good run or undo a bad one (blocking)."""
    reason = _run_problem(run)
    if reason is None:
        problems = wipe.problems(
            set(kept.before.files),
            kept.index,
            _after(job.memory_dir, kept.written),
            wipe.Limits(settings.index_max_lines, settings.index_max_bytes),
        )
        reason = f"wipe guard: {'; '.join(problems)}" if problems else None
    if reason is None:
        try:
            _scrub_written(job, kept.written, settings.redact_secrets, kept.recorder)
        except OSError as exc:  # a run whose files keep a secret is not kept
            reason = f"cannot scrub the files the run wrote: {_write_problem(exc)}"
    if reason is not None:
        outcome = _give_up(job, "failed", reason)
    else:
        _cite_written(job, kept.written, kept.recorder)
        changes = tuple(changelog.changes(job.memory_dir, job.run_dir, job.run_dir / SNAPSHOT))
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
            return _write_problem(error)
        case Failed(error=MalformedAnswer() as error):
            return f"the model's answer was refused: {error}"
        case Failed(error=error):
            return f"the model call failed: {error}"
        case unreachable:
            assert_never(unreachable)


def _write_problem(error: OSError) -> str:
    """Why a write ended the run; a refused record says so."""
    if isinstance(error, RecordRefused):
        return (
            f"the state disk refused the record of a change ({error}): the change was not "
            "made, and the run is undone"
        )
    return str(error)


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


def _scrub_written(job: Job, written: Written, secrets: bool, recorder: Recorder) -> None:
    """Scrub the files the run wrote of secrets and private spans, each rewrite recorded
    first; raises ``OSError`` when a rewrite (or its record) is refused."""
    try:
        area = Area.open(job.memory_dir, guard=recorder)
    except FileNotFoundError:
        return
    with area:
        for relative in sorted(written.paths):
            try:
                data, _ = area.read(relative, max_bytes=snapshot.SNAPSHOT_MAX_BYTES)
                text = data.decode("utf-8")
            except (OSError, ValueError):  # gone, a link now, not text: nothing to scrub
                continue
            clean = scrub_text(text, secrets=secrets)
            if clean != text:
                with contextlib.suppress(Refused):  # turned into a link meanwhile: left alone
                    area.write(relative, clean.encode("utf-8"), expected=data)


def _cite_written(job: Job, written: Written, recorder: Recorder) -> None:
    """Record the citations of the files the run wrote, each rewrite recorded first (an undo
    puts each file back byte for byte). A citation is a hint: one the disk refuses is left
    out and the run is kept."""
    if job.cite is None:
        return
    try:
        job.cite(sorted(written.paths), recorder)
    except Exception:  # a citation is a hint: the run is kept without one
        log.exception("recording the citations of %s crashed", job.memory_dir)


def _give_up(job: Job, state: str, reason: str) -> DreamOutcome:
    """Write down what the run did, then undo it (blocking)."""
    changes = tuple(changelog.changes(job.memory_dir, job.run_dir, job.run_dir / SNAPSHOT))
    undone = _undo(job, reason)
    return DreamOutcome(state, reason, changes, undone.flagged, undo_failed=undone.failed)


def _undo(job: Job, reason: str) -> Undone:
    undone = undo(job.memory_dir, job.run_dir, job.run_dir / SNAPSHOT)
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
