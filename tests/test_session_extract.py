"""One notes extraction, through the real SDK against the loopback Messages-API server."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from memd.clock import FakeClock
from memd.errors import AgentError, BadRequest
from memd.llm.client import LLM
from memd.llm.ledger import Ledger
from memd.session import extract
from memd.session.extract import ChunkDone, NotesJob, NotesSettings, extract_notes, load_setup
from memd.session.notes import notes_path
from memd.session.template import DEFAULT_TEMPLATE, Intact, check_skeleton
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_replies import Reply
from tests.session_support import (
    CURRENT_STATE_LINE,
    TranscriptBuilder,
    edit_current_state,
    notes_path_in,
    request_texts,
    scripted_agent,
    settings_for,
    work_session,
)

SECRETS = {
    "anthropic": "sk-ant-api03-" + "A1b2C3d4E5f6G7h8I9j0" * 3,
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "github": "ghp_" + "x1Y2z3W4v5U6t7S8r9Q0" * 2,
    "url_password": "hunter2-very-secret",
    "pem_body": "MIIEowIBAAKCAQEA7xq1vjS0EXAMPLEKEYBODY",
    "private": "the launch codes are 0000",
}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ledger(tmp_path: Path, clock: FakeClock) -> Ledger:
    return Ledger.load(tmp_path / "state", clock)


def job_for(builder: TranscriptBuilder, cursor: str | None = None) -> NotesJob:
    conv = builder.conversation()
    return NotesJob(
        builder.session_id, "proj", tuple(conv.messages()), conv.context().tokens, cursor
    )


def session_builder(turns: int = 3) -> TranscriptBuilder:
    builder = TranscriptBuilder()
    work_session(builder, turns=turns, context=12_000)
    return builder


async def run(
    llm: LLM,
    settings: NotesSettings,
    job: NotesJob,
    ledger: Ledger,
    clock: FakeClock,
) -> tuple[extract.Extracted, list[ChunkDone]]:
    chunks: list[ChunkDone] = []

    async def on_chunk(done: ChunkDone) -> None:
        chunks.append(done)

    setup = load_setup(settings)
    result = await extract_notes(llm, setup, job, ledger=ledger, clock=clock, on_chunk=on_chunk)
    return result, chunks


@pytest.mark.anyio
async def test_extraction_creates_the_notes_and_records_the_covered_message(
    api: LoopbackAPI, llm: LLM, ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    api.set_handler(scripted_agent(edit_current_state("Refactoring the parser, step 3 next.")))
    builder = session_builder()
    settings = settings_for(tmp_path)
    result, chunks = await run(llm, settings, job_for(builder), ledger, clock)

    path = notes_path(tmp_path / "projects", "proj", builder.session_id)
    assert result.notes_path == path and result.created
    text = path.read_text()
    assert "Refactoring the parser, step 3 next." in text
    assert check_skeleton(text, DEFAULT_TEMPLATE) == Intact()
    last = builder.lines[-1]["uuid"]
    assert result.covered_uuid == last and result.anchor_uuid == last
    assert [c.covered_uuid for c in chunks] == [last]
    first = api.requests[0].body
    assert [t["name"] for t in first["tools"]] == ["Edit"]
    assert notes_path_in(first) == str(path)
    assert [r.kind for r in ledger.records()] == ["session_notes", "session_notes"]


@pytest.mark.anyio
async def test_edit_aimed_at_another_file_is_denied_and_changes_nothing(
    api: LoopbackAPI, llm: LLM, ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    victim = tmp_path / "projects" / "proj" / "important.py"
    victim.parent.mkdir(parents=True)
    victim.write_text("SECRET_SAUCE = 1\n")

    def first(body: Mapping[str, Any]) -> Reply:
        args = {"file_path": str(victim), "old_string": "SECRET_SAUCE = 1", "new_string": "x"}
        return replies.tool_use("Edit", args)

    api.set_handler(scripted_agent(first, then="I was not allowed to edit that file."))
    builder = session_builder()
    await run(llm, settings_for(tmp_path), job_for(builder), ledger, clock)

    assert victim.read_text() == "SECRET_SAUCE = 1\n"
    path = notes_path(tmp_path / "projects", "proj", builder.session_id)
    assert path.read_text() == DEFAULT_TEMPLATE
    answer = api.requests[1].body["messages"][-1]["content"][0]
    assert answer["type"] == "tool_result" and answer.get("is_error") is True
    assert str(path) in json.dumps(answer)  # the refusal names the one allowed file


@pytest.mark.anyio
async def test_a_non_matching_old_string_is_an_error_the_model_recovers_from(
    api: LoopbackAPI, llm: LLM, ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    good = edit_current_state("Recovered after a bad edit.")
    turns: list[str] = []

    def handle(body: dict[str, Any]) -> Reply | None:
        turns.append("x")
        if len(turns) == 1:
            bad = {
                "file_path": notes_path_in(body),
                "old_string": "text that is not in the notes",
                "new_string": "whatever",
            }
            return replies.tool_use("Edit", bad)
        if len(turns) == 2:
            result = body["messages"][-1]["content"][0]
            assert result.get("is_error") is True
            return good(body)
        return replies.text("Done.")

    api.set_handler(handle)
    builder = session_builder()
    await run(llm, settings_for(tmp_path), job_for(builder), ledger, clock)
    path = notes_path(tmp_path / "projects", "proj", builder.session_id)
    assert "Recovered after a bad edit." in path.read_text()
    assert len(api.requests) == 3


@pytest.mark.anyio
async def test_a_changed_header_or_description_is_undone(
    api: LoopbackAPI, llm: LLM, ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    def first(body: Mapping[str, Any]) -> Reply:
        args = {
            "file_path": notes_path_in(body),
            "old_string": CURRENT_STATE_LINE,
            "new_string": "_My own description_\nand some work",
        }
        return replies.tool_use("Edit", args)

    api.set_handler(scripted_agent(first))
    builder = session_builder()
    with pytest.raises(AgentError, match="template"):
        await run(llm, settings_for(tmp_path), job_for(builder), ledger, clock)
    path = notes_path(tmp_path / "projects", "proj", builder.session_id)
    assert path.read_text() == DEFAULT_TEMPLATE


@pytest.mark.anyio
async def test_a_failed_run_puts_the_previous_notes_back(
    api: LoopbackAPI, llm: LLM, ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    def handle(body: dict[str, Any]) -> Reply | None:
        if len(api.requests) == 0:
            return edit_current_state("half-done work")(body)
        return replies.api_error(400, "something about the request was wrong")

    api.set_handler(handle)
    builder = session_builder()
    with pytest.raises(BadRequest):
        await run(llm, settings_for(tmp_path), job_for(builder), ledger, clock)
    path = notes_path(tmp_path / "projects", "proj", builder.session_id)
    assert path.read_text() == DEFAULT_TEMPLATE


@pytest.mark.anyio
async def test_a_turn_waiting_for_a_tool_result_is_not_covered_yet(
    api: LoopbackAPI, llm: LLM, ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    """The conversation holds back a response in progress (issue 9 item 6): the notes cover
    what came before it, and that is a safe anchor."""
    api.set_handler(scripted_agent(edit_current_state("Running the tests.")))
    builder = session_builder()
    before = [line for line in builder.lines if line["type"] in ("user", "assistant")][-1]["uuid"]
    pending, _ = builder.assistant("Running the tests.", (("Bash", {"command": "pytest"}),))
    result, _ = await run(llm, settings_for(tmp_path), job_for(builder), ledger, clock)
    assert result.covered_uuid == before != pending
    assert result.anchor_uuid == before


@pytest.mark.anyio
@pytest.mark.parametrize("strategy", ["delta", "full"])
async def test_secrets_and_private_spans_never_reach_a_request_or_the_notes(
    strategy: str,
    api: LoopbackAPI,
    llm: LLM,
    ledger: Ledger,
    clock: FakeClock,
    tmp_path: Path,
) -> None:
    builder = TranscriptBuilder()
    builder.user(
        f"My key is {SECRETS['anthropic']} and <private>{SECRETS['private']}</private>."
        f" The db is postgres://admin:{SECRETS['url_password']}@db.internal/app"
    )
    _, ids = builder.assistant("Reading the env file.", (("Read", {"file_path": ".env"}),))
    builder.results(
        ids,
        f"AWS_ACCESS_KEY_ID={SECRETS['aws']}\nGITHUB_TOKEN={SECRETS['github']}\n"
        f"-----BEGIN RSA PRIVATE KEY-----\n{SECRETS['pem_body']}\n-----END RSA PRIVATE KEY-----",
    )
    builder.assistant("Found the credentials.", prompt_tokens=12_000)
    # The model tries to write a secret into the notes; the file must not keep it.
    api.set_handler(scripted_agent(edit_current_state(f"Use key {SECRETS['anthropic']}.")))
    settings = settings_for(tmp_path, strategy=strategy)
    await run(llm, settings, job_for(builder), ledger, clock)

    notes = notes_path(tmp_path / "projects", "proj", builder.session_id).read_text()
    first = request_texts([api.requests[0].body])
    # Turn 2 carries the model's own Edit back to it (the fake model "knew" the key); apart
    # from that echo, nothing memd sent may hold a secret.
    later = request_texts([r.body for r in api.requests[1:]])
    for name, secret in SECRETS.items():
        assert secret not in notes, name
        assert secret not in first, name
        if name != "anthropic":
            assert secret not in later, name
    assert "[REDACTED:anthropic_key]" in notes


@pytest.mark.anyio
async def test_user_template_and_prompt_replace_the_defaults(
    api: LoopbackAPI, llm: LLM, ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    config_dir = tmp_path / "claude" / "session-memory" / "config"
    config_dir.mkdir(parents=True)
    template = "# Goal\n_What we are after._\n\n# Done\n_What is finished._\n"
    (config_dir / "template.md").write_text(template)
    (config_dir / "prompt.md").write_text(
        "CUSTOM PROMPT. The notes file is {{notesPath}}. Notes:\n{{currentNotes}}\nEND"
    )

    def first(body: Mapping[str, Any]) -> Reply:
        args = {
            "file_path": notes_path_in(body),
            "old_string": "_What we are after._\n",
            "new_string": "_What we are after._\nA faster parser.\n",
        }
        return replies.tool_use("Edit", args)

    api.set_handler(scripted_agent(first))
    builder = session_builder()
    await run(llm, settings_for(tmp_path), job_for(builder), ledger, clock)

    path = notes_path(tmp_path / "projects", "proj", builder.session_id)
    assert path.read_text() == template.replace("after._\n", "after._\nA faster parser.\n", 1)
    prompt = replies.last_user_message(api.requests[0].body)["content"][-1]["text"]
    assert prompt == f"CUSTOM PROMPT. The notes file is {path}. Notes:\n{template}\nEND"


def oversize_notes(section: str, words: int) -> str:
    header = f"# {section}\n"
    start = DEFAULT_TEMPLATE.index(header)
    line_end = DEFAULT_TEMPLATE.index("\n", start + len(header)) + 1
    filler = "parser tokenizer refactor " * words
    return DEFAULT_TEMPLATE[:line_end] + filler + "\n" + DEFAULT_TEMPLATE[line_end:]


@pytest.mark.anyio
async def test_the_prompt_names_oversize_sections(
    api: LoopbackAPI, llm: LLM, ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    builder = session_builder()
    path = notes_path(tmp_path / "projects", "proj", builder.session_id)
    path.parent.mkdir(parents=True)
    path.write_text(oversize_notes("Worklog", 1_000))  # ~3,000 tokens in one section
    api.set_handler(scripted_agent(edit_current_state("Trimming the worklog.")))
    await run(llm, settings_for(tmp_path), job_for(builder), ledger, clock)
    prompt = replies.last_user_message(api.requests[0].body)["content"][-1]["text"]
    tail = prompt[prompt.index("</current_notes>") :]
    assert '"Worklog"' in tail and "2000-token limit per section" in tail
    assert "URGENT" not in tail


@pytest.mark.anyio
async def test_over_the_total_the_prompt_demands_a_hard_cut(
    api: LoopbackAPI, llm: LLM, ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    builder = session_builder()
    path = notes_path(tmp_path / "projects", "proj", builder.session_id)
    path.parent.mkdir(parents=True)
    path.write_text(oversize_notes("Learnings", 5_000))  # ~15,000 tokens
    api.set_handler(scripted_agent(edit_current_state("Cutting the notes down.")))
    await run(llm, settings_for(tmp_path), job_for(builder), ledger, clock)
    prompt = replies.last_user_message(api.requests[0].body)["content"][-1]["text"]
    tail = prompt[prompt.index("</current_notes>") :]
    assert "URGENT" in tail and "12000-token limit" in tail
    assert '"Current State" and "Errors & Corrections"' in tail


@pytest.mark.anyio
async def test_the_full_strategy_sends_a_valid_fork_of_the_conversation(
    api: LoopbackAPI, llm: LLM, ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    builder = session_builder()
    builder.lines[1]["message"]["content"].insert(
        0, {"type": "thinking", "thinking": "private reasoning", "signature": "sig"}
    )
    builder.assistant("Running the tests.", (("Bash", {"command": "pytest"}),))
    api.set_handler(scripted_agent(edit_current_state("Tests are running.")))
    await run(llm, settings_for(tmp_path, strategy="full"), job_for(builder), ledger, clock)
    body = api.requests[0].body  # the loopback answers 400 to anything the API would refuse
    assert api.requests[0].status == 200
    assert len(body["messages"]) >= 11  # the response waiting for its tool result is held back
    assert "private reasoning" not in request_texts([body])


@pytest.mark.anyio
async def test_a_deleted_notes_file_is_rebuilt_from_the_whole_conversation(
    api: LoopbackAPI, llm: LLM, ledger: Ledger, clock: FakeClock, tmp_path: Path
) -> None:
    api.set_handler(scripted_agent(edit_current_state("Rebuilt.")))
    builder = session_builder()
    cursor = builder.lines[-3]["uuid"]  # the notes had seen all but the last turn
    await run(llm, settings_for(tmp_path), job_for(builder, cursor), ledger, clock)
    sent = replies.message_text(api.requests[0].body["messages"][0])
    assert "Step 0:" in sent  # the file was missing, so nothing counts as seen
    api.reset()
    api.set_handler(scripted_agent(edit_current_state("Updated.")))
    await run(llm, settings_for(tmp_path), job_for(builder, cursor), ledger, clock)
    sent = replies.message_text(api.requests[0].body["messages"][0])
    assert "Step 0:" not in sent and "Step 2 is done." in sent
