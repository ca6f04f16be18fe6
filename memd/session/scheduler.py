"""When and how often notes extractions run (R-S3, R-S6, R-S8, R-S9, R-B1).

The daemon builds one :class:`NotesScheduler`, starts :func:`run_notes_scheduler` in its task
group, and calls :meth:`NotesScheduler.notify_growth` whenever a transcript grows. The
scheduler then:

* checks the thresholds cheaply on the session's figures; only a session that may pass has
  its conversation looked at (tool calls since the last extraction, the last turn);
* runs at most one extraction per session — a trigger that arrives while one runs sets a
  single follow-up, re-checked when the run ends (R-S6) — and different sessions concurrently
  under a global :class:`anyio.CapacityLimiter`;
* waits through the cost guard before each run, retries rate limits and overloads after its
  backoff, and sleeps through the back-off of a park (a prompt-too-long or another error
  retrying at once cannot fix) however much the session grows meanwhile; after a
  prompt-too-long the next requests carry less conversation (:class:`JobRunner`);
* marks a run *pending* on disk before it starts and clears the mark when it ends, so a run
  killed mid-way is done again at the next start (R-S10).

Automatic triggers apply to sessions written to since the scheduler started; older sessions
are extracted only on request (:meth:`NotesScheduler.extract`, R-S9), so a restart over a
large history does not bill for sessions nobody is working in.

The model client is read through ``get_llm`` whenever it is needed, as every feature reads
it: a reload that opens another client (a key added to the env file) or closes it is seen at
once, without rebuilding the scheduler; the daemon calls :meth:`NotesScheduler.llm_changed`
after each change. Without a model (no API key) the scheduler says why and does nothing else;
once one is there, the runs a crash interrupted are redone and the growth seen while it
loaded is checked.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import anyio
import anyio.abc
import anyio.to_thread

from memd.clock import Clock
from memd.errors import LLMDisabled, NotFound
from memd.llm.client import Disabled
from memd.llm.guard import CostGuard
from memd.llm.ledger import Ledger
from memd.llm.models import Models, Route
from memd.session import forked, notes
from memd.session.extract import NotesSettings
from memd.session.runs import JobRunner, SessionSource, Slot
from memd.session.status import NotesStatistics, NotesView, SessionNotesStatus, session_status
from memd.session.store import ExtractionRecord, ExtractionStore
from memd.session.template import is_empty_template, load_template, template_path
from memd.session.triggers import Go, TriggerInput, decide, rebase
from memd.sources.base import Fork
from memd.state import SessionState

log = logging.getLogger(__name__)

WaitOutcome = Literal["idle", "finished", "timeout", "stale"]


class NotesScheduler:
    def __init__(
        self,
        settings: NotesSettings,
        get_llm: Callable[[], Models | None],
        *,
        store: ExtractionStore,
        source: SessionSource,
        guard: CostGuard,
        ledger: Ledger,
        clock: Clock,
        started_at: float | None = None,
    ) -> None:
        self.settings = settings
        self._store = store
        self._source = source
        self._guard = guard
        self._ledger = ledger
        self._clock = clock
        self._started_at = clock.now() if started_at is None else started_at
        self._limiter = anyio.CapacityLimiter(max(1, settings.config.max_concurrent))
        self._get_llm = get_llm
        self._runner = JobRunner(
            store=store,
            source=source,
            guard=guard,
            ledger=ledger,
            clock=clock,
            limiter=self._limiter,
        )
        self._grew_early: set[str] = set()  # sessions that grew while the model client loaded
        self._resumed = False  # the interrupted runs were queued again (once a model is there)
        self._llm_news = True  # the run task has yet to look at the model client
        self._slots: dict[str, Slot] = {}  # queued or running workers
        self._to_start: list[Slot] = []  # slots whose worker the run task has yet to start
        self._wake = anyio.Event()
        self._idle = anyio.Event()
        self._idle.set()

    # -- configuration -----------------------------------------------------------------------

    def llm_changed(self) -> None:
        """The daemon opened (or reopened, or closed) the model client: the run task looks at
        it again (redoes interrupted runs, checks the growth seen while it loaded)."""
        self._llm_news = True
        self._wake.set()

    def _route(self) -> Route | Disabled | None:
        models = self._get_llm()
        return None if models is None else models.route("session_notes")

    def _llm(self) -> Route | None:
        """The notes job's backend and model when notes may run now, else None."""
        route = self._route()
        if not isinstance(route, Route) or not self.settings.config.enabled:
            return None
        return route

    @property
    def disabled_reason(self) -> str | None:
        route = self._route()
        if route is None:
            return "starting: the model client is loading"
        if isinstance(route, Disabled):
            return f"disabled: {route.reason}"
        if not self.settings.config.enabled:
            return "disabled: session_notes.enabled is false"
        return None

    def reconfigure(self, settings: NotesSettings) -> None:
        """New settings (config reload); running extractions finish with the old ones."""
        self.settings = settings
        self._limiter.total_tokens = max(1, settings.config.max_concurrent)

    # -- entry points ----------------------------------------------------------------------------

    def notify_growth(self, state: SessionState) -> None:
        """A transcript grew: queue a check if the session may have reached a trigger point.

        Never blocks; cheap enough to call on every append. Growth seen while the model
        client is still loading is remembered and checked again once it is ready (R-B1: no
        trigger is lost to start-up).
        """
        if state.mtime < self._started_at:
            return
        if self._get_llm() is None:
            self._grew_early.add(state.session_id)
            return
        if self.disabled_reason is not None or self.unkept(state) is not None:
            return
        slot = self._slots.get(state.session_id)
        if slot is not None:
            slot.follow_up = True
        elif self._may_trigger(state):
            self._queue(state.session_id, manual=False)

    def _queue(self, session_id: str, *, manual: bool) -> Slot:
        slot = self._slots.get(session_id)
        if slot is not None:
            slot.follow_up = True
            slot.manual = slot.manual or manual
            return slot
        slot = self._slots[session_id] = Slot(session_id, manual=manual)
        self._to_start.append(slot)
        self._wake.set()
        if self._idle.is_set():
            self._idle = anyio.Event()
        return slot

    def _may_trigger(self, state: SessionState) -> bool:
        record = self._store.get(state.session_id)
        config = self.settings.config
        if record is None or record.tokens_at_extraction is None:
            return state.context_tokens >= config.init_tokens
        baseline = rebase(record.tokens_at_extraction, state.context_tokens)
        if baseline != record.tokens_at_extraction:
            self._store.replace_nowait(dataclasses.replace(record, tokens_at_extraction=baseline))
        return state.context_tokens - (baseline or 0) >= config.update_tokens

    async def extract(self, session_id: str, *, wait_s: float | None = None) -> SessionNotesStatus:
        """Run an extraction now, whatever the thresholds say (R-S9).

        If one is running, a forced follow-up is queued behind it. With ``wait_s``, wait up to
        that long for the forced run to end, successful or not (a failed run is not waited
        through its retries: the status's ``last_error`` says why). Raises
        :class:`memd.errors.NotFound` for an unknown session and
        :class:`memd.errors.LLMDisabled` without a model.
        """
        if (reason := self.disabled_reason) is not None:
            raise LLMDisabled(reason)
        if self._source.get(session_id) is None:
            raise NotFound(f"no session {session_id}")
        self._guard.release("session_notes", subject=session_id)
        slot = self._queue(session_id, manual=True)
        if wait_s is not None:
            # The forced run is the next one to start: after the running one, if any.
            target = slot.runs_ended + (2 if slot.phase == "running" else 1)
            deadline = self._clock.monotonic() + wait_s
            while slot.runs_ended < target and not slot.ended.is_set():
                left = deadline - self._clock.monotonic()
                if left <= 0 or not await _wait_event(slot.pulse, left, self._clock):
                    break
        status = self.status(session_id)
        assert status is not None
        return status

    async def wait_extraction(self, session_id: str) -> WaitOutcome:
        """Wait for a running extraction of the session to end (R-S8).

        Waits at most ``wait_timeout_s``; an extraction running for longer than
        ``stale_after_s`` is treated as stuck and not waited for at all.
        """
        slot = self._slots.get(session_id)
        if slot is None or slot.phase != "running" or slot.started_at is None:
            return "idle"
        config = self.settings.config
        age = self._clock.monotonic() - slot.started_at
        if age >= config.stale_after_s:
            return "stale"
        limit = min(config.wait_timeout_s, config.stale_after_s - age)
        finished = await _wait_event(slot.done, limit, self._clock)
        if finished:
            return "finished"
        return "timeout" if limit == config.wait_timeout_s else "stale"

    async def wait_idle(self) -> None:
        """Wait until no extraction is queued, waiting or running (shutdown drains with it)."""
        while not self._idle.is_set():
            await self._idle.wait()

    # -- reading -------------------------------------------------------------------------------

    def notes_path(self, state: SessionState) -> Path:
        return notes.notes_path(self.settings.projects_root, state.project, state.session_id)

    def unkept(self, state: SessionState) -> str | None:
        """Why this session gets no notes (:func:`memd.session.notes.unkept`), or None."""
        return notes.unkept(state, str(self.settings.projects_root))

    async def read_notes(self, session_id: str) -> NotesView:
        """The session's notes, template and anchor; :class:`NotFound` for an unknown session.

        Works without a model: notes written earlier stay readable.
        """
        state = self._source.get(session_id)
        status = self.status(session_id)
        if state is None or status is None:
            raise NotFound(f"no session {session_id}")
        path = self.notes_path(state)
        text = await anyio.to_thread.run_sync(notes.read_notes, path)
        template = await anyio.to_thread.run_sync(
            load_template, template_path(self.settings.claude_dir)
        )
        record = self._store.get(session_id)
        return NotesView(
            session_id,
            str(path),
            text,
            template,
            text is None or is_empty_template(text, template),
            record.last_summarized_id if record else None,
            status,
        )

    def record(self, session_id: str) -> ExtractionRecord | None:
        return self._store.get(session_id)

    def seed(self, state: SessionState, fork: Fork, notes_text: str) -> None:
        """The fork ``fork`` of ``state`` starts with ``notes_text`` (:mod:`memd.session.
        forked`). Blocking; raises ``OSError``."""
        forked.seed(
            self._store,
            self.settings.projects_root,
            source_id=state.session_id,
            project=state.project,
            fork=fork,
            notes_text=notes_text,
            tokens=state.context_tokens,
        )

    def unseed(self, state: SessionState, fork_id: str) -> None:
        """The fork was not written: its notes and record go. Blocking."""
        forked.unseed(self._store, self.settings.projects_root, state.project, fork_id)

    def status(self, session_id: str) -> SessionNotesStatus | None:
        state = self._source.get(session_id)
        if state is None:
            return None
        slot = self._slots.get(session_id)
        running_for = (
            self._clock.monotonic() - slot.started_at
            if slot is not None and slot.started_at is not None
            else None
        )
        return session_status(
            state,
            self._store.get(session_id),
            self.settings.config,
            notes_path=notes.notes_location(
                str(self.settings.projects_root), state.project, state.session_id
            ),
            phase=slot.phase if slot else "idle",
            waiting_reason=slot.waiting_reason if slot else None,
            follow_up=bool(slot and (slot.follow_up or slot.manual)),
            running_for_s=running_for,
        )

    def statistics(self, session_ids: Sequence[str] | None = None) -> NotesStatistics:
        ids = (
            list(session_ids)
            if session_ids is not None
            else [r.session_id for r in self._store.records()]
        )
        sessions = tuple(s for i in ids if (s := self.status(i)) is not None)
        return NotesStatistics(
            enabled=self.disabled_reason is None,
            reason=self.disabled_reason or "",
            strategy=self.settings.config.strategy,
            running=sum(s.phase == "running" for s in self._slots.values()),
            queued=sum(s.phase != "running" for s in self._slots.values()),
            failures=self._runner.failures,
            sessions=sessions,
        )

    # -- the task ------------------------------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Start workers as sessions are queued, until cancelled (cancelling them too)."""
        async with anyio.create_task_group() as tg:
            await self._look_at_llm()
            task_status.started()
            while True:
                await self._wake.wait()
                self._wake = anyio.Event()
                if self._llm_news:
                    await self._look_at_llm()
                starting, self._to_start = self._to_start, []
                for slot in starting:
                    tg.start_soon(self._work, slot, name=f"notes {slot.session_id}")

    async def _look_at_llm(self) -> None:
        """Once a model is there: redo the interrupted runs (once) and check the growth seen
        while the client loaded."""
        self._llm_news = False
        if self._get_llm() is None:
            return  # still loading: growth is remembered meanwhile
        if (reason := self.disabled_reason) is not None:
            log.info("session notes: %s", reason)
            self._grew_early.clear()
            self._resumed = False  # a model back later redoes what is pending then
            return
        if not self._resumed:
            self._resumed = True
            await self._resume_pending()
        self._recheck_early_growth()

    def _recheck_early_growth(self) -> None:
        """Check the sessions that grew before the model client was ready, as they are now."""
        early, self._grew_early = sorted(self._grew_early), set()
        for session_id in early:
            state = self._source.get(session_id)
            if state is not None:
                self.notify_growth(state)

    async def _resume_pending(self) -> None:
        """Queue a redo of every run a crash interrupted; forget those of vanished sessions."""
        for record in self._store.pending():
            if self._source.get(record.session_id) is None:
                await self._store.put(dataclasses.replace(record, pending=False))
                continue
            log.info("session notes: redoing the interrupted extraction of %s", record.session_id)
            self._queue(record.session_id, manual=True)

    async def _work(self, slot: Slot) -> None:
        """One session's worker: check, run, and go again while follow-ups are due."""
        try:
            again = True
            while again:
                manual, slot.manual, slot.follow_up = slot.manual, False, False
                state = self._source.get(slot.session_id)
                if state is None or self._llm() is None or self.unkept(state) is not None:
                    break
                if not await self._due(state, manual):
                    again = slot.manual  # a forced run asked for while the figures were read
                    continue
                retry = await self._runner.attempt(slot, state, self.settings, self._llm)
                again = retry or slot.follow_up or slot.manual
        except Exception as exc:  # the isolation boundary: one session's trouble stops only it
            log.exception("session notes of %s: the worker failed", slot.session_id)
            self._runner.worker_failed(slot.session_id, exc)
        finally:
            del self._slots[slot.session_id]
            slot.ended.set()
            slot.beat()
            if not self._slots:
                self._idle.set()

    async def _due(self, state: SessionState, manual: bool) -> bool:
        if manual:
            return True
        record = self._store.get(state.session_id)
        figures = await self._runner.figures(state, record.covered_id if record else None)
        baseline = rebase(record.tokens_at_extraction if record else None, figures.context_tokens)
        snapshot = TriggerInput(
            figures.context_tokens,
            baseline,
            figures.tool_calls_since,
            figures.last_turn_has_tool_calls,
        )
        decision = decide(snapshot, self.settings.config)
        log.debug("session notes %s: %s", state.session_id, decision)
        return isinstance(decision, Go)


async def _wait_event(event: anyio.Event, seconds: float, clock: Clock) -> bool:
    """Wait for ``event`` at most ``seconds`` of ``clock`` time; True if it was set."""
    if event.is_set():
        return True
    async with anyio.create_task_group() as tg:

        async def timer() -> None:
            await clock.sleep(seconds)
            tg.cancel_scope.cancel()

        tg.start_soon(timer)
        await event.wait()
        tg.cancel_scope.cancel()
    return event.is_set()


async def run_notes_scheduler(
    scheduler: NotesScheduler,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``scheduler`` until cancelled (the daemon starts this in its task group)."""
    await scheduler.run(task_status=task_status)
