"""How one notes extraction goes once the scheduler decided it is due (R-S7, R-S10, R-B1).

:meth:`JobRunner.attempt` waits through the cost guard, then for a slot under the global
limiter, marks the run pending on disk, takes the conversation as it is now, runs
:func:`memd.session.extract.extract_notes`, and records how it ended: the cursor and anchor
after each chunk, the baseline and figures after a success, the error after a failure (with
the guard told, so it backs off or parks). It is the isolation boundary of a background job:
a failure is logged and recorded, never raised to the scheduler.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, Protocol, TypeVar

import anyio
import anyio.to_thread

from memd.changes import Counted
from memd.clock import Clock
from memd.errors import MemdError, PromptTooLong
from memd.llm.guard import BlockAccount, CostGuard, Go, Parked, Wait, shrink_input
from memd.llm.ledger import Ledger, billed_tokens
from memd.llm.models import Route
from memd.session.extract import (
    ChunkDone,
    Extracted,
    NotesJob,
    NotesSettings,
    extract_notes,
    load_setup,
)
from memd.session.store import (
    ExtractionRecord,
    ExtractionStore,
    failed,
    progressed,
    started,
    succeeded,
)
from memd.state import SessionState
from memd.transcript.conversation import Conversation
from memd.transcript.messages import ApiMessage

log = logging.getLogger(__name__)

Phase = Literal["queued", "waiting", "running"]

T = TypeVar("T")


class SessionSource(Protocol):
    """Where sessions come from (``memd.daemon.sessions.SessionRegistry`` fits)."""

    def get(self, session_id: str) -> SessionState | None: ...
    async def read(self, state: SessionState, fn: Callable[[Conversation], T]) -> T:
        """Run ``fn`` on the session's conversation, caught up with its file, in a worker
        thread under the session's lock."""
        ...


@dataclass
class Slot(Counted):
    """The live state of one session's worker (exists while the worker runs); the scheduler
    reads it for status and waiting."""

    session_id: str
    phase: Phase = "queued"
    waiting_reason: str | None = None
    follow_up: bool = False
    manual: bool = False
    started_at: float | None = None  # monotonic start of the running extraction
    done: anyio.Event = dataclasses.field(default_factory=anyio.Event)  # current run ended
    ended: anyio.Event = dataclasses.field(default_factory=anyio.Event)  # worker exited
    runs_ended: int = 0  # runs finished (either way) since the worker started
    # Set and replaced whenever a run ends or the worker exits: a stable thing to wait on.
    pulse: anyio.Event = dataclasses.field(default_factory=anyio.Event)

    def ended_one(self) -> None:
        self.runs_ended += 1
        self.beat()

    def beat(self) -> None:
        pulse, self.pulse = self.pulse, anyio.Event()
        pulse.set()


@dataclass(frozen=True)
class Figures:
    """What the update trigger needs from the conversation."""

    context_tokens: int
    tool_calls_since: int
    last_turn_has_tool_calls: bool


class JobRunner:
    """Runs extractions for the scheduler; holds what every run needs."""

    def __init__(
        self,
        *,
        store: ExtractionStore,
        source: SessionSource,
        guard: CostGuard,
        ledger: Ledger,
        clock: Clock,
        limiter: anyio.CapacityLimiter,
    ) -> None:
        self._store = store
        self._source = source
        self._guard = guard
        self._ledger = ledger
        self._clock = clock
        self._limiter = limiter
        self.failures = 0  # failed runs since start
        # Per session, after a prompt-too-long: the most conversation tokens one request may
        # carry (kept while the daemon runs: the model's limit does not change).
        self._input_caps: dict[str, int] = {}

    async def figures(self, state: SessionState, cursor: str | None) -> Figures:
        def of(conv: Conversation) -> Figures:
            return Figures(
                conv.context().tokens,
                conv.tool_calls_since(cursor),
                conv.last_assistant_has_tool_calls,
            )

        return await self._source.read(state, of)

    async def attempt(
        self,
        slot: Slot,
        state: SessionState,
        settings: NotesSettings,
        get_llm: Callable[[], Route | None],
    ) -> bool:
        """One guarded run; True when it failed and should be tried again once the guard
        allows it (after a back-off or a park).

        The pending mark goes on disk before waiting, so work held back by the budget or a
        backoff is not lost to a restart either, nor to a reload that turned the model off
        meanwhile (``get_llm`` answers None: no run; it is redone when a model is back).
        """
        record = self._record(state.session_id, state.project)
        await self._store.put(started(record, at=self._clock.now()))
        subject, key = state.session_id, state.last_uuid
        now = self._guard.check("session_notes", subject=subject, input_key=key)
        slot.phase, slot.waiting_reason = "waiting", waiting_reason(now)
        decision = await self._guard.wait_until_allowed(
            "session_notes", subject=subject, input_key=key, wait_parked=True
        )
        if isinstance(decision, Parked):  # the account is blocked: a user has to act
            await self.note_error(state, f"parked: {decision.error} ({decision.reason})")
            return False
        slot.waiting_reason = "concurrency limit"
        async with self._limiter:
            if (route := get_llm()) is None:
                return False
            slot.phase, slot.waiting_reason = "running", None
            slot.started_at, slot.done = self._clock.monotonic(), anyio.Event()
            try:
                return await self._run_job(state, settings, route)
            finally:
                slot.phase, slot.started_at = "queued", None
                slot.done.set()
                slot.ended_one()

    async def _run_job(self, state: SessionState, settings: NotesSettings, route: Route) -> bool:
        state = self._source.get(state.session_id) or state  # it may have grown meanwhile
        record = self._record(state.session_id, state.project)
        began = self._clock.monotonic()
        try:
            setup = await anyio.to_thread.run_sync(load_setup, settings, route)
            job = await self._job(state, record)
            result = await extract_notes(
                route.llm,
                setup,
                job,
                ledger=self._ledger,
                clock=self._clock,
                on_chunk=lambda done: self._progress(state.session_id, done),
            )
        except MemdError as exc:
            return await self._failed(state, exc)
        except Exception as exc:  # the isolation boundary of one background job
            log.exception("session notes of %s: the extraction crashed", state.session_id)
            await self._failed(state, exc)
            return False
        await self._succeeded(state, job, result, self._clock.monotonic() - began)
        return False

    async def _job(self, state: SessionState, record: ExtractionRecord) -> NotesJob:
        messages, tokens = await self._source.read(state, _read_conversation)
        cursor = record.covered_id or record.last_summarized_id
        cap = self._input_caps.get(state.session_id)
        return NotesJob(state.session_id, state.project, messages, tokens, cursor, cap)

    async def _progress(self, session_id: str, done: ChunkDone) -> None:
        record = self._record(session_id)
        await self._store.put(
            progressed(record, covered=done.covered_uuid, anchor=done.anchor_uuid)
        )

    async def _succeeded(
        self, state: SessionState, job: NotesJob, result: Extracted, took: float
    ) -> None:
        cost = billed_tokens(result.usage)
        record = succeeded(
            self._record(state.session_id),
            covered=result.covered_uuid,
            anchor=result.anchor_uuid,
            tokens=job.context_tokens,
            at=self._clock.now(),
            took=took,
            cost=cost,
        )
        # The guard first: once the record says the run succeeded, status must not still show
        # the failure streak it ended (the put gives the loop a turn).
        self._guard.record_success("session_notes", subject=state.session_id)
        await self._store.put(record)
        log.info(
            "session notes of %s: %d request(s), %d billed tokens, %.1f s",
            state.session_id,
            result.requests,
            cost,
            took,
        )

    async def _failed(self, state: SessionState, exc: BaseException) -> bool:
        self.failures += 1
        if isinstance(exc, PromptTooLong) and exc.sent is not None:
            keep = shrink_input(exc.sent, exc.gap)
            self._input_caps[state.session_id] = keep
            log.info(
                "session notes of %s: the request was too long; next time at most %d tokens "
                "of conversation per request (was %d)",
                state.session_id,
                keep,
                exc.sent,
            )
        verdict = self._guard.record_failure(
            "session_notes", exc, subject=state.session_id, input_key=state.last_uuid
        )
        log.warning("session notes of %s failed: %s", state.session_id, exc)
        await self.note_error(state, f"{type(exc).__name__}: {exc}")
        # Backing off and parking both end in another attempt once the guard allows it (the
        # notes stay owed); only an account block waits for a user.
        return not isinstance(verdict, BlockAccount)

    def worker_failed(self, session_id: str, exc: Exception) -> None:
        """A failure outside a run's own handling: counted, and kept in the session's record
        in memory (the write may be what failed), so ``status`` and ``extract`` say it."""
        self.failures += 1
        record = failed(
            self._record(session_id), error=f"{type(exc).__name__}: {exc}", at=self._clock.now()
        )
        self._store.replace_nowait(record)

    async def note_error(self, state: SessionState, message: str) -> None:
        record = self._record(state.session_id, state.project)
        await self._store.put(failed(record, error=message, at=self._clock.now()))

    def _record(self, session_id: str, project: str = "") -> ExtractionRecord:
        return self._store.get(session_id) or ExtractionRecord(session_id, project)


def waiting_reason(decision: Go | Wait | Parked) -> str | None:
    """What ``status`` says about a job the guard holds back."""
    match decision:
        case Go():
            return None
        case Wait(reason=reason):
            return reason
        case Parked(error=error, reason=reason, until=until):
            when = "" if until is None else f"; next attempt after {_clock_time(until)}"
            return f"parked: {error} ({reason}{when})"


def _clock_time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _read_conversation(conv: Conversation) -> tuple[tuple[ApiMessage, ...], int]:
    return tuple(conv.messages()), conv.context().tokens
