"""A look at a session's conversation at a turn end (issue 36, item 2): what memd's MCP answers
served is recorded where it entered, a use counts only after its injection, the cursor keeps a
second look from counting anything twice, and a memory whose file is gone leaves the record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memd.mcp.render import render_memory, render_recall
from memd.memory.usage import USAGE_FILE, UsageRecord
from memd.memory.usage_judge import SessionAt, judge_session
from memd.sources.claude_code.usage import RULES
from memd.transcript.messages import ApiMessage

DEPLOY = "---\nname: deploy command\ndescription: how we deploy\n---\n\nRun `make ship`.\n"
STYLE = "---\nname: style guide\ndescription: how code looks\n---\n\nFour spaces, no tabs.\n"


class Conversation:
    """Messages as a reader builds them, each with one line (uuid ``u<n>``)."""

    def __init__(self) -> None:
        self.messages: list[ApiMessage] = []

    def add(self, role: str, *blocks: dict[str, Any]) -> str:
        uuid = f"u{len(self.messages)}"
        self.messages.append(ApiMessage(role, list(blocks), (uuid,)))  # type: ignore[arg-type]
        return uuid


def text(words: str) -> dict[str, Any]:
    return {"type": "text", "text": words}


def tool_use(tool: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": "t", "name": tool, "input": args}


def result(content: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": "t", "content": content}


def setup(tmp_path: Path) -> tuple[UsageRecord, SessionAt]:
    folder = tmp_path / "memory"
    folder.mkdir()
    (folder / "deploy.md").write_text(DEPLOY)
    (folder / "style.md").write_text(STYLE)
    record = UsageRecord(tmp_path / USAGE_FILE, lambda: 1_800_000_000.0)
    return record, SessionAt("s1", "claude_code", str(tmp_path / "repo"), folder)


def test_a_memory_read_over_mcp_is_served_and_used_there(tmp_path: Path) -> None:
    record, at = setup(tmp_path)
    conv = Conversation()
    conv.add("user", text("how do we ship?"))
    conv.add("assistant", tool_use("mcp__memd__read_memory", name="deploy command"))
    conv.add("user", result(render_memory({"name": "deploy command", "relative": "deploy.md"})))
    conv.add("assistant", text("Done."))
    judged = judge_session(record, at, conv.messages, RULES)
    path = f"{at.memory_dir}/deploy.md"
    assert (judged.served, judged.used) == (1, (path,))
    row = record.row(path)
    assert (row.injected, row.used, row.last_signal) == (1, 1, "read_over_mcp")


def test_a_recall_over_mcp_serves_its_memories_and_the_reply_uses_one(tmp_path: Path) -> None:
    record, at = setup(tmp_path)
    rows = [
        {"name": "deploy command", "relative": "deploy.md", "content": "Run `make ship`."},
        {"name": "style guide", "relative": "style.md", "content": "Four spaces, no tabs."},
    ]
    conv = Conversation()
    conv.add("user", text("how do we ship?"))
    conv.add("assistant", tool_use("mcp__memd__recall", query="ship"))
    conv.add("user", result(render_recall({"memories": rows, "reason": "r"}, 5)))
    conv.add("assistant", text("Use `make ship`."))
    judged = judge_session(record, at, conv.messages, RULES)
    assert judged.served == 2 and judged.used == (f"{at.memory_dir}/deploy.md",)
    assert record.pending("s1").keys() == {f"{at.memory_dir}/style.md"}
    # a second look at the same messages counts nothing again
    judge_session(record, at, conv.messages, RULES)
    assert record.row(f"{at.memory_dir}/deploy.md").injected == 1
    assert record.row(f"{at.memory_dir}/style.md").injected == 1


def test_a_use_before_the_injection_does_not_count(tmp_path: Path) -> None:
    record, at = setup(tmp_path)
    path = f"{at.memory_dir}/deploy.md"
    conv = Conversation()
    conv.add("user", text("hi"))
    anchor = conv.add("assistant", text("I would run `make ship`."))
    record.injected("s1", [path], anchor=anchor)  # the hook, at the next prompt
    conv.add("user", text("and now?"))
    conv.add("assistant", text("Now the tests."))
    judged = judge_session(record, at, conv.messages, RULES)
    assert judged.used == () and record.pending("s1")[path].turns == 2
    conv.add("user", text("deploy it"))
    conv.add("assistant", text("Running `make ship`."))
    assert judge_session(record, at, conv.messages, RULES).used == (path,)


def test_a_memory_whose_file_is_gone_leaves_the_record(tmp_path: Path) -> None:
    record, at = setup(tmp_path)
    path = f"{at.memory_dir}/deploy.md"
    record.injected("s1", [path])
    (at.memory_dir / "deploy.md").unlink()
    conv = Conversation()
    conv.add("user", text("hi"))
    conv.add("assistant", text("`make ship`"))
    judge_session(record, at, conv.messages, RULES)
    assert record.rows([path]) == {} and record.pending("s1") == {}


def test_a_served_name_outside_the_memory_dir_is_not_recorded(tmp_path: Path) -> None:
    record, at = setup(tmp_path)
    conv = Conversation()
    conv.add("user", text("x"))
    conv.add("assistant", tool_use("mcp__memd__recall", query="x"))
    rows = [{"name": "n", "relative": name} for name in ("../x.md", "/etc/x.md", "a//b.md")]
    conv.add("user", result(render_recall({"memories": rows, "reason": "r"}, 5)))
    assert judge_session(record, at, conv.messages, RULES).served == 0
