"""IPC methods for persistent memory: ``memory_index``, ``memories``, ``recall``, ``hook``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from memd.ipc.compaction_methods import precompact
from memd.ipc.params import opt_str, req_str, str_list
from memd.ipc.server import Handler, InvalidParams
from memd.memory.hook_context import (
    CLAUDE,
    from_subagent,
    hook_context,
    hook_stdout,
    parse_hook_stdin,
)
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
        return await _valid(lambda: svc.index(cwd))()

    async def memories(params: dict[str, Any]) -> Any:
        """Params: ``cwd`` or ``project`` (folder name or path); ``check``: also each
        memory's citations and what their check against ``cwd``'s code found. Result:
        manifest rows."""
        cwd, project = opt_str(params, "cwd"), opt_str(params, "project")
        project = unescape_name(project) if project else project
        check = params.get("check") is True
        return await _valid(lambda: svc.memories(cwd=cwd, project=project, check=check))()

    async def recall(params: dict[str, Any]) -> Any:
        """Params: ``query``, ``cwd``, optional ``session``, ``recent_tools``,
        ``already_surfaced``. Result: up to 5 memories with age and freshness warnings, the
        general caveat and which method answered. Never fails for model trouble."""
        query = req_str(params, "query", "what the agent is about to do")
        cwd = req_str(params, "cwd", "the session's absolute working directory")
        return await _valid(
            lambda: svc.recall(
                query,
                cwd,
                opt_str(params, "session") or "",
                str_list(params, "recent_tools"),
                str_list(params, "already_surfaced"),
            )
        )()

    async def hook(params: dict[str, Any]) -> Any:
        """A hook event of Claude Code, Codex or Gemini: see :func:`_hook`."""
        return await _hook(daemon, params)

    return {"memory_index": memory_index, "memories": memories, "recall": recall, "hook": hook}


async def _hook(daemon: MemoryFace, params: dict[str, Any]) -> Any:
    """Params: ``raw`` (the hook's stdin bytes, as ``memd-hook`` sends them) or ``event``
    (a hook event) and ``input`` (its stdin JSON); ``agent``: ``claude`` (the default),
    ``codex`` or ``gemini``; ``env``: the Claude Code environment the hook forwards (read
    for Claude Code only). Result: ``{"additionalContext": text or None, "stdout": what
    the hook prints or None}`` under the injection budget; nothing for an event a
    Claude Code sub-agent fired (:func:`~memd.memory.hook_context.from_subagent`)."""
    parsed = _hook_event(params)
    if parsed is None:
        return {"additionalContext": None, "stdout": None}
    event, hook_input = parsed
    agent = opt_str(params, "agent") or CLAUDE
    if agent == CLAUDE and from_subagent(hook_input):
        return {"additionalContext": None, "stdout": None}
    if event == "PreCompact" and agent == CLAUDE:
        return {"additionalContext": None, "stdout": await precompact(daemon, hook_input)}
    result = await hook_context(
        event,
        hook_input,
        daemon.memory,
        notes_for=daemon.notes_text,
        budget_bytes=daemon.loaded.config.hook.injection_max_bytes,
        env=_forwarded_env(params) if agent == CLAUDE else None,
        agent=agent,
    )
    return {**result, "stdout": hook_stdout(event, result["additionalContext"], agent)}


def _forwarded_env(params: dict[str, Any]) -> dict[str, str] | None:
    """The Claude Code environment a hook forwarded (``env``), its string pairs only."""
    env = params.get("env")
    if not isinstance(env, dict):
        return None
    return {k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str)}


def _hook_event(params: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """``hook``'s event and input: from ``raw`` (None when the bytes are no hook input) or
    from ``event`` and ``input``."""
    raw = params.get("raw")
    if isinstance(raw, bytes):
        parsed = parse_hook_stdin(raw)
        if parsed is None:
            return None
        return parsed[0], dict(parsed[1])
    event = req_str(params, "event", "the hook event name")
    given = params.get("input")
    if not isinstance(given, dict):
        raise InvalidParams("'input' must be the hook's JSON object")
    return event, given
