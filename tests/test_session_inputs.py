"""What an extraction run is sent (pure): the delta cursor, chunks, the R-S7 anchor rule,
placeholders, cuts, and privacy (R-B4) for both strategies."""

from __future__ import annotations

import json
from typing import Any, Literal

from hypothesis import given, settings
from hypothesis import strategies as st

from memd.session.inputs import (
    DELTA_TOOL_RESULT_CHARS,
    OVERLAP_BLOCK_CHARS,
    Chunk,
    anchor_safe,
    cut,
    delta_request,
    full_request,
    plan_delta,
    plan_full,
    render_message,
    render_transcript,
    start_after,
)
from memd.testing.api_rules import request_problems
from memd.transcript.messages import ApiMessage
from tests.session_support import TranscriptBuilder, work_session


def chars(text: str) -> int:
    return len(text) // 4


def msg(
    role: Literal["user", "assistant"], *blocks: dict[str, Any], uuids: tuple[str, ...] = ("u",)
) -> ApiMessage:
    return ApiMessage(role, list(blocks), uuids)


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def call(ident: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": ident, "name": "Read", "input": {"file_path": "/x"}}


def result(ident: str, content: Any = "ok") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": ident, "content": content}


def conversation(turns: int = 4) -> list[ApiMessage]:
    builder = TranscriptBuilder()
    work_session(builder, turns=turns, context=12_000)
    return builder.conversation().messages()


def test_the_cursor_picks_the_unseen_messages() -> None:
    messages = [
        msg("user", text("a"), uuids=("u1",)),
        msg("assistant", text("b"), uuids=("u2", "u3")),
        msg("user", text("c"), uuids=("u4",)),
    ]
    assert start_after(messages, None) == 0
    assert start_after(messages, "u3") == 2
    assert start_after(messages, "u2") == 1  # more lines joined that message since
    assert start_after(messages, "u4") == 3
    assert start_after(messages, "compacted-away") == 0


def test_the_anchor_waits_for_pending_tool_results() -> None:
    asked = msg("assistant", text("reading"), call("t1"), call("t2"))
    assert not anchor_safe([msg("user", text("go")), asked])
    assert not anchor_safe([asked, msg("user", result("t1"))])
    assert anchor_safe([asked, msg("user", result("t1"), result("t2"))])
    assert anchor_safe(
        [asked, msg("user", result("t1"), result("t2")), msg("assistant", text("ok"))]
    )
    assert anchor_safe([msg("user", text("only a prompt"))])
    assert not anchor_safe([])


def test_the_delta_holds_the_new_messages_and_a_little_overlap() -> None:
    messages = conversation()
    cursor = messages[7].last_uuid
    (chunk,) = plan_delta(messages, cursor, overlap=4, chunk_tokens=60_000, estimate=chars)
    assert list(chunk.context) == messages[4:8] and list(chunk.new) == messages[8:]
    assert chunk.covered_uuid == messages[-1].last_uuid and chunk.anchor_safe
    rendered = render_transcript(chunk)
    assert rendered.index("already covered") < rendered.index("Step 1:")
    assert rendered.index("New since the last update") < rendered.index("Step 2:")
    assert "Step 0:" not in rendered
    assert (
        plan_delta(messages, messages[-1].last_uuid, overlap=4, chunk_tokens=10, estimate=chars)
        == ()
    )


def test_the_overlap_is_shown_briefly() -> None:
    old = msg("user", result("t", "OLD" + "o" * 5_000), uuids=("u1",))
    new = msg("user", text("NEW" + "n" * 5_000), uuids=("u2",))
    rendered = render_transcript(Chunk((old,), (new,), "u2", True))
    covered, fresh = rendered.split("New since the last update")
    assert "OLD" in covered and len(covered) < OVERLAP_BLOCK_CHARS + 300
    assert fresh.count("n") >= 5_000


@settings(max_examples=60, deadline=None)
@given(turns=st.integers(1, 12), chunk_tokens=st.integers(1, 400), cursor_at=st.integers(-1, 40))
def test_chunks_cover_every_new_message_once_in_order(
    turns: int, chunk_tokens: int, cursor_at: int
) -> None:
    messages = conversation(turns)
    cursor = messages[cursor_at].last_uuid if 0 <= cursor_at < len(messages) else None
    chunks = plan_delta(messages, cursor, overlap=2, chunk_tokens=chunk_tokens, estimate=chars)
    covered = [m for c in chunks for m in c.new]
    assert covered == messages[start_after(messages, cursor) :]
    for chunk in chunks:
        size = sum(chars(render_message(m)) for m in chunk.new)
        assert size <= chunk_tokens or len(chunk.new) == 1
        assert chunk.covered_uuid == chunk.new[-1].last_uuid
        end = messages.index(chunk.new[-1]) + 1
        assert chunk.anchor_safe == anchor_safe(messages[:end])
    if chunks:
        assert chunks[-1].covered_uuid == messages[-1].last_uuid


def test_chunks_end_where_no_tool_call_waits_when_they_can() -> None:
    messages = conversation(6)
    chunks = plan_delta(messages, None, overlap=0, chunk_tokens=60, estimate=chars)
    assert len(chunks) > 2
    assert all(c.anchor_safe for c in chunks)


def test_images_documents_and_thinking_do_not_travel() -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "QUJD" * 500},
    }
    document = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE" * 500},
    }
    messages = [
        msg("user", text("look"), image, document, uuids=("u1",)),
        msg(
            "assistant",
            {"type": "thinking", "thinking": "hmm secretly", "signature": "s"},
            text("seen"),
            uuids=("u2",),
        ),
        msg("user", result("t0", [text("out"), image]), text("and?"), uuids=("u3",)),
    ]
    for request in (
        delta_request(Chunk((), tuple(messages), "u3", True), "Update."),
        full_request(plan_full(messages), "Update."),
    ):
        sent = json.dumps(request.messages)
        assert "QUJD" not in sent and "JVBE" not in sent and "hmm secretly" not in sent
        assert "[image]" in sent and "[document]" in sent


def test_long_tool_results_are_cut_keeping_head_and_tail() -> None:
    body = "HEAD" + "x" * 50_000 + "TAIL"
    rendered = render_message(msg("user", result("t", body)))
    assert "HEAD" in rendered and "TAIL" in rendered and "characters left out" in rendered
    assert len(rendered) < DELTA_TOOL_RESULT_CHARS + 200
    assert cut("short", 10) == "short"


@settings(max_examples=80, deadline=None)
@given(
    shape=st.lists(st.sampled_from(["prompt", "call", "calls", "answer", "think"]), max_size=14),
    pending=st.booleans(),
)
def test_the_full_fork_is_always_a_request_the_api_accepts(shape: list[str], pending: bool) -> None:
    builder = TranscriptBuilder()
    builder.user("start")
    for step in shape:
        match step:
            case "prompt":
                builder.user("more please")
            case "call" | "calls":
                _, ids = builder.assistant(
                    "on it", (("Read", {"file_path": "/a"}),) * (1 + (step == "calls"))
                )
                builder.results(ids)
            case "answer":
                builder.assistant("here you go")
            case "think":
                builder.assistant("")
                builder.lines[-1]["message"]["content"] = [
                    {"type": "thinking", "thinking": "...", "signature": "sig"}
                ]
    if pending:
        builder.assistant("running", (("Bash", {"command": "make"}),))
    messages = builder.conversation().messages()
    request = full_request(plan_full(messages), "Update the notes.")
    body = {"model": "m", "max_tokens": 10, "messages": list(request.messages)}
    assert request_problems(body) == []
    assert request.messages[-1]["content"][-1] == {"type": "text", "text": "Update the notes."}


SECRET_FORMS = [
    "sk-ant-api03-{s}",
    "AKIA{S}",
    "ghp_{s}{s}",
    "postgres://admin:{s}@db.example.com/app",
    "-----BEGIN OPENSSH PRIVATE KEY-----\n{s}\n-----END OPENSSH PRIVATE KEY-----",
    "<private>{s}</private>",
]


@settings(max_examples=100, deadline=None)
@given(
    form=st.sampled_from(SECRET_FORMS),
    core=st.text("ABCDEFGHJKLMNPQRSTUVWXYZ234567", min_size=20, max_size=30),
    where=st.sampled_from(["user", "tool_input", "tool_result", "assistant"]),
    padding=st.text("abcdefghij .,:;!?-=/'\"", max_size=40),
)
def test_secrets_and_private_spans_never_reach_a_request(
    form: str, core: str, where: str, padding: str
) -> None:
    # The padding has no digits or capitals, so it can never contain the secret itself.
    secret_part = core.lower() + "Q7" if "{s}" in form else core[:16]
    leaked = form.replace("{s}", secret_part).replace("{S}", secret_part)
    carrier = f"{padding} {leaked} {padding}"
    builder = TranscriptBuilder()
    builder.user(carrier if where == "user" else "hello")
    args = {"command": carrier} if where == "tool_input" else {"file_path": "/x"}
    _, ids = builder.assistant(carrier if where == "assistant" else "ok", (("Bash", args),))
    builder.results(ids, carrier if where == "tool_result" else "fine")
    messages = builder.conversation().messages()
    for request in (
        delta_request(Chunk((), tuple(messages), None, True), "Update the notes."),
        full_request(plan_full(messages), "Update the notes."),
    ):
        sent = json.dumps(request.messages, ensure_ascii=False)
        assert secret_part not in sent
