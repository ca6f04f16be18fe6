"""Check a Messages-API request body the way the API does (pure).

:func:`request_problems` returns one line per problem, each prefixed with the JSON path of the
offending part (``messages.2.content.0: …``); an empty list means the API would accept the
request. It is at least as strict as the API wherever a mistake would cost memd a failed
call: tool_use/tool_result pairing, empty content, block placement, tool names, breakpoints.

Consecutive messages with the same role are accepted, because the API merges them; pass
``strict_alternation=True`` to report them. Tool pairing is checked on the messages *as sent*
(a ``tool_result`` must sit in the message right after its ``tool_use``), which is what the
API demands too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

BLOCK_TYPES = frozenset(
    {"text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking"}
)
_USER_ONLY = frozenset({"tool_result", "image", "document"})
_ASSISTANT_ONLY = frozenset({"tool_use", "thinking", "redacted_thinking"})
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_CACHE_BREAKPOINTS = 4
# Claude Code 2.1.332 adds and removes tools mid-conversation under this beta (dated
# ``-2026-07-01``): ``tool_addition``/``tool_removal`` blocks in a system message.
TOOL_CHANGES_BETA = "mid-conversation-tool-changes"


def request_problems(
    body: object,
    *,
    strict_alternation: bool = False,
    system_messages: bool = False,
    betas: frozenset[str] = frozenset(),
) -> list[str]:
    """Everything the API would reject in ``body`` (the decoded JSON of a request).

    ``system_messages`` accepts ``{"role": "system", …}`` entries inside ``messages``, as
    Claude Code 2.1 sends hook context (the "real client" profile of the loopback server);
    memd's own requests never may. ``betas`` are the request's ``anthropic-beta`` names:
    with :data:`TOOL_CHANGES_BETA` a system message may also add or remove tools.
    """
    if not isinstance(body, dict):
        return ["(body): the request body must be a JSON object"]
    problems = [*_top_level(body), *_system(body.get("system")), *_tools(body.get("tools"))]
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append("messages: at least one message is required")
    else:
        tool_changes = any(b.startswith(TOOL_CHANGES_BETA) for b in betas)
        problems += _messages(messages, strict_alternation, system_messages, tool_changes)
    breakpoints = count_cache_breakpoints(body)
    if breakpoints > MAX_CACHE_BREAKPOINTS:
        problems.append(
            f"cache_control: at most {MAX_CACHE_BREAKPOINTS} blocks may carry cache_control, "
            f"found {breakpoints}"
        )
    return problems


def count_cache_breakpoints(body: dict[str, Any]) -> int:
    """Blocks carrying ``cache_control`` in tools, system and messages."""
    return sum(1 for block in _cacheable_blocks(body) if block.get("cache_control") is not None)


def _cacheable_blocks(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for group in (body.get("tools"), body.get("system")):
        if isinstance(group, list):
            yield from (b for b in group if isinstance(b, dict))
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            yield from (b for b in content if isinstance(b, dict))


def _top_level(body: dict[str, Any]) -> list[str]:
    problems = []
    model = body.get("model")
    if not isinstance(model, str) or not model:
        problems.append("model: a model name is required")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        problems.append("max_tokens: a whole number is required")
    elif max_tokens < 1:
        problems.append(f"max_tokens: must be at least 1, got {max_tokens}")
    return problems


def _system(system: object) -> list[str]:
    if system is None or isinstance(system, str):
        return []
    if not isinstance(system, list):
        return ["system: must be a string or a list of text blocks"]
    problems = []
    for i, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text":
            problems.append(f"system.{i}: only text blocks are allowed in system")
        elif not _nonblank(block.get("text")):
            problems.append(f"system.{i}.text: text blocks must not be empty")
    return problems


def _tools(tools: object) -> list[str]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        return ["tools: must be a list"]
    problems: list[str] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            problems.append(f"tools.{i}: must be an object")
            continue
        name = tool.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            problems.append(f"tools.{i}.name: must match {TOOL_NAME.pattern}, got {name!r}")
        elif name in seen:
            problems.append(f"tools.{i}.name: tool names must be unique, {name!r} repeats")
        else:
            seen.add(name)
        if tool.get("type", "custom") != "custom":
            continue  # a server tool (web search, text editor …) has no schema of ours
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            problems.append(f"tools.{i}.input_schema: must be a JSON schema with type 'object'")
    return problems


def _messages(
    messages: list[Any], strict_alternation: bool, system_messages: bool, tool_changes: bool
) -> list[str]:
    problems: list[str] = []
    previous_role: str | None = None
    for i, message in enumerate(messages):
        path = f"messages.{i}"
        if not isinstance(message, dict):
            problems.append(f"{path}: must be an object with role and content")
            continue
        role = message.get("role")
        if role == "system" and system_messages:
            # Claude Code 2.1.331 sends a settings change (``output_config``, the effort) as
            # a system message with no content, also after its own compaction.
            if not message.get("content") and isinstance(message.get("output_config"), dict):
                continue
            problems += _system_message(path, message.get("content"), tool_changes)
            continue
        if role not in ("user", "assistant"):
            problems.append(f"{path}.role: must be 'user' or 'assistant', got {role!r}")
            continue
        if previous_role is None and role != "user":
            problems.append(f"{path}.role: the first message must come from the user")
        if strict_alternation and role == previous_role:
            problems.append(f"{path}.role: two {role} messages in a row")
        previous_role = role
        final = i == len(messages) - 1
        problems += _content(path, role, message.get("content"), final)
    problems += _tool_pairing(messages)
    return problems


def _system_message(path: str, content: object, tool_changes: bool) -> list[str]:
    if isinstance(content, str):
        return [] if content.strip() else [f"{path}.content: must not be empty"]
    if not content:
        return [f"{path}.content: must not be empty"]
    if tool_changes and isinstance(content, list):
        changes = [(i, b) for i, b in enumerate(content) if _is_tool_change(b)]
        problems = [f"{path}.{i}.{p}" for i, b in changes for p in _tool_change(b)]
        text = [b for b in content if not _is_tool_change(b)]
        return problems + [f"{path}.{p.removeprefix('system.')}" for p in _system(text)]
    return [f"{path}.{p.removeprefix('system.')}" for p in _system(content)]


def _is_tool_change(block: object) -> bool:
    return isinstance(block, dict) and block.get("type") in ("tool_addition", "tool_removal")


def _tool_change(block: dict[str, Any]) -> list[str]:
    """A tool added by reference or definition, or removed by reference."""
    tool = block.get("tool")
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind == "tool_reference" and isinstance(tool, dict):
        name = tool.get("name")
        ok = isinstance(name, str) and TOOL_NAME.match(name) is not None
        return [] if ok else ["tool.name: a tool name is required"]
    if kind == "tool_definition" and block.get("type") == "tool_addition":
        definition = tool.get("definition") if isinstance(tool, dict) else None
        ok = isinstance(definition, dict) and isinstance(definition.get("name"), str)
        return [] if ok else ["tool.definition: a tool definition with a name is required"]
    return ["tool: a tool_reference (or, to add, a tool_definition) is required"]


def _content(path: str, role: str, content: object, final: bool) -> list[str]:
    prefill = final and role == "assistant"
    if isinstance(content, str):
        if not content and not prefill:
            return [f"{path}.content: must not be empty (only a final assistant turn may be)"]
        if prefill and content != content.rstrip():
            return [f"{path}.content: a final assistant turn must not end with whitespace"]
        return []
    if not isinstance(content, list):
        return [f"{path}.content: must be a string or a list of content blocks"]
    if not content and not prefill:
        return [f"{path}.content: must not be empty (only a final assistant turn may be)"]
    problems: list[str] = []
    seen_other = False
    for j, block in enumerate(content):
        where = f"{path}.content.{j}"
        problems += _block(where, role, block)
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_result" and seen_other:
            problems.append(f"{where}: tool_result blocks must come before any other content")
        seen_other = seen_other or kind != "tool_result"
    return problems


def _block(where: str, role: str, block: object) -> list[str]:
    if not isinstance(block, dict):
        return [f"{where}: a content block must be an object"]
    kind = block.get("type")
    if kind not in BLOCK_TYPES:
        return [f"{where}.type: unknown content block type {kind!r}"]
    if role == "assistant" and kind in _USER_ONLY:
        return [f"{where}: {kind} blocks may only appear in user messages"]
    if role == "user" and kind in _ASSISTANT_ONLY:
        return [f"{where}: {kind} blocks may only appear in assistant messages"]
    match kind:
        case "text":
            if not _nonblank(block.get("text")):
                return [f"{where}.text: text blocks must not be empty"]
        case "tool_use":
            return _tool_use_block(where, block)
        case "tool_result":
            if not isinstance(block.get("tool_use_id"), str) or not block["tool_use_id"]:
                return [f"{where}.tool_use_id: required"]
            return _tool_result_content(where, block.get("content"))
    return []


def _tool_use_block(where: str, block: dict[str, Any]) -> list[str]:
    problems = []
    if not isinstance(block.get("id"), str) or not block["id"]:
        problems.append(f"{where}.id: required")
    if not isinstance(block.get("name"), str) or not block["name"]:
        problems.append(f"{where}.name: required")
    if not isinstance(block.get("input"), dict):
        problems.append(f"{where}.input: must be an object")
    return problems


def _tool_result_content(where: str, content: object) -> list[str]:
    if content is None or isinstance(content, str):
        return []
    if not isinstance(content, list):
        return [f"{where}.content: must be a string or a list of blocks"]
    problems = []
    for k, inner in enumerate(content):
        if not isinstance(inner, dict) or inner.get("type") not in ("text", "image", "document"):
            problems.append(f"{where}.content.{k}: only text, image or document blocks allowed")
        elif inner.get("type") == "text" and not _nonblank(inner.get("text")):
            problems.append(f"{where}.content.{k}.text: text blocks must not be empty")
    return problems


def _tool_pairing(messages: list[Any]) -> list[str]:
    problems: list[str] = []
    seen_ids: set[str] = set()
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        uses = _ids(message, "tool_use", "id") if message.get("role") == "assistant" else []
        for use_id in uses:
            if use_id in seen_ids:
                problems.append(f"messages.{i}: tool_use id {use_id!r} is used twice")
            seen_ids.add(use_id)
        if message.get("role") == "user":
            problems += _unanswered_results(messages, i)
        if uses and i + 1 < len(messages):
            answered = set(_ids(messages[i + 1], "tool_result", "tool_use_id"))
            missing = [u for u in uses if u not in answered]
            if missing:
                problems.append(
                    f"messages.{i}: tool_use ids without a tool_result in the next message: "
                    + ", ".join(missing)
                )
    return problems


def _unanswered_results(messages: list[Any], i: int) -> list[str]:
    results = _ids(messages[i], "tool_result", "tool_use_id")
    if not results:
        return []
    before = messages[i - 1] if i > 0 else None
    asked = (
        set(_ids(before, "tool_use", "id"))
        if isinstance(before, dict) and before.get("role") == "assistant"
        else set()
    )
    problems = []
    if len(set(results)) != len(results):
        problems.append(f"messages.{i}: more than one tool_result for the same tool_use id")
    stray = [r for r in results if r not in asked]
    if stray:
        problems.append(
            f"messages.{i}: tool_result for ids the previous assistant message did not ask for: "
            + ", ".join(stray)
        )
    return problems


def _ids(message: object, kind: str, key: str) -> list[str]:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [
        b[key]
        for b in content
        if isinstance(b, dict) and b.get("type") == kind and isinstance(b.get(key), str)
    ]


def _nonblank(text: object) -> bool:
    return isinstance(text, str) and text.strip() != ""
