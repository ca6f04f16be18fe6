"""With the real Claude Code CLI (npm, pinned by tests/claude_cli.py's cache convention):
``memdctl install-mcp --agent claude`` goes through ``claude mcp add``, and ``claude mcp list``
shows memd connected; ``uninstall-mcp`` removes it again. Every ``claude -p`` is offered
memd's tools and a call of one is answered (issue 38)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_replies import When
from tests.claude_cli import CLAUDE_CODE_VERSION, ClaudeCLI, cache_dir
from tests.daemon_harness import fake_home, memdctl, read_log, start_memd, stop_memd
from tests.test_claude_code_cli import main_requests

TOOLS = ("recall", "list_memories", "read_memory", "remember", "session_notes", "memory_status")

# `claude mcp list` health-checks every server; on a loaded 2-core machine it takes ~25 s.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def cached_claude() -> Path | None:
    command = cache_dir() / "node_modules" / ".bin" / "claude"
    return command if command.exists() else None


def test_claude_mcp_list_shows_memd_connected(tmp_path: Path) -> None:
    claude = cached_claude()
    if claude is None:
        pytest.skip("Claude Code CLI not installed in the test cache (see tests/claude_cli.py)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").symlink_to(claude)
    (tmp_path / ".claude.json").write_text(
        json.dumps({"hasCompletedOnboarding": True, "lastOnboardingVersion": CLAUDE_CODE_VERSION})
    )
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}
    env.update(
        HOME=str(tmp_path),
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        XDG_RUNTIME_DIR=str(tmp_path / "run"),
        ANTHROPIC_API_KEY="sk-ant-loopback-0000000000000000000000",
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_ERROR_REPORTING="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
    )

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=180)

    memdctl = (sys.executable, "-m", "memd_client.cli")
    installed = run(*memdctl, "install-mcp", "--agent", "claude")
    assert installed.returncode == 0 and "installed claude CLI" in installed.stdout, installed
    again = run(*memdctl, "install-mcp", "--agent", "claude")
    assert "unchanged" in again.stdout, again
    listed = run(str(claude), "mcp", "list")
    assert listed.returncode == 0, listed
    line = next(ln for ln in listed.stdout.splitlines() if ln.startswith("memd:"))
    assert "-P -m memd.mcp" in line and "Connected" in line, listed.stdout
    servers = json.loads((tmp_path / ".claude.json").read_text())["mcpServers"]
    assert servers["memd"]["args"] == ["-P", "-m", "memd.mcp"]

    removed = run(*memdctl, "uninstall-mcp", "--agent", "claude")
    assert removed.returncode == 0 and "removed" in removed.stdout, removed
    assert "memd" not in json.loads((tmp_path / ".claude.json").read_text())["mcpServers"]


def test_every_claude_p_turn_is_offered_memds_tools_and_calls_them(
    claude_cli_newest: ClaudeCLI, claude_api: LoopbackAPI, tmp_path: Path
) -> None:
    """Issue 38: memd-mcp answers what Claude Code 2.1.332 asks first (the 2026 era's
    discovery, subscription, tools, prompts and resources: it offers a server's tools once
    all are listed) before the MCP SDK is loaded, so the first request of each ``claude -p``
    offers memd's tools, and a call of one is served by the SDK the server loads meanwhile."""
    cli, api = claude_cli_newest, claude_api
    with fake_home(tmp_path) as home:
        repo = home.root / "repo"
        (repo / ".git").mkdir(parents=True)
        bin_dir = home.root / "bin"
        bin_dir.mkdir()
        (bin_dir / "claude").symlink_to(cli.command)
        home.env["PATH"] = f"{bin_dir}{os.pathsep}{home.env.get('PATH', '')}"
        installed = memdctl(home, "install-mcp", "--agent", "claude")
        assert installed.returncode == 0, installed.stderr
        env = cli.env(home.env, api.url)
        api.add_rule(
            When(match="memd status please", turn="first"),
            replies.tool_use("mcp__memd__memory_status", {}),
        )
        proc = start_memd(home)
        try:
            assert memdctl(home, "status").returncode == 0  # its features loaded: it lists
            for turn in range(3):
                since = len(api.requests)
                args = ["-p", "memd status please", "--allowedTools", "mcp__memd__memory_status"]
                done = cli.run(args, cwd=repo, env=env)
                assert done.returncode == 0, (done.stdout, done.stderr)
                first, answered = main_requests(api, since)[:2]
                offered = json.dumps(first.body)  # 2.1.332 lists MCP tools as deferred tools
                assert all(f"mcp__memd__{name}" in offered for name in TOOLS), turn
                result = json.dumps(answered.body["messages"][-2:])
                assert "project root: " + str(repo) in result, result[:2000]
        finally:
            assert stop_memd(proc) == 0, read_log(home)
