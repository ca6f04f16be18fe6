"""``memd-mcp``: a stdio MCP server that gives any agent memd's memories (R-I8)."""
