"""An independent reading of other agents' session files, with the stdlib ``json`` module,
for the tests to compare memd's readers with (as :mod:`tests.transcript_oracle` is for
Claude Code's). It follows the formats as ../shared/data/agents/README.md describes them, not
memd's code: what the model sees now (flattened to ``(role, kind, text or tool id)``), the
agent's own token figure for it, turn ends and compactions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

Block = tuple[str, str, str]


@dataclass
class Reading:
    cwd: str | None = None
    ignored: bool = False
    blocks: list[Block] = field(default_factory=list)
    from_usage: int = 0  # the agent's own figure for the context (0: none since compaction)
    turn_ends: int = 0
    compactions: int = 0


def _codex_blocks(item: dict[str, Any]) -> list[Block]:
    kind = item.get("type")
    if kind == "message" and item.get("role") in ("user", "assistant"):
        parts = item.get("content") or []
        return [(item["role"], "text", p["text"]) for p in parts if p.get("text")]
    if kind in ("function_call", "custom_tool_call"):
        return [("assistant", "tool_use", item.get("call_id") or "")]
    if kind in ("function_call_output", "custom_tool_call_output"):
        return [("user", "tool_result", item.get("call_id") or "")]
    return []


def read_codex(lines: list[bytes]) -> Reading:
    """A rollout's lines (complete JSON objects) as Codex's model sees them now."""
    out = Reading()
    responded = False  # a model-side item since the last compaction
    for raw in lines:
        line = json.loads(raw)
        kind, payload = line.get("type"), line.get("payload") or {}
        if kind == "session_meta" and out.cwd is None and not out.ignored:
            source = json.dumps(payload.get("source")).lower()
            out.ignored = bool(payload.get("parent_thread_id")) or "subagent" in source
            out.cwd = payload.get("cwd")
        elif kind == "turn_context" and payload.get("cwd"):
            out.cwd = payload["cwd"]
        elif kind == "response_item":
            if (line.get("metadata") or {}).get("compaction_output"):
                responded = False
                continue
            blocks = _codex_blocks(payload)
            responded |= any(role == "assistant" for role, _, _ in blocks)
            out.blocks += blocks
        elif kind == "compacted":
            out.compactions += 1
            out.blocks = [b for item in payload["replacement_history"] for b in _codex_blocks(item)]
            out.from_usage, responded = 0, False
        elif kind == "event_msg" and payload.get("type") == "task_complete":
            out.turn_ends += 1
        elif kind == "event_msg" and payload.get("type") == "token_count" and responded:
            last = (payload.get("info") or {}).get("last_token_usage")
            if last:
                out.from_usage = last["input_tokens"] + last["output_tokens"]
    return out


def _gemini_texts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    parts: list[dict[str, Any]] = (
        [{"text": content}] if isinstance(content, str) else (content or [])
    )
    texts = []
    for part in parts:
        if part.get("text"):
            texts.append(part["text"])
        elif "functionCall" in part:
            texts.append(f"[called {part['functionCall'].get('name')}(")
        elif "functionResponse" in part:
            texts.append(f"[{part['functionResponse'].get('name')} returned: ")
    texts += [f"[called {call.get('name')}(" for call in message.get("toolCalls") or []]
    return texts


def read_gemini(lines: list[bytes]) -> Reading:
    """A chat's lines as Gemini's model sees them now: ``blocks`` hold each text's start
    (a tool call's or result's up to its arguments). A file with no message record of its
    own is ``ignored``."""
    out = Reading(ignored=True)
    history: dict[str, dict[str, Any]] = {}
    answered: set[str] = set()
    snapshots: set[str] = set()
    for raw in lines:
        line = json.loads(raw.decode("utf-8", "replace"))  # Gemini CLI's readline decodes so
        if "$set" in line:
            if "messages" in line["$set"]:
                history = {}
                for m in line["$set"]["messages"]:
                    if not m["id"].endswith("_response"):
                        history.pop(m["id"], None)
                        history[m["id"]] = m
                for m in line["$set"]["messages"][:3]:
                    text = json.dumps(m.get("content"))
                    if '"<state_snapshot>' in text and m["id"] not in snapshots:
                        snapshots.add(m["id"])
                        out.compactions += 1
        elif "$rewindTo" in line:
            ids = list(history)
            if line["$rewindTo"] in ids:
                history = {i: history[i] for i in ids[: ids.index(line["$rewindTo"])]}
        elif "type" in line:
            out.ignored = False
            if line["id"] in history and line["id"] != list(history)[-1]:
                history[line["id"]] = line
            else:
                history.pop(line["id"], None)
                history[line["id"]] = line
            words = any(t.strip() for t in _gemini_texts(line))
            answer = line["type"] == "gemini" and not line.get("toolCalls") and words
            if answer and line["id"] not in answered:
                answered.add(line["id"])
                out.turn_ends += 1
    out.blocks = [
        ("user" if m["type"] == "user" else "assistant", "text", t)
        for m in history.values()
        for t in _gemini_texts(m)
    ]
    last = next((m for m in reversed(history.values()) if m["type"] == "gemini"), None)
    tokens = (last or {}).get("tokens") or {}
    out.from_usage = tokens.get("input", 0) + tokens.get("output", 0)
    return out
