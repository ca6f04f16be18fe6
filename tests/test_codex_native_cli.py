"""memd's memories in the real Codex CLI's own memories (issue 35, item 5), one route only.

Real Codex 0.171.0 with its memories on (``[features] memories = true``) against its loopback
model (tests/other_cli.py), memd's hooks installed and ``agents.codex.native_memory`` on:

1. a memory of the repository reaches the first session through memd's prompt hook; that
   session's turn end writes memd's extension (``memories/extensions/memd/``);
2. the next Codex start finds its memories folder changed (its workspace diff for the
   consolidation shows memd's extension) and runs its consolidation, which the loopback
   model answers as the extension's instructions ask (the memory's line and
   marker into ``memory_summary.md``, through Codex's own tool); the session itself still
   has the summary of its start, so memd's hook brings the memory, once;
3. the session after sends the summary, which carries the memory; memd's hook leaves it out:
   once again.

The extension's files and the summary's reading are proved without the CLI:
tests/test_codex_native.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memd.memory.paths import memory_dir
from memd.sources.codex.extension import carried
from memd.testing.loopback_agents import LoopbackAgentAPI
from tests.daemon_harness import fake_home, memdctl, read_log, start_memd, stop_memd, wait_for
from tests.other_cli import AgentCLI
from tests.test_agents_real_memory import QUESTION, repository
from tests.test_source_memory_e2e import LEARNT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CONFIG = "memory:\n  extraction_quiet_s: 600\nagents:\n  codex:\n    native_memory: true\n"
# What the consolidation's model does with memd's extension, as its instructions ask: one
# line per memory (its name, its first line of content, its marker) in the summary.
CONSOLIDATE = (
    "{ echo v1; echo '## memd memories'; for f in extensions/memd/resources/*.md; do"
    ' echo "- $(sed -n 2p "$f" | cut -c3-): $(sed -n 5p "$f") $(head -n 1 "$f")"; done; }'
    " > memory_summary.md"
)


def test_real_codex_gets_a_served_memory_once(codex_cli: AgentCLI, tmp_path: Path) -> None:
    with fake_home(tmp_path) as home, LoopbackAgentAPI("responses", text="Use make ship.") as api:
        (home.root / "memd.yaml").write_text(CONFIG)
        home.env["MEMD_CONFIG"] = str(home.root / "memd.yaml")
        repo = repository(home)
        memory = memory_dir(home.projects, repo) / "deploy_command.md"
        memory.parent.mkdir(parents=True)
        memory.write_text(LEARNT)
        env = codex_cli.env(home.env, api.url)
        codex = home.root / ".codex"
        with (codex / "config.toml").open("a") as config:
            config.write("\n[features]\nmemories = true\n")

        def asked() -> str:
            since = len(api.requests)
            done = codex_cli.run(codex_cli.prompt_args(QUESTION), cwd=repo, env=env)
            assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
            turns = [r.body for r in api.requests[since:] if _own_turn(r.body)]
            assert turns
            return json.dumps(turns[0], ensure_ascii=False)

        proc = start_memd(home)
        try:
            done = memdctl(home, "install-hooks", "--agent", "codex")
            assert done.returncode == 0, done.stderr
            first = asked()  # no extension yet: memd's hook brings the memory
            assert first.count("make ship") == 1, first[-3000:]
            resources = codex / "memories" / "extensions" / "memd" / "resources"
            wait_for(lambda: any(resources.glob("*.md")), timeout=20, what="memd's extension")

            api.expect_consolidation(CONSOLIDATE)
            second = asked()  # the summary of its start holds nothing of memd's yet
            assert second.count("make ship") == 1, second[-3000:]
            marker = f"<!-- memd:memory {memory} -->"
            diff = codex / "memories" / "phase2_workspace_diff.md"  # Codex's, for its model
            assert marker in diff.read_text()
            summary = codex / "memories" / "memory_summary.md"
            assert carried(summary.read_bytes()) == {str(memory)}, summary.read_text()

            third = asked()  # Codex sends the summary; memd's hook leaves the memory out
            assert third.count("make ship") == 1, third[-3000:]
            assert third.count(marker) == 1
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def _own_turn(body: object) -> bool:
    """A model request of the session itself (not of Codex's memory consolidation)."""
    meta = body.get("client_metadata") if isinstance(body, dict) else None
    return isinstance(meta, dict) and "x-openai-subagent" not in meta
