"""memd's memories in the real Gemini CLI's own memory file (issue 35, item 5), one route only.

Real Gemini CLI 0.61.0 against its loopback model (tests/other_cli.py), memd's hooks
installed and ``agents.gemini.native_memory`` on: a memory of the repository reaches the first
session through memd's prompt hook (no block yet); that session's turn end puts it in
Gemini's ``MEMORY.md`` as memd's block; the next session's request carries it exactly once
(Gemini sends the file; memd's hook leaves the memory out). The block's bytes and the file
are proved without the CLI: tests/test_gemini_native.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memd.memory.paths import memory_dir
from memd.sources.gemini.memory_block import held
from memd.testing.loopback_agents import LoopbackAgentAPI
from tests.daemon_harness import fake_home, memdctl, read_log, start_memd, stop_memd, wait_for
from tests.other_cli import AgentCLI
from tests.test_agents_real_memory import QUESTION, repository
from tests.test_source_memory_e2e import LEARNT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CONFIG = "memory:\n  extraction_quiet_s: 600\nagents:\n  gemini:\n    native_memory: true\n"


def test_real_gemini_gets_a_served_memory_once(gemini_cli: AgentCLI, tmp_path: Path) -> None:
    with fake_home(tmp_path) as home, LoopbackAgentAPI("gemini", text="Use make ship.") as api:
        (home.root / "memd.yaml").write_text(CONFIG)
        home.env["MEMD_CONFIG"] = str(home.root / "memd.yaml")
        repo = repository(home)
        memory = memory_dir(home.projects, repo) / "deploy_command.md"
        memory.parent.mkdir(parents=True)
        memory.write_text(LEARNT)
        env = gemini_cli.env(home.env, api.url)

        def asked() -> str:
            since = len(api.requests)
            done = gemini_cli.run(gemini_cli.prompt_args(QUESTION), cwd=repo, env=env)
            assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
            calls = (":generateContent", ":streamGenerateContent")
            bodies = [r.body for r in api.requests[since:] if r.path.endswith(calls)]
            assert bodies
            return json.dumps(bodies[0], ensure_ascii=False)

        proc = start_memd(home)
        try:
            done = memdctl(home, "install-hooks", "--agent", "gemini")
            assert done.returncode == 0, done.stderr
            first = asked()  # no block yet: memd's hook brings it
            assert first.count("make ship") == 1, first[-3000:]
            tmp = home.root / ".gemini" / "tmp"

            def served() -> bool:  # written by the turn end's hook, which may outlast its wait
                return any(
                    held(own.read_bytes()) == {str(memory)} for own in tmp.glob("*/*/MEMORY.md")
                )

            wait_for(served, timeout=20, what="memd's block in Gemini's MEMORY.md")
            second = asked()  # Gemini sends its file; memd's hook leaves the memory out
            assert second.count("make ship") == 1, second[-3000:]
            assert second.count("memd:begin") == 1
        finally:
            assert stop_memd(proc) == 0, read_log(home)
