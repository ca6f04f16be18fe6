"""The daemon reads Codex's and Gemini's hook input and answers in their shape (issue 24),
through the real hook command (``… hook.py codex|gemini``) and a real daemon. The inputs are
the ones the real CLIs send (captured from Codex 0.169.0, which 0.171.0 sends alike, and
Gemini 0.61.0; the CLIs themselves run in ``tests/test_agent_hooks_cli.py``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from memd_client import hook as hook_module
from memd_client.hooks_install import hook_command
from tests.daemon_harness import (
    Home,
    call,
    fake_home,
    read_log,
    start_memd,
    stop_memd,
    wait_features,
)
from tests.test_memory_e2e import context_of, hook, write_memories

pytestmark = pytest.mark.slow

INDEX_LINE = "Run the test suite with scripts/check"  # in MEMORY.md
PROMPT = "how should I run the test suite before committing?"


@contextmanager
def memd_with_memories(tmp_path: Path, index: str | None = None) -> Iterator[tuple[Home, Path]]:
    """A real daemon over a fake home whose project ``work/proj`` (the cwd yielded) holds
    three-day-old memories; ``index``: the text of its MEMORY.md instead of the usual one."""
    cwd = tmp_path / "work" / "proj"
    cwd.mkdir(parents=True)
    with fake_home(tmp_path) as home:
        mdir = write_memories(home, cwd, age_days=3)
        if index is not None:
            (mdir / "MEMORY.md").write_text(index)
        proc = start_memd(home)
        try:
            wait_features(home)  # a hook sent while they load waits past its budget
            yield home, cwd
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_gemini_gets_the_index_and_recall_for_its_prompt_alone(tmp_path: Path) -> None:
    command = hook_command(sys.executable, hook_module.__file__, "gemini")
    with memd_with_memories(tmp_path) as (home, cwd):  # auto memory on: no matter to Gemini
        common = {
            "session_id": "de122ca2-4d90-41ca-808a-a5f0a91e60e0",
            "transcript_path": str(tmp_path / "session-2026-11-26T08-35-de122ca2.jsonl"),
            "cwd": str(cwd),
            "timestamp": "2026-11-26T08:35:59.913Z",
        }
        start = {**common, "hook_event_name": "SessionStart", "source": "startup"}
        index = context_of(hook(home, start, command), "SessionStart")
        assert INDEX_LINE in index
        # Gemini hands BeforeAgent the prompt with the SessionStart context prepended:
        # what memd itself injected is not a query (the index names every memory).
        ahead = f"<hook_context>{index}</hook_context>\n\n"
        quiet = {**common, "hook_event_name": "BeforeAgent", "prompt": ahead + "hello"}
        done = hook(home, quiet, command)
        assert (done.returncode, done.stdout) == (0, b"")
        asked = {**quiet, "prompt": ahead + PROMPT}
        recalled = context_of(hook(home, asked, command), "BeforeAgent")
        assert "feedback_tests.md" in recalled and "3 days ago" in recalled
        after = {**common, "hook_event_name": "AfterAgent", "prompt": PROMPT}
        done = hook(home, {**after, "prompt_response": "OK"}, command)
        assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


def test_codex_gets_the_index_although_claude_codes_auto_memory_is_on(tmp_path: Path) -> None:
    """Codex sends Claude Code's input under the same names; Claude Code's own settings (its
    auto memory loads MEMORY.md itself) say nothing about a Codex session."""
    with memd_with_memories(tmp_path) as (home, cwd):
        common = {
            "session_id": "01a216fd-ce35-7623-8170-643697eba0d1",
            "transcript_path": str(tmp_path / "rollout-2026-11-26T08-34-21.jsonl"),
            "cwd": str(cwd),
            "model": "gpt-5-codex",
            "permission_mode": "bypassPermissions",
        }
        start = {**common, "hook_event_name": "SessionStart", "source": "startup"}
        claude = hook_command(sys.executable, hook_module.__file__)
        done = hook(home, {**start, "session_id": "claude-1"}, claude)
        assert (done.returncode, done.stdout) == (0, b"")  # Claude Code loads it itself
        codex = hook_command(sys.executable, hook_module.__file__, "codex")
        assert INDEX_LINE in context_of(hook(home, start, codex), "SessionStart")
        prompt = {**common, "hook_event_name": "UserPromptSubmit", "prompt": PROMPT}
        recalled = context_of(hook(home, {**prompt, "turn_id": "t1"}, codex), "UserPromptSubmit")
        assert "feedback_tests.md" in recalled
        stop = {**common, "hook_event_name": "Stop", "last_assistant_message": "OK"}
        done = hook(home, {**stop, "stop_hook_active": False}, codex)
        assert (done.returncode, done.stdout) == (0, b"")
        # memd reads no Codex transcript (yet): its Stop is no turn end to wait for, and
        # its rollout is never read as Claude Code's.
        assert call(home, "status")["memory"]["quiet_timers"] == 0


def test_codex_context_stays_under_its_hook_output_limit(tmp_path: Path) -> None:
    """Codex writes a hook's output over ~2,500 tokens to a file under the temp dir that others
    can list: an index dense in tokens (CJK, emoji) fit memd's 8 KB but not that limit."""
    from memd.sources.codex.hooks import MAX_TOKENS as CODEX_MAX_TOKENS
    from memd.tokens import estimate_text

    dense = "".join(f"- [記憶 {i}](feedback_tests.md) — 漢字テスト 🙂🙂 {i}\n" for i in range(150))
    with memd_with_memories(tmp_path, f"- [Tests]({INDEX_LINE})\n" + dense) as (home, cwd):
        start = {
            "session_id": "01a216fd-ce35-7623-8170-643697eba0d2",
            "transcript_path": str(tmp_path / "rollout.jsonl"),
            "cwd": str(cwd),
            "hook_event_name": "SessionStart",
            "source": "startup",
        }
        codex = hook_command(sys.executable, hook_module.__file__, "codex")
        text = context_of(hook(home, start, codex), "SessionStart")
        assert estimate_text(text) <= CODEX_MAX_TOKENS < estimate_text(dense)
        assert "記憶 1" in text and "hook limit" in text
