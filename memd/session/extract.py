"""One notes extraction job (R-S4, R-S7): bring a session's notes up to date.

1. Make sure the notes file exists (from the template).
2. Plan the input (:mod:`memd.session.inputs`): one request for the full strategy, one per
   chunk of unseen messages for the delta strategy.
3. For each request, run the restricted sub-agent with only the Edit tool under the
   :class:`~memd.agent.permissions.EditOnlyFile` policy: an Edit aimed at any other path is
   denied in code, an Edit whose ``old_string`` does not match comes back as an error the
   model can correct.
4. Afterwards, check that every header and description line is byte-identical to the
   template; if not — or if the run failed — put the previous notes back and raise. Scrub
   the final file of secrets and ``<private>`` spans.
5. Report the progress (``on_chunk``) so the caller can record the covered message and,
   when no tool call is pending, the new ``lastSummarizedMessageId``.

All file work runs in worker threads. Errors leave the notes as they were before the failed
request and propagate: :class:`memd.errors.LLMError` from the model, :class:`AgentError`
when the run timed out or broke the template.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import assert_never

import anyio.to_thread

from memd.agent.permissions import EditOnlyFile
from memd.agent.runner import AgentRun, AgentSpec, Completed, Failed, TimedOut, TurnLimit, run_agent
from memd.agent.tools import make_tools
from memd.clock import Clock
from memd.config import SessionNotesConfig
from memd.errors import AgentError, PromptTooLong
from memd.llm.backends import Protocol
from memd.llm.client import LLM, Usage
from memd.llm.guard import keep_newest
from memd.llm.ledger import Ledger
from memd.llm.models import Route
from memd.privacy import scrub_text
from memd.session import inputs, notes, prompts, whole
from memd.session.template import (
    Broken,
    Intact,
    check_skeleton,
    load_template,
    template_path,
)
from memd.tokens import estimate_text
from memd.transcript.messages import ApiMessage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NotesSetup:
    """What one extraction needs: settings plus the template and prompt read for this job."""

    config: SessionNotesConfig
    projects_root: Path
    template: str
    prompt: str
    model: str
    max_tokens: int
    timeout_s: float
    redact_secrets: bool = True
    protocol: Protocol = "tools"  # how the job's backend is asked (memd.llm.models)


@dataclass(frozen=True)
class NotesSettings:
    """The daemon's side of the setup: config values and where the user's files live."""

    config: SessionNotesConfig
    projects_root: Path
    claude_dir: Path
    model: str
    max_tokens: int
    timeout_s: float  # one whole agent run
    redact_secrets: bool = True


def load_setup(settings: NotesSettings, route: Route | None = None) -> NotesSetup:
    """Read the user's template and prompt (if any) and build the setup (blocking); the
    model and protocol are the route's (the job's backend), else the settings'.

    Done for every job, so editing ``template.md`` or ``prompt.md`` needs no reload.
    """
    return NotesSetup(
        config=settings.config,
        projects_root=settings.projects_root,
        template=load_template(template_path(settings.claude_dir)),
        prompt=prompts.load_prompt(prompts.prompt_path(settings.claude_dir)),
        model=route.model if route is not None else settings.model,
        max_tokens=settings.max_tokens,
        timeout_s=settings.timeout_s,
        redact_secrets=settings.redact_secrets,
        protocol=route.protocol if route is not None else "tools",
    )


@dataclass(frozen=True)
class NotesJob:
    """One session at the moment the job was taken."""

    session_id: str
    project: str
    messages: tuple[ApiMessage, ...]
    context_tokens: int
    cursor: str | None  # the last message the notes have seen (None: none yet)
    # After a prompt-too-long: at most this many tokens of conversation per request (R-B1).
    input_cap: int | None = None


@dataclass(frozen=True)
class ChunkDone:
    """A request finished and its edits are kept."""

    covered_uuid: str | None
    anchor_uuid: str | None  # the new lastSummarizedMessageId; None leaves it unchanged
    usage: Usage


@dataclass(frozen=True)
class Extracted:
    notes_path: Path
    created: bool
    requests: int  # agent runs (chunks)
    usage: Usage
    covered_uuid: str | None
    anchor_uuid: str | None


OnChunk = Callable[[ChunkDone], Awaitable[None]]


def plan(setup: NotesSetup, job: NotesJob) -> tuple[inputs.Chunk, ...]:
    """The chunks to run, per the configured strategy (pure, but tokenizes: use a thread)."""
    messages = job.messages
    cap = job.input_cap
    match setup.config.strategy:
        case "full":
            if messages and cap is not None:
                messages = keep_newest(
                    messages, cap, lambda m: inputs.fork_tokens(m, estimate_text)
                )
            return (inputs.plan_full(messages),) if messages else ()
        case "delta":
            size = setup.config.chunk_tokens
            return inputs.plan_delta(
                messages,
                job.cursor,
                overlap=setup.config.overlap_messages,
                chunk_tokens=size if cap is None else max(1, min(size, cap)),
                estimate=estimate_text,
            )


def build_request(
    setup: NotesSetup, chunk: inputs.Chunk, current: str, path: Path
) -> inputs.Request:
    """The request for one chunk on the current notes, with the budget reminder (pure)."""
    budget = notes.analyze_budget(current, setup.template, setup.config, estimate_text)
    instruction = prompts.render_prompt(
        setup.prompt,
        notes=current,
        notes_path=str(path),
        reminder=notes.budget_reminder(budget),
    )
    secrets = setup.redact_secrets
    match setup.config.strategy:
        case "full":
            return inputs.full_request(chunk, instruction, secrets=secrets)
        case "delta":
            return inputs.delta_request(chunk, instruction, secrets=secrets)


async def extract_notes(
    llm: LLM,
    setup: NotesSetup,
    job: NotesJob,
    *,
    ledger: Ledger,
    clock: Clock,
    on_chunk: OnChunk | None = None,
) -> Extracted:
    """Run the job; see the module docstring. Raises on failure with the notes restored."""
    path = notes.notes_path(setup.projects_root, job.project, job.session_id)
    _, created = await anyio.to_thread.run_sync(notes.ensure_notes, path, setup.template)
    if created:
        # A new (or deleted and re-created) file has seen nothing: start from the beginning.
        job = replace(job, cursor=None)
    chunks = await anyio.to_thread.run_sync(plan, setup, job)
    usage = Usage()
    covered, anchor = job.cursor, None
    for chunk in chunks:
        done = await _run_chunk(llm, setup, job, chunk, path, ledger=ledger, clock=clock)
        usage += done.usage
        covered = done.covered_uuid
        anchor = done.anchor_uuid or anchor
        if on_chunk is not None:
            await on_chunk(done)
    return Extracted(path, created, len(chunks), usage, covered, anchor)


async def _run_chunk(
    llm: LLM,
    setup: NotesSetup,
    job: NotesJob,
    chunk: inputs.Chunk,
    path: Path,
    *,
    ledger: Ledger,
    clock: Clock,
) -> ChunkDone:
    before = await anyio.to_thread.run_sync(notes.ensure_notes, path, setup.template)
    spec = AgentSpec(
        kind="session_notes",
        model=setup.model,
        system=whole.SYSTEM_PROMPT if setup.protocol == "whole" else prompts.SYSTEM_PROMPT,
        tools=make_tools(EditOnlyFile(path), ["Edit"], cwd=path.parent),
        max_turns=setup.config.max_turns,
        timeout_s=setup.timeout_s,
        max_tokens=setup.max_tokens,
        project=job.project,
        session=job.session_id,
    )
    try:
        if setup.protocol == "whole":
            usage = await _whole_chunk(llm, setup, spec, chunk, path, before[0], ledger)
        else:
            usage = await _tool_chunk(llm, setup, spec, chunk, path, before[0], ledger, clock)
    except PromptTooLong as exc:
        strategy = "delta" if setup.protocol == "whole" else setup.config.strategy
        exc.sent = await anyio.to_thread.run_sync(
            inputs.chunk_tokens, chunk, strategy, estimate_text
        )
        raise
    anchor = chunk.covered_uuid if chunk.anchor_safe else None
    return ChunkDone(chunk.covered_uuid, anchor, usage)


async def _tool_chunk(
    llm: LLM,
    setup: NotesSetup,
    spec: AgentSpec,
    chunk: inputs.Chunk,
    path: Path,
    before: str,
    ledger: Ledger,
    clock: Clock,
) -> Usage:
    """The Edit tool loop on one chunk; its edits kept or undone (:func:`_settle`)."""
    request = await anyio.to_thread.run_sync(build_request, setup, chunk, before, path)
    run = await run_agent(llm, spec, request.messages, ledger=ledger, clock=clock)
    await anyio.to_thread.run_sync(_settle, setup, path, before, run)
    return run.usage


async def _whole_chunk(
    llm: LLM,
    setup: NotesSetup,
    spec: AgentSpec,
    chunk: inputs.Chunk,
    path: Path,
    before: str,
    ledger: Ledger,
) -> Usage:
    """The whole new notes asked for and checked (:mod:`memd.session.whole`)."""
    budget = await anyio.to_thread.run_sync(
        notes.analyze_budget, before, setup.template, setup.config, estimate_text
    )
    return await whole.run_chunk(
        llm,
        spec,
        chunk,
        path,
        template=setup.template,
        before=before,
        reminder=notes.budget_reminder(budget),
        section_limit=setup.config.section_tokens,
        total_limit=setup.config.total_tokens,
        secrets=setup.redact_secrets,
        ledger=ledger,
    )


def _settle(setup: NotesSetup, path: Path, before: str, run: AgentRun) -> None:
    """Keep the run's edits if it ended well and kept the template; else restore (blocking)."""
    after = notes.read_notes(path)
    match run.outcome:
        case Completed() | TurnLimit():
            pass
        case Failed() | TimedOut():
            if after != before:
                notes.write_notes(path, before)
            run.raise_for_outcome()
        case unreachable:
            assert_never(unreachable)
    problem = _template_problem(setup.template, before, after)
    if problem is not None or after is None:
        notes.write_notes(path, before)
        raise AgentError(f"the notes extraction changed the template ({problem}); undone")
    scrubbed = scrub_text(after, secrets=setup.redact_secrets)
    if scrubbed != after:
        notes.write_notes(path, scrubbed)
    if isinstance(run.outcome, TurnLimit):
        log.info("notes of %s: the agent used every turn; its edits are kept", path)


def _template_problem(template: str, before: str, after: str | None) -> str | None:
    if after is None:
        return "the notes file was removed"
    # Notes made under another template (the user changed it since) keep their own skeleton.
    reference = template if isinstance(check_skeleton(before, template), Intact) else before
    match check_skeleton(after, reference):
        case Intact():
            return None
        case Broken(problems=problems):
            return "; ".join(problems)
