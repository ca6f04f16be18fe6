"""Who wrote a team memory, with which agent (pure).

A sync stamps each memory it shares with its writer: ``metadata.author`` (the git identity
of the person whose machine shares it, ``Name <email>``) and ``metadata.agent`` (the agent
that wrote it, when memd knows: the ``agent`` key ``remember`` writes, else the agent of the
session Claude Code names in ``metadata.originSessionId``); ``metadata.modified`` already
says when. The rest (who changed it before, and when) is in the ref's history, which
``memdctl team log`` shows.

:func:`set_metadata` edits the frontmatter's ``metadata`` block as text, line by line, so a
memory keeps its form (key order, quoting, comments); only when its frontmatter is not in a
form a line edit can follow (a flow mapping, a block that does not parse) is the block
written anew from its parsed keys. Values are one line each, written as JSON strings (which
YAML reads as they are). Everything read here comes from files others wrote: every value is
checked for type and cut to :data:`MAX_VALUE_CHARS`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from memd.memory.frontmatter import Frontmatter, normalize_line, parse_document

MAX_VALUE_CHARS = 200
_FENCE = "---"
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")
_KEY = re.compile(r"^([ \t]+)([A-Za-z_][A-Za-z0-9_\-]*)\s*:")


@dataclass(frozen=True)
class Provenance:
    """A memory's writer and agent as its frontmatter says (``None``: not said)."""

    author: str | None = None
    agent: str | None = None
    reconcile_with: str | None = None


def provenance(meta: Frontmatter) -> Provenance:
    """The writer, agent and conflict mark recorded in ``meta``."""
    top = dict(meta.extra)
    nested = top.get("metadata")
    inner: Mapping[str, Any] = nested if isinstance(nested, dict) else {}
    return Provenance(
        author=clean_value(inner.get("author", top.get("author"))),
        agent=clean_value(inner.get("agent", top.get("agent"))),
        reconcile_with=clean_value(inner.get("reconcile_with")),
    )


def clean_value(value: object) -> str | None:
    """``value`` as one short line of text, or ``None`` when it is not text."""
    if not isinstance(value, str):
        return None
    text = normalize_line(_CONTROL.sub(" ", value))[:MAX_VALUE_CHARS]
    return text or None


def set_metadata(text: str, values: Mapping[str, str]) -> str:
    """``text`` with ``metadata.<key>: value`` set for each of ``values`` (see above)."""
    clean = {key: clean_value(value) or "" for key, value in values.items()}
    lines = text.splitlines(keepends=True)
    bom = "\ufeff" if lines and lines[0].startswith("\ufeff") else ""
    if lines:
        lines[0] = lines[0].removeprefix("\ufeff")
    if not lines or lines[0].strip() != _FENCE:
        block = "".join(f"  {k}: {json.dumps(v, ensure_ascii=False)}\n" for k, v in clean.items())
        return f"{bom}{_FENCE}\nmetadata:\n{block}{_FENCE}\n\n{text.removeprefix(bom)}"
    close = next((i for i in range(1, len(lines)) if lines[i].strip() in (_FENCE, "...")), None)
    if close is None:
        return bom + "".join(lines)  # an unclosed block: left as it is
    edited = _edit_block(lines[1:close], clean)
    if edited is None or not _holds(edited, clean):
        edited = _rendered_block(lines[1:close], clean)
    if edited is None:
        return bom + "".join(lines)
    return bom + lines[0] + "".join(edited) + "".join(lines[close:])


def _edit_block(block: list[str], values: Mapping[str, str]) -> list[str] | None:
    """``block`` with the values set under ``metadata:`` by lines, or ``None``."""
    at = next((i for i, line in enumerate(block) if line.rstrip() == "metadata:"), None)
    if at is None:
        if any(line.startswith("metadata:") for line in block):
            return None  # ``metadata: {…}`` or similar: parsed and written anew
        rows = [f"  {k}: {json.dumps(v, ensure_ascii=False)}\n" for k, v in values.items()]
        tail = block[-1] if block else ""
        glue = [] if not block or tail.endswith("\n") else ["\n"]
        return [*block, *glue, "metadata:\n", *rows]
    end = at + 1
    while end < len(block) and (block[end][:1] in (" ", "\t") or not block[end].strip()):
        end += 1
    children = block[at + 1 : end]
    indent = next((m.group(1) for line in children if (m := _KEY.match(line))), "  ")
    kept = _without_keys(children, indent, values.keys())
    rows = [f"{indent}{k}: {json.dumps(v, ensure_ascii=False)}\n" for k, v in values.items()]
    if kept and not kept[-1].endswith("\n"):
        kept[-1] += "\n"
    return [*block[: at + 1], *kept, *rows, *block[end:]]


def _without_keys(children: list[str], indent: str, keys: Any) -> list[str]:
    """``children`` without the entries (and their continuation lines) of ``keys``."""
    kept: list[str] = []
    skipping = False
    for line in children:
        match = _KEY.match(line)
        if match is not None and match.group(1) == indent:
            skipping = match.group(2) in keys
        elif not line.startswith(indent + " ") and line.strip():
            skipping = False
        if not skipping:
            kept.append(line)
    return kept


def _holds(block: list[str], values: Mapping[str, str]) -> bool:
    """Whether ``block`` parses to a mapping whose ``metadata`` has ``values``."""
    data = _load("".join(block))
    nested = data.get("metadata") if data is not None else None
    return isinstance(nested, dict) and all(nested.get(k) == v for k, v in values.items())


def _rendered_block(block: list[str], values: Mapping[str, str]) -> list[str] | None:
    data = _load("".join(block))
    if data is None:
        return None
    nested = data.get("metadata")
    data["metadata"] = {**(nested if isinstance(nested, dict) else {}), **values}
    try:
        dumped = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1 << 30)
    except yaml.YAMLError:
        return None
    return dumped.splitlines(keepends=True)


def _load(text: str) -> dict[str, Any] | None:
    try:
        data = yaml.load(text, Loader=_SAFE_LOADER) if text.strip() else {}
    except (yaml.YAMLError, RecursionError, ValueError):
        return None
    if data is None:
        return {}
    return {str(k): v for k, v in data.items()} if isinstance(data, dict) else None


def stamped(text: str, author: str, agent_of: Callable[[str], str | None]) -> str:
    """``text`` with its writer (``author``) and agent recorded, or ``text`` itself when it
    says so already. The agent is the one the memory names, else the one of the session its
    ``metadata.originSessionId`` names (``agent_of``), else left out."""
    meta = parse_document(text).meta
    said = provenance(meta)
    agent = said.agent
    if agent is None:
        session = _origin_session(meta)
        agent = agent_of(session) if session else None
    values = {"author": author, **({"agent": agent} if agent else {})}
    if said.author == clean_value(author) and said.agent == clean_value(agent):
        return text
    return set_metadata(text, values)


def _origin_session(meta: Frontmatter) -> str | None:
    top = dict(meta.extra)
    nested = top.get("metadata")
    inner: Mapping[str, Any] = nested if isinstance(nested, dict) else {}
    return clean_value(inner.get("originSessionId", top.get("originSessionId")))
