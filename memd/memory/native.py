"""memd's verified memories in an agent's own memory file (issue 35, item 5).

Where an agent loads a memory file of its own with every request (its room's ``native``:
:class:`memd.sources.native.NativeMemory`) and the user turned serving on, memd keeps its
verified memories there too: the ones recall would trust (read through the memory dir's
area, a team memory that steers left out, citations checked now and none failing), pinned
first, then the newest, as many as the agent's budget holds. Each hook event of such an
agent's session (:func:`on_event`, before the context is worked out):

* ``SessionStart`` — the agent has just loaded its file: the memories memd's block held are
  marked as surfaced in the session, so the prompt hook never injects them again (one route
  per memory); a block left from before serving was turned off is taken out;
* ``PromptSubmit`` — the same marking when memd saw no start of the session (a restart);
* ``TurnEnd`` — the block is brought up to date for the agent's next session (memories
  written meanwhile, some no longer verifying), or taken out when serving is off.

A write that fails is logged and left for the next turn; the hook answers all the same.
"""

from __future__ import annotations

import logging
import time
from functools import partial

import anyio.to_thread

from memd.config import LoadedConfig
from memd.memory.reads import scan_headers
from memd.memory.recall import load_memories
from memd.memory.service import MemoryService
from memd.sources.hooks import HookEvent, PromptSubmit, SessionStart, TurnEnd
from memd.sources.native import NativeMemory, Served

log = logging.getLogger(__name__)

MAX_CANDIDATES = 24  # memories looked at for the block (pinned first, then the newest)
CHECK_S = 1.0  # the citation checks' share of one hook call


async def on_event(
    native: NativeMemory, event: HookEvent, service: MemoryService, loaded: LoadedConfig
) -> None:
    """What an event of a session of ``native``'s agent means for its file (module doc)."""
    if not isinstance(event, SessionStart | PromptSubmit | TurnEnd) or not event.cwd:
        return
    record = service.contexts.get(event.session_id)
    if isinstance(event, SessionStart) or (
        isinstance(event, PromptSubmit) and not record.native_read
    ):
        held = await anyio.to_thread.run_sync(native.served, loaded, event.cwd)
        record.surfaced |= held
        record.native_read = True
    on = native.enabled(loaded)
    if isinstance(event, TurnEnd) or (isinstance(event, SessionStart) and not on):
        try:
            await refresh(native, service, loaded, event.cwd)
        except (OSError, ValueError) as exc:  # a memory dir memd cannot read: next turn
            log.warning("memd's memories not served for %s: %s", event.cwd, exc)


async def refresh(
    native: NativeMemory, service: MemoryService, loaded: LoadedConfig, cwd: str
) -> str:
    """Bring memd's block in the agent's file for ``cwd`` up to date (none when serving is
    off); what happened."""
    memories = await verified(service, cwd) if native.enabled(loaded) else []
    outcome = await anyio.to_thread.run_sync(native.serve, loaded, cwd, memories)
    log.debug("native memory for %s: %s", cwd, outcome)
    return outcome


async def verified(service: MemoryService, cwd: str) -> list[Served]:
    """The project's memories recall would trust now, pinned first, then the newest."""
    where = await service.locate(cwd)
    if where.opted_out or service.disabled_reason():
        return []
    headers = await scan_headers(where.memory_dir, service.config)
    ordered = sorted(headers, key=lambda h: not h.pinned)[:MAX_CANDIDATES]
    redact = service.config.privacy.redact_secrets
    now_ms = int(time.time() * 1000)
    load = partial(load_memories, where.memory_dir, ordered, now_ms, redact)
    memories = await anyio.to_thread.run_sync(load)
    check = partial(service.citations.recalled, cwd, where.memory_dir, memories, tuple)
    checked = await anyio.to_thread.run_sync(check, time.monotonic() + CHECK_S)
    trusted = {m.path: m for m in checked if m.verified is not False}
    kept = [trusted[m.path] for m in memories if m.path in trusted]  # in their order
    return [Served(m.path, m.name, m.type or "", m.mtime[:10], m.content) for m in kept]
