"""Drive the real ``memd-mcp`` process with the MCP SDK's own client over stdio."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import CallToolResult, Implementation, ListRootsResult, Root, TextContent
from pydantic import FileUrl

from memd.install.agents import server_command
from tests.daemon_harness import Home


@asynccontextmanager
async def mcp_session(
    home: Home,
    cwd: Path,
    *,
    client: str = "codex-test",
    env: dict[str, str] | None = None,
    roots: list[Path] | None = None,
    exact_env: dict[str, str] | None = None,
) -> AsyncIterator[ClientSession]:
    """A fresh memd-mcp process in ``cwd``, started as ``install-mcp`` registers it, and an
    initialized SDK session. ``exact_env`` replaces the environment whole (an agent that
    passes only a few variables)."""
    command, *args = server_command("user")
    params = StdioServerParameters(
        command=command,
        args=args,
        env=exact_env if exact_env is not None else {**home.env, **(env or {})},
        cwd=str(cwd),
    )
    info = Implementation(name=client, version="1.0")
    answer = ListRootsResult(roots=[Root(uri=FileUrl(p.as_uri())) for p in roots or []])

    async def list_roots(context: ClientRequestContext) -> ListRootsResult:
        return answer

    # The server's stderr goes to a file beside the daemon's log (the SDK wants a text file).
    with open(home.root / "memd-mcp.log", "a") as errlog:  # noqa: ASYNC230 - a local file
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(
                read,
                write,
                client_info=info,
                list_roots_callback=list_roots if roots is not None else None,
            ) as session,
        ):
            with anyio.fail_after(30):
                await session.initialize()
            yield session


async def call(session: ClientSession, tool: str, args: dict[str, Any]) -> CallToolResult:
    with anyio.fail_after(30):
        return await session.call_tool(tool, args)


def text_of(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))
