"""One memory for every agent, with the real CLIs (issue 24): a fact stated in a real ``gemini
-p`` is extracted when its ``AfterAgent`` hook says the turn ended, the session known by the id
Gemini printed; a fact said to a real ``claude -p`` with memd's defaults and Claude Code's own
auto memory on reaches a real ``codex exec``, in one memory. That a fact said in any of the four
agents is recalled into each other one is ``tests/test_agents_real_matrix.py``, which uses the
helpers here.

Each CLI talks to its loopback model server (Codex: Responses API; Claude Code: the Messages
API in the real-client profile; Gemini: ``generateContent``); memd's own model is a scripted
Messages-API loopback that writes the fact as a memory when its extraction sees it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memd.memory.paths import memory_dir
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_agents import LoopbackAgentAPI
from memd.testing.loopback_process import LoopbackProcess
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
    wait_for,
)
from tests.other_cli import AgentCLI
from tests.test_source_memory_e2e import FACT, LEARNT, extraction_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

QUESTION = "how do we deploy this to production?"


def repository(home: Home) -> Path:
    repo = home.root / "work" / "repo"
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo


def claude_hooks(home: Home) -> None:
    """memd's hooks in Claude Code's user settings, in the form ``install-hooks`` writes."""
    settings = home.root / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({}))
    install_hooks(settings, hook_command(sys.executable, hook_module.__file__), CLAUDE_HOOKS)


def claude_texts(api: LoopbackAPI, since: int) -> str:
    """Everything Claude Code's main requests put before the model."""
    bodies = [
        [r.body.get("system"), r.body.get("messages")]
        for r in api.requests[since:]
        if r.path == "/v1/messages" and isinstance(r.body, dict) and r.body.get("tools")
    ]
    assert bodies, [r.path for r in api.requests[since:]]
    return json.dumps(bodies, ensure_ascii=False)


def learnt(home: Home, repo: Path, what: str) -> None:
    """Wait until memd's extraction wrote the fact into the repository's memory."""
    path = memory_dir(home.projects, repo) / "deploy_command.md"
    wait_for(path.exists, timeout=60, what=f"the memory extracted from {what}")
    assert path.read_text() == LEARNT


def turn_ends_only(home: Home, memd_api: LoopbackProcess) -> None:
    """memd's model is ``memd_api`` (which writes the fact when an extraction sees it), and
    the quiet period is ten minutes: only an agent's own turn-end hook starts an extraction
    within a test."""
    memd_api.add_script(extraction_script())
    config = home.root / "memd.yaml"
    config.write_text("memory:\n  extraction_quiet_s: 600\n")
    home.env.update(
        MEMD_CONFIG=str(config), ANTHROPIC_BASE_URL=memd_api.url, ANTHROPIC_API_KEY="test"
    )


def fact_learnt_from(
    home: Home, repo: Path, cli: AgentCLI, api: LoopbackAgentAPI
) -> subprocess.CompletedProcess[str]:
    """With memd running: the agent's hooks installed, the fact stated in a real prompt of
    its CLI, and the fact in the repository's memory, from that agent's session; the CLI's
    run."""
    wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=30, what="the model")
    env = cli.env(home.env, api.url)
    done = memdctl(home, "install-hooks", "--agent", cli.agent)
    assert done.returncode == 0, done.stderr
    done = cli.run(cli.prompt_args(f"Note for later: {FACT}"), cwd=repo, env=env)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    learnt(home, repo, f"the {cli.agent} session")
    (row,) = call(home, "sessions", {})
    assert row["agent"] == cli.agent, row
    return done


def test_a_fact_from_real_gemini_is_extracted_when_its_turn_ends(
    gemini_cli: AgentCLI, tmp_path: Path
) -> None:
    """Gemini's AfterAgent is a turn end: with the quiet period at ten minutes, a fact stated
    in a real ``gemini -p`` is in the repository's memory within a minute of its end. The
    session is the one Gemini printed: any prefix of its id finds it (issue 35)."""
    with (
        fake_home(tmp_path) as home,
        LoopbackProcess() as memd_api,
        LoopbackAgentAPI("gemini", text="Understood: `make ship`.") as gemini_api,
    ):
        turn_ends_only(home, memd_api)  # the turn end is AfterAgent
        repo = repository(home)
        proc = start_memd(home)
        try:
            done = fact_learnt_from(home, repo, gemini_cli, gemini_api)
            printed = json.loads(done.stdout)["session_id"]
            shown = memdctl(home, "session", printed[:8])
            assert shown.returncode == 0, shown.stderr
            detail = call(home, "session", {"session": printed[:8]})
            assert (detail["session_id"], detail["agent"]) == (printed, "gemini")
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_a_fact_said_to_real_claude_code_with_defaults_reaches_real_codex_once(
    claude_cli: ClaudeCLI, codex_cli: AgentCLI, claude_api: LoopbackAPI, tmp_path: Path
) -> None:
    """Issue 36, item 4: Claude Code's own auto memory on and memd's settings the defaults.
    memd extracts beside it what it did not write after the turn (it wrote nothing here), so
    a fact said to ``claude -p`` is recalled into ``codex exec``; the fact is in one memory."""
    with (
        fake_home(tmp_path) as home,
        LoopbackProcess() as memd_api,
        LoopbackAgentAPI("responses", text="Use `make ship`.") as codex_api,
    ):
        memd_api.add_script(extraction_script())
        home.env.update(ANTHROPIC_BASE_URL=memd_api.url, ANTHROPIC_API_KEY="test")
        repo = repository(home)
        claude_hooks(home)
        proc = start_memd(home)
        try:
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=30, what="the model")
            env = claude_cli.env(home.env, claude_api.url)
            done = claude_cli.run(["-p", f"Note for later: {FACT}"], cwd=repo, env=env, timeout=60)
            assert done.returncode == 0, (done.stdout, done.stderr, read_log(home))
            learnt(home, repo, "the Claude Code session (its SessionEnd ends memd's wait)")
            (row,) = call(home, "sessions", {})
            facts = call(home, "session", {"session": row["session_id"]})["claude_code"]
            assert facts["auto_memory"], facts  # Claude Code's own memory was on all along
            env = codex_cli.env(home.env, codex_api.url)  # its config first, then the hooks
            assert memdctl(home, "install-hooks", "--agent", "codex").returncode == 0
            done = codex_cli.run(codex_cli.prompt_args(QUESTION), cwd=repo, env=env)
            assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
            assert "make ship" in codex_api.texts()
            mdir = memory_dir(home.projects, repo)
            holding = [
                p.name
                for p in mdir.rglob("*.md")
                if p.name != "MEMORY.md" and "make ship" in p.read_text()
            ]
            assert holding == ["deploy_command.md"], holding  # one memory, not two
        finally:
            assert stop_memd(proc) == 0, read_log(home)
