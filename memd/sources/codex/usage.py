"""How Codex CLI's rollout shows that its agent used a memory (issue 36;
the rules :mod:`memd.memory.usage_evidence` judges by).

Its reader keeps a ``function_call`` as a ``tool_use`` whose input is the call's arguments,
JSON text: the shell is ``exec_command`` (``cmd``, a command line; 0.169, 0.171) or the older
``shell`` (``command``, argv). An MCP tool is called ``<namespace>__<tool>``, the namespace
``mcp__<server>``: memd's are ``mcp__memd__recall`` and ``mcp__memd__read_memory``.

Codex 0.171 has its model cite the memories it used: one block at the very end of the final
reply (its memory prompt asks for exactly this structure, for "programmatic parsing")::

    <oai-mem-citation>
    <citation_entries>
    MEMORY.md:234-236|note=[responsesapi citation extraction code pointer]
    rollout_summaries/2026-02-17T21-23-02-LN3m-example.md:10-12|note=[weekly report format]
    </citation_entries>
    <rollout_ids>
    019c6e27-e55b-73d1-87d8-4e01f1f75043
    </rollout_ids>
    </oai-mem-citation>

Each entry is ``<file>:<line_start>-<line_end>|note=[<how it was used>]``, the file relative
to the memory folder: :func:`cited_files` reads the files of every such block in a reply.
"""

from __future__ import annotations

import re
from typing import Final

from memd.sources.usage import Rules

SERVER: Final = "memd"
MAX_ENTRIES: Final = 64
_BLOCK: Final = re.compile(
    r"<oai-mem-citation>\s*<citation_entries>(.*?)</citation_entries>", re.DOTALL
)
_LINES: Final = re.compile(r":\d+(?:-\d+)?$")


def cited_files(reply: str) -> tuple[str, ...]:
    """The files the citation blocks of ``reply`` name (line ranges and notes left out)."""
    files: list[str] = []
    for block in _BLOCK.findall(reply):
        for line in block.splitlines():
            entry = line.split("|", 1)[0].strip()
            entry = _LINES.sub("", entry).strip()
            if entry:
                files.append(entry)
            if len(files) >= MAX_ENTRIES:
                return tuple(files)
    return tuple(files)


RULES: Final = Rules(
    shell_args={"exec_command": "cmd", "shell": "command", "local_shell": "command"},
    mcp_read=frozenset({f"mcp__{SERVER}__read_memory"}),
    mcp_recall=frozenset({f"mcp__{SERVER}__recall"}),
    citations=cited_files,
)
