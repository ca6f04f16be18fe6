"""R-B1 end to end: the real daemon against a loopback Messages API in its own process.

* A server that answers every request with "prompt is too long" while two transcripts grow
  fast: each session's notes job is called at most three times, then shows as parked with
  the reason; once a server that accepts only smaller prompts takes over, the next notes
  run of each session fits (it sends less) and succeeds.
* Growth seen in the first moments after ``hello``, while the SDK still loads, is not lost:
  the notes are written once the model client is ready.

Time is scaled down (the issue's 5 lines/s for a minute becomes 25 lines/s for 6 s, with the
back-off starting at 3 s instead of 30 s): the property — growth never unparks a job — is
the same.
"""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from memd.session.template import DEFAULT_TEMPLATE
from memd.testing import loopback_billing as billing
from memd.testing.loopback_process import LoopbackProcess
from tests.daemon_harness import Home, call, fake_home, read_log, start_memd, stop_memd, wait_for
from tests.session_support import TranscriptBuilder

pytestmark = pytest.mark.slow

SLUG = "-home-user-parking"
RUN_S = 6.0
INITIAL_TURNS = 30
LINES_PER_S = 25.0
CONFIG = "budget:\n  backoff_initial_s: 3.0\n  backoff_max_s: 30.0\n"
WORKLOG = "_One terse line per step: what was tried and what came of it._\n"
PATH_RE = "The notes file is (?P<path>/\\S+?summary\\.md)"
FILLER = "The parser keeps the spans of every token it reads. " * 12


def edit_script() -> str:
    assert WORKLOG in DEFAULT_TEMPLATE
    edit = {
        "tool_use": {
            "name": "Edit",
            "input": {
                "file_path": "{path}",
                "old_string": WORKLOG,
                "new_string": WORKLOG + "- progress noted\n",
            },
        }
    }
    rules = [
        {"when": {"tool": "Edit", "turn": "first", "match": PATH_RE}, "reply": edit},
        {"when": {"turn": "after_tool"}, "reply": {"text": "Done."}},
    ]
    return "\n".join(json.dumps(r) for r in rules)


TOO_LONG_SCRIPT = json.dumps(
    {"when": {"match": ""}, "reply": {"error": {"status": 400, "message": "prompt is too long"}}}
)


def notes_requests(requests: list[dict[str, Any]], sid: str) -> list[dict[str, Any]]:
    """The session's notes requests (they offer only Edit and name the session's notes)."""
    return [
        r
        for r in requests
        if [t.get("name") for t in r["body"].get("tools") or []] == ["Edit"]
        and f"/{sid}/session-memory/" in json.dumps(r["body"])
    ]


def turn(builder: TranscriptBuilder, k: int, context: int) -> list[bytes]:
    """One turn of work as JSONL lines: a prompt, a tool call and its result, an answer."""
    start = len(builder.lines)
    builder.user(f"Step {k}: {FILLER}")
    _, ids = builder.assistant(
        f"Reading for step {k}.", (("Read", {"file_path": f"/p/f{k}.py"}),), prompt_tokens=context
    )
    builder.results(ids, f"contents of step {k}: {FILLER}")
    builder.assistant(f"Step {k} is done. {FILLER}", prompt_tokens=context)
    return [json.dumps(line).encode() + b"\n" for line in builder.lines[start:]]


def notes_row(home: Home, sid: str) -> dict[str, Any] | None:
    try:
        row: dict[str, Any] = call(home, "session", {"session": sid})
    except Exception:
        return None
    notes: dict[str, Any] | None = row.get("notes")
    return notes


def test_prompt_too_long_parks_each_session_and_a_smaller_limit_then_fits(
    tmp_path: Path,
) -> None:
    config = tmp_path / "memd.yaml"
    config.write_text(CONFIG)
    sids = ["ptl-a", "ptl-b"]
    builders = {sid: TranscriptBuilder(session_id=sid) for sid in sids}
    with LoopbackProcess() as refusing:
        refusing.add_script(TOO_LONG_SCRIPT)
        port = refusing.url.rsplit(":", 1)[1]
        env = {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": refusing.url}
        with fake_home(tmp_path, MEMD_CONFIG=str(config), **env) as home:
            proc = start_memd(home)
            try:
                wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=30, what="llm")
                project = home.projects / SLUG
                project.mkdir(parents=True)
                paths = {sid: project / f"{sid}.jsonl" for sid in sids}
                grow_both(builders, paths)
                for sid in sids:
                    calls = len(notes_requests(refusing.requests(), sid))
                    assert 1 <= calls <= 3, (sid, calls, read_log(home))
                    notes = wait_for(partial(parked, home, sid), timeout=10, what="parked")
                    assert "PromptTooLong" in notes["waiting_reason"], notes
                sent = [
                    billing.count_prompt(r["body"])
                    for sid in sids
                    for r in notes_requests(refusing.requests(), sid)
                ]
                refusing.close()
                limit = int(max(sent) * 0.7)  # a server that takes only smaller prompts
                with LoopbackProcess(
                    extra_args=("--port", port, "--context-limit", str(limit))
                ) as accepting:
                    accepting.add_script(edit_script())
                    for sid in sids:
                        what = f"notes (sent {sent}, limit {limit}): {notes_row(home, sid)}"
                        wait_for(partial(extracted, home, sid), timeout=90, what=what)
                    for sid in sids:
                        done = notes_requests(accepting.requests(), sid)
                        assert any(r["status"] == 200 for r in done)
                        notes_file = project / sid / "session-memory" / "summary.md"
                        assert "- progress noted" in notes_file.read_text()
            finally:
                assert stop_memd(proc) == 0, read_log(home)


def grow_both(builders: dict[str, TranscriptBuilder], paths: dict[str, Path]) -> None:
    """Both transcripts past the notes threshold, then growing at LINES_PER_S for RUN_S."""
    context = 12_000
    pending: list[tuple[str, bytes]] = []
    k = 0
    while len(pending) < LINES_PER_S * RUN_S + INITIAL_TURNS * 4 * len(builders):
        for sid, builder in builders.items():
            pending += [(sid, line) for line in turn(builder, k, context)]
        context += 6_000
        k += 1
    backlog = INITIAL_TURNS * 4 * len(builders)  # written at once: the first request is big
    for sid, line in pending[:backlog]:
        with paths[sid].open("ab") as f:
            f.write(line)
    started = time.monotonic()
    for i, (sid, line) in enumerate(pending[backlog:]):
        with paths[sid].open("ab") as f:
            f.write(line)
        delay = started + (i + 1) / LINES_PER_S - time.monotonic()
        if delay > 0:
            time.sleep(delay)  # the pace of the writer, not synchronisation


def parked(home: Home, sid: str) -> dict[str, Any] | None:
    notes = notes_row(home, sid)
    reason = (notes or {}).get("waiting_reason") or ""
    return notes if reason.startswith("parked:") else None


def extracted(home: Home, sid: str) -> dict[str, Any] | None:
    notes = notes_row(home, sid)
    return notes if notes and notes["extractions"] >= 1 else None


def test_growth_right_after_hello_gets_notes_once_the_model_is_ready(tmp_path: Path) -> None:
    builder = TranscriptBuilder(session_id="early")
    lines = [line for k in range(4) for line in turn(builder, k, 12_000)]
    with LoopbackProcess() as api:
        api.add_script(edit_script())
        env = {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": api.url}
        with fake_home(tmp_path, **env) as home:
            project = home.projects / SLUG
            project.mkdir(parents=True)
            proc = start_memd(home)  # returns at the first answered hello
            hello = time.monotonic()
            try:
                with (project / "early.jsonl").open("ab") as f:
                    f.writelines(lines)  # within 0.5 s of hello, while the SDK loads
                assert time.monotonic() - hello < 0.5
                loading = not call(home, "status")["llm"]["enabled"]
                wait_for(lambda: extracted(home, "early"), timeout=60, what="notes")
                notes_file = project / "early" / "session-memory" / "summary.md"
                assert "- progress noted" in notes_file.read_text()
                assert loading, "the model client was ready already: the race was not tested"
            finally:
                assert stop_memd(proc) == 0, read_log(home)
