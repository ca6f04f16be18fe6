"""The ``memd-mcp`` server: memd's memories for any MCP agent, over stdio (R-I8).

A thin face over the daemon: every tool and resource is one call through
:class:`memd_client.client.AsyncClient`; the server keeps no state between calls. The
project of a call is resolved by :mod:`memd.mcp.project` (tool argument, the client's roots,
``$CLAUDE_PROJECT_DIR``, the working directory) and mapped to its memory dir by the daemon,
exactly as for Claude Code sessions.

Fail open (R-B6): when the daemon is down, slow or refuses, the tool answers an error result
whose text says what happened and how to fix it; the server itself keeps running. Only the
MCP SDK and the msgpack client are imported; the daemon's own modules never are. This module
is imported only once the agent asks what :mod:`memd.mcp.front` does not answer (a tool call):
the handshake and the tool list are answered before the SDK is loaded.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import sys
import warnings
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, cast

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types import ListResourcesResult, PaginatedRequestParams, Resource, ToolAnnotations
from pydantic import Field

from memd.mcp import render
from memd.mcp.project import NoProject, Project, resolve_project
from memd.mcp.resources import URI_PREFIX, resource_rows
from memd_client.client import AsyncClient
from memd_client.errors import DaemonNotRunning, MemdClientError, RemoteError

log = logging.getLogger("memd.mcp")

CALL_TIMEOUT_S = 10.0
RECALL_TIMEOUT_S = 20.0  # the daemon gives the model memory.recall_timeout_s, then ranks
REMEMBER_TIMEOUT_S = 25.0  # the daemon waits up to 15 s for an extraction or dream to finish
ROOTS_TIMEOUT_S = 2.0

INSTRUCTIONS = """\
memd keeps this project's long-lived memories: Markdown notes about the user, their
feedback on how work should be done, facts about the project and where to find things. The
same files are loaded into Claude Code's sessions, so what you save here reaches every agent
working on this repository. Call `recall` with what you are about to do before starting a
task; call `remember` when you learn something a future session should know that the code
and git history do not say. Memories are point-in-time notes: verify claims about code
before relying on them."""

ProjectArg = Annotated[
    str | None,
    Field(
        description="Absolute path of the project (any directory inside the repository). "
        "Leave out to use the client's root, $CLAUDE_PROJECT_DIR, or the server's "
        "working directory."
    ),
]


class DaemonFailure(Exception):
    """A daemon call that failed; the message is what the agent is told."""


async def call_daemon(method: str, params: dict[str, Any], *, wait_s: float) -> Any:
    """One request to the daemon; :class:`DaemonFailure` with an actionable message."""
    try:
        async with AsyncClient(timeout=wait_s) as client:
            return await client.call(method, params)
    except DaemonNotRunning as exc:
        raise DaemonFailure(f"{exc}; then call this tool again.") from None
    except RemoteError as exc:
        raise DaemonFailure(f"memd refused: {exc.message}") from None
    except MemdClientError as exc:
        raise DaemonFailure(
            f"memd did not answer ({exc}); `memdctl status` shows whether it is healthy"
        ) from None


async def client_roots(ctx: Context) -> list[str]:
    """The client's root URIs, ``[]`` when it has none or does not answer in time."""
    session = ctx.session
    caps = session.client_capabilities
    if caps is None or caps.roots is None:
        return []
    with anyio.move_on_after(ROOTS_TIMEOUT_S), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # roots are deprecated in the newest protocol only
        try:
            result = await session.list_roots()
        except MCPError as exc:
            log.info("roots/list failed: %s", exc)
            return []
        return [str(root.uri) for root in result.roots]
    return []


async def project_of(ctx: Context, argument: str | None) -> Project:
    roots = [] if argument else await client_roots(ctx)
    found = resolve_project(
        argument, roots, os.environ.get("CLAUDE_PROJECT_DIR"), _cwd(), os.environ.get("HOME")
    )
    if isinstance(found, NoProject):
        raise DaemonFailure(found.reason)
    return found


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:
        return None  # the working directory was removed


def client_name(ctx: Context) -> str:
    params = ctx.session.client_params
    info = getattr(params, "client_info", None)
    name = getattr(info, "name", None)
    return name if isinstance(name, str) and name else "mcp-client"


async def _tool(
    ctx: Context,
    project: str | None,
    method: str,
    params: dict[str, Any],
    wait_s: float = CALL_TIMEOUT_S,
) -> Any:
    try:
        where = await project_of(ctx, project)
        return await call_daemon(method, {"cwd": where.path, **params}, wait_s=wait_s)
    except DaemonFailure as exc:
        raise ToolError(str(exc)) from None


# ---------------------------------------------------------------------------------------------
# Tools


async def recall(
    ctx: Context,
    query: Annotated[
        str,
        Field(
            min_length=1,
            max_length=4_000,
            description="What you are about to do or need to know, in a sentence.",
        ),
    ],
    limit: Annotated[int, Field(ge=1, le=5, description="At most this many memories (1-5).")] = 5,
    project: ProjectArg = None,
) -> str:
    """The memories that matter for a query: each with its type, when it was saved, its age
    and a warning when it is older than a day, plus a caveat that memories can be stale.
    A model picks them when memd has an API key; otherwise a lexical ranking does."""
    result = await _tool(ctx, project, "recall", {"query": query}, RECALL_TIMEOUT_S)
    return render.render_recall(result, limit)


async def list_memories(ctx: Context, project: ProjectArg = None) -> str:
    """Every memory of the project, newest first: type, file, age, name and one-line
    description. Use read_memory with a file or name to read one in full."""
    return render.render_memories(await _tool(ctx, project, "memories", {}))


async def read_memory(
    ctx: Context,
    name: Annotated[
        str,
        Field(
            min_length=1,
            description="The memory's file as list_memories shows it "
            "(e.g. feedback_testing.md) or its name.",
        ),
    ],
    project: ProjectArg = None,
) -> str:
    """One memory in full: its frontmatter fields, who wrote it, its age and freshness
    warning, and its content (private spans and likely secrets removed)."""
    return render.render_memory(await _tool(ctx, project, "read_memory", {"name": name}))


async def remember(
    ctx: Context,
    type: Annotated[
        str,
        Field(
            description="user: who the user is and how they work; feedback: how they want "
            "work done (corrections, preferences); project: facts about this work that the "
            "code and git history do not say; reference: where to find things.",
            json_schema_extra={"enum": ["user", "feedback", "project", "reference"]},
        ),
    ],
    name: Annotated[
        str,
        Field(
            min_length=1,
            max_length=120,
            description="A short title; saving again under the same name updates that memory.",
        ),
    ],
    description: Annotated[
        str,
        Field(
            min_length=1,
            max_length=300,
            description="One line saying when this memory is useful (it goes into the index).",
        ),
    ],
    content: Annotated[
        str,
        Field(
            min_length=1,
            max_length=65_536,  # the daemon enforces mcp.remember_max_bytes (4 KB default)
            description="The memory itself, in Markdown: one fact or rule and why. "
            "At most 4 KB by default.",
        ),
    ],
    project: ProjectArg = None,
) -> str:
    """Save a memory for every future session on this project, Claude Code's included:
    a typed Markdown file plus its line in MEMORY.md. Private spans (<private>…</private>)
    and likely secrets are removed before writing. Do not save what the code or git history
    already records, or anything temporary."""
    params = {
        "type": type,
        "name": name,
        "description": description,
        "content": content,
        "agent": client_name(ctx),
    }
    result = await _tool(ctx, project, "remember", params, REMEMBER_TIMEOUT_S)
    return render.render_remembered(result)


async def session_notes(
    ctx: Context,
    session: Annotated[
        str | None,
        Field(
            description="A Claude Code session id (or a unique prefix). Leave out for the "
            "project's most recently active session with notes."
        ),
    ] = None,
    project: ProjectArg = None,
) -> str:
    """The working notes memd keeps for a Claude Code session in this project (current
    state, task, files, errors, learnings, worklog), to pick up where it left off."""
    params = {"session": session} if session else {}
    return render.render_notes(await _tool(ctx, project, "project_notes", params))


async def memory_status(ctx: Context, project: ProjectArg = None) -> str:
    """What memd knows about this project: its memory dir, whether memory is on, the
    number of memories, the index size, the last background extraction, and the Claude
    Code sessions it has seen."""
    return render.render_status(await _tool(ctx, project, "project_status", {}))


# ---------------------------------------------------------------------------------------------
# Resources


class MemdMCP(MCPServer[Any]):
    """MCPServer whose resource list is the project's memory files, read per request."""

    async def _handle_list_resources(
        self, ctx: Any, params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        listing = await self._list_memory_resources(Context(request_context=ctx, mcp_server=self))
        return ListResourcesResult(resources=listing)

    async def _list_memory_resources(self, ctx: Context) -> list[Resource]:
        try:
            where = await project_of(ctx, None)
            result = await call_daemon("memories", {"cwd": where.path}, wait_s=CALL_TIMEOUT_S)
        except DaemonFailure as exc:
            log.info("resources/list: %s", exc)
            return []
        return [Resource.model_validate(row) for row in resource_rows(result)]


async def memory_resource(file: str, ctx: Context) -> str:
    """A memory file (scrubbed) or, for ``MEMORY.md``, the index as loaded into context."""
    try:
        where = await project_of(ctx, None)
        if file == "MEMORY.md":
            index = await call_daemon("memory_index", {"cwd": where.path}, wait_s=CALL_TIMEOUT_S)
            return str(index.get("text") or "")
        memory = await call_daemon(
            "read_memory", {"cwd": where.path, "name": file}, wait_s=CALL_TIMEOUT_S
        )
    except DaemonFailure as exc:
        raise ResourceError(str(exc)) from None
    return render.render_memory(memory)


def build_server() -> MemdMCP:
    server = MemdMCP("memd", instructions=INSTRUCTIONS, version=_version(), log_level="WARNING")
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    for tool in (recall, list_memories, read_memory, session_notes, memory_status):
        server.add_tool(tool, annotations=read_only, structured_output=False)
    server.add_tool(
        remember,
        annotations=ToolAnnotations(
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
        structured_output=False,
    )
    server.resource(
        URI_PREFIX + "{+file}",
        name="memory",
        description="A memory file of this project, or MEMORY.md, the index",
        mime_type="text/markdown",
    )(memory_resource)
    return server


def _version() -> str:
    from memd import __version__

    return __version__


def main() -> None:
    """Run the server on stdin/stdout until the client closes it (the SDK from the start;
    ``memd-mcp`` runs :func:`memd.mcp.front.main`, which answers the handshake first)."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    build_server().run("stdio")


def serve_lines(
    lines: queue.SimpleQueue[bytes | None], write: Callable[[bytes], None], drop_id: object
) -> None:
    """Serve the lines :mod:`memd.mcp.front` passes on (``None`` ends them) until they end,
    writing each answer whole through ``write``; the answer to the request ``drop_id`` (the
    ``initialize`` the front answered already) is not written. Blocking: the front runs it
    in a thread of its own."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    server = build_server()

    async def run() -> None:
        # Explicit streams: stdin is the front's to read, stdout shared with it.
        streams = stdio_server(cast(Any, _Fed(lines)), cast(Any, _Dropping(write, drop_id)))
        async with streams as (read, write_stream):
            await server._lowlevel_server.run(
                read, write_stream, server._lowlevel_server.create_initialization_options()
            )

    anyio.run(run)


class _Fed:
    """The lines the front passes on, as the text lines the SDK's stdio reader iterates."""

    def __init__(self, lines: queue.SimpleQueue[bytes | None]) -> None:
        self._lines = lines

    def __aiter__(self) -> AsyncIterator[str]:
        return self._read()

    def _next(self) -> bytes | None:
        return self._lines.get()

    async def _read(self) -> AsyncIterator[str]:
        while (
            line := await anyio.to_thread.run_sync(self._next, abandon_on_cancel=True)
        ) is not None:
            yield line.decode("utf-8", errors="replace")


class _Dropping:
    """The SDK's output lines, each written whole, but its answer to ``drop_id``."""

    def __init__(self, write: Callable[[bytes], None], drop_id: object) -> None:
        self._write = write
        self._drop_id = drop_id
        self._pending = ""

    async def write(self, text: str) -> None:
        self._pending += text
        if not self._pending.endswith("\n"):
            return
        line, self._pending = self._pending, ""
        if self._drop_id is not None and _answers(line, self._drop_id):
            self._drop_id = None
            return
        await anyio.to_thread.run_sync(self._write, line.encode("utf-8"))

    async def flush(self) -> None:
        pass


def _answers(line: str, ident: object) -> bool:
    try:
        data = json.loads(line)
    except ValueError:
        return False
    return (
        isinstance(data, dict)
        and "method" not in data
        and data.get("id") == ident
        and type(data.get("id")) is type(ident)
    )
