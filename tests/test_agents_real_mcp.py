"""memd's MCP tools under the real Codex CLI (issue 24; pinned in :mod:`tests.other_cli`):
installed by ``memdctl install-mcp --agent codex`` (``python -P -m memd.mcp``), the daemon
started as systemd starts it (runtime dir ``/run/user/<uid>``), Codex started in a repository
holding a ``memd/`` folder and a ``memd.py`` that would shadow the package. Codex gives its MCP
servers a short list of variables (no ``XDG_RUNTIME_DIR``); its loopback model calls the tools
and the outputs Codex sends back show memd answered. Codex 0.171 starts its MCP servers in the
background: the model calls memd's tools once Codex offers them
(:func:`memd.testing.loopback_agents.next_call` waits in a shell until then)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from memd.testing.loopback_agents import LoopbackAgentAPI, ToolCall, call_outputs
from tests.daemon_harness import Home, memdctl, read_log, start_memd, stop_memd
from tests.other_cli import AgentCLI

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SHADOW = "raise ImportError('the working dir shadowed memd')\n"
CALLS = (
    ToolCall("mcp__memd", "memory_status", {}),
    ToolCall("mcp__memd", "recall", {"query": "how do we deploy"}),
)


def shadowed_repo(root: Path) -> Path:
    """A git repository whose ``memd/`` and ``memd.py`` would shadow the package."""
    repo = root / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for shadow in (repo / "memd" / "__init__.py", repo / "memd.py"):
        shadow.parent.mkdir(exist_ok=True)
        shadow.write_text(SHADOW)
    return repo


def install_mcp(home: Home) -> None:
    """``memdctl install-mcp --agent codex``, plus this checkout's tree for the server when
    the tests run from one (``PYTHONPATH``, which Codex does not pass on by itself)."""
    done = memdctl(home, "install-mcp", "--agent", "codex")
    assert done.returncode == 0, done.stderr
    config = home.root / ".codex" / "config.toml"
    text = config.read_text()
    assert 'args = ["-P", "-m", "memd.mcp"]' in text
    if os.environ.get("PYTHONPATH"):
        text += f"\n[mcp_servers.memd.env]\nPYTHONPATH = {json.dumps(os.environ['PYTHONPATH'])}\n"
        config.write_text(text)


def tool_outputs(api: LoopbackAgentAPI) -> dict[str, str]:
    """What Codex sent back for each scripted call the model made, by ``call_id`` (the shell
    waits for the tools to be offered left out)."""
    found: dict[str, str] = {}
    for request in api.requests:
        for item in call_outputs(request.body):
            call_id = str(item.get("call_id"))
            if call_id.startswith("call_loop"):
                found[call_id] = json.dumps(item.get("output"), ensure_ascii=False)
    return found


def test_codex_calls_memds_tools_under_systemds_runtime_dir_from_a_shadowing_folder(
    codex_cli: AgentCLI, tmp_path: Path, systemd_runtime: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "MEMD_"))}
    env.update(HOME=str(tmp_path), XDG_RUNTIME_DIR=str(systemd_runtime))
    home = Home(tmp_path, systemd_runtime, env)
    repo = shadowed_repo(tmp_path)
    with LoopbackAgentAPI("responses", calls=CALLS) as api:
        cli_env = codex_cli.env(home.env, api.url)
        install_mcp(home)
        proc = start_memd(home)
        try:
            done = codex_cli.run(codex_cli.prompt_args("what is in memd?"), cwd=repo, env=cli_env)
            assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
        finally:
            assert stop_memd(proc) == 0, read_log(home)
    outputs = tool_outputs(api)
    assert set(outputs) == {"call_loop0", "call_loop1"}, (outputs, done.stderr[-2000:])
    for text in outputs.values():
        assert "not running" not in text and "ImportError" not in text, text
        assert "shadowed" not in text, text
    assert f"project root: {repo}" in outputs["call_loop0"], outputs["call_loop0"]
    assert "OK from stub" in done.stdout
