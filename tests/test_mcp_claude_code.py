"""With the real Claude Code CLI (npm, pinned by tests/claude_cli.py's cache convention):
``memdctl install-mcp --agent claude`` goes through ``claude mcp add``, and ``claude mcp list``
shows memd connected; ``uninstall-mcp`` removes it again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.claude_cli import CLAUDE_CODE_VERSION, cache_dir

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
