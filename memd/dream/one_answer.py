"""A dream on a model asked for one answer (issue 34): a small local model, an agent's CLI run
headless, any backend whose protocol for the dream is ``whole``.

memd does the looking itself (:mod:`memd.dream.gather`: the index, the topic files within
budgets, a few transcript excerpts), asks once (:func:`memd.agent.runner.ask_once`: no tools,
the ledger counts it; a request over the model's context once more, with less shown),
checks every operation of the answer before any is applied (:mod:`memd.dream.answer`), then
applies them through the run's journaled area: each write and delete recorded by the run's
:class:`~memd.dream.recorder.Recorder` before it is made, exactly as the tool loop's Write,
Edit and Delete are. The run then settles as any dream
(:func:`memd.dream.consolidate.consolidate`): the wipe guard, the scrub, the citations, the
change log, kept or undone; snapshot, journal, undo, restore and ``dream --log`` do not know
which protocol made the changes.

A malformed, cut-short or refused answer changes nothing: the run ends :class:`Failed` with a
:class:`~memd.errors.MalformedAnswer`, which the cost guard counts (``malformed_answers``)
and parks (never retried at once).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

from memd.agent.runner import (
    AgentProgress,
    AgentRun,
    AgentSpec,
    Completed,
    Failed,
    Outcome,
    ToolCall,
    ask_once,
)
from memd.clock import Clock
from memd.confined import Area
from memd.dream import answer, gather, prompts, snapshot, wipe
from memd.dream.job import DreamSettings, Job
from memd.dream.recorder import Recorder
from memd.dream.tools import Written
from memd.errors import LLMError, MalformedAnswer, PromptTooLong, WriteFailed
from memd.llm.client import LLM, LLMReply, Usage
from memd.llm.ledger import Ledger
from memd.memory.paths import INDEX_FILENAME
from memd.privacy import scrub_text


class ChangedMeanwhile(WriteFailed):
    """A note the answer changes no longer holds what the model was shown: someone else
    wrote it during the run. Nothing more is changed and the run is undone (their change
    kept)."""

    def __str__(self) -> str:
        return f"{self.path} changed while the dream ran; the run is undone, their change kept"


async def dream_once(
    llm: LLM,
    settings: DreamSettings,
    job: Job,
    before: snapshot.Tree,
    index: bytes | None,
    recorder: Recorder,
    written: Written,
    *,
    ledger: Ledger,
    clock: Clock,
    on_progress: Callable[[AgentProgress], None] | None = None,
) -> AgentRun:
    """Gather, ask once, check, apply (see the module docstring); the run as the tool loop's
    would be (one turn, one "tool call" per operation)."""
    started = clock.now()
    limits = wipe.Limits(settings.index_max_lines, settings.index_max_bytes)
    secrets = settings.redact_secrets
    spec = AgentSpec(
        kind="dream",
        model=settings.model,
        system=prompts.ONE_ANSWER_SYSTEM,
        tools={},
        max_turns=1,
        timeout_s=settings.timeout_s,
        max_tokens=settings.max_tokens,
        project=job.project,
        session=job.trigger_session,
    )
    asking = Asking(llm, spec, job, before, index, limits, secrets, ledger)
    try:
        found, reply = await asking.ask()
    except LLMError as exc:
        return _run(Failed(exc), 0, (), Usage(), "", started, clock.now())
    shown = answer.Shown(found.whole(), set(before.files), index, limits, secrets)
    try:
        ops, summary = answer.operations_of(reply)
        plan = answer.plan(ops, shown, scrub_text(summary, secrets=secrets))
    except MalformedAnswer as exc:
        text = scrub_text(reply.text[:500], secrets=secrets)
        return _run(Failed(exc), 1, (), reply.usage, text, started, clock.now(), reply)
    calls = tuple(ToolCall(1, step.op, True, False, step.touched) for step in plan.steps)
    if on_progress is not None:
        touched = tuple(dict.fromkeys(p for call in calls for p in call.touched))
        on_progress(AgentProgress("dream", 1, calls, touched, reply.usage, summary, started))
    outcome: Outcome = Completed()
    try:
        await anyio.to_thread.run_sync(apply, job.memory_dir, recorder, written, plan, shown)
    except WriteFailed as exc:  # a refused record, a disk fault, a note changed meanwhile
        outcome = Failed(exc)
    return _run(outcome, 1, calls, reply.usage, plan.summary, started, clock.now(), reply)


@dataclass(frozen=True)
class Asking:
    """The one request of a run: what memd gathers, and the call."""

    llm: LLM
    spec: AgentSpec
    job: Job
    before: snapshot.Tree
    index: bytes | None
    limits: wipe.Limits
    secrets: bool
    ledger: Ledger

    async def ask(self) -> tuple[gather.Gathered, LLMReply]:
        """Gather, ask; a request over the model's context is gathered again, cut to fit
        (shrinking is the cure), and asked once more, never again."""
        found = await anyio.to_thread.run_sync(self.gathered, gather.Budget())
        try:
            return found, await self.call(found)
        except PromptTooLong as exc:
            smaller = gather.Budget().shrunk(found, exc.actual, exc.limit)
        found = await anyio.to_thread.run_sync(self.gathered, smaller)
        return found, await self.call(found)

    async def call(self, found: gather.Gathered) -> LLMReply:
        message = {"role": "user", "content": self.message(found)}
        return await ask_once(self.llm, self.spec, [message], ledger=self.ledger)

    def gathered(self, budget: gather.Budget) -> gather.Gathered:
        return gather.gather(
            self.job.run_dir,
            self.before.files,
            self.index,
            self.job.transcripts,
            self.job.sessions,
            index_max_lines=self.limits.index_max_lines,
            index_max_bytes=self.limits.index_max_bytes,
            secrets=self.secrets,
            budget=budget,
        )

    def message(self, found: gather.Gathered) -> str:
        return prompts.one_answer_message(
            today=self.job.today,
            index=found.index,
            files=[(f.relative, f.text, f.whole is not None) for f in found.files],
            excerpts=found.excerpts,
            terms=found.terms,
            max_lines=self.limits.index_max_lines,
            max_ops=answer.MAX_OPERATIONS,
            secrets=self.secrets,
            retire=self.job.retire,
        )


def _run(
    outcome: Outcome,
    turns: int,
    calls: tuple[ToolCall, ...],
    usage: Usage,
    text: str,
    started: float,
    ended: float,
    reply: LLMReply | None = None,
) -> AgentRun:
    touched = tuple(dict.fromkeys(p for call in calls for p in call.touched))
    stop = reply.stop_reason if reply is not None else None
    return AgentRun("dream", outcome, turns, calls, touched, usage, text, stop, started, ended)


def apply(
    memory_dir: Path,
    recorder: Recorder,
    written: Written,
    plan: answer.Plan,
    shown: answer.Shown,
) -> None:
    """Make the plan's changes through an area the run's recorder guards (blocking): the
    notes written first, then the deletes (each recorded as merged into its note), the index
    last. A note that no longer holds what the model was shown stops it
    (:class:`ChangedMeanwhile`); so does a record or a write the disk refuses."""
    with Area.open(memory_dir, guard=recorder) as area:
        for relative, data in plan.writes.items():
            if not area.write(relative, data, expected=shown.whole[relative]):
                raise ChangedMeanwhile(str(area.path(relative)), OSError(0, "changed"))
            written.paths.add(relative)
        for relative, into in plan.deletes.items():
            if snapshot.area_bytes(area, relative) != shown.whole[relative]:
                raise ChangedMeanwhile(str(area.path(relative)), OSError(0, "changed"))
            recorder.merges[relative] = into
            area.unlink(relative)
            written.paths.add(relative)
        if plan.index is not None:
            if not _write_index(area, plan.index, shown.index):
                raise ChangedMeanwhile(str(area.path(INDEX_FILENAME)), OSError(0, "changed"))
            written.paths.add(INDEX_FILENAME)


def _write_index(area: Area, data: bytes, before: bytes | None) -> bool:
    if before is None:
        if area.lstat(INDEX_FILENAME) is not None:
            return False  # one appeared meanwhile: not overwritten
        return area.write(INDEX_FILENAME, data)
    return area.write(INDEX_FILENAME, data, expected=before)
