"""memd's hooks in the real Codex CLI 0.171.0 and Gemini CLI 0.61.0 (issue 24): installed by
``memdctl install-hooks --agent codex|gemini``, a memory written in the project (through the
daemon's ``remember``, as an agent's MCP call writes it) reaches the model's request through
the hook; ``uninstall-hooks`` gives the files back byte for byte, and then nothing reaches it.

Each CLI talks to a loopback server of :mod:`memd.testing.loopback_agents`; memd's own model
is the strict Messages-API loopback. One CLI run is a few seconds (each is bounded by
``tests.other_cli.RUN_TIMEOUT_S``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_agents import LoopbackAgentAPI
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

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

DEPLOY_BODY = "Deploys go through scripts/bg-deploy.sh with a 10 minute canary."


def project_with_memory(home: Home) -> Path:
    """A git project whose memory holds one memory, written by the running daemon."""
    project = home.root / "proj"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    call(
        home,
        "remember",
        {
            "cwd": str(project),
            "type": "project",
            "name": "Deploy",
            "description": "how deploys of this service work",
            "content": DEPLOY_BODY,
            "agent": "codex",
        },
    )
    return project


def run_agent(cli: AgentCLI, api: LoopbackAgentAPI, home: Home, project: Path) -> str:
    """One prompt through the CLI; what its model requests put before the model."""
    since = len(api.requests)
    env = cli.env(home.env, api.url)
    done = cli.run(cli.prompt_args("how do we deploy this service?"), cwd=project, env=env)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:], read_log(home))
    assert "OK from stub" in done.stdout
    return api.texts(since)


def files_of(home: Home, agent: str) -> dict[str, bytes | None]:
    folder = home.root / (".codex" if agent == "codex" else ".gemini")
    names = ("hooks.json", "config.toml") if agent == "codex" else ("settings.json",)
    return {n: (folder / n).read_bytes() if (folder / n).exists() else None for n in names}


@pytest.mark.parametrize("agent", ["codex", "gemini"])
def test_a_memory_reaches_the_agents_prompt_through_its_hook(
    agent: str, request: pytest.FixtureRequest, memd_api: LoopbackAPI, tmp_path: Path
) -> None:
    cli: AgentCLI = request.getfixturevalue(f"{agent}_cli")
    with fake_home(tmp_path) as home, LoopbackAgentAPI(cli.wire) as api:
        config = home.root / "memd.yaml"
        config.write_text("memory:\n  extraction_quiet_s: 600\n")
        home.env.update(
            MEMD_CONFIG=str(config), ANTHROPIC_BASE_URL=memd_api.url, ANTHROPIC_API_KEY="test"
        )
        proc = start_memd(home)
        try:
            project = project_with_memory(home)
            cli.env(home.env, api.url)  # the CLI's own config first: the install keeps it
            before = files_of(home, agent)
            done = memdctl(home, "install-hooks", "--agent", agent)
            assert done.returncode == 0, done.stderr
            text = run_agent(cli, api, home, project)
            assert DEPLOY_BODY in text  # recalled for the prompt
            assert "[Deploy](" in text  # the memory index, at the session's start
            done = memdctl(home, "uninstall-hooks", "--agent", agent)
            assert done.returncode == 0, done.stderr
            assert files_of(home, agent) == before
            assert DEPLOY_BODY not in run_agent(cli, api, home, project)
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_codex_runs_no_hook_without_the_trust_memd_records(
    codex_cli: AgentCLI, memd_api: LoopbackAPI, tmp_path: Path
) -> None:
    """The trust is what makes Codex run the hook: the same hooks.json without it is skipped
    (so the fingerprint memd computes is the one Codex checks)."""
    with fake_home(tmp_path) as home, LoopbackAgentAPI("responses") as api:
        home.env.update(ANTHROPIC_BASE_URL=memd_api.url, ANTHROPIC_API_KEY="test")
        proc = start_memd(home)
        try:
            project = project_with_memory(home)
            config = home.root / ".codex" / "config.toml"
            codex_cli.env(home.env, api.url)
            plain = config.read_text()
            assert memdctl(home, "install-hooks", "--agent", "codex").returncode == 0
            trusted = config.read_text()
            assert trusted.startswith(plain) and "[hooks.state." in trusted
            config.write_text(plain)
            assert DEPLOY_BODY not in run_agent(codex_cli, api, home, project)
            config.write_text(trusted)
            assert DEPLOY_BODY in run_agent(codex_cli, api, home, project)
        finally:
            assert stop_memd(proc) == 0, read_log(home)
        assert json.loads((home.root / ".codex" / "hooks.json").read_text())["hooks"]
