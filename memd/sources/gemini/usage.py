"""How a Gemini CLI chat shows that its agent used a memory (issue 36;
the rules :mod:`memd.memory.usage_evidence` judges by).

Its reader writes a model message's tool calls into its text, ``[called <name>(<args as
JSON>)]`` (and a result as ``[<name> returned: …]``): :func:`calls_in_text` takes them out
of the reply's words. Its tools name files in ``file_path`` (``read_file``, ``write_file``,
``replace``; older ones ``absolute_path``), ``paths`` (``read_many_files``) or ``path``
(``search_file_content``, ``grep``); the shell is ``run_shell_command`` (``command``). An MCP
tool is ``mcp_<server>_<tool>`` (``mcp_memd_recall``), or the bare tool name when no other
server has one so called. The prompt starts with the context a SessionStart hook gave, in a
``<hook_context>`` element Gemini prepends: that is not the user's words.
"""

from __future__ import annotations

import json
import re
from typing import Final

from memd.sources.usage import MAX_CALLS, Call, Rules

SERVER: Final = "memd"
_CALLED: Final = re.compile(r"\[called ([\w.:-]{1,200})\(")
_CONTEXT: Final = re.compile(r"\A\s*<hook_context>.*?</hook_context>\s*", re.DOTALL)
_DECODER: Final = json.JSONDecoder()


def calls_in_text(text: str) -> tuple[str, tuple[Call, ...]]:
    """``text`` without its ``[called name(args)]`` parts, and those calls (arguments that
    are not a JSON object read as none)."""
    calls: list[Call] = []
    kept: list[str] = []
    at = 0
    for found in _CALLED.finditer(text):
        if found.start() < at or len(calls) >= MAX_CALLS:
            continue
        args, end = _args(text, found.end())
        if not text.startswith(")]", end):
            continue
        kept.append(text[at : found.start()])
        calls.append(Call(found.group(1), args))
        at = end + 2
    kept.append(text[at:])
    return "".join(kept), tuple(calls)


def _args(text: str, at: int) -> tuple[dict[str, object], int]:
    try:
        value, end = _DECODER.raw_decode(text, at)
    except (ValueError, RecursionError):
        return {}, at
    return (value if isinstance(value, dict) else {}), end


def user_words(text: str) -> str:
    """A user message without the hook context Gemini put before the prompt."""
    return _CONTEXT.sub("", text, count=1)


RULES: Final = Rules(
    file_args={
        "read_file": ("file_path", "absolute_path"),
        "write_file": ("file_path",),
        "replace": ("file_path",),
        "read_many_files": ("paths",),
        "search_file_content": ("path",),
        "grep": ("path",),
    },
    shell_args={"run_shell_command": "command"},
    mcp_read=frozenset({f"mcp_{SERVER}_read_memory", "read_memory"}),
    mcp_recall=frozenset({f"mcp_{SERVER}_recall", "recall"}),
    calls_in_text=calls_in_text,
    user_words=user_words,
)
