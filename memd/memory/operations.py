"""Memories by the whole-answer protocol (issue 34): for a model that cannot drive the tool
loop, the extraction asks for one answer, a JSON list of operations, which memd validates
and applies itself through its own confined writer (:func:`memd.memory.remember.write_memory`:
scrubbed, typed, a file name memd derives, an index line).

The answer is ``{"operations": [{"op": "remember", "type": …, "name": …, "description": …,
"content": …}, …]}``; ``[]`` saves nothing. A memory named like an existing one (case and
spacing ignored) is updated in place. The model never names a path: nothing it says can
point outside the memory dir.

All or nothing: every operation is checked first (:func:`parse_operations` and
:func:`memd.memory.remember.plan_memory`); an answer that is cut short, not JSON, not that
shape, holds more than :data:`MAX_OPERATIONS` or any operation that fails a check changes
nothing and raises :class:`memd.errors.MalformedAnswer` (the job parks, the answer is
counted). A write the disk refuses midway is rolled back from the snapshot taken before.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread

from memd.agent.runner import AgentSpec, ask_once
from memd.errors import MalformedAnswer
from memd.llm.client import LLM, LLMReply
from memd.llm.ledger import Ledger
from memd.memory.frontmatter import FrontmatterForm
from memd.memory.remember import Limits, MemoryDraft, RememberRefused, plan_memory, write_memory

MAX_OPERATIONS = 8
CONTENT_MAX_BYTES = 4_096

ANSWER_RULES = """\
Answer with JSON only, no other text, in exactly this shape:

{"operations": [
  {"op": "remember", "type": "feedback", "name": "A short title",
   "description": "One line saying what this memory is about",
   "content": "The memory itself: short, factual, self-contained."}
]}

- type is one of: user, feedback, project, reference.
- To update an existing memory, use its exact name: the memory is rewritten with your content.
- At most {max_ops} operations. If nothing is worth remembering, answer {{"operations": []}}."""

SYSTEM_SUFFIX = """

You have no tools in this task: you cannot read or write files. The request shows the \
existing memories. You answer with a list of operations, and memd applies them."""


@dataclass(frozen=True)
class Applied:
    written: tuple[str, ...]  # relative file names, in order
    reply: LLMReply


def answer_rules() -> str:
    return (
        ANSWER_RULES.replace("{max_ops}", str(MAX_OPERATIONS)).replace("{{", "{").replace("}}", "}")
    )


def parse_operations(reply: LLMReply) -> list[MemoryDraft]:
    """The drafts an answer asks for (pure); :class:`MalformedAnswer` says why none."""
    if reply.cut_short:
        raise MalformedAnswer("the operations were cut short at the output limit; nothing saved")
    data = json_object(reply.text)
    ops = data.get("operations") if isinstance(data, dict) else None
    if not isinstance(ops, list):
        raise MalformedAnswer('the answer is not {"operations": [...]}; nothing saved')
    if len(ops) > MAX_OPERATIONS:
        raise MalformedAnswer(f"{len(ops)} operations, over {MAX_OPERATIONS}; nothing saved")
    drafts = []
    for number, op in enumerate(ops, 1):
        if not isinstance(op, dict) or op.get("op", "remember") != "remember":
            raise MalformedAnswer(f"operation {number} is not a remember; nothing saved")
        kind, name, description, content = (
            op.get(k) for k in ("type", "name", "description", "content")
        )
        if not all(isinstance(f, str) for f in (kind, name, description, content)):
            raise MalformedAnswer(f"operation {number} lacks a text field; nothing saved")
        drafts.append(MemoryDraft(str(kind), str(name), str(description), str(content), "memd"))
    return drafts


def json_object(text: str) -> Any:
    """The JSON object in an answer (a fenced block or the outermost braces)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise MalformedAnswer("the answer holds no JSON object; nothing saved")
    try:
        return json.loads(text[start : end + 1])
    except (ValueError, RecursionError) as exc:
        raise MalformedAnswer(f"the answer is not valid JSON ({exc}); nothing saved") from None


def check_all(drafts: Sequence[MemoryDraft], limits: Limits) -> None:
    """Every draft passes ``remember``'s checks, and no two name the same memory."""
    seen: set[str] = set()
    for number, draft in enumerate(drafts, 1):
        try:
            planned = plan_memory(draft, limits)
        except RememberRefused as exc:
            raise MalformedAnswer(f"operation {number}: {exc}; nothing saved") from None
        key = (planned.meta.name or "").casefold()
        if key in seen:
            raise MalformedAnswer(f"operation {number} repeats a name; nothing saved")
        seen.add(key)


async def ask_and_apply(
    llm: LLM,
    spec: AgentSpec,
    messages: list[dict[str, Any]],
    memory_dir: Path,
    *,
    limits: Limits,
    form: FrontmatterForm,
    ledger: Ledger,
) -> Applied:
    """Ask once, check every operation, then write them all (blocking parts in a thread).
    The caller snapshots the memory dir before and rolls back on any exception."""
    reply = await ask_once(llm, spec, messages, ledger=ledger)
    drafts = parse_operations(reply)
    check_all(drafts, limits)

    def apply() -> tuple[str, ...]:
        try:
            return tuple(write_memory(memory_dir, d, limits, form=form).relative for d in drafts)
        except RememberRefused as exc:  # the index is full: no room for the line
            raise MalformedAnswer(f"{exc}; nothing saved") from None

    written = await anyio.to_thread.run_sync(apply)
    return Applied(written, reply)
