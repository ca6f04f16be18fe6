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
from memd.atomic import write_atomic, write_text_atomic
from memd.clock import Clock
from memd.errors import NotFound, PromptTooLong
from memd.llm.client import LLM, Usage
from memd.llm.guard import keep_newest
from memd.llm.ledger import Ledger
from memd.memory import prompts
from memd.memory.frontmatter import FrontmatterForm
from memd.memory.index import IndexEntry, load_index, parse_index
from memd.memory.paths import INDEX_FILENAME
from memd.memory.plan import Job
from memd.memory.scan import format_manifest, scan_memories
from memd.memory.store import MemoryStore
from memd.privacy import scrub_text
from memd.regular_file import read_regular
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
    """The memory dir before a run: every file's path, and the contents of most."""

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
) -> Extracted:
    """Run the extraction agent on ``job``. Raises the model error, or
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
        run = await run_agent(llm, spec, request, ledger=ledger, clock=clock)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(roll_back, memory_dir, before)
        raise
    try:
        return await anyio.to_thread.run_sync(settle, memory_dir, before, run, settings)
    except PromptTooLong as exc:
        exc.sent = estimate_text(prompts.render_new(new, secrets=settings.redact_secrets))
        raise


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
    scrub_files(run.files_touched, secrets=settings.redact_secrets)
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
    """Every file below ``memory_dir`` (resolved paths) and the bytes of all that fit
    :data:`SNAPSHOT_MAX_BYTES` (hidden folders are listed but not copied)."""
    root = os.path.realpath(memory_dir)
    existing = _list_files(root)
    contents: dict[str, bytes] = {}
    budget = SNAPSHOT_MAX_BYTES
    for path in sorted(existing):
        hidden = any(part.startswith(".") for part in Path(path).relative_to(root).parts[:-1])
        if hidden or os.path.islink(path):
            continue
        data = _read_bytes(path)
        if data is not None and len(data) <= budget:
            contents[path] = data
            budget -= len(data)
    return Snapshot(frozenset(existing), contents)


def roll_back(memory_dir: Path, before: Snapshot, touched: Iterable[str] | None = None) -> None:
    """Undo a run: files it created go, files it changed get their old bytes back.

    ``touched=None`` compares the whole dir with the snapshot (a cancelled run's record of
    the files it touched is lost with it).
    """
    if touched is None:
        paths = _list_files(os.path.realpath(memory_dir)) | set(before.contents)
    else:
        paths = set(touched)
    for path in sorted(paths):
        old = before.contents.get(path)
        if old is not None:
            if _read_bytes(path) != old:
                write_atomic(Path(path), old)
        elif path not in before.existing:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        elif touched is not None:
            log.warning("memory extraction: cannot restore %s (not in the snapshot)", path)


def _list_files(root: str) -> set[str]:
    return {os.path.join(folder, name) for folder, _, names in os.walk(root) for name in names}


def _read_bytes(path: str) -> bytes | None:
    try:
        return read_regular(path)
    except OSError:
        return None


def scrub_files(paths: Iterable[str], *, secrets: bool = True) -> tuple[str, ...]:
    """Scrub each text file in place (private spans, secrets); the paths that changed."""
    changed: list[str] = []
    for path in paths:
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        try:
            text = read_regular(path).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        clean = scrub_text(text, secrets=secrets)
        if clean != text:
            write_text_atomic(Path(path), clean)
            changed.append(path)
    return tuple(changed)


def index_missing(
    memory_dir: Path, touched: Iterable[str], *, redact: bool = True
) -> tuple[str, ...]:
    """Add an index line for each touched topic file MEMORY.md does not list yet."""
    store = MemoryStore(memory_dir, redact=redact)
    root = os.path.realpath(memory_dir)
    listed = {e.file.removeprefix("./") for e in parse_index(store.read_index())}
    added: list[str] = []
    for path in touched:
        relative = PurePosixPath(Path(os.path.relpath(path, root)).as_posix())
        name = relative.as_posix()
        if relative.suffix != ".md" or relative.name == INDEX_FILENAME or name in listed:
            continue
        try:
            meta = store.read(name).document.meta
        except (ValueError, NotFound):
            continue  # outside the memory dir, hidden, or gone again
        store.update_index(IndexEntry(meta.name or relative.stem, name, meta.description or ""))
        listed.add(name)
        added.append(name)
    return tuple(added)
