"""Recall (R-M6, R-M7) through the real SDK against the loopback Messages-API server."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from memd.clock import FakeClock, SystemClock
from memd.config import Config, MemoryConfig
from memd.llm.backends import CLAUDE
from memd.llm.client import LLM, Disabled
from memd.llm.guard import CostGuard
from memd.llm.ledger import Ledger
from memd.memory.freshness import RECALL_CAVEAT
from memd.memory.recall import readable_selection, recall
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_replies import When

DAY = 86_400.0
SECRET = "sk-ant-api03-" + "Q1w2E3r4T5y6U7i8O9p0" * 3
RECALL_MODEL = CLAUDE["recall"]

MEMORIES = {
    "feedback_testing.md": (
        "Integration tests use a real database",
        "Do not mock Postgres in integration tests; use make test-db",
        "feedback",
        "Why: mocked repositories hid a broken migration.\nHow: use the db fixture.",
        3,
    ),
    "project_deploy.md": (
        "Deploys go through the release train",
        "Production deploys happen on Tuesdays via the release train",
        "project",
        "Deploys are frozen on Fridays.",
        0,
    ),
    "reference_grafana.md": (
        "Grafana dashboards",
        "Where the latency dashboards live in Grafana",
        "reference",
        "Board: api-latency.",
        40,
    ),
    "user_role.md": (
        "The user is a backend engineer",
        "Backend engineer, new to the frontend code",
        "user",
        "Explain React idioms in backend terms.",
        1,
    ),
}


def write_memories(memory_dir: Path, now: float) -> None:
    memory_dir.mkdir(parents=True, exist_ok=True)
    for name, (title, description, kind, body, days) in MEMORIES.items():
        path = memory_dir / name
        path.write_text(
            f"---\nname: {title}\ndescription: {description}\ntype: {kind}\n---\n\n{body}\n"
        )
        stamp = now - days * DAY - 60.0
        os.utime(path, (stamp, stamp))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=time.time())


@pytest.fixture
def memory_dir(tmp_path: Path, clock: FakeClock) -> Path:
    directory = tmp_path / "memory"
    write_memories(directory, clock.now())
    return directory


def config(timeout_s: float = 3.0, model_budget_s: float | None = None) -> Config:
    """The whole recall budget is the model's unless ``model_budget_s`` says otherwise."""
    budget = timeout_s if model_budget_s is None else model_budget_s
    memory = MemoryConfig(recall_timeout_s=timeout_s, recall_model_budget_s=budget)
    return replace(Config(), memory=memory)


def selector_answer(api: LoopbackAPI, text: str) -> None:
    api.add_rule(When(model=RECALL_MODEL), replies.text(text))


def request_text(api: LoopbackAPI) -> str:
    return "\n".join(json.dumps(r.body) for r in api.requests)


@pytest.mark.anyio
async def test_the_model_chooses_and_results_carry_age_warning_and_content(
    api: LoopbackAPI, llm: LLM, memory_dir: Path, clock: FakeClock, tmp_path: Path
) -> None:
    selector_answer(api, 'Useful: ["feedback_testing.md", "project_deploy.md"]')
    ledger = Ledger.load(tmp_path / "state", clock)
    result = await recall(
        "how should I write the integration tests for the deploy job?",
        memory_dir=memory_dir,
        llm=llm,
        cfg=config(),
        clock=clock,
        ledger=ledger,
        project="proj",
        session="s1",
    )
    assert result.method == "model" and RECALL_MODEL in result.reason
    assert [m.relative for m in result.memories] == ["feedback_testing.md", "project_deploy.md"]
    old, new = result.memories
    assert old.age == "3 days ago" and old.age_days == 3
    assert "3 days" in old.warning and "file:line" in old.warning
    assert new.age == "today" and new.warning == ""
    assert old.type == "feedback" and old.name == "Integration tests use a real database"
    assert old.content.startswith("Why: mocked repositories") and not old.content_truncated
    assert old.mtime.endswith("Z") and old.path == str(memory_dir / "feedback_testing.md")
    assert result.caveat == RECALL_CAVEAT and result.candidates == 4
    body = api.requests[0].body
    assert body["model"] == RECALL_MODEL
    prompt = body["messages"][0]["content"]
    assert "- [feedback] feedback_testing.md (" in prompt and "integration tests" in prompt
    assert [(r.kind, r.project, r.session) for r in ledger.records()] == [("recall", "proj", "s1")]
    assert result.as_dict()["memories"][0]["age"] == "3 days ago"


@pytest.mark.anyio
async def test_a_memory_one_day_old_has_no_warning(
    api: LoopbackAPI, llm: LLM, memory_dir: Path, clock: FakeClock
) -> None:
    selector_answer(api, '["user_role.md"]')
    result = await recall(
        "explain this component", memory_dir=memory_dir, llm=llm, cfg=config(), clock=clock
    )
    assert [(m.age, m.warning) for m in result.memories] == [("yesterday", "")]


@pytest.mark.anyio
async def test_surfaced_memories_are_not_offered_and_not_returned(
    api: LoopbackAPI, llm: LLM, memory_dir: Path, clock: FakeClock
) -> None:
    selector_answer(api, '["feedback_testing.md", "project_deploy.md"]')
    result = await recall(
        "integration tests and deploys",
        memory_dir=memory_dir,
        llm=llm,
        cfg=config(),
        clock=clock,
        already_surfaced=[str(memory_dir / "feedback_testing.md")],
    )
    assert [m.relative for m in result.memories] == ["project_deploy.md"]
    prompt = api.requests[0].body["messages"][0]["content"]
    assert "feedback_testing.md" not in prompt and result.candidates == 3


@pytest.mark.anyio
async def test_an_empty_answer_is_a_valid_choice_but_prose_is_not(
    api: LoopbackAPI, llm: LLM, memory_dir: Path, clock: FakeClock
) -> None:
    api.push(replies.text("[]"), replies.text("Hmm, maybe the deploy one could help?"))
    query = "how do deploys work"
    first = await recall(query, memory_dir=memory_dir, llm=llm, cfg=config(), clock=clock)
    assert (first.method, first.memories) == ("model", ())
    second = await recall(query, memory_dir=memory_dir, llm=llm, cfg=config(), clock=clock)
    assert second.method == "lexical" and "readable" in second.reason
    assert second.memories[0].relative == "project_deploy.md"
    assert readable_selection("None of these fit.") and not readable_selection("hmm")


@pytest.mark.anyio
async def test_without_a_key_the_lexical_ranker_answers(memory_dir: Path, clock: FakeClock) -> None:
    for llm, why in ((Disabled("no API key: set it"), "no API key"), (None, "loading")):
        result = await recall(
            "mock the database in integration tests?",
            memory_dir=memory_dir,
            llm=llm,
            cfg=config(),
            clock=clock,
        )
        assert result.method == "lexical" and why in result.reason
        assert result.memories[0].relative == "feedback_testing.md"
        assert result.memories[0].age == "3 days ago" and result.memories[0].warning


@pytest.mark.anyio
async def test_a_failing_server_falls_back_and_the_guard_holds_off_later_recalls(
    api: LoopbackAPI, llm: LLM, memory_dir: Path, clock: FakeClock, tmp_path: Path
) -> None:
    api.fail_next(1, status=500)
    ledger = Ledger.load(tmp_path / "state", clock)
    guard = CostGuard(Config().budget, ledger, clock)
    query = "where are the grafana latency dashboards"
    first = await recall(
        query, memory_dir=memory_dir, llm=llm, cfg=config(), clock=clock, guard=guard
    )
    assert first.method == "lexical" and "failed" in first.reason
    assert first.memories[0].relative == "reference_grafana.md"
    second = await recall(
        query, memory_dir=memory_dir, llm=llm, cfg=config(), clock=clock, guard=guard
    )
    assert second.method == "lexical" and "holding off" in second.reason
    assert len(api.requests) == 1
    clock.advance(3_600.0)
    selector_answer(api, '["reference_grafana.md"]')
    third = await recall(
        query, memory_dir=memory_dir, llm=llm, cfg=config(), clock=clock, guard=guard
    )
    assert third.method == "model" and len(api.requests) == 2


@pytest.mark.anyio
async def test_a_server_slower_than_the_budget_is_cut_off_within_the_timeout(
    api: LoopbackAPI, llm: LLM, memory_dir: Path
) -> None:
    api.delay_next(1, seconds=30.0)
    clock = SystemClock()
    started = time.monotonic()
    with anyio.fail_after(1.0):
        result = await recall(
            "postgres integration tests",
            memory_dir=memory_dir,
            llm=llm,
            cfg=config(timeout_s=1.0),
            clock=clock,
        )
    assert time.monotonic() - started < 1.0
    assert result.method == "lexical" and "did not answer" in result.reason
    assert result.memories[0].relative == "feedback_testing.md"


@pytest.mark.anyio
async def test_the_model_gets_only_its_own_budget_then_the_lexical_answer_goes_out(
    api: LoopbackAPI, llm: LLM, memory_dir: Path
) -> None:
    """The prompt path stays fast: a slow model costs ``recall_model_budget_s``, not the
    whole recall timeout."""
    api.delay_next(1, seconds=30.0)
    started = time.monotonic()
    with anyio.fail_after(2.5):
        result = await recall(
            "postgres integration tests",
            memory_dir=memory_dir,
            llm=llm,
            cfg=config(timeout_s=10.0, model_budget_s=0.3),
            clock=SystemClock(),
        )
    assert time.monotonic() - started < 2.5  # a guard; bench/recall.py measures it
    assert result.method == "lexical" and "within 0.3 s" in result.reason
    assert result.memories[0].relative == "feedback_testing.md"


@pytest.mark.anyio
async def test_private_spans_and_secrets_never_reach_the_model_or_the_result(
    api: LoopbackAPI, llm: LLM, memory_dir: Path, clock: FakeClock
) -> None:
    leaky = memory_dir / "reference_tokens.md"
    leaky.write_text(
        "---\nname: API access\ndescription: the staging key is "
        f"{SECRET}\ntype: reference\n---\n\nUse {SECRET} <private>my pin is 4711</private>.\n"
    )
    selector_answer(api, '["reference_tokens.md"]')
    result = await recall(
        f"staging api access <private>my home address</private> token {SECRET}",
        memory_dir=memory_dir,
        llm=llm,
        cfg=config(),
        clock=clock,
    )
    sent = request_text(api)
    for hidden in (SECRET, "home address"):
        assert hidden not in sent
    (memory,) = result.memories
    assert SECRET not in memory.content + memory.description and "4711" not in memory.content


@pytest.mark.anyio
async def test_reference_notes_on_tools_in_use_are_dropped_even_if_the_model_picks_them(
    api: LoopbackAPI, llm: LLM, memory_dir: Path, clock: FakeClock
) -> None:
    (memory_dir / "reference_gh_cli.md").write_text(
        "---\nname: gh cli usage\ndescription: How to use the gh cli for pull requests\n"
        "type: reference\n---\n\ngh pr create --fill\n"
    )
    selector_answer(api, '["reference_gh_cli.md", "project_deploy.md"]')
    result = await recall(
        "open a pull request for the deploy change",
        memory_dir=memory_dir,
        llm=llm,
        cfg=config(),
        clock=clock,
        recent_tools=["gh"],
    )
    assert [m.relative for m in result.memories] == ["project_deploy.md"]
    assert "Tools in active use: gh" in api.requests[0].body["messages"][0]["content"]


@pytest.mark.anyio
async def test_nothing_to_choose_from_answers_at_once(tmp_path: Path, clock: FakeClock) -> None:
    missing = await recall(
        "anything", memory_dir=tmp_path / "none", llm=None, cfg=config(), clock=clock
    )
    assert (missing.method, missing.memories, missing.reason) == (
        "none",
        (),
        "no memories to choose from",
    )
    empty = await recall("  ", memory_dir=tmp_path, llm=None, cfg=config(), clock=clock)
    assert empty.method == "none" and "empty" in empty.reason
