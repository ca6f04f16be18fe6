"""The fourth agent's fork with its real CLI (issue 35 items 4 and 6): ``compact --fork`` of a
real Qwen Code 0.24.4 session, resumed by ``qwen --resume`` against a loopback model, carries
the notes once. Qwen's place in the one memory of the four agents (a fact it is told recalled
into the three others, theirs into it; its session known by its own id and given notes) is
``tests/test_agents_real_matrix.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memd.sources.qwen.reader import QwenReader
from memd.testing.loopback import LoopbackAPI
from tests.daemon_harness import fake_home, memdctl, read_log, start_memd, stop_memd, wait_for
from tests.qwen_cli import QwenCLI, session_id
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

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


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
