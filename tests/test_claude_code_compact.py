"""Claude Code's compaction served from memd's notes (issue 25), with the real CLI of each
pinned version (tests/claude_cli.py) against loopback Messages-API servers.

A session of a few ``claude -p`` turns, one of them a Read tool call, gets notes as a past
extraction would have left them; ``memdctl compact --fork`` writes the new session with no
model call, and ``claude -p --resume <new id>`` sends the notes once, fewer messages, every
tool call answered and the new prompt last.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from memd.compaction.service import messages_of
from memd.session.store import ExtractionRecord
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI, RecordedRequest
from memd.testing.loopback_replies import When
from memd.transcript.conversation import Conversation
from tests.claude_cli import ClaudeCLI
from tests.daemon_harness import Home, fake_home, read_log, start_memd, stop_memd, wait_for
from tests.test_claude_code_cli import main_requests, setup

NOTES_LINE = "Half of the billing canary rollout is done; next: widen it to eu-west"
PROMPTS = [f"step {k}: tell me about part {k} of the rollout plan in detail" for k in range(5)]
READ_PROMPT = "please read the file plan.txt"
SMALL_KEEP = "compaction:\n  keep_min_tokens: 100\n  keep_min_text_messages: 1\n"


def run(cli: ClaudeCLI, api: LoopbackAPI, home: Home, project: Path, *args: str) -> None:
    done = cli.run(list(args), cwd=project, env=cli.env(home.env, api.url))
    assert done.returncode == 0, (done.stdout, done.stderr, read_log(home))


def transcript(home: Home, sid: str) -> Path:
    (path,) = home.projects.glob(f"*/{sid}.jsonl")
    return path


def a_session(cli: ClaudeCLI, api: LoopbackAPI, home: Home, project: Path) -> str:
    """Six turns; the fifth reads a file. Returns the session id."""
    (project / "plan.txt").write_text("canary first, then eu-west, then everyone\n")
    api.add_rule(
        When(match="read the file plan.txt", turn="first"),
        replies.tool_use("Read", {"file_path": str(project / "plan.txt")}),
    )
    run(cli, api, home, project, "-p", PROMPTS[0])
    (sid,) = (p.stem for p in home.projects.glob("*/*.jsonl"))
    for prompt in [*PROMPTS[1:4], READ_PROMPT, PROMPTS[4]]:
        run(cli, api, home, project, "-p", "--resume", sid, prompt)
    return sid


def plant_notes(home: Home, sid: str, covered_turns: int) -> None:
    """Notes covering the first ``covered_turns`` turns, as an extraction leaves them."""
    path = transcript(home, sid)
    conv = Conversation()
    conv.add_lines(path.read_bytes().splitlines())
    msgs = messages_of(conv)
    prompts = [i for i, m in enumerate(msgs) if m.role == "user" and "tool_result" not in str(m)]
    anchor = msgs[prompts[covered_turns] - 1].uuid
    notes = path.parent / sid / "session-memory" / "summary.md"
    notes.parent.mkdir(parents=True)
    notes.write_text(f"# Current State\n{NOTES_LINE}\n")
    record = ExtractionRecord(
        sid, path.parent.name, last_summarized_id=anchor, covered_id=anchor, tokens_at_extraction=1
    )
    records = home.state_dir / "session-notes"
    records.mkdir(parents=True, exist_ok=True)
    (records / f"{sid}.json").write_text(json.dumps(record.to_json()))


def unanswered(request: RecordedRequest) -> list[str]:
    """Tool calls of the request not answered by the message after them."""
    messages = [m for m in request.body["messages"] if m["role"] in ("user", "assistant")]
    missing = []
    for i, message in enumerate(messages):
        content = message["content"] if isinstance(message["content"], list) else []
        calls = {b["id"] for b in content if b.get("type") == "tool_use"}
        after = messages[i + 1]["content"] if i + 1 < len(messages) else []
        answered = {b.get("tool_use_id") for b in after if isinstance(b, dict)}
        missing += sorted(calls - answered)
    return missing


def last_turn(request: RecordedRequest) -> dict[str, Any]:
    """The last user or assistant message (Claude Code puts context after the prompt as
    ``role: "system"`` messages)."""
    turns = [m for m in request.body["messages"] if m["role"] != "system"]
    last: dict[str, Any] = turns[-1]
    return last


def memdctl(home: Home, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "memd_client.cli", "--json", *args],
        env=home.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, (done.stdout, done.stderr, read_log(home))
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_claude_resumes_a_fork_with_the_notes_once_and_fewer_messages(
    claude_cli_each: ClaudeCLI, claude_api: LoopbackAPI, memd_api: LoopbackAPI, tmp_path: Path
) -> None:
    cli = claude_cli_each
    with fake_home(tmp_path) as home:
        project = setup(home, memd_api, {})
        config = Path(home.env["MEMD_CONFIG"])
        config.write_text(config.read_text() + SMALL_KEEP)
        sid = a_session(cli, claude_api, home, project)
        before = main_requests(claude_api, 0)[-1]
        plant_notes(home, sid, covered_turns=4)
        old = transcript(home, sid).read_bytes()
        proc = start_memd(home)
        try:
            wait_for(
                lambda: memdctl(home, "session", sid)["offset"] == len(old),
                timeout=20,
                what="ingest",
            )
            calls = len(claude_api.requests), len(memd_api.requests)
            fork = memdctl(home, "compact", sid, "--fork")
            assert fork["forked"] and fork["api_calls"] == 0
            assert (len(claude_api.requests), len(memd_api.requests)) == calls
            assert transcript(home, sid).read_bytes() == old
            since = len(claude_api.requests)
            run(cli, claude_api, home, project, "-p", "--resume", fork["session"], "what next?")
        finally:
            assert stop_memd(proc) == 0, read_log(home)
        (after,) = main_requests(claude_api, since)[:1]
        text = json.dumps(after.body["messages"], ensure_ascii=False)
        assert text.count(NOTES_LINE) == 1, text[:3000]
        assert READ_PROMPT in text and "canary first, then eu-west" in text  # the kept tool pair
        assert PROMPTS[0] not in text  # replaced by the notes
        assert len(after.body["messages"]) < len(before.body["messages"])
        assert unanswered(after) == []
        last = last_turn(after)
        assert last["role"] == "user" and "what next?" in json.dumps(last)
