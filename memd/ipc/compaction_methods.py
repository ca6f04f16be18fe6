"""IPC methods for compaction: ``should_compact``, ``compact``, ``microcompact``.

A request names a session (messages are rebuilt from its transcript) or carries its own
``messages`` in API format (with an optional ``session`` for the notes).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from memd.compaction.message import Msg
from memd.compaction.results import Compacted, DryRun, ForkResult, NotForked
from memd.compaction.service import messages_from_client
from memd.compaction.takeover import Pass, asked, block_reason, decide
from memd.errors import NotFound
from memd.ipc.params import find_session, opt_int, opt_str
from memd.ipc.server import Handler, InvalidParams
from memd.state import SessionState
from memd.transcript.content import TranscriptChanged
from memd.window import effective_window

if TYPE_CHECKING:
    from memd.ipc.face import CompactionFace, TakeoverFace

log = logging.getLogger(__name__)

# The PreCompact hook waits (memd_client.hook.DEFAULT_TIMEOUT_S) for 3 s; the takeover gives
# up well before, so the hook prints nothing and Claude Code compacts as usual.
TAKEOVER_BUDGET_S = 1.5


def compaction_methods(daemon: CompactionFace) -> dict[str, Handler]:
    svc = daemon.compaction

    async def should_compact(params: dict[str, Any]) -> Any:
        """Params: ``session``; optional ``tokens`` (else the session's live figure),
        ``context_window``, ``max_output_tokens``. Result: compact (bool), threshold,
        tokens_left, circuit state."""
        state = find_session(daemon, opt_str(params, "session"))
        tokens = opt_int(params, "tokens")
        figure = state.context_tokens if tokens is None else tokens
        return svc.should_compact(state.session_id, figure, svc.window(params, state)).as_dict()

    async def compact(params: dict[str, Any]) -> Any:
        """Params: ``session`` and/or ``messages`` (API format), ``context_window``,
        ``max_output_tokens``, ``trigger`` (auto|manual), ``custom_instructions``, ``cwd``,
        ``dry_run``, ``fork``. With ``fork``: no model call, the session's notes and recent
        messages are written as a new Claude Code session beside it (the old file is not
        touched); result ``forked``, the new ``session``, its ``path`` and ``resume``
        command, or ``forked: False`` and the ``reason``. Otherwise the result is the new
        messages, level, tokens before/after, API calls and tokens spent, what to restore,
        and the time it took here (``server_ms``: ``total``, and ``input``, getting the
        session's messages, which rebuilds a conversation that is not in memory). Errors:
        not_found, invalid_params, disabled (no notes usable and no model), unavailable
        (the model failed)."""
        started = time.perf_counter()
        if params.get("fork"):
            return (await _fork(daemon, params)).as_dict()
        state, msgs = await _input(daemon, params)
        input_ms = _ms_since(started)
        result = await _run_compact(daemon, params, state, msgs)
        total_ms = _ms_since(started)
        log.debug(
            "compact %s: level %s in %.1f ms (messages %.1f ms)",
            state.session_id if state else "(client messages)",
            result.level,
            total_ms,
            input_ms,
        )
        return result.as_dict() | {"server_ms": {"total": total_ms, "input": input_ms}}

    async def microcompact(params: dict[str, Any]) -> Any:
        """Params: ``session`` or ``messages``, optional ``keep_recent``. Clears old tool
        results to a placeholder, pairs kept valid; zero API calls."""
        _, msgs = await _input(daemon, params)
        return svc.microcompact(msgs, opt_int(params, "keep_recent")).as_dict()

    return {"should_compact": should_compact, "compact": compact, "microcompact": microcompact}


async def _run_compact(
    daemon: CompactionFace, params: dict[str, Any], state: SessionState | None, msgs: list[Msg]
) -> DryRun | Compacted:
    """``compact`` without ``fork``: the dry run's plan or the compaction's result."""
    svc = daemon.compaction
    trigger = params.get("trigger", "manual")
    if trigger not in ("auto", "manual"):
        raise InvalidParams("'trigger' must be 'auto' or 'manual'")
    window = svc.window(params, state)
    sid = state.session_id if state else None
    if params.get("dry_run"):
        path, tokens = (state.path, state.context_tokens) if state else (None, None)
        return await svc.dry_run(
            msgs, sid, window, trigger=trigger, transcript_path=path, context_tokens=tokens
        )
    cwd = opt_str(params, "cwd") or (state.cwd if state else None)
    return await svc.compact(
        msgs,
        session_id=sid,
        project=state.project if state else "",
        window=window,
        trigger=trigger,
        custom_instructions=opt_str(params, "custom_instructions"),
        cwd=Path(cwd) if cwd else None,
        transcript_path=state.path if state else None,
        slug=state.slug if state else None,
    )


async def _fork(daemon: CompactionFace, params: dict[str, Any]) -> ForkResult:
    """``compact`` with ``fork`` (:meth:`memd.compaction.service.CompactionService.fork`)."""
    svc = daemon.compaction
    if params.get("messages") is not None or params.get("dry_run"):
        raise InvalidParams("'fork' takes a 'session', not 'messages' or 'dry_run'")
    state = find_session(daemon, opt_str(params, "session"))
    room, source = daemon.registry.room_of(state), daemon.registry.source_of(state)
    if room is None or source is None:
        return NotForked(f"memd no longer follows {state.agent} sessions")
    window = svc.window(params, state)
    return await svc.fork(state, room, daemon.registry.read, window, root=source.root)


async def _input(
    daemon: CompactionFace, params: dict[str, Any]
) -> tuple[SessionState | None, list[Msg]]:
    ident = opt_str(params, "session")
    state = find_session(daemon, ident) if ident else None
    raw = params.get("messages")
    if raw is not None:
        if not isinstance(raw, list) or not raw:
            raise InvalidParams("'messages' must be a non-empty list of API messages")
        try:
            return state, messages_from_client(raw)
        except ValueError as exc:
            raise InvalidParams(str(exc)) from None
    if state is None:
        raise InvalidParams("give 'session' (a session id) or 'messages' (API format)")
    return state, await daemon.registry.read(state, daemon.compaction.input_of)


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


async def precompact(daemon: TakeoverFace, hook_input: Mapping[str, Any]) -> str | None:
    """Why the PreCompact hook blocks the compaction, after a fork of the session (its
    agent's dialect prints it), or None (the agent compacts as usual). See
    :mod:`memd.compaction.takeover`."""
    svc, sid = daemon.compaction, hook_input.get("session_id")
    record = svc.takeover
    state = daemon.registry.get(sid) if isinstance(sid, str) and sid else None
    room = daemon.registry.room_of(state) if state is not None else None
    source = daemon.registry.source_of(state) if state is not None else None
    if state is None or room is None or source is None:
        return await _pass(daemon, "", "memd does not know the session")
    if (not_asked := asked(hook_input)) is not None:
        return await _pass(daemon, state.session_id, not_asked.reason)
    if not record.begin(state.session_id):  # the claim: no wait between it and the check
        log.info("PreCompact of %s: another hook of this compaction came first", sid)
        return None
    window, cfg = svc.window({}, state), daemon.loaded.config.compaction
    notes = daemon.notes.status(state.session_id)
    decision = decide(
        hook_input,
        context_tokens=state.context_tokens,
        effective_window=effective_window(
            window.context_window, window.max_output_tokens, cfg.max_output_reserve
        ),
        blocked_last=record.blocked_last(state.session_id),
        notes_phase=notes.phase if notes else None,
        window=f"{window.context_window} tokens, {window.source}",
    )
    if isinstance(decision, Pass):
        return await _pass(daemon, state.session_id, decision.reason)
    if room.fork is None:
        return await _pass(daemon, state.session_id, f"memd cannot write a {room.title} session")
    fork_id = room.fork.new_id()
    try:
        await anyio.to_thread.run_sync(record.mark, state.session_id, fork_id)
    except OSError as exc:
        return await _pass(daemon, state.session_id, f"the takeover record: {exc}")
    with anyio.move_on_after(TAKEOVER_BUDGET_S):
        try:
            result = await svc.fork(
                state,
                room,
                daemon.registry.read,
                window,
                root=source.root,
                wait=False,
                fork_id=fork_id,
                fresh_only=True,
            )
        except (NotFound, TranscriptChanged) as exc:  # the transcript went or keeps changing
            return await _pass(daemon, state.session_id, str(exc))
        if isinstance(result, NotForked):
            return await _pass(daemon, state.session_id, result.reason)
        await anyio.to_thread.run_sync(record.count_taken)
        log.info("/compact of %s taken over by the fork %s", state.session_id, fork_id)
        return block_reason(result.resume)
    return await _pass(daemon, state.session_id, "the fork took longer than the hook waits")


async def _pass(daemon: TakeoverFace, session_id: str, reason: str) -> str | None:
    """Let the compaction through: say why, and forget a block of this session (so the one
    after this may be taken over again)."""
    record = daemon.compaction.takeover
    await anyio.to_thread.run_sync(record.count_passed, reason)
    log.info("PreCompact of %s goes through: %s", session_id or "(unknown session)", reason)
    if session_id:
        with contextlib.suppress(OSError):  # kept in the record: the next one passes too
            await anyio.to_thread.run_sync(record.clear, session_id)
    return None
