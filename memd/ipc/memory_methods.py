"""IPC methods for persistent memory: ``memory_index``, ``memories``, ``restore_memory``,
``recall``, ``hook``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from memd.errors import NotFound
from memd.ipc.compaction_methods import precompact
from memd.ipc.params import opt_str, req_str, str_list
from memd.ipc.server import Handler, InvalidParams
from memd.memory.hook_context import hook_context
from memd.memory.native import on_event
from memd.sources.hooks import PreCompact, Unhandled
from memd.sources.registry import UNNAMED, room_named
from memd.sources.room import Room
from memd_client.names import unescape_name

if TYPE_CHECKING:
    from memd.ipc.face import MemoryFace


def _valid(call: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
    async def run() -> Any:
        try:
            return await call()
        except ValueError as exc:  # the service's word for a bad cwd/project
            raise InvalidParams(str(exc)) from None

    return run


def memory_methods(daemon: MemoryFace) -> dict[str, Handler]:
    svc = daemon.memory

    async def memory_index(params: dict[str, Any]) -> Any:
        """Params: ``cwd`` (absolute). Result: the project's MEMORY.md as loaded into context
        (200 lines / 25,000 bytes, cut at a line with a warning), its dir, opt-out."""
        cwd = req_str(params, "cwd", "the session's absolute working directory")
        return (await _valid(lambda: svc.index(cwd))()).as_dict()

    async def memories(params: dict[str, Any]) -> Any:
        """Params: ``cwd`` or ``project`` (folder name or path); ``check``: also each
        memory's citations and what their check against ``cwd``'s code found; ``archived``:
        the memories in its archive instead. Result: manifest rows (``memories``), or the
        archive's rows (``archived``) and its folder (``archive_dir``)."""
        cwd, project = _project(params)
        check, archived = params.get("check") is True, params.get("archived") is True
        return await _valid(
            lambda: svc.memories(cwd=cwd, project=project, check=check, archived=archived)
        )()

    async def restore_memory(params: dict[str, Any]) -> Any:
        """Params: ``cwd`` or ``project`` (as for ``memories``), ``memory``: an archived
        memory's name in the archive, its old file or its name. Result: where it is now
        (``restored``, ``path``), whether its index lines came back (``index``).
        ``not_found`` when the archive holds no such memory; ``unavailable`` when memd's
        record of the move cannot be written (then nothing moved)."""
        return await _valid(lambda: _restore(daemon, params))()

    async def recall(params: dict[str, Any]) -> Any:
        """Params: ``query``, ``cwd``, optional ``session``, ``recent_tools``,
        ``already_surfaced``. Result: up to 5 memories with age and freshness warnings, the
        general caveat and which method answered. Never fails for model trouble."""
        query = req_str(params, "query", "what the agent is about to do")
        cwd = req_str(params, "cwd", "the session's absolute working directory")
        answer = await _valid(
            lambda: svc.recall(
                query,
                cwd,
                opt_str(params, "session") or "",
                str_list(params, "recent_tools"),
                str_list(params, "already_surfaced"),
            )
        )()
        return answer.as_dict()

    async def hook(params: dict[str, Any]) -> Any:
        """A hook event of Claude Code, Codex or Gemini: see :func:`_hook`."""
        return await _hook(daemon, params)

    return {
        "memory_index": memory_index,
        "memories": memories,
        "restore_memory": restore_memory,
        "recall": recall,
        "hook": hook,
    }


async def _restore(daemon: MemoryFace, params: dict[str, Any]) -> Any:
    cwd, project = _project(params)
    wanted = req_str(params, "memory", "the archived memory's file or name")
    try:
        restored = await daemon.memory.restore(wanted, cwd=cwd, project=project)
    except LookupError as exc:
        raise NotFound(str(exc).strip("'\"")) from None
    return restored.as_dict()


def _project(params: dict[str, Any]) -> tuple[str | None, str | None]:
    """The ``cwd`` and ``project`` params (a project's folder name comes escaped)."""
    cwd, project = opt_str(params, "cwd"), opt_str(params, "project")
    return cwd, unescape_name(project) if project else project


async def _hook(daemon: MemoryFace, params: dict[str, Any]) -> Any:
    """Params: ``raw`` (the hook's stdin bytes, as ``memd-hook`` sends them) or ``event``
    (a hook event) and ``input`` (its stdin JSON); ``agent``: the agent that runs the hook
    (a room's name, :data:`memd.sources.registry.ROOMS`; none: the first room's, whose hook
    commands name none); ``env``: the environment the hook forwards (read where the agent's
    room reads it). Result: ``{"additionalContext": text or None, "stdout": what the hook
    prints or None}`` under the injection budget, in the agent's shape and limits; nothing
    for an agent or an event memd does not know."""
    nothing = {"additionalContext": None, "stdout": None}
    agent = opt_str(params, "agent")
    room = room_named(agent) if agent else UNNAMED
    if room is None:
        return nothing
    parsed = _hook_event(room, params)
    if parsed is None:
        return nothing
    event = room.hooks.parse(*parsed, _forwarded_env(params))
    if isinstance(event, Unhandled):
        return nothing
    if isinstance(event, PreCompact):
        reason = await precompact(daemon, event.data)
        stdout = room.hooks.output(event, reason) if reason else None
        return {"additionalContext": None, "stdout": stdout}
    if room.native is not None:  # what the agent's own memory file holds is not injected
        await on_event(room.native, event, daemon.memory, daemon.loaded)
    text = await hook_context(
        event,
        daemon.memory,
        notes_for=daemon.notes_text,
        budget_bytes=daemon.loaded.config.hook.injection_max_bytes,
        own_index=room.memory_per_session,
    )
    text = room.hooks.limit(text) if text else None
    return {"additionalContext": text or None, "stdout": room.hooks.output(event, text or "")}


def _forwarded_env(params: dict[str, Any]) -> dict[str, str] | None:
    """The environment a hook forwarded (``env``), its string pairs only."""
    env = params.get("env")
    if not isinstance(env, dict):
        return None
    return {k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str)}


def _hook_event(room: Room, params: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """``hook``'s event and input: from ``raw`` (None when the bytes are not the agent's
    hook input) or from ``event`` and ``input``."""
    raw = params.get("raw")
    if isinstance(raw, bytes):
        parsed = room.hooks.read(raw)
        if parsed is None:
            return None
        return parsed[0], dict(parsed[1])
    event = req_str(params, "event", "the hook event name")
    given = params.get("input")
    if not isinstance(given, dict):
        raise InvalidParams("'input' must be the hook's JSON object")
    return event, given
