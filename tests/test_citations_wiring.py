"""Citation checks through the services that use them (issue 26): ``memory.
citation_retire_days`` through the dream (a memory whose citations have all failed that long
is offered to the consolidation agent to fix or retire, one second sooner it is not; the
memory itself is never deleted for it), and the ranking through a recall the model chose."""

from __future__ import annotations

import dataclasses
import os
from functools import partial
from pathlib import Path

import anyio
import pytest

from memd.clock import SystemClock
from memd.config import Config, MemoryConfig
from memd.llm.backends import CLAUDE
from memd.llm.client import LLM
from memd.memory.citations import infer
from memd.memory.frontmatter import Frontmatter, render_document
from memd.memory.recall import recall
from memd.memory.trust import CitationChecks
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_replies import When
from tests.citation_support import Repo
from tests.dream_support import make_service
from tests.test_dream_service import NOTE, forced_run, prepare

DAY_S = 86_400.0


def _failing_for(tmp_path: Path, memory: Path, cfg: MemoryConfig, seconds: float) -> CitationChecks:
    """Checks whose log has ``memory/n.md`` failing for ``seconds`` (a real repository)."""
    repo = Repo(tmp_path / "code")
    repo.write("a.py", "def alpha():\n    pass\n")
    repo.commit()
    wall = [1_000_000.0]
    checks = CitationChecks(tmp_path / "state", lambda: cfg, wall=lambda: wall[0])
    where = checks.repository(str(repo.root), memory)
    cited = checks.verifier.baseline(where, infer("`alpha()` is in a.py:1-2"))
    repo.write("a.py", "gone\n")
    key = f"{os.path.realpath(memory)}/n.md"
    _, check = checks.document(where, key, 0, cited, "")
    assert check.failing
    wall[0] += seconds
    checks.document(where, key, 0, cited, "")  # still failing: the clock keeps its start
    return checks


@pytest.mark.anyio
@pytest.mark.parametrize(("failing_s", "offered"), [(2 * DAY_S - 1, False), (2 * DAY_S, True)])
async def test_dream_is_offered_memories_failing_for_citation_retire_days(
    tmp_path: Path, api: LoopbackAPI, llm: LLM, failing_s: float, offered: bool
) -> None:
    memory = prepare(tmp_path)
    cfg = dataclasses.replace(Config(), memory=MemoryConfig(citation_retire_days=2))
    checks = _failing_for(tmp_path, memory, cfg.memory, failing_s)
    api.push(replies.text("Nothing to change."))
    service = make_service(tmp_path, llm, cfg, retire_candidates=checks.retire_candidates)
    async with anyio.create_task_group() as tg:
        await tg.start(service.run)
        await forced_run(service)
        tg.cancel_scope.cancel()
    task = api.requests[0].body["messages"][0]["content"][0]["text"]
    assert ("- n.md" in task) is offered
    assert ("have not matched the code for a long" in task) is offered
    assert (memory / "n.md").read_text() == NOTE


def test_a_memory_that_verifies_again_is_no_longer_offered(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "code")
    repo.write("a.py", "def alpha():\n    pass\n")
    repo.commit()
    memory = tmp_path / "memory"
    memory.mkdir()
    wall = [1_000_000.0]
    checks = CitationChecks(tmp_path / "state", MemoryConfig, wall=lambda: wall[0])
    where = checks.repository(str(repo.root), memory)
    cited = checks.verifier.baseline(where, infer("a.py:1-2"))
    key = f"{os.path.realpath(memory)}/n.md"
    repo.write("a.py", "gone\n")
    checks.document(where, key, 0, cited, "")
    wall[0] += 40 * DAY_S
    assert checks.retire_candidates(memory) == ["n.md"]
    repo.write("a.py", "def alpha():\n    pass\n")
    _, check = checks.document(where, key, 0, cited, "")
    assert check.verified and checks.retire_candidates(memory) == []
    assert checks.log.row(key) == {"last_verified": wall[0]}
    checks.log.save()
    reloaded = CitationChecks(tmp_path / "state", MemoryConfig, wall=lambda: wall[0])
    assert reloaded.log.row(key) == {"last_verified": wall[0]}


def _remembered(memory: Path, repo: Repo, checks: CitationChecks, name: str, path: str) -> None:
    """A memory citing ``path`` with its citations recorded as ``remember`` records them."""
    body = f"Deploy steps for {name} start in {path}:1-2."
    rows = checks.cite(str(repo.root), memory, body)
    meta = Frontmatter(name, f"deploy steps of {name}", "project", (("citations", rows),))
    (memory / f"project_{name}.md").write_text(render_document(meta, body + "\n"))


@pytest.mark.anyio
async def test_a_model_pick_whose_citations_all_fail_ranks_below_one_that_verifies(
    tmp_path: Path, api: LoopbackAPI, llm: LLM
) -> None:
    """The recall model picks the memory whose cited code is gone: a memory the ranker
    also found for the query, whose citations verify, takes its place (issue 26's ranking
    holds whoever chose; before, the failing pick was all the recall gave)."""
    repo = Repo(tmp_path / "code")
    for name in ("alpha", "beta"):
        repo.write(f"{name}.py", f"def {name}():\n    pass\n")
    repo.commit()
    memory = tmp_path / "memory"
    memory.mkdir()
    checks = CitationChecks(tmp_path / "state", MemoryConfig)
    for name in ("alpha", "beta"):
        _remembered(memory, repo, checks, name, f"{name}.py")
    repo.write("alpha.py", "gone\n")
    api.add_rule(When(model=CLAUDE["recall"]), replies.text('["project_alpha.md"]'))
    cfg = dataclasses.replace(Config(), memory=MemoryConfig(recall_max=1))
    result = await recall(
        "deploy steps alpha beta",
        memory_dir=memory,
        llm=llm,
        cfg=cfg,
        clock=SystemClock(),
        checks=partial(checks.recalled, str(repo.root), memory),
    )
    assert result.method == "model", result.reason
    assert [(m.relative, m.verified) for m in result.memories] == [("project_beta.md", True)]
