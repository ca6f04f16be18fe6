"""Which memories a real agent used, from its own transcript (issue 36, item 2): each agent's
real CLI, against its loopback model, in a repository with five memories (see
:mod:`tests.usage_support`); memd's hook injects them with the prompt, and at the turn's end
memd reads in the session's transcript how the agent used each: a quote of one, a tool call
opening the file another cites, a ``read_memory`` over memd's MCP server, a citation tag
(Codex), and nothing for the fifth."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_agents import LoopbackAgentAPI, ToolCall
from memd.testing.loopback_replies import Reply
from memd_client import hook as hook_module
from memd_client.agents.claude_code import HOOKS as CLAUDE_HOOKS
from memd_client.hooks_install import hook_command, install_hooks
from tests.claude_cli import ClaudeCLI
from tests.daemon_harness import (
    Home,
    call,
    fake_home,
    memdctl,
    read_log,
    start_memd,
    stop_memd,
)
from tests.other_cli import AgentCLI
from tests.usage_support import (
    ANSWER,
    CITATION,
    PROMPT,
    SETTINGS,
    install_mcp,
    repository,
    wait_judged,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MCP_READ = "mcp__memd__read_memory"
# How an agent that writes no citation tag used each memory (None: it did not).
UNTAGGED = {
    "deploy_command.md": "quoted",
    "settings_file.md": "opened_cited",
    "release_train.md": "read_over_mcp",
    "style_guide.md": None,
    "coffee_machine.md": None,
}
MCP_WAITS = 60


def judged_session(
    home: Home, cli: AgentCLI, api: LoopbackAgentAPI, expected: dict[str, str | None]
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """With memd running and its hooks and MCP server installed for ``cli``: one prompt of
    the real CLI in the repository, and the memories' rows and ``status``'s shares once
    every use ``expected`` was found."""
    repo = repository(home)
    env = cli.env(home.env, api.url)
    install_mcp(home, cli.agent)
    proc = start_memd(home)
    try:
        done = memdctl(home, "install-hooks", "--agent", cli.agent)
        assert done.returncode == 0, done.stderr
        done = cli.run(cli.prompt_args(PROMPT), cwd=repo, env=env)
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
        rows = wait_judged(home, repo, {file for file, how in expected.items() if how})
        return rows, call(home, "status")["memory"]["usage"]
    finally:
        assert stop_memd(proc) == 0, read_log(home)


def test_codex_uses_are_read_from_its_rollout(codex_cli: AgentCLI, tmp_path: Path) -> None:
    """Codex's rollout keeps its model's citation tag in the reply: the style memory, cited
    there, is used too."""
    calls = (
        ToolCall("", "exec_command", {"cmd": f"cat {SETTINGS}"}),
        ToolCall("mcp__memd", "read_memory", {"name": "release train"}),
    )
    expected = {**UNTAGGED, "style_guide.md": "cited"}
    with (
        fake_home(tmp_path) as home,
        LoopbackAgentAPI("responses", text=ANSWER + CITATION, calls=calls) as api,
    ):
        rows, usage = judged_session(home, codex_cli, api, expected)
    assert {file: row["last_signal"] for file, row in rows.items()} == expected, rows
    coffee = rows["coffee_machine.md"]
    assert (coffee["injected"], coffee["used"], coffee["last_used"]) == (1, 0, None), coffee
    for file in ("deploy_command.md", "style_guide.md"):
        assert rows[file]["injected"] == 1 and rows[file]["used"] == 1, rows[file]
        assert rows[file]["last_agent"] == "codex", rows[file]
        assert rows[file]["last_used"] is not None and rows[file]["last_injected"], rows[file]
    assert usage["day"] == {"injected": 5, "used": 4, "share": 0.8}, usage


def claude_agent(body: dict[str, Any]) -> Reply | None:
    """The real Claude Code's model: reads the settings file, then reads the release memory
    over memd's MCP server, then answers. Claude Code connects its MCP servers in the
    background: until it offers memd's tools the model reads the settings file again, half a
    second later each time (at most :data:`MCP_WAITS` times)."""
    names = {t.get("name") for t in body.get("tools") or () if isinstance(t, dict)}
    if "Read" not in names:
        return None  # a side request (a title, a summary): the default text
    called = [
        b.get("name")
        for m in body.get("messages") or ()
        if isinstance(m, dict) and isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    if not called:
        return replies.tool_use("Read", {"file_path": SETTINGS})
    if MCP_READ not in called and MCP_READ not in names and len(called) <= MCP_WAITS:
        time.sleep(0.5)
        return replies.tool_use("Read", {"file_path": SETTINGS})
    if MCP_READ not in called:
        return replies.tool_use(MCP_READ, {"name": "release train"})
    return replies.text(ANSWER)


def test_claude_code_uses_are_read_from_its_transcript(
    claude_cli: ClaudeCLI, claude_api: LoopbackAPI, tmp_path: Path
) -> None:
    """Claude Code with its defaults (its own auto memory on): memd's hook injects, and the
    transcript shows the quote, the Read of the cited file and the MCP read; Claude Code writes
    no citation tag, so the style memory, like the coffee one, waits unused."""
    claude_api.set_handler(claude_agent)
    with fake_home(tmp_path) as home:
        repo = repository(home)
        settings = home.root / ".claude" / "settings.json"
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text("{}")
        install_hooks(settings, hook_command(sys.executable, hook_module.__file__), CLAUDE_HOOKS)
        install_mcp(home, "claude")
        proc = start_memd(home)
        try:
            env = claude_cli.env(home.env, claude_api.url)
            done = claude_cli.run(["-p", PROMPT], cwd=repo, env=env, timeout=90)
            assert done.returncode == 0, (done.stdout, done.stderr, read_log(home))
            rows = wait_judged(home, repo, {f for f, how in UNTAGGED.items() if how})
        finally:
            assert stop_memd(proc) == 0, read_log(home)
    assert {file: row["last_signal"] for file, row in rows.items()} == UNTAGGED, rows
    assert all(row["injected"] == 1 for row in rows.values()), rows
    assert {row["last_agent"] for row in rows.values()} == {"claude_code"}, rows


def test_gemini_uses_are_read_from_its_chat(gemini_cli: AgentCLI, tmp_path: Path) -> None:
    """Gemini CLI writes its tool calls into the chat as the model made them (memd's reader
    keeps them as text): the read of the cited file and the MCP read are found there, as is
    the quote; Gemini writes no citation tag."""
    calls = (
        ToolCall("", "read_file", {"file_path": SETTINGS}),
        ToolCall("", "mcp_memd_read_memory", {"name": "release train"}),
    )
    with (
        fake_home(tmp_path) as home,
        LoopbackAgentAPI("gemini", text=ANSWER, calls=calls) as api,
    ):
        rows, _ = judged_session(home, gemini_cli, api, UNTAGGED)
    assert {file: row["last_signal"] for file, row in rows.items()} == UNTAGGED, rows
    assert {row["last_agent"] for row in rows.values()} == {"gemini"}, rows
