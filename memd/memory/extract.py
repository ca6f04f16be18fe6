"""Background memory extraction (R-M3): one session's new messages into the memory dir.

After a completed turn the service plans a run with :func:`memd.memory.plan.plan_extraction`
(pure: the new part of the conversation, or a skip). :func:`extract_memories` then runs the
restricted sub-agent on the new part (the request is built by
:func:`memd.memory.prompts.build_request`: redacted, cut, placeholders for media).
The agent may Read, Grep and Glob inside the memory dir, run read-only shell commands there,
and Write or Edit only files inside it (:class:`~memd.agent.permissions.MemoryDirPolicy`, no
delete).

After a good run every file the agent touched is scrubbed in place, and a topic file it
wrote without an index line gets one. A run that fails, times out or is cancelled is rolled
back from a snapshot taken before it (files it created are removed, files it changed are put
back), so a retry starts from the same memory dir: never half-applied (R-A5).

Where each session's new part starts is kept by :class:`memd.memory.cursors.CursorStore`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any, Literal, assert_never

import anyio
import anyio.to_thread

from memd.agent.permissions import MemoryDirPolicy
from memd.agent.runner import AgentRun, AgentSpec, Completed, Failed, TimedOut, TurnLimit, run_agent
from memd.agent.tools import Tool, ToolResult, make_tools
from memd.clock import Clock
from memd.confined import Area, Refused, shown
from memd.errors import NotFound, PromptTooLong
from memd.llm.backends import Protocol
from memd.llm.client import LLM, Usage
from memd.llm.guard import keep_newest
from memd.llm.ledger import Ledger
from memd.memory import operations, prompts
from memd.memory.frontmatter import FrontmatterForm
from memd.memory.index import IndexEntry, load_index, parse_index
from memd.memory.paths import INDEX_FILENAME
from memd.memory.plan import Job
from memd.memory.remember import Limits
from memd.memory.scan import format_manifest, opened_area, scan_memories
from memd.memory.store import MemoryStore
from memd.privacy import scrub_text
from memd.tokens import estimate_text
from memd.transcript.messages import ApiMessage

log = logging.getLogger(__name__)

EXTRACT_TOOLS = ("Read", "Grep", "Glob", "Shell", "Edit", "Write")
SNAPSHOT_MAX_BYTES = 32 * 1024 * 1024


# ---------------------------------------------------------------------------------------------
# The run


@dataclass(frozen=True)
class ExtractSettings:
    model: str
    max_turns: int
    max_tokens: int
    timeout_s: float  # one whole agent run
    index_max_lines: int = 200
    index_max_bytes: int = 25_000
    scan_max_files: int = 200
    redact_secrets: bool = True
    frontmatter_form: FrontmatterForm = "metadata"  # as the session's Claude Code writes


@dataclass(frozen=True)
class Extracted:
    outcome: Literal["completed", "turn_limit"]
    turns: int
    tool_calls: int
    denied_calls: int
    files_touched: tuple[str, ...]  # resolved paths
    indexed: tuple[str, ...]  # topic files memd added index lines for
    usage: Usage
    summary: str  # the agent's last words


@dataclass(frozen=True)
class Snapshot:
    """The memory dir before a run: every entry's relative path, and the contents of most."""

    existing: frozenset[str]
    contents: dict[str, bytes]


async def extract_memories(
    llm: LLM,
    settings: ExtractSettings,
    job: Job,
    *,
    memory_dir: Path,
    project: str,
    session: str,
    ledger: Ledger,
    clock: Clock,
    input_cap: int | None = None,
    protocol: Protocol = "tools",
) -> Extracted:
    """Run the extraction agent on ``job`` (``protocol="whole"``: one answer of operations,
    :mod:`memd.memory.operations`). Raises the model error, or
    :class:`memd.errors.AgentError` on a timeout, after rolling the memory dir back.

    ``input_cap`` (after a prompt-too-long, R-B1): the most tokens of new conversation to
    send; the oldest part of ``job.new`` goes. A prompt-too-long raised here carries in
    ``sent`` the size of what was sent, so the caller can ask for less next time.
    """
    await anyio.to_thread.run_sync(lambda: memory_dir.mkdir(parents=True, exist_ok=True))
    manifest, index = await anyio.to_thread.run_sync(_current_memories, memory_dir, settings)
    today = datetime.fromtimestamp(clock.now(), UTC).strftime("%Y-%m-%d")
    new = job.new
    if input_cap is not None:
        new = keep_newest(new, input_cap, partial(_message_tokens, secrets=settings.redact_secrets))
    request = prompts.build_request(
        new,
        memory_dir=str(memory_dir),
        manifest=manifest,
        index=index,
        today=today,
        secrets=settings.redact_secrets,
    )
    spec = AgentSpec(
        kind="memory_extract",
        model=settings.model,
        system=prompts.system_prompt(max_turns=settings.max_turns, form=settings.frontmatter_form),
        tools=scrubbed_tools(memory_dir, secrets=settings.redact_secrets),
        max_turns=settings.max_turns,
        timeout_s=settings.timeout_s,
        max_tokens=settings.max_tokens,
        project=project,
        session=session,
    )
    before = await anyio.to_thread.run_sync(take_snapshot, memory_dir)
    try:
        if protocol == "whole":
            return await _by_operations(llm, spec, request, memory_dir, settings, ledger, before)
        return await _by_tools(llm, spec, request, memory_dir, settings, ledger, clock, before)
    except PromptTooLong as exc:
        exc.sent = estimate_text(prompts.render_new(new, secrets=settings.redact_secrets))
        raise


async def _by_tools(
    llm: LLM,
    spec: AgentSpec,
    request: list[dict[str, Any]],
    memory_dir: Path,
    settings: ExtractSettings,
    ledger: Ledger,
    clock: Clock,
    before: Snapshot,
) -> Extracted:
    """The tool loop: the agent's writes kept, or undone when the run fails or is cancelled."""
    try:
        run = await run_agent(llm, spec, request, ledger=ledger, clock=clock)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(roll_back, memory_dir, before)
        raise
    return await anyio.to_thread.run_sync(settle, memory_dir, before, run, settings)


async def _by_operations(
    llm: LLM,
    spec: AgentSpec,
    request: list[dict[str, Any]],
    memory_dir: Path,
    settings: ExtractSettings,
    ledger: Ledger,
    before: Snapshot,
) -> Extracted:
    """The whole-answer protocol: one answer of operations, checked, applied, or nothing."""
    rules = {"type": "text", "text": operations.answer_rules()}
    asked = [{**request[0], "content": [*request[0]["content"], rules]}]
    whole_spec = replace(
        spec,
        system=prompts.guidance(form=settings.frontmatter_form) + operations.SYSTEM_SUFFIX,
        tools={},
    )
    limits = Limits(
        content_max_bytes=operations.CONTENT_MAX_BYTES,
        index_max_lines=settings.index_max_lines,
        index_max_bytes=settings.index_max_bytes,
        redact_secrets=settings.redact_secrets,
    )
    try:
        applied = await operations.ask_and_apply(
            llm,
            whole_spec,
            asked,
            memory_dir,
            limits=limits,
            form=settings.frontmatter_form,
            ledger=ledger,
        )
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(roll_back, memory_dir, before)
        raise
    paths = tuple(str(memory_dir / name) for name in applied.written)
    said = f"saved {len(paths)} memory file(s)" if paths else "Nothing to save."
    return Extracted(
        "completed", 1, len(paths), 0, paths, applied.written, applied.reply.usage, said
    )


def _message_tokens(message: ApiMessage, *, secrets: bool) -> int:
    return estimate_text(prompts.render_new((message,), secrets=secrets))


@dataclass(frozen=True)
class ScrubbedTool:
    """A tool whose output is scrubbed before the model sees it: a memory file written by
    hand may hold a secret or a private span, and a Read must not send it away."""

    inner: Tool
    secrets: bool = True

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def description(self) -> str:
        return self.inner.description

    @property
    def input_schema(self) -> dict[str, Any]:
        return self.inner.input_schema

    async def run(self, args: Mapping[str, Any]) -> ToolResult:
        result = await self.inner.run(args)
        return replace(result, content=scrub_text(result.content, secrets=self.secrets))


def scrubbed_tools(memory_dir: Path, *, secrets: bool = True) -> dict[str, Tool]:
    """The extraction agent's tools under :class:`MemoryDirPolicy`, outputs scrubbed."""
    tools = make_tools(MemoryDirPolicy(memory_dir), EXTRACT_TOOLS, cwd=memory_dir)
    return {name: ScrubbedTool(tool, secrets) for name, tool in tools.items()}


def _current_memories(memory_dir: Path, settings: ExtractSettings) -> tuple[str, str]:
    """The manifest and the loaded index, scrubbed (they go to the model)."""
    headers = scan_memories(memory_dir, max_files=settings.scan_max_files)
    store = MemoryStore(memory_dir, redact=settings.redact_secrets)
    loaded = load_index(
        store.read_index(), max_lines=settings.index_max_lines, max_bytes=settings.index_max_bytes
    )
    secrets = settings.redact_secrets
    return scrub_text(format_manifest(headers), secrets=secrets), scrub_text(
        loaded.text, secrets=secrets
    )


def settle(
    memory_dir: Path, before: Snapshot, run: AgentRun, settings: ExtractSettings
) -> Extracted:
    """Keep a good run's work (scrubbed, indexed) or undo a bad one and raise (blocking)."""
    outcome: Literal["completed", "turn_limit"]
    match run.outcome:
        case Completed():
            outcome = "completed"
        case TurnLimit():
            outcome = "turn_limit"
        case Failed() | TimedOut():
            roll_back(memory_dir, before, run.files_touched)
            run.raise_for_outcome()
            raise AssertionError("unreachable: a failed run raises")  # pragma: no cover
        case unreachable:
            assert_never(unreachable)
    touched = (in_memory_dir(memory_dir, p) for p in run.files_touched)
    scrub_files(memory_dir, [r for r in touched if r], secrets=settings.redact_secrets)
    indexed = index_missing(memory_dir, run.files_touched, redact=settings.redact_secrets)
    return Extracted(
        outcome,
        run.turns,
        len(run.tool_calls),
        len(run.denied_calls),
        run.files_touched,
        indexed,
        run.usage,
        run.final_text.strip()[:500],
    )


# ---------------------------------------------------------------------------------------------
# Snapshot, roll-back, scrubbing and index repair (blocking)


def take_snapshot(memory_dir: Path) -> Snapshot:
    """Every entry below ``memory_dir`` (relative paths, links and hidden files included) and
    the bytes of the memory files that fit :data:`SNAPSHOT_MAX_BYTES` (files in hidden
    folders are listed but not copied; links and hard links are never read)."""
    with opened_area(memory_dir) as area:
        if area is None:
            return Snapshot(frozenset(), {})
        refused: list[str] = []
        files = [entry.relative for entry in area.walk(hidden=True, refused=refused)]
        contents: dict[str, bytes] = {}
        budget = SNAPSHOT_MAX_BYTES
        for relative in sorted(files):
            if "/." in "/" + relative.rpartition("/")[0]:
                continue
            data = _read_bytes(area, relative, budget)
            if data is not None:
                contents[relative] = data
                budget -= len(data)
    return Snapshot(frozenset(files) | frozenset(refused), contents)


def roll_back(memory_dir: Path, before: Snapshot, touched: Iterable[str] | None = None) -> None:
    """Undo a run: files it created go, files it changed get their old bytes back.

    ``touched=None`` compares the whole dir with the snapshot (a cancelled run's record of
    the files it touched is lost with it). Nothing is written through or over a link.
    """
    with opened_area(memory_dir) as area:
        if area is None:
            return
        if touched is None:
            listed = {entry.relative for entry in area.walk(hidden=True)}
            paths = listed | set(before.contents)  # a link someone made is left to them
        else:
            paths = {r for r in (in_memory_dir(memory_dir, p) for p in touched) if r}
        for relative in sorted(paths):
            _put_back(area, before, relative, warn=touched is not None)


def _put_back(area: Area, before: Snapshot, relative: str, *, warn: bool) -> None:
    old = before.contents.get(relative)
    try:
        if old is not None:
            if _read_bytes(area, relative, len(old)) != old:
                area.write(relative, old)
        elif relative not in before.existing:
            area.unlink(relative)
        elif warn:
            log.warning("memory extraction: cannot restore %s (not in the snapshot)", relative)
    except (OSError, ValueError) as exc:
        log.warning("memory extraction: cannot restore %s: %s", shown(relative), exc)


def in_memory_dir(memory_dir: Path, path: str) -> str | None:
    """``path`` (absolute, as the agent's tools report it) relative to the memory dir, or
    ``None`` when it is not below it."""
    for root in (str(memory_dir), os.path.realpath(memory_dir)):
        relative = os.path.relpath(path, root)
        if relative != "." and not relative.startswith("../") and relative != "..":
            return relative
    return None


def _read_bytes(area: Area, relative: str, limit: int) -> bytes | None:
    """The memory file's bytes, ``None`` when it is missing, not one, or over ``limit``."""
    try:
        data, _ = area.read(relative, max_bytes=limit + 1)
    except (OSError, ValueError):
        return None
    return data if len(data) <= limit else None


def scrub_files(
    memory_dir: Path, relatives: Iterable[str], *, secrets: bool = True
) -> tuple[str, ...]:
    """Scrub each text file below ``memory_dir`` in place (private spans, secrets); the
    relative paths that changed. Links and hard links are neither read nor replaced."""
    changed: list[str] = []
    with opened_area(memory_dir) as area:
        if area is None:
            return ()
        for relative in relatives:
            data = _read_bytes(area, relative, SNAPSHOT_MAX_BYTES)
            try:
                text = data.decode("utf-8") if data is not None else None
            except UnicodeDecodeError:
                continue
            if text is None:
                continue
            clean = scrub_text(text, secrets=secrets)
            if clean != text:
                try:
                    area.write(relative, clean.encode("utf-8"))
                except OSError as exc:
                    log.warning("cannot scrub %s: %s", shown(relative), exc)
                    continue
                changed.append(relative)
    return tuple(changed)


def index_missing(
    memory_dir: Path, touched: Iterable[str], *, redact: bool = True
) -> tuple[str, ...]:
    """Add an index line for each touched topic file MEMORY.md does not list yet."""
    store = MemoryStore(memory_dir, redact=redact)
    listed = {e.file.removeprefix("./") for e in parse_index(store.read_index())}
    added: list[str] = []
    for path in touched:
        name = in_memory_dir(memory_dir, path)
        if name is None:
            continue
        relative = PurePosixPath(name)
        if relative.suffix != ".md" or relative.name == INDEX_FILENAME or name in listed:
            continue
        try:
            meta = store.read(name).document.meta
        except (ValueError, NotFound):
            continue  # hidden, gone again, or not a memory (a link)
        try:
            store.update_index(IndexEntry(meta.name or relative.stem, name, meta.description or ""))
        except Refused as exc:  # MEMORY.md is a link or a hard link: never written over
            log.warning("memory extraction: %s", exc)
            break
        listed.add(name)
        added.append(name)
    return tuple(added)
