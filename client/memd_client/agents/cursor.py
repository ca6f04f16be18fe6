"""Cursor: an MCP client only (memd follows no session of it and installs no hook there)."""

from __future__ import annotations

from memd_client.agents.base import AgentTable, McpFiles

TABLE = AgentTable(
    name="cursor",
    title="Cursor",
    short="cursor",
    mcp=McpFiles(
        user=lambda env, home: home / ".cursor" / "mcp.json",
        project=lambda root: root / ".cursor" / "mcp.json",
        fmt="json",
        servers="mcpServers",
    ),
)
