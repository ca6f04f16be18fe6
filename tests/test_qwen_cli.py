"""The fourth agent with its real CLI (issue 35 item 6): Qwen Code 0.24.4 against a loopback
model, beside a real Codex CLI, one memory for both. A fact stated in a ``codex exec`` session
is extracted into the repository's memory and recalled into a real ``qwen`` prompt through
memd's UserPromptSubmit hook (installed by ``memdctl install-hooks --agent qwen``); the fact
that Qwen session states is extracted from its transcript when its Stop hook says the turn
ended, and recalled into the next ``codex exec``; the Qwen session is listed under Qwen's own
id and gets its notes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memd.memory.paths import memory_dir, project_slug
from memd.sources.qwen.reader import QwenReader
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_agents import LoopbackAgentAPI
from memd.testing.loopback_process import LoopbackProcess
from tests.daemon_harness import call, fake_home, memdctl, read_log, start_memd, stop_memd, wait_for
from tests.other_cli import AgentCLI
from tests.qwen_cli import QWEN_PACKAGE, QwenCLI, installed_qwen, session_id
from tests.test_agent_forks_cli import (
    CONFIG as FORK_CONFIG,
)
from tests.test_agent_forks_cli import (
    NOTES_LINE,
    PROMPTS,
    conversation,
    fork_and_resume,
    ingested,
    plant_notes,
)
from tests.test_agents_real_memory import QUESTION, fact_learnt_from, repository
from tests.test_memory_links_e2e import write_one_memory
from tests.test_source_memory_e2e import LEARNT, NOTES_EDIT, NOTES_RE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

LINT = "Lint runs with `make tidy`, never by hand."
LEARNT_LINT = (
    "---\nname: lint command\ndescription: How this repository is linted\n"
    "type: project\n---\n\nLint runs with `make tidy`, never by hand.\n"
)


@pytest.fixture(scope="module")
def qwen_cli() -> QwenCLI:
    command = installed_qwen()
    if command is None:
        pytest.skip(f"npm is not installed: cannot install {QWEN_PACKAGE}")
    return QwenCLI(command)


def two_extractions() -> str:
    """memd's extraction agent: the first extraction writes the deploy fact, the second the
    lint fact (each then ends its turn); the notes agent adds a line to the notes."""
    first, done = write_one_memory("deploy_command.md", LEARNT)
    second, _ = write_one_memory("lint_command.md", LEARNT_LINT)
    notes = {"when": {"tool": "Edit", "turn": "first", "match": NOTES_RE}, "reply": NOTES_EDIT}
    rules = [{**first, "times": 1}, second, done, notes, {"when": {}, "reply": {"text": "Done."}}]
    return "".join(json.dumps(r) + "\n" for r in rules)


def read_text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def qwen_texts(api: LoopbackAPI) -> str:
    """Everything Qwen's requests put before its model."""
    bodies = [r.body for r in api.requests if r.path.endswith("/chat/completions")]
    assert bodies, [r.path for r in api.requests]
    return json.dumps(bodies, ensure_ascii=False)


def test_one_memory_between_real_codex_and_real_qwen_code(
    codex_cli: AgentCLI, qwen_cli: QwenCLI, tmp_path: Path
) -> None:
    with (
        fake_home(tmp_path) as home,
        LoopbackProcess() as memd_api,
        LoopbackAgentAPI("responses", text="Understood: `make ship`.") as codex_api,
        LoopbackAPI(profile="real_client", default_text="Noted.") as qwen_api,
    ):
        memd_api.add_script(two_extractions())
        config = home.root / "memd.yaml"
        config.write_text("memory:\n  extraction_quiet_s: 600\n")  # turn ends only
        home.env.update(
            MEMD_CONFIG=str(config), ANTHROPIC_BASE_URL=memd_api.url, ANTHROPIC_API_KEY="test"
        )
        repo = repository(home)
        proc = start_memd(home)
        try:
            fact_learnt_from(home, repo, codex_cli, codex_api)
            env = qwen_cli.env(home.env, qwen_api.url)
            done = memdctl(home, "install-hooks", "--agent", "qwen")
            assert done.returncode == 0, done.stderr
            done = qwen_cli.run([f"{QUESTION} Note for later: {LINT}"], cwd=repo, env=env)
            assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
            assert "make ship" in qwen_texts(qwen_api)  # recalled into Qwen's prompt
            lint = memory_dir(home.projects, repo) / "lint_command.md"
            wait_for(lint.exists, timeout=60, what="the memory extracted from the Qwen session")
            assert lint.read_text() == LEARNT_LINT
            printed = session_id(done.stdout)
            detail = call(home, "session", {"session": printed[:8]})
            assert (detail["session_id"], detail["agent"]) == (printed, "qwen")
            assert detail["cwd"] == str(repo)
            notes = home.projects / project_slug(str(repo)) / printed / "session-memory"
            wait_for(
                lambda: "make ship" in read_text(notes / "summary.md"),
                timeout=60,
                what="the Qwen session's notes",
            )
            since = len(codex_api.requests)
            env = codex_cli.env(home.env, codex_api.url)
            done = codex_cli.run(codex_cli.prompt_args("How do we lint it?"), cwd=repo, env=env)
            assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
            assert "make tidy" in codex_api.texts(since)  # Qwen's fact, in Codex's prompt
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_qwen_resumes_memds_fork_with_the_notes_once(qwen_cli: QwenCLI, tmp_path: Path) -> None:
    """``compact --fork`` of a real Qwen session of two prompts, notes covering the first:
    ``qwen --resume <fork>`` sends the notes once, the second prompt kept, and not the prompt
    the notes stand for; no model call makes the fork (three Qwen runs, ~25 s)."""
    with (
        fake_home(tmp_path) as home,
        LoopbackAPI(profile="real_client", default_text="Noted, carrying on.") as api,
    ):
        project = home.root / "proj"
        project.mkdir()
        (home.root / "memd.yaml").write_text(FORK_CONFIG)
        home.env["MEMD_CONFIG"] = str(home.root / "memd.yaml")
        env = qwen_cli.env(home.env, api.url)
        first = qwen_cli.run([PROMPTS[0]], cwd=project, env=env)
        assert first.returncode == 0, (first.stdout[-2000:], first.stderr[-2000:])
        sid = session_id(first.stdout)
        done = qwen_cli.run(["--resume", sid, PROMPTS[1]], cwd=project, env=env)
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
        (chat,) = (home.root / ".qwen" / "projects").glob(f"*/chats/{sid}.jsonl")
        plant_notes(home, sid, project, conversation(chat, QwenReader), covered=1)
        proc = start_memd(home)
        try:
            done = memdctl(home, "install-hooks", "--agent", "qwen")
            assert done.returncode == 0, done.stderr
            wait_for(ingested(home, sid, chat), timeout=20, what="the session")

            def resume(new: str) -> None:
                done = qwen_cli.run(["--resume", new, "what next?"], cwd=project, env=env)
                assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])

            def requests() -> list[Any]:
                return [r for r in api.requests if r.path.endswith("/chat/completions")]

            fork, first_request = fork_and_resume(home, sid, resume, requests)
            assert fork["resume"] == f"qwen --resume {fork['session']}"
            assert Path(fork["path"]).parent == chat.parent
            said = json.dumps(first_request.body["messages"], ensure_ascii=False)
            assert said.count(NOTES_LINE) == 1, said[-3000:]
            assert PROMPTS[0] not in said  # the notes stand for it
            assert PROMPTS[1] in said and "what next?" in said
        finally:
            assert stop_memd(proc) == 0, read_log(home)
