"""The real window of a Claude Code session (issue 38), from the model its transcript
records: the table of Claude Code 2.1.332 (pure), and with the real CLI (the newest pinned)
against a loopback model, a session on its default model (1M natively) is given its 1M
window however small the config's default, in ``status``, ``should_compact`` and the
``/compact`` takeover; a switch to a 200K model and to its ``[1m]`` form follows."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.clock import SystemClock
from memd.compaction.service import CompactionService
from memd.config import Config
from memd.llm.ledger import Ledger
from memd.sources.base import ModelWindow
from memd.sources.claude_code.window import ONE_MILLION, TWO_HUNDRED_K, model_window
from memd.state import MAX_MODEL_CHARS, SessionState, model_name
from memd.testing.loopback import LoopbackAPI
from memd.transcript.conversation import Conversation
from memd.window import ASKED_WINDOW, CONFIG_WINDOW
from memd_client import hook as hook_module
from memd_client.agents.claude_code import TAKEOVER_HOOKS as CLAUDE_TAKEOVER
from memd_client.hooks_install import hook_command, install_hooks
from tests.claude_cli import ClaudeCLI
from tests.daemon_harness import call, fake_home, read_log, stop_memd, wait_for
from tests.test_claude_code_cli import setup
from tests.test_claude_code_compact import (
    BLOCKED,
    SMALL_KEEP,
    a_session,
    claude,
    memdctl,
    plant_notes,
    sessions,
    started,
)


@pytest.mark.parametrize(
    "model, tokens",
    [
        ("claude-opus-5-5", ONE_MILLION),
        ("claude-sonnet-4-6[1m]", ONE_MILLION),
        ("claude-sonnet-4-6", TWO_HUNDRED_K),
        ("claude-opus-4-6", TWO_HUNDRED_K),
        ("claude-opus-4-7", ONE_MILLION),
        ("claude-haiku-4-5-20251001", TWO_HUNDRED_K),
        ("us.anthropic.claude-sonnet-4-20250514-v1:0", TWO_HUNDRED_K),
        ("claude-opus-4-1@20250805", TWO_HUNDRED_K),
        ("anthropic.claude-opus-4-1[1M]", ONE_MILLION),
        ("Claude-Sonnet-5", ONE_MILLION),
        ("claude-3-5-haiku-20241022", TWO_HUNDRED_K),
        ("gpt-5-codex", None),
        ("<synthetic>", None),
        ("", None),
    ],
)
def test_the_window_of_a_model_as_claude_code_2_1_332_gives_it(
    model: str, tokens: int | None
) -> None:
    found = model_window(model)
    assert (found.tokens if found else None) == tokens
    if found is not None:
        assert model[:40] in found.why


@given(st.text(max_size=400))
def test_any_model_name_is_a_window_or_none(name: str) -> None:
    found = model_window(name)
    assert found is None or (found.tokens in (ONE_MILLION, TWO_HUNDRED_K) and len(found.why) < 300)


@given(st.text(max_size=300))
def test_a_model_name_is_kept_short_and_printable(name: str) -> None:
    kept = SessionState.from_dict({"session_id": "s", "project": "p", "path": "/x", "model": name})
    assert kept.model.isprintable() and len(kept.model) <= MAX_MODEL_CHARS
    assert kept.model == name[:MAX_MODEL_CHARS] or not name.isprintable()
    assert model_name("claude-opus-5-5\x1b[2J" + "x" * 10**6).startswith("claude-opus-5-5?[2J")


def assistant(uuid: str, parent: str | None, model: str, requested: str | None) -> bytes:
    line: dict[str, Any] = {
        "type": "assistant",
        "uuid": uuid,
        "parentUuid": parent,
        "message": {"id": uuid, "model": model, "content": [{"type": "text", "text": "ok"}]},
    }
    if requested is not None:
        line["requestedModel"] = requested
    return json.dumps(line).encode()


def test_the_newest_response_names_the_model_and_its_long_form() -> None:
    conv = Conversation()
    conv.add_lines([assistant("a", None, "claude-sonnet-4-6", None)])  # 2.1.197: no request
    assert conv.model == "claude-sonnet-4-6"
    conv.add_lines([assistant("b", "a", "claude-sonnet-4-6", "claude-sonnet-4-6[1m]")])
    assert conv.model == "claude-sonnet-4-6[1m]"
    conv.add_lines([assistant("c", "b", "<synthetic>", None)])  # Claude Code's own line
    assert conv.model == "claude-sonnet-4-6[1m]"
    conv.add_lines([assistant("d", "c", "claude-haiku-4-5", "claude-haiku-4-5")])  # a switch
    assert conv.model == "claude-haiku-4-5"


def test_the_window_is_the_requests_then_the_transcripts_then_the_configs(
    tmp_path: Path,
) -> None:
    svc = CompactionService(
        Config(),
        tmp_path,
        home=tmp_path,
        claude_dir=tmp_path,
        ledger=Ledger(tmp_path / "ledger.json", SystemClock()),
        get_llm=lambda: None,
    )
    state = SessionState("s", "p", "/x.jsonl", model="claude-opus-5-5")
    assert svc.window({}, state).source == CONFIG_WINDOW  # no agent says
    svc.window_of = lambda s: ModelWindow(ONE_MILLION, "opus") if s.model else None
    found = svc.window({}, state)
    assert (found.context_window, found.source) == (ONE_MILLION, "transcript: opus")
    assert svc.threshold(found) == ONE_MILLION - 20_000 - 13_000
    asked = svc.window({"context_window": 300_000}, state)
    assert (asked.context_window, asked.source) == (300_000, ASKED_WINDOW)
    unknown = svc.window({}, SessionState("s", "p", "/x.jsonl"))
    assert (unknown.context_window, unknown.source) == (200_000, CONFIG_WINDOW)
    assert svc.wants_warming(SessionState("s", "p", "/x.jsonl", context_tokens=100_000))
    big = SessionState("s", "p", "/x", context_tokens=100_000, model="m")
    assert not svc.wants_warming(big)  # half of its own window is further
    assert big.context_tokens < svc.threshold(svc.window({}, big)) // 2


def window_of(home: Any, sid: str) -> dict[str, Any]:
    row: dict[str, Any] = call(home, "session", {"session": sid})
    return row


@pytest.mark.slow
def test_a_1m_session_is_given_its_window_in_status_and_the_takeover(
    claude_cli_newest: ClaudeCLI, claude_api: LoopbackAPI, memd_api: LoopbackAPI, tmp_path: Path
) -> None:
    cli, api = claude_cli_newest, claude_api
    with fake_home(tmp_path) as home:
        project = setup(home, memd_api, {})
        install_hooks(
            home.root / ".claude" / "settings.json",
            hook_command(sys.executable, hook_module.__file__),
            CLAUDE_TAKEOVER,
        )
        config = Path(home.env["MEMD_CONFIG"])
        # A config window the session is over (30K - 20K reserve): its own 1M is not.
        config.write_text(
            config.read_text()
            + "  update_tokens: 100000000\n"
            + SMALL_KEEP
            + "  default_context_window: 30000\n"
        )
        sid = a_session(cli, api, home, project, turns=6)  # Claude Code's default: Opus 5.5
        plant_notes(home, sid, covered_turns=4)
        proc = started(home, sid)
        try:
            row = window_of(home, sid)
            assert row["model"] == "claude-opus-5-5"
            assert row["context_window"] == 1_000_000
            assert row["compact_threshold"] == 967_000
            assert row["window_source"].startswith("transcript: claude-opus-5-5")
            listed = memdctl(home, "status")["sessions"]
            (mine,) = [r for r in listed if r["session_id"] == sid]
            assert mine["compact_threshold"] == 967_000
            verdict = call(home, "should_compact", {"session": sid})
            assert verdict["threshold"] == 967_000 and not verdict["compact"]

            known = sessions(home)
            said = claude(cli, api, home, project, "-p", "--resume", sid, "/compact")
            assert BLOCKED in said, said  # taken over: the context is far from 1M
            assert len(sessions(home) - known) == 1

            claude(
                cli, api, home, project, "-p", "--resume", sid, "--model", "claude-haiku-4-5", "hi"
            )
            # memd reads the resumed turn as the watcher sees it: wait for it, not for claude.
            wait_for(
                lambda: window_of(home, sid)["context_window"] == 200_000,
                timeout=30,
                what="the haiku turn's 200K window",
            )
            long = "claude-sonnet-4-6[1m]"
            claude(cli, api, home, project, "-p", "--resume", sid, "--model", long, "hi")
            row = wait_for(
                lambda: (r := window_of(home, sid))["model"] == long and r,
                timeout=30,
                what="the [1m] turn's model",
            )
            assert row["context_window"] == 1_000_000
        finally:
            assert stop_memd(proc) == 0, read_log(home)
