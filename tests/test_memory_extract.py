"""Memory extraction (R-M3): planning, the request, and runs through the real SDK against the
loopback Messages-API server (the scripted agent writes with Write/Edit tool calls)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from memd.clock import FakeClock
from memd.errors import LLMError
from memd.llm.client import LLM
from memd.llm.ledger import Ledger
from memd.memory import prompts
from memd.memory.cursors import CursorStore, SessionCursor
from memd.memory.extract import ExtractSettings, extract_memories
from memd.memory.index import parse_index
from memd.memory.plan import Job, Skip, memory_write, plan_extraction
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_replies import Reply, When
from memd.transcript.messages import ApiMessage

MODEL = "claude-sonnet-4-6"
SECRETS = {
    "anthropic": "sk-ant-api03-" + "A1b2C3d4E5f6G7h8I9j0" * 3,
    "github": "ghp_" + "x1Y2z3W4v5U6t7S8r9Q0" * 2,
    "url_password": "hunter2-very-secret",
}
PRIVATE = "my bank pin is 8642"


def msg(role: str, *blocks: dict[str, Any], uuid: str) -> ApiMessage:
    return ApiMessage("user" if role == "user" else "assistant", list(blocks), (uuid,))


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def write_call(path: str, content: str = "x") -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": "t1",
        "name": "Write",
        "input": {"file_path": path, "content": content},
    }


def turn(n: int, prompt: str, answer: str) -> list[ApiMessage]:
    return [msg("user", text(prompt), uuid=f"u{n}"), msg("assistant", text(answer), uuid=f"a{n}")]


FEEDBACK = (
    "---\nname: Real database in integration tests\n"
    "description: Never mock Postgres in integration tests; use make test-db\n"
    "type: feedback\n---\n\nWhy: mocks hid a broken migration.\n"
)


# ---------------------------------------------------------------------------------------------
# Planning and the request (pure)


def test_the_new_part_follows_the_cursor() -> None:
    messages = turn(1, "hi", "hello") + turn(2, "never mock the db", "noted")
    plan = plan_extraction(messages, "a1", ["/m"])
    assert isinstance(plan, Job) and [m.last_uuid for m in plan.new] == ["u2", "a2"]
    assert plan.covered_uuid == "a2"
    assert isinstance(plan_extraction(messages, None, ["/m"]), Job)
    assert plan_extraction(messages, "a2", ["/m"]) == Skip("nothing new since the last extraction")
    unanswered = [*messages, msg("user", text("and?"), uuid="u3")]
    assert plan_extraction(unanswered, "a2", ["/m"]) == Skip("the turn has no answer yet")
    gone = plan_extraction(messages, "compacted-away", ["/m"])
    assert isinstance(gone, Job) and len(gone.new) == 4


def test_a_turn_where_the_agent_wrote_memories_itself_is_skipped_and_covered() -> None:
    memory = "/home/u/.claude/projects/-p/memory"
    wrote = [
        msg("user", text("remember that we deploy on Tuesdays"), uuid="u1"),
        msg("assistant", write_call(f"{memory}/project_deploy.md"), uuid="a1"),
        msg("user", {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}, uuid="r1"),
        msg("assistant", text("Saved."), uuid="a2"),
    ]
    plan = plan_extraction(wrote, None, ["/elsewhere", memory + "/"])
    assert isinstance(plan, Skip) and plan.covered_uuid == "a2"
    assert "project_deploy.md" in plan.reason
    edit = {
        "type": "tool_use",
        "id": "t",
        "name": "Edit",
        "input": {"file_path": f"{memory}/../x.md"},
    }
    assert memory_write([msg("assistant", edit, uuid="a")], [memory]) is None
    outside = [msg("assistant", write_call("/home/u/src/memory_notes.md"), uuid="a")]
    assert memory_write(outside, [memory]) is None
    read = {"type": "tool_use", "id": "t", "name": "Read", "input": {"file_path": f"{memory}/x.md"}}
    assert memory_write([msg("assistant", read, uuid="a")], [memory]) is None


def test_the_request_is_redacted_cut_and_keeps_the_newest_messages() -> None:
    secret_turn = [
        msg("user", text(f"token {SECRETS['anthropic']} <private>{PRIVATE}</private>"), uuid="u1"),
        msg(
            "assistant",
            {"type": "tool_use", "id": "t", "name": "Bash", "input": {"command": "cat big.log"}},
            uuid="a1",
        ),
        msg(
            "user",
            {"type": "tool_result", "tool_use_id": "t", "content": "LOG " * 5_000},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"},
            },
            uuid="r1",
        ),
        msg("assistant", text("The log is fine."), uuid="a2"),
    ]
    request = prompts.build_request(
        secret_turn,
        memory_dir="/m",
        manifest="- [user] user_role.md (2025-01-01T00:00:00.000Z): role",
        index="- [Role](user_role.md) — the user's role",
        today="2025-06-01",
    )
    body = json.dumps(request)
    assert SECRETS["anthropic"] not in body and PRIVATE not in body
    assert "[image]" in body and "iVBOR" not in body and "characters left out" in body
    assert "2025-06-01" in body and "user_role.md" in body and "/m/MEMORY.md" in body
    many = [m for n in range(40) for m in turn(n, f"question {n} " + "x" * 200, f"answer {n}")]
    text_out = prompts.render_new(many, max_chars=2_000)
    assert "answer 39" in text_out and "question 0 " not in text_out
    assert "older message(s) of this part were left out" in text_out


def test_the_system_prompt_states_the_rules() -> None:
    system = prompts.system_prompt(max_turns=4)
    for needle in ("user", "feedback", "project", "reference", "git history", "secrets"):
        assert needle in system
    assert "at most 4 turns" in system and "single turn" in system


# ---------------------------------------------------------------------------------------------
# Runs against the loopback server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ledger(tmp_path: Path, clock: FakeClock) -> Ledger:
    return Ledger.load(tmp_path / "state", clock)


SETTINGS = ExtractSettings(model=MODEL, max_turns=4, max_tokens=1_024, timeout_s=30.0)


def agent(
    api: LoopbackAPI, *calls: tuple[str, Mapping[str, Any]], then: Reply | None = None
) -> None:
    """The scripted extraction agent: ``calls`` in its first turn, then ``then``."""
    api.add_rule(When(model=MODEL, turn="first"), replies.tool_uses(list(calls)))
    api.add_rule(When(model=MODEL, turn="after_tool"), then or replies.text("Saved one memory."))


async def run(llm: LLM, job: Job, memory_dir: Path, ledger: Ledger, clock: FakeClock) -> Any:
    return await extract_memories(
        llm,
        SETTINGS,
        job,
        memory_dir=memory_dir,
        project="proj",
        session="s1",
        ledger=ledger,
        clock=clock,
    )


def job_of(messages: Sequence[ApiMessage]) -> Job:
    return Job(tuple(messages), messages[-1].last_uuid)


FEEDBACK_TURN = turn(1, "Please never mock the database in integration tests.", "Understood.")


@pytest.mark.anyio
async def test_a_run_writes_a_topic_file_and_the_index(
    api: LoopbackAPI, llm: LLM, ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    memory = tmp_path / "projects" / "-p" / "memory"
    index_line = (
        "- [Real database in integration tests](feedback_testing.md) — never mock Postgres\n"
    )
    agent(
        api,
        ("Write", {"file_path": "feedback_testing.md", "content": FEEDBACK}),
        ("Write", {"file_path": "MEMORY.md", "content": index_line}),
    )
    result = await run(llm, job_of(FEEDBACK_TURN), memory, ledger, clock)
    assert result.outcome == "completed" and result.turns == 2 and result.denied_calls == 0
    assert (memory / "feedback_testing.md").read_text() == FEEDBACK
    assert (memory / "MEMORY.md").read_text() == index_line and result.indexed == ()
    assert {Path(p).name for p in result.files_touched} == {"feedback_testing.md", "MEMORY.md"}
    first = api.requests[0].body
    assert {t["name"] for t in first["tools"]} == {"Read", "Grep", "Glob", "Shell", "Edit", "Write"}
    assert "never mock the database" in json.dumps(first["messages"])
    assert [r.kind for r in ledger.records()] == ["memory_extract", "memory_extract"]


@pytest.mark.anyio
async def test_a_run_updates_an_existing_memory_and_indexes_a_forgotten_file(
    api: LoopbackAPI, llm: LLM, ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    (memory / "feedback_testing.md").write_text(FEEDBACK)
    (memory / "MEMORY.md").write_text("- [Real DB](feedback_testing.md) — no mocks\n")
    deploy = (
        "---\nname: Deploy day\ndescription: Deploys happen on Tuesdays\ntype: project\n"
        "---\n\nTue.\n"
    )
    agent(
        api,
        (
            "Edit",
            {
                "file_path": "feedback_testing.md",
                "old_string": "broken migration.",
                "new_string": "broken migration in 2025-03.",
            },
        ),
        ("Write", {"file_path": "project_deploy.md", "content": deploy}),
    )
    result = await run(llm, job_of(FEEDBACK_TURN), memory, ledger, clock)
    assert "broken migration in 2025-03." in (memory / "feedback_testing.md").read_text()
    assert result.indexed == ("project_deploy.md",)
    entries = parse_index((memory / "MEMORY.md").read_text())
    assert [(e.file, e.title) for e in entries] == [
        ("feedback_testing.md", "Real DB"),
        ("project_deploy.md", "Deploy day"),
    ]
    prompt = json.dumps(api.requests[0].body["messages"])
    assert "feedback_testing.md" in prompt and "no mocks" in prompt  # manifest and index shown


@pytest.mark.anyio
async def test_secrets_and_private_spans_never_reach_requests_or_memory_files(
    api: LoopbackAPI, llm: LLM, ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    hand_written = "---\nname: Old\ndescription: old notes\ntype: reference\n---\n\n"
    (memory / "reference_old.md").write_text(hand_written + f"deploy key {SECRETS['github']}\n")
    echoed = (
        "---\nname: Access\ndescription: staging access\ntype: reference\n---\n\n"
        f"key {SECRETS['anthropic']} <private>the agent echoed this</private>\n"
    )
    agent(
        api,
        ("Read", {"file_path": "reference_old.md"}),
        ("Write", {"file_path": "reference_access.md", "content": echoed}),
    )
    conversation = [
        msg("user", text(f"token {SECRETS['github']} <private>{PRIVATE}</private>"), uuid="u1"),
        msg("assistant", text(f"https://admin:{SECRETS['url_password']}@db.internal/x"), uuid="a1"),
    ]
    result = await run(llm, job_of(conversation), memory, ledger, clock)
    sent = "\n".join(json.dumps(r.body) for r in api.requests)
    for secret in (SECRETS["github"], SECRETS["url_password"], PRIVATE):
        assert secret not in sent  # neither from the conversation nor from the Read
    assert "[REDACTED:github_token]" in sent
    written = (memory / "reference_access.md").read_text()
    assert SECRETS["anthropic"] not in written and "agent echoed" not in written
    assert "[REDACTED:anthropic_key]" in written and "[private]" in written
    assert result.indexed == ("reference_access.md",)


@pytest.mark.anyio
async def test_writes_outside_the_memory_dir_are_denied(
    api: LoopbackAPI, llm: LLM, ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    memory = tmp_path / "memory"
    outside = tmp_path / "src" / "app.py"
    agent(
        api,
        ("Write", {"file_path": str(outside), "content": "pwned"}),
        ("Write", {"file_path": "../escape.md", "content": "x"}),
    )
    result = await run(llm, job_of(FEEDBACK_TURN), memory, ledger, clock)
    assert result.denied_calls == 2 and result.files_touched == ()
    assert not outside.exists() and not (tmp_path / "escape.md").exists()


@pytest.mark.anyio
async def test_a_failed_run_is_rolled_back(
    api: LoopbackAPI, llm: LLM, ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    (memory / "feedback_testing.md").write_text(FEEDBACK)
    agent(
        api,
        ("Write", {"file_path": "feedback_testing.md", "content": "half-done"}),
        ("Write", {"file_path": "project_new.md", "content": "half-done"}),
        then=replies.server_error(500),
    )
    with pytest.raises(LLMError):
        await run(llm, job_of(FEEDBACK_TURN), memory, ledger, clock)
    assert sorted(p.name for p in memory.iterdir()) == ["feedback_testing.md"]
    assert (memory / "feedback_testing.md").read_text() == FEEDBACK


# ---------------------------------------------------------------------------------------------
# Cursors


@pytest.mark.anyio
async def test_cursors_survive_a_reload_and_a_corrupt_file_is_moved_aside(tmp_path: Path) -> None:
    store = CursorStore.load(tmp_path)
    base = SessionCursor("s1", "-p", "/t/s1.jsonl", "/p", "/m")
    await store.update(base, pending=True)
    await store.update(base, cursor="a2", pending=False)
    await store.update(SessionCursor("s2", "-p", "/t/s2.jsonl", "/p", "/m"), pending=True)
    again = CursorStore.load(tmp_path)
    assert again.get("s1") == SessionCursor("s1", "-p", "/t/s1.jsonl", "/p", "/m", "a2", False)
    assert [r.session_id for r in again.pending()] == ["s2"]
    (tmp_path / "memory-extraction.json").write_text("{broken")
    assert CursorStore.load(tmp_path).get("s1") is None
    assert (tmp_path / "memory-extraction.json.corrupt").exists()
