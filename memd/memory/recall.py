"""Recall: the memories that help with a query, with their age and warnings (R-M6, R-M7).

:func:`recall` scans the memory dir (in a worker thread), leaves out what the session has
already been shown, and asks the fast model (``llm.models.recall``) to pick up to
``memory.recall_max`` memories from the manifest. The lexical ranker
(:func:`memd.memory.rank.rank_headers`) answers instead when

* there is no model (no API key, or the client is still loading);
* the cost guard says recalls are backing off or the account is blocked;
* the call fails, or does not answer within ``memory.recall_model_budget_s`` (the prompt
  path must stay fast: the lexical answer goes out instead) or the time left of
  ``memory.recall_timeout_s``;
* the answer names no memory in any readable form.

A recall never raises: whatever goes wrong, an answer (possibly empty) comes back, and
:attr:`RecallResult.reason` says which method answered and why. A failed or timed-out model
call is reported to the guard, so a slow or broken API makes the following recalls go
straight to the ranker for the backoff period instead of making every prompt wait.

Each result carries the memory's body (scrubbed of ``<private>`` spans and likely secrets:
it goes into an agent's context, and from there to a model), its mtime in ISO-8601, its age
as text, and for memories older than a day the freshness warning. The result carries the
general caveat that memories can be stale.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, assert_never

import anyio
import anyio.to_thread

from memd.clock import Clock
from memd.config import Config
from memd.confined import Area
from memd.errors import LLMError, Unavailable
from memd.llm.client import LLM, Disabled, LLMReply
from memd.llm.guard import CostGuard, Go, Parked, Wait, describe
from memd.llm.ledger import Ledger
from memd.llm.models import Route, as_route
from memd.memory.citations import Citation, from_frontmatter
from memd.memory.freshness import RECALL_CAVEAT, age_days, age_text, freshness_warning
from memd.memory.frontmatter import MemoryType, parse_document, written_ms
from memd.memory.rank import (
    doc_from_header,
    is_tool_usage_reference,
    ranked_headers,
    selection_candidates,
    strong_count,
)
from memd.memory.rank_index import RecallCache
from memd.memory.relevance import Answerable, Cover, abstained
from memd.memory.scan import MemoryHeader, iso_mtime, opened_area, scan_memories
from memd.memory.selector import build_selector_prompt, parse_selection, selector_system
from memd.memory.shared import TeamNote, note_of, quarantine_reason
from memd.memory.usage_rank import UsageCounts, reweighed
from memd.privacy import scrub_text

if TYPE_CHECKING:
    from memd.memory.semantic import SemanticStage

log = logging.getLogger(__name__)

RecallMethod = Literal["model", "lexical", "none"]
# The recalled memories, checked against the code and reordered, by a monotonic deadline.
# Issue 26: checks the chosen memories by the deadline; the loader gives the ranker's next
# candidates (loaded only when asked: one that verifies may take a failing one's place).
Memories = tuple["RecalledMemory", ...]
CheckMemories = Callable[[Memories, Callable[[], Memories], float], Memories]

SELECTOR_MAX_TOKENS = 256
MAX_CONTENT_BYTES = 16_000  # of one memory's file; the rest is left for a Read
MANIFEST_NEWEST = 10  # of the model's manifest, kept for the newest memories whatever the rank
LEXICAL_RESERVE_S = 0.25  # kept back from the model (at most a quarter of the budget)
_NOTHING_WORDS = ("none", "nothing", "no memor")


@dataclass(frozen=True)
class RecalledMemory:
    path: str  # absolute
    relative: str  # to the memory dir
    name: str
    type: MemoryType | None
    description: str
    content: str  # the body, scrubbed
    content_truncated: bool
    mtime: str  # ISO-8601, UTC
    mtime_ms: int
    age: str  # "today", "yesterday", "N days ago"
    age_days: int
    warning: str  # "" for memories a day old or newer
    # Issue 26 (memd.memory.verify): what the frontmatter records (None: infer from the
    # text), then what the checks found.
    recorded_citations: tuple[Citation, ...] | None = None
    citations: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    verified: bool | None = None
    team: TeamNote | None = None  # issue 37: a teammate's note, with who wrote it
    via: str | None = None  # a linked memory: the recalled one whose ``[[name]]`` named it

    def as_dict(self) -> dict[str, Any]:
        """The row on the wire: no ``recorded_citations``; ``via`` only for a linked one."""
        row = asdict(self)
        del row["recorded_citations"]
        if self.via is None:
            del row["via"]
        return row


@dataclass(frozen=True)
class RecallResult:
    memories: tuple[RecalledMemory, ...]
    method: RecallMethod
    reason: str  # why this method answered
    caveat: str
    candidates: int  # memories the choice was made from
    elapsed_s: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "memories": [m.as_dict() for m in self.memories],
            "method": self.method,
            "reason": self.reason,
            "caveat": self.caveat,
            "candidates": self.candidates,
            "elapsed_ms": round(self.elapsed_s * 1000.0, 1),
        }


@dataclass(frozen=True)
class _Choice:
    headers: tuple[MemoryHeader, ...]
    method: RecallMethod
    reason: str
    # The ranker's strong candidates not chosen: one that verifies takes the place of a
    # chosen memory whose citations all fail, whoever chose (issue 26's ranking).
    spares: tuple[MemoryHeader, ...] = ()


@dataclass(frozen=True)
class _Context:
    """What choosing needs besides the query and the memories."""

    llm: Route | Disabled | None  # the recall job's backend and model
    cfg: Config
    recent_tools: Sequence[str]
    already_surfaced: Collection[str]
    clock: Clock
    guard: CostGuard | None
    ledger: Ledger | None
    project: str
    session: str
    deadline: float  # on the clock's monotonic scale


async def recall(
    query: str,
    *,
    memory_dir: Path,
    llm: LLM | Route | Disabled | None,
    cfg: Config,
    recent_tools: Sequence[str] = (),
    already_surfaced: Collection[str] = (),
    clock: Clock,
    guard: CostGuard | None = None,
    ledger: Ledger | None = None,
    project: str = "",
    session: str = "",
    timeout_s: float | None = None,
    cache: RecallCache | None = None,
    checks: CheckMemories | None = None,
    semantic: SemanticStage | None = None,
    usage: UsageCounts | None = None,
) -> RecallResult:
    """Memories for ``query`` from ``memory_dir`` (the module docstring); never raises for a
    model, guard or file problem. ``timeout_s``: for ``memory.recall_timeout_s``. ``cache``
    (the daemon's): heads read and indexed only for new or changed files. ``checks`` (a
    thread, by the deadline): the chosen memories' citations, a spare that verifies for one
    whose all fail. ``semantic``: :func:`_fused`. ``usage``: weighs scores by use (issue 36)."""
    started = clock.monotonic()
    deadline = started + (cfg.memory.recall_timeout_s if timeout_s is None else timeout_s)
    surfaced = frozenset(already_surfaced)
    scan = partial(_scan_and_rank, memory_dir, query, cfg, surfaced, tuple(recent_tools), cache)
    try:
        headers, ranked, cover = await anyio.to_thread.run_sync(scan)
    except OSError as exc:
        return _empty(f"the memory dir cannot be scanned: {exc}", started, clock)
    ranked = reweighed(ranked, _relative, usage) if usage is not None else ranked
    candidates = selection_candidates(headers, already_surfaced)
    if not query.strip():
        return _empty("the query is empty", started, clock, len(candidates))
    if not candidates:
        return _empty("no memories to choose from", started, clock)
    lexical = ranked
    if semantic is not None:
        semantic.want(memory_dir, headers)
        fuse = partial(semantic.fuse, memory_dir, query, candidates, lexical)
        ranked = await _fused(fuse, cfg, tuple(recent_tools), deadline - clock.monotonic(), lexical)
    answerable = Answerable(cover, lexical, None if semantic is None else ranked)
    context = _Context(
        as_route(llm, "recall", cfg.llm.models.recall),
        cfg,
        tuple(recent_tools),
        already_surfaced,
        clock,
        guard,
        ledger,
        project,
        session,
        deadline,
    )
    choice = await _choose(query, candidates, ranked, context, answerable)
    memories = await _load_chosen(memory_dir, choice, context, checks)
    elapsed, found = clock.monotonic() - started, len(candidates)
    return RecallResult(memories, choice.method, choice.reason, RECALL_CAVEAT, found, elapsed)


async def _fused(
    fuse: Callable[..., list[tuple[MemoryHeader, float]]],
    cfg: Config,
    recent_tools: tuple[str, ...],
    left_s: float,
    ranked: list[tuple[MemoryHeader, float]],
) -> list[tuple[MemoryHeader, float]]:
    """The semantic stage's ranking (issue 27, when on: ``fuse`` puts the memories most alike
    to the query into ``ranked``, in a worker thread; :mod:`memd.memory.semantic`), or
    ``ranked`` when it has not answered within the ``left_s`` seconds the recall has left."""
    limit = max(cfg.memory.scan_max_files, cfg.memory.recall_max)
    with anyio.move_on_after(max(0.0, left_s)):
        call = partial(fuse, limit=limit, recent_tools=recent_tools)
        return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
    return ranked


async def _load_chosen(
    memory_dir: Path, choice: _Choice, context: _Context, checks: CheckMemories | None
) -> Memories:
    """Read the chosen memories (in a worker thread); with ``checks``, their citations
    checked by the deadline, the ranker's spares standing by."""
    now_ms = int(context.clock.now() * 1000)
    redact = context.cfg.privacy.redact_secrets
    load = partial(load_memories, memory_dir, choice.headers, now_ms, redact)
    memories = await anyio.to_thread.run_sync(load)
    if checks is not None and memories:
        spares = partial(load_memories, memory_dir, choice.spares, now_ms, redact)
        memories = await anyio.to_thread.run_sync(checks, memories, spares, context.deadline)
    return memories


def _scan_and_rank(
    memory_dir: Path,
    query: str,
    cfg: Config,
    surfaced: frozenset[str],
    recent_tools: tuple[str, ...],
    cache: RecallCache | None,
) -> tuple[list[MemoryHeader], list[tuple[MemoryHeader, float]], Cover]:
    """Every memory's header (newest first); the best of those not surfaced for ``query``
    with their scores, as many as a manifest holds; and how much of the query the best of a
    lexical answer covers (:mod:`memd.memory.relevance`). Blocking."""
    head_lines = cfg.memory.frontmatter_lines
    limit = max(cfg.memory.scan_max_files, cfg.memory.recall_max)
    answer = cfg.memory.recall_max
    if cache is not None:
        prefix = f"{memory_dir}/"
        exclude = {s.removeprefix(prefix) for s in surfaced}
        return cache.ranked(
            memory_dir,
            query,
            limit=limit,
            exclude=exclude,
            recent_tools=recent_tools,
            head_lines=head_lines,
            answer=answer,
        )
    headers = scan_memories(memory_dir, max_files=None, head_lines=head_lines)
    ranked, cover = ranked_headers(
        headers, query, already_surfaced=surfaced, recent_tools=recent_tools, answer=answer
    )
    return headers, ranked[:limit], cover


def _relative(header: MemoryHeader) -> str:
    return header.relative


def _empty(reason: str, started: float, clock: Clock, candidates: int = 0) -> RecallResult:
    return RecallResult((), "none", reason, RECALL_CAVEAT, candidates, clock.monotonic() - started)


# ---------------------------------------------------------------------------------------------
# Choosing


async def _choose(
    query: str,
    candidates: Sequence[MemoryHeader],
    ranked: Sequence[tuple[MemoryHeader, float]],
    context: _Context,
    answerable: Answerable,
) -> _Choice:
    limit = context.cfg.memory.recall_max
    best = ranked[: 2 * limit]
    strong = [h for h, _ in best[: strong_count([score for _, score in best])]]
    if not answerable.any:
        alike = answerable.alike()
        strong = [h for h in strong if h.relative in alike]
    why = model_unavailable(context.llm, context.guard, context.project)
    if why is None:
        assert isinstance(context.llm, Route)
        shown = manifest_candidates(
            [h for h, _ in ranked], candidates, context.cfg.memory.scan_max_files
        )
        picked = await _ask_model(context.llm, query, shown, context)
        if not isinstance(picked, str):
            model = context.llm.model
            chosen = {h.relative for h in picked}
            spares = tuple(h for h in strong if h.relative not in chosen)[:limit]
            return _Choice(tuple(picked), "model", f"chosen by {model}", spares)
        why = picked
    chosen_lexically, spares = tuple(strong[:limit]), tuple(strong[limit:])
    if not chosen_lexically and best and not answerable.any:
        why = f"{why}; {abstained(answerable.cover)}"
    return _Choice(chosen_lexically, "lexical", f"lexical ranking: {why}", spares)


def manifest_candidates(
    ranked: Sequence[MemoryHeader], candidates: Sequence[MemoryHeader], limit: int
) -> list[MemoryHeader]:
    """What the model is shown: the ranker's best, then the newest (``candidates`` are newest
    first), at most ``limit`` (R-M4's cap; issue 27). The newest :data:`MANIFEST_NEWEST` always
    have a place, so a memory that shares no word with the query can still be chosen."""
    newest = min(MANIFEST_NEWEST, limit)
    shown: dict[str, MemoryHeader] = {}
    for header in ranked[: max(0, limit - newest)]:
        shown.setdefault(header.relative, header)
    for header in candidates:  # the newest few, then more of the newest while room is left
        if len(shown) >= limit:
            break
        shown.setdefault(header.relative, header)
    return list(shown.values())


def model_unavailable(
    llm: Route | Disabled | None, guard: CostGuard | None, project: str
) -> str | None:
    """Why the model cannot be asked now, or ``None`` when it can."""
    if llm is None:
        return "the model client is still loading"
    if isinstance(llm, Disabled):
        return f"no model ({llm.reason})"
    if guard is None:
        return None
    match guard.check("recall", subject=project):
        case Go():
            return None
        case Wait(reason=reason):
            return f"recalls are holding off ({reason})"
        case Parked(error=error):
            return f"the model is blocked ({error})"
        case unreachable:
            assert_never(unreachable)


async def _ask_model(
    route: Route, query: str, candidates: Sequence[MemoryHeader], context: _Context
) -> list[MemoryHeader] | str:
    """The memories the model picked, or why its answer cannot be used."""
    left = context.deadline - context.clock.monotonic()
    remaining = left - min(LEXICAL_RESERVE_S, left / 4)  # so the fallback still fits
    remaining = min(remaining, context.cfg.memory.recall_model_budget_s)
    if remaining <= 0:
        return "no time was left for the model"
    limit = context.cfg.memory.recall_max
    prompt = build_selector_prompt(query, candidates, context.recent_tools)
    reply: LLMReply | None = None
    with anyio.move_on_after(remaining):
        try:
            reply = await route.llm.create_message(
                model=route.model,
                system=selector_system(limit),
                messages=[{"role": "user", "content": prompt}],
                max_tokens=SELECTOR_MAX_TOKENS,
                timeout=remaining,
            )
        except LLMError as exc:
            _failed(context, exc)
            return f"the model call failed ({describe(exc)})"
        except Exception as exc:  # a recall never raises: an unexpected crash degrades too
            log.exception("recall: the model call crashed")
            _failed(context, exc)
            return f"the model call crashed ({type(exc).__name__})"
    if reply is None:
        _failed(context, Unavailable("the recall selection timed out"))
        return f"the model did not answer within {remaining:.1f} s"
    _succeeded(context, reply)
    return _picked(reply.text, candidates, limit, context.recent_tools)


def _picked(
    text: str, candidates: Sequence[MemoryHeader], limit: int, recent_tools: Sequence[str]
) -> list[MemoryHeader] | str:
    by_key = {h.relative: h for h in candidates}
    chosen = parse_selection(text, by_key.keys(), limit=limit)
    if not chosen and not readable_selection(text):
        return "the model's answer named no memories in a readable form"
    picked = [by_key[key] for key in chosen]
    # The selector is told the tool rule; this keeps a model that ignored it from breaking it.
    return [h for h in picked if not is_tool_usage_reference(doc_from_header(h), recent_tools)]


def readable_selection(text: str) -> bool:
    """Whether an answer that named no known memory still reads as a selection (an empty
    list, a list of unknown paths, or "none")."""
    lowered = text.lower()
    return "[" in text or ".md" in lowered or any(w in lowered for w in _NOTHING_WORDS)


def _failed(context: _Context, error: BaseException) -> None:
    if context.guard is not None:
        context.guard.record_failure("recall", error, subject=context.project)


def _succeeded(context: _Context, reply: LLMReply) -> None:
    if context.ledger is not None:
        context.ledger.record_reply(
            "recall", reply, project=context.project, session=context.session
        )
    if context.guard is not None:
        context.guard.record_success("recall", subject=context.project)


# ---------------------------------------------------------------------------------------------
# Loading the chosen memories (blocking: run in a worker thread)


def load_memories(
    memory_dir: Path, headers: Sequence[MemoryHeader], now_ms: int, redact: bool
) -> tuple[RecalledMemory, ...]:
    """Each memory behind ``headers`` as :func:`load_memory` loads it; gone ones left out."""
    if not headers:
        return ()
    with opened_area(memory_dir) as area:
        if area is None:
            return ()
        loaded = (load_memory(area, h, now_ms, redact=redact) for h in headers)
        return tuple(m for m in loaded if m is not None)


def load_memory(
    area: Area, header: MemoryHeader, now_ms: int, *, redact: bool = True
) -> RecalledMemory | None:
    """The whole memory behind ``header`` (its body cut at :data:`MAX_CONTENT_BYTES`), or
    ``None`` when the file is gone, unreadable or no longer a memory (a link, a hard link)."""
    try:
        raw, _ = area.read(header.relative, max_bytes=MAX_CONTENT_BYTES + 1)
    except (OSError, ValueError):
        return None
    truncated = len(raw) > MAX_CONTENT_BYTES
    text = raw[:MAX_CONTENT_BYTES].decode("utf-8", errors="ignore")
    if quarantine_reason(header.relative, text) is not None:
        return None  # a team memory that tries to steer the agent is never injected
    document = parse_document(text)
    meta = document.meta
    mtime_ms = header.mtime_ms
    dated_ms = written_ms(mtime_ms, meta.modified)
    return RecalledMemory(
        path=str(header.path),
        relative=header.relative,
        name=scrub_text(meta.name or header.name or Path(header.relative).stem, secrets=redact),
        type=meta.type or header.type,
        description=scrub_text(meta.description or header.description or "", secrets=redact),
        content=scrub_text(document.body.strip(), secrets=redact),
        content_truncated=truncated,
        mtime=iso_mtime(mtime_ms),
        mtime_ms=mtime_ms,
        age=age_text(dated_ms, now_ms),
        age_days=age_days(dated_ms, now_ms),
        warning=freshness_warning(dated_ms, now_ms),
        recorded_citations=from_frontmatter(meta.extra),
        team=note_of(header.relative, meta),
    )
