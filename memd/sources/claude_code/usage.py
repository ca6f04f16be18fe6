"""How Claude Code's transcript shows that its agent used a memory (issue 36;
the rules :mod:`memd.memory.usage_evidence` judges by).

Its tool calls are ``tool_use`` blocks with their input as an object: ``Read``, ``Edit``,
``Write`` and ``MultiEdit`` name the file in ``file_path``, ``NotebookEdit`` in
``notebook_path``, ``Grep`` searches ``path``; ``Bash`` runs ``command``. memd's MCP server,
registered as ``memd`` by ``memdctl install-mcp``, has its tools as ``mcp__memd__<tool>``.
Claude Code writes no citation tag; a hook's context is an attachment, not the prompt's
text.
"""

from __future__ import annotations

from memd.sources.usage import Rules

SERVER = "memd"

RULES = Rules(
    file_args={
        "Read": ("file_path",),
        "Edit": ("file_path",),
        "Write": ("file_path",),
        "MultiEdit": ("file_path",),
        "NotebookEdit": ("notebook_path",),
        "Grep": ("path",),
    },
    shell_args={"Bash": "command"},
    mcp_read=frozenset({f"mcp__{SERVER}__read_memory"}),
    mcp_recall=frozenset({f"mcp__{SERVER}__recall"}),
)
