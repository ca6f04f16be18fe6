"""Abstention through the real daemon and the real hook client (issue 36, item 1): a prompt
that nothing in the memory dir is relevant to gets nothing injected, and the daemon's log says
why at debug level; with a model, the selector is told it may choose none, and when it does,
nothing is injected either."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memd.memory.frontmatter import Frontmatter, render_document
from memd.memory.paths import memory_dir
from memd.memory.session_context import RECALL_MARK
from memd.testing.loopback_process import LoopbackProcess
from tests.daemon_harness import (
    Home,
    call,
    claude_hook,
    fake_home,
    read_log,
    start_memd,
    stop_memd,
    wait_for,
)

pytestmark = pytest.mark.slow

FACTS = (
    "Caroline passed her driving test last spring",
    "Caroline adopted a guinea pig named Oscar",
    "Caroline went to a pottery class with Melanie in May",
    "Melanie ran her first half marathon in the autumn",
    "Evan has a dog called Rex",
    "Evan likes jazz and plays the piano on Sundays",
)
TIMEOUT = "hook.timeout_ms=30000"
CODING = "fix the failing test in the parser module"
RELEVANT = "which pet did Caroline adopt?"


def write_facts(home: Home, cwd: Path) -> None:
    mdir = memory_dir(home.projects, cwd)
    mdir.mkdir(parents=True)
    for n, fact in enumerate(FACTS):
        meta = Frontmatter(name=f"fact {n}", description=fact, type="user")
        (mdir / f"fact_{n}.md").write_text(render_document(meta, fact + "\n"))


def prompt(home: Home, cwd: Path, text: str) -> str:
    """What the hook prints for a UserPromptSubmit of ``text`` (empty: nothing injected)."""
    done = claude_hook(home, cwd, "UserPromptSubmit", prompt=text)
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    if not done.stdout:
        return ""
    context: str = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    return context


def test_the_hook_injects_nothing_for_a_prompt_nothing_is_relevant_to(tmp_path: Path) -> None:
    cwd = tmp_path / "repo"
    cwd.mkdir()
    with fake_home(tmp_path) as home:
        write_facts(home, cwd)
        proc = start_memd(home)  # -v: memd's loggers at debug level
        try:
            assert prompt(home, cwd, CODING) == ""  # before: the driving-test memory came
            log = read_log(home)
            assert "injects nothing: lexical ranking: " in log  # no model, or still loading
            assert "nothing relevant enough: the best memory holds" in log
            recalled = prompt(home, cwd, RELEVANT)
            assert RECALL_MARK in recalled and "fact_1.md" in recalled
            answer = call(home, "recall", {"query": CODING, "cwd": str(cwd)})
            assert answer["memories"] == [] and "nothing relevant enough" in answer["reason"]
        finally:
            assert stop_memd(proc) == 0


def test_the_model_selector_may_choose_none_and_then_nothing_is_injected(
    tmp_path: Path,
) -> None:
    cwd = tmp_path / "repo"
    cwd.mkdir()
    selector = {
        "when": {"system_match": "You decide which saved memories"},
        "reply": {"text": "[]"},
    }
    with fake_home(tmp_path) as home, LoopbackProcess() as api:
        write_facts(home, cwd)
        api.add_script(json.dumps(selector) + "\n")
        home.env.update(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="test")
        home.env["MEMD_HOOK_TIMEOUT_MS"] = "30000"  # the hook client waits as long
        # Time enough for the model on a busy machine (else the lexical answer goes out).
        budget = ("memory.recall_model_budget_s=20", "memory.recall_timeout_s=25")
        proc = start_memd(home, *(a for b in budget for a in ("--set", b)), "--set", TIMEOUT)
        try:
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=30, what="the model")
            assert prompt(home, cwd, RELEVANT) == ""
            asked = [r for r in api.requests() if "You decide which saved memories" in str(r)]
            assert asked, "the selector was not asked"
            assert "Reply [] when nothing fits" in json.dumps(asked[-1])
            assert "injects nothing: chosen by" in read_log(home)
        finally:
            assert stop_memd(proc) == 0
