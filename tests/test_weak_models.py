"""The whole-answer protocol of weak models (issue 34): notes asked for as the whole new text,
memories as a list of operations, through the real openai SDK against a loopback
OpenAI-compatible server, as a local model is. No answer, however bad, loses or corrupts a
note or a memory, and none is retried at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.clock import FakeClock
from memd.errors import MalformedAnswer
from memd.llm.client import Backend, LLMReply, Usage
from memd.llm.failures import ParkJob, classify
from memd.llm.ledger import Ledger
from memd.llm.models import Route
from memd.memory.extract import ExtractSettings, extract_memories
from memd.memory.plan import Job
from memd.session import whole
from memd.session.extract import NotesJob, extract_notes, load_setup
from memd.session.notes import notes_path, read_notes
from memd.session.template import DEFAULT_TEMPLATE, Intact, check_skeleton
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.weak_model import WeakModel
from tests.session_support import TranscriptBuilder, settings_for, work_session


def route(llm: Backend, kind: str = "session_notes") -> Route:
    return Route(kind, "openai", llm, "qwen2.5-coder:7b", "whole", "test", priced=False)  # type: ignore[arg-type]


def notes_job(turns: int = 3, session: str = "sess-1") -> NotesJob:
    builder = TranscriptBuilder(session)
    work_session(builder, turns=turns, context=12_000)
    conv = builder.conversation()
    return NotesJob(session, "proj", tuple(conv.messages()), conv.context().tokens, None)


async def notes_once(llm: Backend, tmp: Path, ledger: Ledger, job: NotesJob) -> str | None:
    setup = load_setup(settings_for(tmp), route(llm))
    try:
        await extract_notes(llm, setup, job, ledger=ledger, clock=FakeClock())
    except MalformedAnswer:
        pass
    return read_notes(notes_path(tmp / "projects", "proj", job.session_id))


@pytest.mark.anyio
async def test_the_whole_notes_replace_the_file_when_they_keep_the_template(
    local: Backend, api: LoopbackAPI, tmp_path: Path
) -> None:
    api.set_handler(WeakModel(fault_every=0))
    ledger = Ledger.load(tmp_path / "state", FakeClock())
    text = await notes_once(local, tmp_path, ledger, notes_job())
    assert text is not None and "Step 1: working on the parser." in text
    assert isinstance(check_skeleton(text, DEFAULT_TEMPLATE), Intact)
    sent = api.requests[-1].body
    assert "tools" not in sent and sent["messages"][0]["role"] == "system"
    (row,) = ledger.statistics().by_backend
    assert row.name == "openai" and row.tokens.billed == 0 and row.tokens.input > 0


@pytest.mark.anyio
async def test_a_scripted_weak_model_never_loses_or_corrupts_the_notes(
    local: Backend, api: LoopbackAPI, tmp_path: Path
) -> None:
    model = WeakModel(fault_every=2)
    api.set_handler(model)
    ledger = Ledger.load(tmp_path / "state", FakeClock())
    kept: str | None = None
    for run in range(12):
        text = await notes_once(local, tmp_path, ledger, notes_job(turns=2 + run))
        assert text is not None and isinstance(check_skeleton(text, DEFAULT_TEMPLATE), Intact)
        if kept is not None:  # each good answer adds a line, a bad one changes nothing
            assert kept.count("Step ") <= text.count("Step ") <= kept.count("Step ") + 1
        kept = text
    assert set(model.faults) == {"cut_short", "wrong_sections", "invalid_json", "dropped"}
    assert kept is not None and kept.count("Step ") == 6  # the six good answers, all kept


def reply(text: str, stop: str = "end_turn") -> LLMReply:
    return LLMReply("m", "x", [{"type": "text", "text": text}], stop, Usage())


def test_an_answer_cut_short_or_without_its_tags_is_refused() -> None:
    with pytest.raises(MalformedAnswer, match="cut short"):
        whole.notes_of(reply("<notes>\n# Session Title\n</notes>", stop="max_tokens"))
    with pytest.raises(MalformedAnswer, match="no complete"):
        whole.notes_of(reply("<notes>\n# Session Title\n_x_\n"))
    assert whole.notes_of(reply("ok <notes>\nA\n</notes> bye")) == "A\n"


def filled(state: str, errors: str = "") -> str:
    text = DEFAULT_TEMPLATE.replace(
        "# Current State\n_What is being done right now, what is half-finished, and the very "
        "next step._\n",
        "# Current State\n_What is being done right now, what is half-finished, and the very "
        f"next step._\n{state}\n",
    )
    return text + (f"\n{errors}\n" if errors else "")


def test_the_checks_keep_template_budgets_and_what_the_notes_held() -> None:
    before = filled("Refactoring the parser; tests pass. " * 30)
    assert (
        whole.check_answer(
            before, filled("Parser done; next: docs."), DEFAULT_TEMPLATE, 2000, 12000
        )
        is not None
    )  # dropped most
    assert whole.check_answer(
        before, before.replace("# Worklog", "# Log"), DEFAULT_TEMPLATE, 2000, 12000
    )
    assert "emptied" in str(whole.check_answer(before, filled(""), DEFAULT_TEMPLATE, 2000, 12000))
    grown = filled("word " * 900)
    assert "budget" in str(whole.check_answer(before, grown, DEFAULT_TEMPLATE, 2000, 500))
    assert whole.check_answer(before, before + "more\n", DEFAULT_TEMPLATE, 2000, 12000) is None


@given(st.text(max_size=400))
@settings(max_examples=150, deadline=None)
def test_no_answer_whatever_it_says_breaks_the_notes(answer: str) -> None:
    before = filled("Refactoring the parser.")
    try:
        after = whole.notes_of(reply(answer))
    except MalformedAnswer:
        return
    if whole.check_answer(before, after, DEFAULT_TEMPLATE, 2000, 12000) is None:
        assert isinstance(check_skeleton(after, DEFAULT_TEMPLATE), Intact)
        assert "Refactoring" in after or "Current State" in after


# -- memories as operations --------------------------------------------------------------------


def memory_job() -> Job:
    builder = TranscriptBuilder("m1")
    builder.user("Please never mock the database in integration tests.")
    builder.assistant("Understood, I will use the real test database.")
    messages = tuple(builder.conversation().messages())
    return Job(new=messages, covered_uuid=builder.lines[-1]["uuid"])


async def extract_once(llm: Backend, memory_dir: Path, ledger: Ledger) -> None:
    settings = ExtractSettings(model="qwen2.5-coder:7b", max_turns=4, max_tokens=2048, timeout_s=30)
    await extract_memories(
        llm,
        settings,
        memory_job(),
        memory_dir=memory_dir,
        project="proj",
        session="m1",
        ledger=ledger,
        clock=FakeClock(),
        protocol="whole",
    )


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.mark.anyio
async def test_operations_write_typed_memories_and_their_index_lines(
    local: Backend, api: LoopbackAPI, tmp_path: Path
) -> None:
    api.set_handler(WeakModel(fault_every=0))
    memory = tmp_path / "memory"
    await extract_once(local, memory, Ledger.load(tmp_path / "state", FakeClock()))
    (topic,) = [p for p in memory.glob("*.md") if p.name != "MEMORY.md"]
    assert topic.name == "feedback_testing_rule_1.md"
    assert "type: feedback" in topic.read_text() and "real database" in topic.read_text()
    assert "(feedback_testing_rule_1.md)" in (memory / "MEMORY.md").read_text()
    assert "operations" in str(api.requests[-1].body["messages"][-1]["content"])


@pytest.mark.anyio
@pytest.mark.parametrize(
    "answer",
    [
        replies.text('{"operations": [{"op": "remember", "type": "feedback"'),  # invalid JSON
        replies.text('{"operations": [{"op": "remember"', stop_reason="max_tokens"),
        replies.text('{"ops": []}'),
        replies.text('{"operations": [{"op": "delete", "name": "x"}]}'),
        replies.text(
            '{"operations": [{"op": "remember", "type": "feedback", "name": "ok", '
            '"description": "d", "content": "fine"}, {"op": "remember", "type": "secret", '
            '"name": "../../etc/passwd", "description": "d", "content": "x"}]}'
        ),
    ],
    ids=["invalid-json", "cut-short", "wrong-shape", "not-allowed", "one-bad-of-two"],
)
async def test_a_bad_answer_changes_nothing_and_parks_the_job(
    local: Backend, api: LoopbackAPI, tmp_path: Path, answer: replies.Message
) -> None:
    memory = tmp_path / "memory"
    api.set_handler(WeakModel(fault_every=0))
    ledger = Ledger.load(tmp_path / "state", FakeClock())
    await extract_once(local, memory, ledger)
    before = snapshot(memory)
    api.set_handler(None)
    api.push(answer)
    with pytest.raises(MalformedAnswer) as info:
        await extract_once(local, memory, ledger)
    assert snapshot(memory) == before
    assert not (tmp_path / "etc").exists()
    assert isinstance(classify(info.value), ParkJob)  # tried again after a back-off, not at once


@pytest.mark.anyio
async def test_secrets_and_private_spans_never_reach_another_backend(
    local: Backend, api: LoopbackAPI, tmp_path: Path
) -> None:
    from tests.test_session_extract import SECRETS

    api.set_handler(WeakModel(fault_every=0))
    builder = TranscriptBuilder("sec")
    builder.user(
        f"Use {SECRETS['anthropic']} and <private>{SECRETS['private']}</private> for the "
        f"deploy; the db is postgres://admin:{SECRETS['url_password']}@db.internal/app, "
        f"AWS_ACCESS_KEY_ID={SECRETS['aws']} GITHUB_TOKEN={SECRETS['github']}\n"
        f"-----BEGIN RSA PRIVATE KEY-----\n{SECRETS['pem_body']}\n-----END RSA PRIVATE KEY-----"
    )
    builder.assistant("Noted; deploying now.", prompt_tokens=12_000)
    conv = builder.conversation()
    job = NotesJob("sec", "proj", tuple(conv.messages()), conv.context().tokens, None)
    ledger = Ledger.load(tmp_path / "state", FakeClock())
    await notes_once(local, tmp_path, ledger, job)
    memory_run = Job(new=tuple(conv.messages()), covered_uuid=builder.lines[-1]["uuid"])
    settings = ExtractSettings(model="m", max_turns=4, max_tokens=2048, timeout_s=30)
    await extract_memories(
        local,
        settings,
        memory_run,
        memory_dir=tmp_path / "memory",
        project="p",
        session="sec",
        ledger=ledger,
        clock=FakeClock(),
        protocol="whole",
    )
    sent = "\n".join(str(r.body) for r in api.requests)
    assert "deploy" in sent  # the conversation went, its secrets did not
    for name, secret in SECRETS.items():
        assert secret not in sent, name
