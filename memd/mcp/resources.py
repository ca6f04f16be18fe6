"""The project's memory files as MCP resources (``resources/list``), from the daemon's
``memories`` answer. Shared by the SDK server (:mod:`memd.mcp.server`) and, in the 2026 era,
:mod:`memd.mcp.front`, which answers ``resources/list`` before the SDK is loaded: Claude Code
2.1.332 offers a server's tools only once its tools, prompts and resources are all listed.

Imports only the msgpack client and :mod:`memd.mcp.project`.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from memd.mcp.project import NoProject, resolve_project
from memd_client.client import Client
from memd_client.errors import MemdClientError

log = logging.getLogger("memd.mcp")

URI_PREFIX = "memd://memory/"
CALL_TIMEOUT_S = 10.0
INDEX = {
    "uri": f"{URI_PREFIX}MEMORY.md",
    "name": "MEMORY.md",
    "mimeType": "text/markdown",
    "description": "The memory index as it is loaded into Claude Code's context",
}


def resource_rows(result: Any) -> list[dict[str, Any]]:
    """The resources of a ``memories`` answer: the index, then each memory file (pure).
    Each holds the fields the SDK's ``Resource`` writes, by their wire names (none null)."""
    rows = result.get("memories") if isinstance(result, dict) else None
    out: list[dict[str, Any]] = [dict(INDEX)]
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and isinstance(row.get("relative"), str):
            resource = {"uri": URI_PREFIX + row["relative"], "name": row["relative"]}
            for field, key in (("title", "name"), ("description", "description")):
                if isinstance(row.get(key), str):
                    resource[field] = row[key]
            out.append({**resource, "mimeType": "text/markdown"})
    return out


def memory_resources_nowait_roots() -> list[dict[str, Any]]:
    """The resources of the project named without the client's roots (``$CLAUDE_PROJECT_DIR``,
    then the working directory: a 2026-era connection over stdio has no way to ask the
    client for its roots), ``[]`` when no project is named or the daemon does not answer.
    Blocking."""
    try:
        cwd: str | None = os.getcwd()
    except OSError:
        cwd = None
    found = resolve_project(
        None, [], os.environ.get("CLAUDE_PROJECT_DIR"), cwd, os.environ.get("HOME")
    )
    if isinstance(found, NoProject):
        log.info("resources/list: %s", found.reason)
        return []
    try:
        with Client(timeout=CALL_TIMEOUT_S) as client:
            result = client.call("memories", {"cwd": found.path})
    except MemdClientError as exc:
        log.info("resources/list: %s", exc)
        return []
    return resource_rows(result)
