"""One memory for the four agents, with their real CLIs (issue 35's acceptance): a fact said in
any one is recalled into each other one. Claude Code, Codex, Gemini and Qwen Code (pinned:
``tests/claude_cli.py``, ``tests/other_cli.py``, ``tests/qwen_cli.py``) work in one git
repository, each against its own loopback model, memd's hooks installed in each by
``install-hooks``. memd's model is a scripted loopback whose extraction writes a fact as a
memory only when the transcript it is shown holds that fact, and the quiet period is ten
minutes, so a memory comes from the turn-end hook of the agent that said it.

Eight runs in two rounds prove the twelve ordered pairs: the four CLIs each say their fact at
once; when the four memories are written, the four each ask the team's rules at once, and each
request carries the three other agents' facts (seen in the request that CLI sent its model).
The test also checks that the Qwen session is known by the id Qwen printed and gets its notes.
One test, not one per pair: a real run costs 2-8 s, so two rounds of four at once cost about
as much as two runs in a row (the whole test ~25 s on a quiet machine, ~70 s beside busy
loops)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from memd.memory.paths import memory_dir, project_slug
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_agents import LoopbackAgentAPI
from memd.testing.loopback_process import LoopbackProcess
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
from tests.qwen_cli import QwenCLI, session_id
from tests.test_agents_real_memory import claude_hooks, claude_texts, repository
from tests.test_memory_links_e2e import MEMORY_DIR_RE, MEMORY_SYSTEM
from tests.test_source_memory_e2e import NOTES_EDIT, NOTES_RE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

# The fact each agent says: (its topic, the command only that agent's prompt names).
FACTS = {
    "codex": ("lint", "make tidy"),
    "gemini": ("deploy", "make ship"),
    "qwen": ("test", "make proof"),
    "claude_code": ("release", "make cut"),
}
ASK = "What are the team rules for this repository (deploy, lint, test, release)?"
# The quiet period at ten minutes: only an agent's turn end starts an extraction. Four hooks
# run at once, and the CI runs beside busy loops: the hook and its recall get 9 s (the agents
# give memd's hooks 10 s) rather than the defaults of 1.5 s, which a loaded machine misses (a
# hook that misses it fails open and recalls nothing), and each CLI run two minutes.
HOOK_MS = 9_000
CONFIG = (
    f"memory:\n  extraction_quiet_s: 600\n  recall_timeout_s: 8\nhook:\n  timeout_ms: {HOOK_MS}\n"
)
RUN_S = 120.0

# One run of an agent's real CLI: the prompt in; what it sent its model and what it printed.
Run = Callable[[str], tuple[str, str]]


def fact(agent: str) -> str:
    topic, command = FACTS[agent]
    return f"Team rule for this repository: {topic} only with `{command}`."


def memory_file(agent: str) -> str:
    return f"{FACTS[agent][0]}_rule.md"


def learnt(agent: str) -> str:
    topic = FACTS[agent][0]
    return (
        f"---\nname: {topic} rule\ndescription: Team rule for this repository: how we {topic}\n"
        f"type: project\n---\n\n{fact(agent)}\n"
    )


def extraction_script() -> str:
    """memd's model: an extraction shown a transcript that holds an agent's fact writes it
    (once), then ends its turn; one shown none says so; the notes agent adds a line."""
    rules: list[dict[str, Any]] = []
    for agent, (_, command) in FACTS.items():
        holds = f"(?s)^(?=.*{re.escape(command)}).*?{MEMORY_DIR_RE}"
        path, content = f"{{dir}}/{memory_file(agent)}", learnt(agent)
        write = {"name": "Write", "input": {"file_path": path, "content": content}}
        when = {"system_match": MEMORY_SYSTEM, "turn": "first", "match": holds}
        rules.append({"when": when, "reply": {"tool_use": write}, "times": 1})
    rules += [
        {"when": {"system_match": MEMORY_SYSTEM}, "reply": {"text": "Nothing new to save."}},
        {"when": {"tool": "Edit", "turn": "first", "match": NOTES_RE}, "reply": NOTES_EDIT},
        {"when": {}, "reply": {"text": "Done."}},
    ]
    return "".join(json.dumps(r) + "\n" for r in rules)


def other_cli(home: Home, repo: Path, cli: AgentCLI, api: LoopbackAgentAPI) -> Run:
    env = cli.env(home.env, api.url)  # the CLI's config first: the install keeps it
    done = memdctl(home, "install-hooks", "--agent", cli.agent)
    assert done.returncode == 0, done.stderr

    def run(prompt: str) -> tuple[str, str]:
        since = len(api.requests)
        done = cli.run(cli.prompt_args(prompt), cwd=repo, env=env, timeout=RUN_S)
        assert done.returncode == 0, (cli.agent, done.stdout[-2000:], done.stderr[-2000:])
        return api.texts(since), done.stdout

    return run


def qwen(home: Home, repo: Path, cli: QwenCLI, api: LoopbackAPI) -> Run:
    env = cli.env(home.env, api.url)
    done = memdctl(home, "install-hooks", "--agent", "qwen")
    assert done.returncode == 0, done.stderr

    def run(prompt: str) -> tuple[str, str]:
        since = len(api.requests)
        done = cli.run([prompt], cwd=repo, env=env, timeout=RUN_S)
        assert done.returncode == 0, ("qwen", done.stdout[-2000:], done.stderr[-2000:])
        sent = [r.body for r in api.requests[since:] if r.path.endswith("/chat/completions")]
        return json.dumps(sent, ensure_ascii=False), done.stdout

    return run


def claude(home: Home, repo: Path, cli: ClaudeCLI, api: LoopbackAPI) -> Run:
    claude_hooks(home)
    env = cli.env(home.env, api.url)

    def run(prompt: str) -> tuple[str, str]:
        since = len(api.requests)
        done = cli.run(["-p", prompt], cwd=repo, env=env, timeout=RUN_S)
        assert done.returncode == 0, ("claude", done.stdout, done.stderr, read_log(home))
        return claude_texts(api, since), done.stdout

    return run


def each(runs: dict[str, Run], prompt: Callable[[str], str]) -> dict[str, tuple[str, str]]:
    """One run of every agent's CLI at once, each with its ``prompt``."""
    with ThreadPoolExecutor(len(runs)) as pool:
        done = pool.map(lambda agent: runs[agent](prompt(agent)), runs)
        return dict(zip(runs, done, strict=True))


def recalled(sent: str, sources: list[str]) -> list[str]:
    """The agents among ``sources`` whose fact is in what a CLI sent its model."""
    return [s for s in sources if FACTS[s][1] in sent]


def test_a_fact_said_in_any_real_cli_is_recalled_into_each_other_one(
    claude_cli: ClaudeCLI,
    codex_cli: AgentCLI,
    gemini_cli: AgentCLI,
    qwen_cli: QwenCLI,
    claude_api: LoopbackAPI,
    tmp_path: Path,
) -> None:
    with (
        fake_home(tmp_path, CLAUDE_CODE_DISABLE_AUTO_MEMORY="1") as home,
        LoopbackProcess() as memd_api,
        LoopbackAgentAPI("responses") as codex_api,
        LoopbackAgentAPI("gemini") as gemini_api,
        LoopbackAPI(profile="real_client", default_text="Noted.") as qwen_api,
    ):
        memd_api.add_script(extraction_script())
        config = home.root / "memd.yaml"
        config.write_text(CONFIG)
        home.env.update(
            MEMD_CONFIG=str(config),
            MEMD_HOOK_TIMEOUT_MS=str(HOOK_MS),
            ANTHROPIC_BASE_URL=memd_api.url,
            ANTHROPIC_API_KEY="test",
        )
        repo = repository(home)
        mdir = memory_dir(home.projects, repo)
        proc = start_memd(home)
        try:
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=30, what="the model")
            runs = {
                "codex": other_cli(home, repo, codex_cli, codex_api),
                "gemini": other_cli(home, repo, gemini_cli, gemini_api),
                "qwen": qwen(home, repo, qwen_cli, qwen_api),
                "claude_code": claude(home, repo, claude_cli, claude_api),
            }
            printed = each(runs, lambda agent: f"Note for later: {fact(agent)}")
            for agent in runs:
                path = mdir / memory_file(agent)
                wait_for(path.exists, timeout=60, what=f"the memory extracted from {agent}")
                assert path.read_text() == learnt(agent)
            sent = each(runs, lambda _: ASK)
            for agent in runs:
                others = [a for a in runs if a != agent]
                got = recalled(sent[agent][0], others)
                assert got == others, (agent, sent[agent][0][-3000:], read_log(home)[-5000:])
            # The Qwen session: known by the id Qwen printed, and given its notes.
            sid = session_id(printed["qwen"][1])
            detail = call(home, "session", {"session": sid[:8]})
            shown = (detail["session_id"], detail["agent"], detail["cwd"])
            assert shown == (sid, "qwen", str(repo))
            notes = home.projects / project_slug(str(repo)) / sid / "session-memory" / "summary.md"
            wait_for(
                lambda: notes.exists() and "make ship" in notes.read_text(),
                timeout=60,
                what="the Qwen session's notes",
            )
        finally:
            assert stop_memd(proc) == 0, read_log(home)
