"""Faults of the backends other than Anthropic's, on the real daemon with a local
OpenAI-compatible server and with the Gemini API (issue 34): a 429 with retry-after, a 500,
a hang, a stream cut mid-answer, a wrong tool name, a tool call with a path outside the area,
an answer that is not what was asked: each ends in a state ``status`` shows, and none
changes the notes or the memories wrongly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_replies import When
from tests.daemon_harness import Home, call, fake_home, read_log, start_memd, stop_memd, wait_for
from tests.session_support import write_work_session
from tests.test_memory_links_e2e import MEMORY_SYSTEM

pytestmark = pytest.mark.slow

SESSION = "0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9"
NOTES_SYSTEM = "You keep the working notes of a coding session"


def extract(home: Home) -> dict[str, Any]:
    result: dict[str, Any] = call(home, "extract", {"session": SESSION, "wait": 20})
    return result


def guard(home: Home) -> dict[str, Any]:
    status: dict[str, Any] = call(home, "status")["guard"]
    return status


def backend_config(backend: str, url: str) -> str:
    """The ``llm`` section that puts every job on ``backend`` at ``url``."""
    common = "  find_local: false\n  timeout_s: 2\n"
    if backend == "gemini":
        where = f"  provider: gemini\n  gemini:\n    base_url: {url}\n"
    else:
        where = f"  local:\n    base_url: {url}/v1\n"
    return f"llm:\n{common}{where}    protocol: tools\n"


@pytest.mark.parametrize("backend", ["local", "gemini"])
def test_each_fault_of_a_backend_ends_in_a_state_status_shows(tmp_path: Path, backend: str) -> None:
    notes_rule = When(system_match=NOTES_SYSTEM)
    keys = {"GEMINI_API_KEY": "test"} if backend == "gemini" else {}
    with (
        LoopbackAPI() as api,
        fake_home(tmp_path, CLAUDE_CODE_DISABLE_AUTO_MEMORY="1", **keys) as home,
    ):
        api.models = ("qwen2.5-coder:7b",)
        api.add_rule(notes_rule, replies.rate_limited(retry_after=1), times=1)
        api.add_rule(notes_rule, replies.server_error(500), times=1)
        # The memory agent calls a tool that does not exist, then writes outside its dir.
        api.add_rule(
            When(system_match=MEMORY_SYSTEM, turn="first"),
            replies.tool_uses(
                [
                    ("Bash", {"command": "rm -rf /"}),
                    ("Write", {"file_path": str(tmp_path / "outside.md"), "content": "x"}),
                ]
            ),
        )
        api.add_rule(When(system_match=MEMORY_SYSTEM, turn="after_tool"), replies.text("Done."))
        config = tmp_path / "memd.yaml"
        config.write_text(
            backend_config(backend, api.url) + "session_notes:\n  init_tokens: 1000000000\n"
            "memory:\n  extraction_quiet_s: 0.2\n  extract_beside_claude_code: true\n"
            "  beside_wait_s: 0\n"
            "budget:\n  backoff_initial_s: 0.01\n  backoff_max_s: 0.05\n"
        )
        home.env["MEMD_CONFIG"] = str(config)
        proc = start_memd(home)
        try:
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=30, what="model")
            folder = home.projects / "-work-project"
            write_work_session(folder, SESSION, turns=2)
            wait_for(lambda: call(home, "sessions", {}), timeout=30, what="the session")
            notes = folder / SESSION / "session-memory" / "summary.md"

            # 429 with retry-after: the backend is held off, and status says until when.
            first = extract(home)
            assert "RateLimited" in str(first["last_error"]), first
            # 500: backing off, the failure named.
            wait_for(lambda: "(500)" in str(extract(home)["last_error"]), timeout=30, what="a 500")
            assert guard(home)["kinds"]["session_notes"]["total_failures"] >= 2
            # A hang: the deadline ends it (llm.timeout_s), named in the error.
            hang = replies.Message(({"type": "text", "text": "x"},), delay_s=6)
            api.add_rule(notes_rule, hang, times=1)
            wait_for(
                lambda: "did not finish within 2 s" in str(extract(home)["last_error"]),
                timeout=40,
                what="the hang's deadline",
            )
            # A stream cut mid-answer: not taken as an answer.
            api.add_rule(notes_rule, replies.text("half", stop_reason="cut_stream"), times=1)
            wait_for(
                lambda: "stream ended" in str(extract(home)["last_error"]),
                timeout=40,
                what="the cut stream",
            )
            before = notes.read_text() if notes.exists() else None

            row = wait_for(
                lambda: next(
                    (
                        p["last_run"]
                        for p in call(home, "status")["memory"]["projects"].values()
                        if "refused" in str((p.get("last_run") or {}).get("detail"))
                    ),
                    None,
                ),
                timeout=40,
                what="the memory run",
            )
            assert "2 tool call(s) refused" in row["detail"], row
            assert not (tmp_path / "outside.md").exists()
            sent = json.dumps([r.body for r in api.requests])
            assert "There is no tool called 'Bash'" in sent

            # An answer that is not the whole notes (the whole-answer protocol after a reload).
            config.write_text(config.read_text().replace("protocol: tools", "protocol: whole"))
            call(home, "reload")
            assert call(home, "status")["llm"]["jobs"]["session_notes"]["protocol"] == "whole"
            api.add_rule(notes_rule, replies.text("I updated the notes for you!"), times=1)
            wait_for(
                lambda: "MalformedAnswer" in str(extract(home)["last_error"]),
                timeout=40,
                what="the malformed answer",
            )
            assert guard(home)["malformed_answers"] == {"session_notes": 1}
            assert (notes.read_text() if notes.exists() else None) == before
        finally:
            assert stop_memd(proc) == 0, read_log(home)
