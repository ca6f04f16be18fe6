"""The agents' CLIs as memd's model (issue 34), without the CLIs: what each room makes of
what its CLI prints (every answer, usage and failure, and garbage), the environment a CLI
gets (nothing of memd's), the prompt it is given, the plan (opt-in, no recall unless named),
the watcher never following memd's own calls, memd's hook doing nothing inside one, and the
status and doctor lines. The real CLIs: ``tests/test_cli_backends.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.config import parse_config_text
from memd.config_llm import LLMConfig
from memd.errors import (
    AuthenticationFailed,
    LLMError,
    MalformedAnswer,
    Overloaded,
    PromptTooLong,
    QuotaExceeded,
    RateLimited,
    Unavailable,
    Unreachable,
)
from memd.ipc.handlers import PROBE_REQUEST_S
from memd.llm import cli_claude, cli_codex, cli_gemini
from memd.llm.cli_input import KEPT_ENV, cli_env, prompt_of
from memd.llm.cli_run import Call, Ran
from memd.llm.client import PROBE_MAX_S, Disabled
from memd.llm.models import Found, plan
from memd_client import hook
from memd_client.cli_doctor import _served
from memd_client.render_status import cli_lines

ENV = {"HOME": "/home/u", "PATH": "/usr/bin"}
CALL = Call("sonnet", Path("/nowhere/system.md"), "hello", 1000, Path("/nowhere"))


def rooms() -> list[Any]:
    config = LLMConfig()
    return [
        cli_claude.room(config, ENV),
        cli_codex.room(config, ENV),
        cli_gemini.room(config, ENV),
    ]


def ran(stdout: str | bytes = b"", code: int = 0, stderr: str | bytes = b"") -> Ran:
    out = stdout.encode() if isinstance(stdout, str) else stdout
    err = stderr.encode() if isinstance(stderr, str) else stderr
    return Ran(code, out, err, 1.5)


# -- Claude Code's JSON result ---------------------------------------------------------------


def claude_result(**fields: Any) -> str:
    base = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "api_error_status": None,
        "result": "the answer",
        "session_id": "s-1",
        "usage": {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_creation_input_tokens": 100,
            "cache_read_input_tokens": 1000,
        },
        "modelUsage": {"claude-sonnet-5": {}},
    }
    return json.dumps({**base, **fields})


def test_claude_code_s_result_is_the_answer_and_its_usage() -> None:
    reply = rooms()[0].answer(ran(claude_result()), CALL)
    assert reply.text == "the answer" and reply.model == "claude-sonnet-5"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (10, 5)
    assert reply.usage.cache_read_input_tokens == 1000 and reply.backend == "claude_cli"


@pytest.mark.parametrize(
    ("status", "said", "kind"),
    [
        (None, "Not logged in · Please run /login", AuthenticationFailed),
        (401, "Failed to authenticate. API Error: 401 invalid bearer", AuthenticationFailed),
        (429, "API Error: Server is temporarily limiting requests", RateLimited),
        (None, "Claude AI usage limit reached|1893456000", RateLimited),
        (400, "Credit balance is too low", QuotaExceeded),
        (529, "API Error: 529 overloaded", Overloaded),
        (500, "API Error: 500 boom", Unavailable),
        (None, "API Error: Unable to connect to API (ECONNRESET)", Unreachable),
        (
            400,
            "Prompt is too long · the request is ~210000 tokens (limit 200000) but …",
            PromptTooLong,
        ),
    ],
)
def test_claude_code_s_failures_map_to_the_seam_s_classes(
    status: int | None, said: str, kind: type[LLMError]
) -> None:
    printed = claude_result(is_error=True, api_error_status=status, result=said)
    with pytest.raises(kind) as raised:
        rooms()[0].answer(ran(printed, code=1), CALL)
    if kind is PromptTooLong:
        assert isinstance(raised.value, PromptTooLong) and raised.value.gap == 10_000
    if "1893456000" in said:
        assert isinstance(raised.value, RateLimited) and raised.value.retry_after


# -- Codex's events ----------------------------------------------------------------------------


def codex_events(*events: dict[str, Any]) -> str:
    return "\n".join(json.dumps(e) for e in events) + "\n"


def test_codex_s_last_message_is_the_answer_and_its_usage_counts_the_cache() -> None:
    printed = codex_events(
        {"type": "thread.started", "thread_id": "t"},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "first"}},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "final"}},
        {
            "type": "turn.completed",
            "usage": {
                "input_tokens": 1000,
                "cached_input_tokens": 600,
                "cache_write_input_tokens": 100,
                "output_tokens": 7,
            },
        },
    )
    reply = rooms()[1].answer(ran(printed), CALL)
    assert reply.text == "final" and reply.usage.prompt_tokens == 1000
    assert (reply.usage.input_tokens, reply.usage.cache_read_input_tokens) == (300, 600)


@pytest.mark.parametrize(
    ("said", "kind"),
    [
        ("unexpected status 401 Unauthorized: x", AuthenticationFailed),
        (
            "error sending request for url (https://auth.openai.com/oauth/token)",
            AuthenticationFailed,
        ),
        ("exceeded retry limit, last status: 429 Too Many Requests", RateLimited),
        ("You've hit your usage limit. Try again later.", RateLimited),
        ("Quota exceeded. Check your plan and billing details.", QuotaExceeded),
        ("Codex ran out of room in the model's context window.", PromptTooLong),
        ("stream disconnected before completion: error sending request", Unavailable),
        ("We're currently experiencing high demand", Unavailable),
    ],
)
def test_codex_s_failed_turns_map_to_the_seam_s_classes(said: str, kind: type[LLMError]) -> None:
    printed = codex_events(
        {"type": "error", "message": "Reconnecting... 1/5"},
        {"type": "turn.failed", "error": {"message": said}},
    )
    with pytest.raises(kind):
        rooms()[1].answer(ran(printed, code=1), CALL)


def test_codex_s_answer_stopped_at_its_limit_is_a_reply_cut_short() -> None:
    printed = codex_events(
        {"type": "item.completed", "item": {"type": "agent_message", "text": "<notes>half"}},
        {"type": "turn.failed", "error": {"message": "Incomplete response, max_output_tokens"}},
    )
    reply = rooms()[1].answer(ran(printed, code=1), CALL)
    assert reply.cut_short and reply.text == "<notes>half"


# -- Gemini's JSON -----------------------------------------------------------------------------


def gemini_json(**fields: Any) -> str:
    tokens = {"prompt": 150, "candidates": 7, "cached": 50, "thoughts": 3}
    stats = {"models": {"gemini-3.8-flash": {"api": {"errorsByType": {}}, "tokens": tokens}}}
    return json.dumps({"session_id": "g-1", "response": "the answer", "stats": stats, **fields})


def test_gemini_s_response_is_the_answer_and_its_stats_the_usage() -> None:
    reply = rooms()[2].answer(ran(gemini_json()), CALL)
    assert reply.text == "the answer" and reply.model == "gemini-3.8-flash"
    assert (reply.usage.input_tokens, reply.usage.cache_read_input_tokens) == (100, 50)
    assert reply.usage.output_tokens == 10


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (
            {"message": '{"error":{"code":401,"message":"API key not valid"}}', "code": 401},
            AuthenticationFailed,
        ),
        (
            {"message": "When using Gemini API, you must specify the GEMINI_API_KEY", "code": 41},
            AuthenticationFailed,
        ),
        ({"message": "quota\nSuggested retry after 7s.", "code": 429}, RateLimited),
        (
            {
                "message": '{"error":{"code":400,"message":"The input token count (210000) '
                'exceeds the maximum number of tokens allowed (200000)."}}',
                "code": 400,
            },
            PromptTooLong,
        ),
        ({"message": '{"error":{"code":500,"message":"boom"}}', "code": 500}, Unavailable),
    ],
)
def test_gemini_s_errors_map_to_the_seam_s_classes(
    error: dict[str, Any], kind: type[LLMError]
) -> None:
    printed = "Error: at stack\n    at x (y.js:1)\n" + json.dumps(
        {"session_id": "g", "error": error}
    )
    with pytest.raises(kind) as raised:
        rooms()[2].answer(ran(b"", code=1, stderr=printed), CALL)
    if kind is RateLimited:
        assert isinstance(raised.value, RateLimited) and raised.value.retry_after == 7.0


def test_gemini_s_answer_without_a_finish_reason_is_no_answer() -> None:
    stats = {"models": {"m": {"api": {"errorsByType": {"NO_FINISH_REASON": 1}}, "tokens": {}}}}
    with pytest.raises(Unavailable, match="NO_FINISH_REASON"):
        rooms()[2].answer(ran(gemini_json(stats=stats)), CALL)


# -- garbage -------------------------------------------------------------------------------


@given(
    st.binary(max_size=400) | st.text(max_size=400).map(str.encode),
    st.integers(-15, 255),
    st.binary(max_size=200),
)
def test_whatever_a_cli_prints_is_an_answer_or_a_failure_of_the_seam(
    stdout: bytes, code: int, stderr: bytes
) -> None:
    for room in rooms():
        try:
            reply = room.answer(Ran(code, stdout, stderr, 0.1), CALL)
        except LLMError:
            continue
        assert isinstance(reply.text, str) and reply.backend == room.name


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.95])
def test_json_cut_short_is_a_malformed_answer_never_a_half_answer(fraction: float) -> None:
    codex = codex_events(
        {"type": "item.completed", "item": {"type": "agent_message", "text": "the answer"}},
        {"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 1}},
    )
    for room, whole in zip(rooms(), (claude_result(), codex, gemini_json()), strict=True):
        with pytest.raises((MalformedAnswer, Unavailable)):
            room.answer(ran(whole[: int(len(whole.rstrip()) * fraction)]), CALL)


def test_a_cli_killed_by_a_signal_memd_did_not_send_is_unavailable() -> None:
    for room in rooms():
        with pytest.raises(Unavailable, match="killed by SIGKILL"):
            room.answer(ran(b"", code=-9), CALL)


# -- what a CLI is given ---------------------------------------------------------------------


def test_a_cli_s_environment_holds_nothing_of_memd_s() -> None:
    env = {k: f"v-{k}" for k in KEPT_ENV}
    env.update(
        ANTHROPIC_API_KEY="sk-a",
        OPENAI_API_KEY="sk-o",
        GEMINI_API_KEY="g",
        AWS_SECRET_ACCESS_KEY="aws",
        MEMD_STATE_DIR="/x",
        CODEX_HOME="/c",
        ANTHROPIC_BASE_URL="http://proxy",
    )
    given_env = cli_env(env, ("CODEX_HOME",))
    assert set(given_env) == {*KEPT_ENV, "CODEX_HOME", hook.MODEL_CALL_ENV}
    assert not {"sk-a", "sk-o", "g", "aws", "/x", "http://proxy"} & set(given_env.values())


def test_a_conversation_reaches_a_cli_as_its_turns_and_one_message_as_itself() -> None:
    one = prompt_of("sys", [{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    assert one == ("sys", "hi")
    system, text = prompt_of(
        [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        [
            {"role": "user", "content": "fix it"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "1", "name": "Read", "input": {"p": 1}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "1", "content": "x"}],
            },
        ],
    )
    assert system == "a\n\nb"
    assert (
        text.index("<user>\nfix it")
        < text.index("[tool call Read")
        < text.index("[tool result: x]")
    )


# -- the plan: opt-in, no recall unless named --------------------------------------------------


def test_an_agent_cli_is_never_picked_unless_named_and_serves_recall_only_when_named() -> None:
    found = {"claude_cli": Found("claude_cli", "installed")}
    auto = plan(LLMConfig(), found)
    assert auto.default is None  # found, a CLI still spends nothing until turned on
    config = parse_config_text("llm:\n  provider: codex_cli\n").llm
    chosen = plan(config, {})
    notes = chosen.choices["session_notes"]
    assert not isinstance(notes, str) and notes.backend == "codex_cli"
    assert notes.model == "default"
    recall = chosen.choices["recall"]
    assert isinstance(recall, str) and "llm.models.recall names it" in recall
    named = parse_config_text(
        "llm:\n  provider: codex_cli\n  models:\n    recall: 'gemini_cli:flash-lite'\n"
    ).llm
    picked = plan(named, {}).choices["recall"]
    assert not isinstance(picked, str) and (picked.backend, picked.model) == (
        "gemini_cli",
        "flash-lite",
    )


# -- memd's own calls: never followed, no hook -------------------------------------------------


def test_a_session_of_memd_s_own_model_call_is_never_followed(tmp_path: Path) -> None:
    """What an agent's real reader makes of its chat, published: a session whose cwd is in
    memd's folder for its CLI calls is ignored, under the agent's own id as any other."""
    from memd.daemon.session_state import OWN_CALL, publish
    from memd.sources.gemini import Gemini
    from memd.sources.gemini.reader import GeminiReader
    from memd.state import SessionState

    source = Gemini(tmp_path / ".gemini")
    chat = source.root / "memd-model-call" / "chats" / "session-2026-11-28T10-00-0a1b2c3d.jsonl"
    key = source.session_key(chat)
    assert key is not None
    own_id = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    header = json.dumps({"sessionId": own_id, "kind": "main"}).encode() + b"\n"
    prompt = json.dumps({"id": "p1", "type": "user", "content": [{"text": "notes?"}]}).encode()
    chat.parent.mkdir(parents=True)
    chat.write_bytes(header + prompt + b"\n")
    for cwd, ignored in (
        ("/run/user/1/memd/model-calls/gemini_cli/memd-model-call", OWN_CALL),
        ("/run/user/1/memd/model-calls", OWN_CALL),
        ("/run/user/1/memd/model-calls-not", ""),
        ("/home/u/work", ""),
    ):
        reader = GeminiReader(str(chat), chat.stat().st_ino, cwd, None)
        assert reader.feed([(0, header[:-1]), (len(header), prompt)]) == 0
        state = SessionState(key.session_id, "", str(chat))
        publish(source, key, reader, state, "/run/user/1/memd/model-calls")
        assert (state.session_id, state.ignored) == (own_id, ignored), cwd


def test_memd_s_hook_does_nothing_inside_memd_s_own_model_call() -> None:
    env = {hook.MODEL_CALL_ENV: "1", "MEMD_RUNTIME_DIR": "/nonexistent-memd-runtime"}
    stdin = json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": "x"}).encode()
    assert hook.run(stdin, env) is None  # no daemon asked: the socket does not exist
    with pytest.raises(FileNotFoundError):  # without it, the daemon is asked
        hook.run(stdin, {"MEMD_RUNTIME_DIR": "/nonexistent-memd-runtime"})


# -- status and doctor -----------------------------------------------------------------------


def test_status_and_doctor_say_of_each_cli_installed_logged_in_on_and_how_to_turn_it_on() -> None:
    llm = {
        "jobs": {"session_notes": {"backend": "claude_cli"}},
        "clis": {
            "claude_cli": {"command": "/bin/claude", "login": "/h/.credentials.json", "on": True},
            "codex_cli": {"command": "/bin/codex", "login": None, "on": False, "turn_on": "T1"},
            "gemini_cli": {"command": None, "login": None, "on": False, "turn_on": "T2"},
        },
    }
    lines = cli_lines(llm)
    assert lines[0] == "  agent CLI claude_cli: /bin/claude, logged in (/h/.credentials.json); on"
    assert "codex_cli: /bin/codex, not logged in; off; turn on: T1" in lines[1]
    assert "gemini_cli: not installed, not logged in; off; turn on: T2" in lines[2]
    said = _served(llm)
    assert (
        "claude_cli on" in said and "codex_cli off (installed, not logged in; turn on: T1)" in said
    )
    assert "gemini_cli off (not installed; turn on: T2)" in said


def test_output_nested_past_what_python_reads_is_a_failure_of_the_seam() -> None:
    deep = ("[" * 100_000 + "]" * 100_000).encode()
    for room in rooms():
        for printed in (deep, b'{"response": ' + deep + b"}"):
            with pytest.raises(LLMError):
                room.answer(Ran(0, printed, printed, 0.1), CALL)


def test_a_cli_s_probe_waits_for_its_start_not_a_network_probe_s_limit(tmp_path: Path) -> None:
    """``memdctl doctor`` gives a network probe 10 s; an agent CLI's ``--version`` is its
    whole start, which took Gemini CLI 26-35 s on a machine loaded 8 per core, and the doctor
    said the CLI did not answer. Here the limit asked for is 0.2 s, the start 1 s."""
    slow = tmp_path / "codex"
    slow.write_text("#!/bin/sh\nsleep 1\necho codex-cli 0.171.0\n")
    slow.chmod(0o700)
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex" / "auth.json").write_text('{"OPENAI_API_KEY": "k"}')
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": str(tmp_path)}
    config = parse_config_text(f"llm:\n  provider: codex_cli\n  codex_cli:\n    command: {slow}\n")
    backend = cli_codex.open_codex_cli(config.llm, env)
    assert not isinstance(backend, Disabled), backend
    said = anyio.run(lambda: backend.probe(model="m", timeout=0.2))
    assert "codex-cli 0.171.0" in said and "logged in" in said, said
    assert PROBE_REQUEST_S >= PROBE_MAX_S + 5  # and the doctor's request waits for it
