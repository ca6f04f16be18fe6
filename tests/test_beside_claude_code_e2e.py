"""memd extracts beside Claude Code's own auto memory by default, the turns that memory did not
write after (issue 36, item 4), through the real daemon: Claude Code's auto memory on (its
default), memd's settings the defaults. A session's Stop makes memd wait for Claude Code's
memory; its SessionEnd ends the wait. A memory file written into the memory dir meanwhile
(what Claude Code's own extraction does) means the turn was taken: memd skips it, its model
never asked. A turn after which nothing was written is extracted by memd."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memd.memory.paths import memory_dir
from memd.testing.loopback_process import LoopbackProcess
from tests.daemon_harness import Home, call, fake_home, read_log, start_memd, stop_memd, wait_for
from tests.test_memory_links_e2e import MEMORY_SYSTEM, NEW, extraction_script, transcript

pytestmark = pytest.mark.slow

CLAUDE_CODES = (
    "---\nname: small commits\ndescription: The user wants small commits\ntype: feedback\n"
    "---\n\nKeep commits small.\n"
)


def hook(home: Home, event: str, session: str, repo: Path, mdir: Path) -> None:
    data = {
        "session_id": session,
        "cwd": str(repo),
        "transcript_path": str(mdir.parent / f"{session}.jsonl"),
        "hook_event_name": event,
        "stop_hook_active": False,
    }
    call(home, "hook", {"event": event, "input": data})


def waiting(home: Home) -> int:
    count: int = call(home, "status")["memory"]["claude_code"]["waiting_for_claude_code"]
    return count


def run_of(home: Home, mdir: Path, session: str) -> dict[str, Any] | None:
    memory = call(home, "status")["memory"]
    last = ((memory.get("projects") or {}).get(str(mdir)) or {}).get("last_run") or {}
    busy = memory.get("queued") or memory.get("running")
    return last if last.get("session") == session and not busy else None


def memory_requests(api: LoopbackProcess) -> int:
    return sum(MEMORY_SYSTEM in str(r.get("body")) for r in api.requests())


def test_a_turn_claude_codes_memory_took_is_left_to_it_the_others_extracted(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "work" / "repo"
    (repo / ".git").mkdir(parents=True)
    with fake_home(tmp_path) as home, LoopbackProcess() as api:
        mdir = memory_dir(home.projects, repo)
        mdir.mkdir(parents=True)
        api.add_script(extraction_script())
        home.env.update(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="test")
        proc = start_memd(home)
        try:
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=30, what="the model")
            transcript(mdir.parent, repo, "sess-a")
            hook(home, "Stop", "sess-a", repo, mdir)
            wait_for(lambda: waiting(home) == 1, timeout=30, what="the wait for Claude Code")
            (mdir / "feedback_small_commits.md").write_text(CLAUDE_CODES)  # its own memory
            hook(home, "SessionEnd", "sess-a", repo, mdir)
            taken = wait_for(lambda: run_of(home, mdir, "sess-a"), timeout=60, what="the look")
            assert taken["outcome"] == "skipped", taken  # then "nothing new" for its end
            said = "Claude Code's auto memory wrote feedback_small_commits.md after the turn"
            assert said in read_log(home)
            assert memory_requests(api) == 0 and not (mdir / "new.md").exists()

            transcript(mdir.parent, repo, "sess-b")
            hook(home, "Stop", "sess-b", repo, mdir)
            wait_for(lambda: waiting(home) == 1, timeout=30, what="the wait for Claude Code")
            hook(home, "SessionEnd", "sess-b", repo, mdir)
            wait_for(lambda: run_of(home, mdir, "sess-b"), timeout=60, what="the extraction")
            assert call(home, "status")["memory"]["runs"].get("extracted") == 1
            assert (mdir / "new.md").read_text() == NEW
            assert (mdir / "feedback_small_commits.md").read_text() == CLAUDE_CODES
        finally:
            assert stop_memd(proc) == 0, read_log(home)
