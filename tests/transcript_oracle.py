"""An independent reading of a transcript, to check memd's against (FORMAT.md, R-T4/5/7).

Written apart from ``memd.transcript`` and on purpose in another style: the stdlib ``json``
module on raw lines, plain dicts, whole-list passes repeated until nothing changes (memd
builds incrementally and in one pass). Only the token estimator is shared: it is a pure
function of text, tested on its own.

The rules, from FORMAT.md and the requirements:

* conversation entries are the lines of type user/assistant/system/progress/attachment with a
  uuid; the first line of a uuid wins; sub-agent (``isSidechain``) lines are left out of a
  main transcript;
* a ``parentUuid`` that names no earlier entry links to the previous entry (not at the very
  first entry, which stays a root);
* the active chain is the walk from the last entry back to a root or a compact boundary, plus
  the other lines of every response on it and the tool results answering them; progress and
  attachment lines are walked through but are not part of it (memd keeps only where they lead);
* messages: consecutive user lines are one message; the lines of one response are one message
  even with tool results between them; the list is then made what the API accepts (see
  :func:`_make_valid`), each message's lines being those of the groups merged into it that
  still have a block in it (a group whose blocks all went took its lines with it); a response
  whose tool results have not all arrived is held back;
* context: the last real response's usage (prompt + largest output) plus an estimate of the
  user and other real assistant content on the chain after its first line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from memd.tokens import estimate_content

CONVERSATION_TYPES = {"user", "assistant", "system", "progress", "attachment"}


@dataclass
class Reading:
    chain: list[str]  # uuids of the active chain's user/assistant/system lines, file order
    roles: list[str]  # the roles of the API messages
    message_uuids: list[list[str]]  # the transcript lines of each API message
    pending: list[str]  # lines held back (a response in progress)
    context_tokens: int
    stale: bool
    boundaries: list[str]
    sidechain_uuids: set[str]

    @property
    def message_count(self) -> int:
        return len(self.roles)


def read_lines(raw_lines: list[bytes], *, sidechain_file: bool) -> Reading:
    """The reading of a transcript made of ``raw_lines`` (each one JSON object, or garbage)."""
    return read_values([load(raw) for raw in raw_lines], sidechain_file=sidechain_file)


def read_values(values: list[dict[str, Any] | None], *, sidechain_file: bool) -> Reading:
    """:func:`read_lines` on lines already decoded by :func:`load`."""
    entries: list[dict[str, Any]] = []
    known: set[str] = set()
    sidechain: set[str] = set()
    for entry in values:
        if entry is None or entry.get("type") not in CONVERSATION_TYPES:
            continue
        uuid = entry.get("uuid")
        if not isinstance(uuid, str) or not uuid or uuid in known:
            continue
        if entry.get("isSidechain") is True and not sidechain_file:
            sidechain.add(uuid)
            continue
        parent = entry.get("parentUuid")
        if isinstance(parent, str) and parent not in known and entries:
            entry = {**entry, "parentUuid": entries[-1]["uuid"]}
        known.add(uuid)
        entries.append(entry)
    chain = _chain(entries)
    groups = _groups(chain)
    kept, held = _make_valid(groups)
    tokens, stale = _context(chain)
    return Reading(
        chain=[e["uuid"] for e in chain if e["type"] not in ("progress", "attachment")],
        roles=[m["role"] for m in kept],
        message_uuids=[_uuids(m) for m in kept],
        pending=[u for m in held for uuids, _ in m["parts"] for u in uuids],
        context_tokens=tokens,
        stale=stale,
        boundaries=[e["uuid"] for e in entries if _is_boundary(e)],
        sidechain_uuids=sidechain,
    )


def load(raw: bytes) -> dict[str, Any] | None:
    """One line as a dict, or None when it is not a JSON object. Bytes that are not UTF-8 are
    read as Claude Code (Node) reads its file: each invalid sequence is U+FFFD."""
    try:
        value = json.loads(raw.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _is_boundary(entry: dict[str, Any]) -> bool:
    return entry.get("type") == "system" and entry.get("subtype") == "compact_boundary"


def _message(entry: dict[str, Any]) -> dict[str, Any]:
    message = entry.get("message")
    return message if isinstance(message, dict) else {}


def _response_id(entry: dict[str, Any]) -> str:
    ident = _message(entry).get("id")
    return ident if isinstance(ident, str) and ident else entry["uuid"]


def _is_real_assistant(entry: dict[str, Any]) -> bool:
    return entry["type"] == "assistant" and _message(entry).get("model") != "<synthetic>"


def _blocks(entry: dict[str, Any]) -> list[dict[str, Any]]:
    content = _message(entry).get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _ids(entry: dict[str, Any], kind: str, key: str) -> list[str]:
    return [b[key] for b in _blocks(entry) if b.get("type") == kind and isinstance(b.get(key), str)]


# -- the chain --------------------------------------------------------------------------------


def _chain(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not entries:
        return []
    by_uuid = {e["uuid"]: e for e in entries}
    order = {e["uuid"]: i for i, e in enumerate(entries)}
    walked: list[dict[str, Any]] = []
    visited: set[str] = set()
    current: Any = entries[-1]["uuid"]
    while current in by_uuid and current not in visited:
        entry = by_uuid[current]
        walked.append(entry)
        visited.add(current)
        if _is_boundary(entry):
            break
        current = entry.get("parentUuid")
    on_chain = {e["uuid"] for e in walked}
    responses = {_response_id(e) for e in walked if e["type"] == "assistant"}
    lines = [e for e in entries if e["type"] == "assistant" and _response_id(e) in responses]
    response_of = {e["uuid"]: _response_id(e) for e in lines}
    calls: dict[str, set[str]] = {}
    for e in lines:
        calls.setdefault(_response_id(e), set()).update(_ids(e, "tool_use", "id"))
    extra = [e for e in lines if e["uuid"] not in on_chain]
    extra += [
        e
        for e in entries
        if e["type"] == "user"
        and e["uuid"] not in on_chain
        and e.get("parentUuid") in response_of
        and set(_ids(e, "tool_result", "tool_use_id")) & calls[response_of[e["parentUuid"]]]
    ]
    return sorted(walked + extra, key=lambda e: order[e["uuid"]])


# -- messages ---------------------------------------------------------------------------------


def _groups(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Lines to messages, before any validity rule: ``{role, id, lines}``."""
    groups: list[dict[str, Any]] = []
    for entry in chain:
        if entry["type"] == "user":
            if groups and groups[-1]["role"] == "user":
                groups[-1]["lines"].append(entry)
            else:
                groups.append({"role": "user", "id": None, "lines": [entry]})
        elif _is_real_assistant(entry):
            rid = _response_id(entry)
            back = len(groups) - 1
            while back >= 0 and groups[back]["role"] == "user" and _only_results(groups[back]):
                back -= 1
            if back >= 0 and groups[back]["role"] == "assistant" and groups[back]["id"] == rid:
                groups[back]["lines"].append(entry)
            else:
                groups.append({"role": "assistant", "id": rid, "lines": [entry]})
    return groups


def _only_results(group: dict[str, Any]) -> bool:
    return all(_ids(line, "tool_result", "tool_use_id") for line in group["lines"])


def _nonblank(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _allowed(role: str, block: dict[str, Any]) -> bool:
    kind = block.get("type")
    if kind == "text":
        return _nonblank(block.get("text"))
    if role == "user":
        if kind == "tool_result":
            return _nonblank(block.get("tool_use_id"))
        return kind in ("image", "document")
    if kind == "tool_use":
        return (
            _nonblank(block.get("id"))
            and _nonblank(block.get("name"))
            and isinstance(block.get("input"), dict)
        )
    return kind in ("thinking", "redacted_thinking")


def _calls(message: dict[str, Any]) -> list[str]:
    return [b["id"] for b in message["blocks"] if b.get("type") == "tool_use"]


def _results(message: dict[str, Any]) -> list[str]:
    return [b["tool_use_id"] for b in message["blocks"] if b.get("type") == "tool_result"]


def _make_valid(
    groups: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Messages the API accepts, and the trailing response held back (may be empty)."""
    messages = []
    for g in groups:
        blocks = [b for line in g["lines"] for b in _blocks(line) if _allowed(g["role"], b)]
        uuids = [line["uuid"] for line in g["lines"]]
        parts = [(uuids, {id(b) for b in blocks})]
        messages.append({"role": g["role"], "blocks": blocks, "parts": parts})
    _drop_repeated_calls(messages)
    held: list[dict[str, Any]] = []
    if messages and messages[-1]["role"] == "assistant" and _calls(messages[-1]):
        held = messages[-1:]
    elif (
        len(messages) >= 2
        and messages[-2]["role"] == "assistant"
        and messages[-1]["blocks"]
        and len(_results(messages[-1])) == len(messages[-1]["blocks"])
        and set(_calls(messages[-2])) - set(_results(messages[-1]))
    ):
        held = messages[-2:]
    messages = messages[: len(messages) - len(held)]
    while True:
        before = _shape(messages)
        messages = _pass(messages)
        if _shape(messages) == before:
            break
    return messages, held


def _shape(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What a pass can change: roles, lines, and which block objects each message holds."""
    return [(m["role"], tuple(_uuids(m)), tuple(id(b) for b in m["blocks"])) for m in messages]


def _uuids(message: dict[str, Any]) -> list[str]:
    """The lines of a message: those of each group merged into it that still has a block
    there (a group whose blocks all went, whenever, took its lines with it)."""
    present = {id(b) for b in message["blocks"]}
    return [u for uuids, ids in message["parts"] if ids & present for u in uuids]


def _drop_repeated_calls(messages: list[dict[str, Any]]) -> None:
    seen: set[str] = set()
    for m in messages:
        if m["role"] != "assistant":
            continue
        kept = []
        for b in m["blocks"]:
            if b.get("type") == "tool_use":
                if b["id"] in seen:
                    continue
                seen.add(b["id"])
            kept.append(b)
        m["blocks"] = kept


def _pass(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One round of every rule; repeated by the caller until nothing changes."""
    # Results answer the message right before, once each, and come first.
    for i, m in enumerate(messages):
        if m["role"] != "user":
            continue
        before = messages[i - 1] if i > 0 else None
        asked = set(_calls(before)) if before and before["role"] == "assistant" else set()
        seen: set[str] = set()
        results, others = [], []
        for b in m["blocks"]:
            if b.get("type") != "tool_result":
                others.append(b)
            elif b["tool_use_id"] in asked and b["tool_use_id"] not in seen:
                seen.add(b["tool_use_id"])
                results.append(b)
        m["blocks"] = results + others
    # A call the next message does not answer is dropped (what is in progress was held back).
    for i, m in enumerate(messages):
        if m["role"] != "assistant" or not _calls(m):
            continue
        after = messages[i + 1] if i + 1 < len(messages) else None
        answered = set(_results(after)) if after is not None and after["role"] == "user" else set()
        missing = set(_calls(m)) - answered
        m["blocks"] = [
            b for b in m["blocks"] if not (b.get("type") == "tool_use" and b["id"] in missing)
        ]
    # No empty messages, no leading response, no two messages of one role in a row.
    out: list[dict[str, Any]] = []
    for m in messages:
        if not m["blocks"] or (not out and m["role"] == "assistant"):
            continue
        if out and out[-1]["role"] == m["role"]:
            out[-1] = {
                "role": m["role"],
                "blocks": out[-1]["blocks"] + m["blocks"],
                "parts": out[-1]["parts"] + m["parts"],
            }
        else:
            out.append(dict(m))
    return out


# -- context ----------------------------------------------------------------------------------


def _context(chain: list[dict[str, Any]]) -> tuple[int, bool]:
    real = [e for e in chain if _is_real_assistant(e)]
    if not real:
        estimate = sum(estimate_content(_blocks(e)) for e in chain if e["type"] == "user")
        return estimate, bool(chain) and _is_boundary(chain[0])
    last_id = _response_id(real[-1])
    lines = [e for e in real if _response_id(e) == last_id]
    usage = _message(lines[-1]).get("usage") or {}
    prompt = sum(
        _count(usage.get(key))
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    output = max(_count((_message(e).get("usage") or {}).get("output_tokens")) for e in lines)
    after = chain[chain.index(lines[0]) + 1 :]
    tail = sum(
        estimate_content(_blocks(e))
        for e in after
        if e["type"] == "user" or (_is_real_assistant(e) and _response_id(e) != last_id)
    )
    return prompt + output + tail, False


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
