"""The compaction replies on the wire (issue 35 item 2): the compaction service answers in
typed results (:mod:`memd.compaction.results`) that become their wire form only at the IPC
boundary. Clients read the same keys, in the same order, of the same kinds as before."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from memd.compaction.boundaries import CompactBoundary
from memd.compaction.full import Spent
from memd.compaction.message import Msg
from memd.compaction.restore import RestoredFile
from memd.compaction.results import (
    Compaction,
    ContextFile,
    CutPlan,
    DryRun,
    Forked,
    NotCompacted,
    NotForked,
    Restore,
)
from memd.compaction.strategy import Outcome
from memd.ipc.handlers import method_table
from memd.ipc.server import Handler
from tests.wire_support import built_daemon, packs_back

pytestmark = pytest.mark.anyio

MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "read the config"},
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a"}}],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]},
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t2", "name": "Read", "input": {"path": "b"}}],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "y"}]},
    {"role": "assistant", "content": "both read"},
]
DRY_RUN_KEYS = ["dry_run", "tokens_before", "threshold", "level", "reason"]


@pytest.fixture
async def table(tmp_path: Path) -> AsyncIterator[dict[str, Handler]]:
    yield method_table(await built_daemon(tmp_path))


async def test_the_microcompact_reply_keeps_its_wire_form(table: dict[str, Handler]) -> None:
    reply = await table["microcompact"]({"messages": MESSAGES, "keep_recent": 1})
    assert list(reply) == [
        "messages",
        "cleared_tool_use_ids",
        "tokens_before",
        "tokens_after",
        "api_calls",
    ]
    assert isinstance(reply["cleared_tool_use_ids"], list) and reply["api_calls"] == 0
    assert [m["role"] for m in reply["messages"]] == [m["role"] for m in MESSAGES]
    assert reply["tokens_after"] <= reply["tokens_before"]
    assert packs_back(reply)


async def test_the_dry_run_reply_keeps_its_wire_form(table: dict[str, Handler]) -> None:
    reply = await table["compact"]({"messages": MESSAGES, "dry_run": True})
    level2 = [*DRY_RUN_KEYS, "context_tokens", "server_ms"]
    no_model = [*DRY_RUN_KEYS, "disabled", "context_tokens", "server_ms"]
    assert list(reply) in (level2, no_model)
    assert reply["dry_run"] is True and reply["reason"] == "the session has no notes"
    assert reply["level"] == (2 if list(reply) == level2 else None)
    assert reply["context_tokens"] is None and list(reply["server_ms"]) == ["total", "input"]
    assert packs_back(reply)


def test_a_compaction_and_a_fork_keep_their_wire_form() -> None:
    """The replies only a model or a session's notes produce, key for key as before."""
    boundary = CompactBoundary("manual", 900, 2, "u9")
    outcome = Outcome(2, (Msg.of("user", "the summary"),), boundary, 900, 40, Spent(1, 5), None)
    plan = ContextFile("/h/.claude/plans/p.md", "the plan")
    restore = Restore((RestoredFile("/r/a.py", 1, "x = 1\n", 3),), (plan,), plan, "- [a](a.md)")
    reply = Compaction(outcome, restore).as_dict()
    assert list(reply) == [
        "compacted",
        "level",
        "messages",
        "boundary",
        "tokens_before",
        "tokens_after",
        "api_calls",
        "spent",
        "level1_skipped",
        "restore",
    ]
    assert reply["spent"] == asdict(Spent(1, 5)) and reply["boundary"] == boundary.as_dict()
    assert reply["restore"] == {
        "files": [{"path": "/r/a.py", "order": 1, "content": "x = 1\n", "tokens": 3}],
        "claude_md": [{"path": plan.path, "content": "the plan"}],
        "plan": {"path": plan.path, "content": "the plan"},
        "memory_index": "- [a](a.md)",
    }
    assert NotCompacted("stopped").as_dict() == {"compacted": False, "reason": "stopped"}
    forked = Forked("f1", "s1", "/p/f1.jsonl", "claude --resume f1", 900, 300, 4, 6).as_dict()
    assert list(forked.items()) == list(  # in this order: == on dicts ignores it
        {
            "forked": True,
            "session": "f1",
            "from_session": "s1",
            "path": "/p/f1.jsonl",
            "resume": "claude --resume f1",
            "tokens_before": 900,
            "tokens_after": 300,
            "kept_messages": 4,
            "dropped_messages": 6,
            "api_calls": 0,
        }.items()
    )
    assert NotForked("no notes").as_dict() == {"forked": False, "reason": "no notes"}
    cut = NotForked("too short", "too_short").as_dict()
    assert list(cut.items()) == [
        ("forked", False),
        ("reason", "too short"),
        ("fall_through", "too_short"),
    ]
    cut_plan = DryRun(900, 500, 1, CutPlan(300, 6, 4, 6, ("Files",)), context_tokens=950).as_dict()
    assert list(cut_plan.items()) == [
        ("dry_run", True),
        ("tokens_before", 900),
        ("threshold", 500),
        ("level", 1),
        ("tokens_after", 300),
        ("cut_index", 6),
        ("kept_messages", 4),
        ("dropped_messages", 6),
        ("truncated_sections", ["Files"]),
        ("context_tokens", 950),
    ]
