"""Claude Code's compaction served from memd's notes (issue 25), with the real CLI of each
pinned version (tests/claude_cli.py) against loopback Messages-API servers, memd's hooks
installed with ``--compact-takeover``.

A session of a few ``claude -p`` turns, one of them a Read tool call, gets notes as a past
extraction would have left them. ``memdctl compact --fork`` writes a new session with no
model call, and ``claude -p --resume <new id>`` sends the notes once, fewer messages, every
tool call answered and the new prompt last. ``/compact`` is blocked once with the resume
line (no model call), the fork it made resumes the same way, and the next ``/compact`` is
Claude Code's own; in a session whose context is over the window it is never blocked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memd.compaction.service import messages_of
from memd.session.store import ExtractionRecord
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI, RecordedRequest
from memd.testing.loopback_replies import When
from memd.transcript.conversation import Conversation
from memd_client import hook as hook_module
from memd_client.agents.claude_code import TAKEOVER_HOOKS as CLAUDE_TAKEOVER
from memd_client.hooks_install import hook_command, install_hooks
from tests.claude_cli import ClaudeCLI
from tests.conftest import on_a_gateway_model
from tests.daemon_harness import Home, fake_home, read_log, start_memd, stop_memd, wait_for
from tests.daemon_harness import memdctl as run_memdctl
from tests.test_claude_code_cli import main_requests, setup

NOTES_LINE = "Half of the billing canary rollout is done; next: widen it to eu-west"
PROMPTS = [f"step {k}: tell me about part {k} of the rollout plan in detail" for k in range(5)]
READ_PROMPT = "please read the file plan.txt"
SMALL_KEEP = "compaction:\n  keep_min_tokens: 100\n  keep_min_text_messages: 1\n"
BLOCKED = "Compaction blocked by PreCompact hook"


def claude(cli: ClaudeCLI, api: LoopbackAPI, home: Home, project: Path, *args: str) -> str:
    """``claude`` run to success; its stdout."""
    done = cli.run(list(args), cwd=project, env=cli.env(home.env, api.url))
    assert done.returncode == 0, (done.stdout, done.stderr, read_log(home))
    return done.stdout


def transcript(home: Home, sid: str) -> Path:
    (path,) = home.projects.glob(f"*/{sid}.jsonl")
    return path


def sessions(home: Home) -> set[str]:
    return {p.stem for p in home.projects.glob("*/*.jsonl")}


def a_session(cli: ClaudeCLI, api: LoopbackAPI, home: Home, project: Path, turns: int) -> str:
    """``turns`` turns, the last but one reading a file (with six or more). Its id."""
    (project / "plan.txt").write_text("canary first, then eu-west, then everyone\n")
    api.add_rule(
        When(match="read the file plan.txt", turn="first"),
        replies.tool_use("Read", {"file_path": str(project / "plan.txt")}),
    )
    known = sessions(home)
    claude(cli, api, home, project, "-p", PROMPTS[0])
    (sid,) = sessions(home) - known
    prompts = [*PROMPTS[1:4], READ_PROMPT, PROMPTS[4]] if turns >= 6 else PROMPTS[1:turns]
    for prompt in prompts:
        claude(cli, api, home, project, "-p", "--resume", sid, prompt)
    return sid


def plant_notes(home: Home, sid: str, covered_turns: int) -> int:
    """Notes covering the first ``covered_turns`` turns (every turn when it has no more), as
    an extraction leaves them; the session's context in tokens, as memd counts it."""
    path = transcript(home, sid)
    conv = Conversation()
    conv.add_lines(path.read_bytes().splitlines())
    msgs = messages_of(conv)
    prompts = [i for i, m in enumerate(msgs) if m.role == "user" and "tool_result" not in str(m)]
    anchor = msgs[prompts[covered_turns] - 1 if covered_turns < len(prompts) else -1].uuid
    notes = path.parent / sid / "session-memory" / "summary.md"
    notes.parent.mkdir(parents=True)
    notes.write_text(f"# Current State\n{NOTES_LINE}\n")
    record = ExtractionRecord(
        sid, path.parent.name, last_summarized_id=anchor, covered_id=anchor, tokens_at_extraction=1
    )
    records = home.state_dir / "session-notes"
    records.mkdir(parents=True, exist_ok=True)
    (records / f"{sid}.json").write_text(json.dumps(record.to_json()))
    return conv.context().tokens


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
    done = run_memdctl(home, "--json", *args)
    assert done.returncode == 0, (done.stdout, done.stderr, read_log(home))
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def ingested(home: Home, sid: str) -> Callable[[], bool]:
    size = transcript(home, sid).stat().st_size
    return lambda: bool(memdctl(home, "session", sid)["offset"] == size)


def started(home: Home, *sids: str) -> subprocess.Popen[bytes]:
    """memd, once it has read every byte of the sessions ``sids``."""
    proc = start_memd(home)
    for sid in sids:
        wait_for(ingested(home, sid), timeout=20, what=f"{sid} ingested")
    return proc


def assert_resumed(request: RecordedRequest, before: RecordedRequest) -> None:
    """The first request of a resumed fork: the notes once, the kept tool pair, fewer
    messages than before, every call answered, the new prompt last."""
    text = json.dumps(request.body["messages"], ensure_ascii=False)
    assert text.count(NOTES_LINE) == 1, text[:3000]
    assert READ_PROMPT in text and "canary first, then eu-west" in text
    assert PROMPTS[0] not in text  # replaced by the notes
    assert len(request.body["messages"]) < len(before.body["messages"])
    assert unanswered(request) == []
    last = last_turn(request)
    assert last["role"] == "user" and "what next?" in json.dumps(last)


def test_compaction_from_the_notes_through_the_real_claude_code(
    claude_cli_each: ClaudeCLI, claude_api: LoopbackAPI, memd_api: LoopbackAPI, tmp_path: Path
) -> None:
    cli, api = claude_cli_each, claude_api
    with fake_home(tmp_path) as home:
        project = setup(home, memd_api, {})
        settings = home.root / ".claude" / "settings.json"
        command = hook_command(sys.executable, hook_module.__file__)
        install_hooks(settings, command, CLAUDE_TAKEOVER)
        config = Path(home.env["MEMD_CONFIG"])
        # No notes runs: the notes the test plants stay as they are (and no update is due).
        no_runs = "  init_tokens: 100000000\n"
        assert no_runs in config.read_text()
        normal = config.read_text().replace(no_runs, no_runs + "  update_tokens: 100000000\n")
        normal += SMALL_KEEP
        # No extraction either: a claude -p's end (SessionEnd) is a turn memd extracts beside
        # Claude Code's memory by default, a model request that is not the takeover's.
        normal = normal.replace("memory:\n", "memory:\n  extract_beside_claude_code: false\n")
        sid = a_session(cli, api, home, project, turns=6)
        before = main_requests(api, 0)[-1]
        spare = a_session(cli, api, home, project, turns=2)
        plant_notes(home, sid, covered_turns=4)
        context = plant_notes(home, spare, covered_turns=1)

        # Over the window (memd's window set just under this session's context, its model one
        # memd knows no window of): never blocked.
        config.write_text(normal + f"  default_context_window: {context + 20_000}\n")
        spare_path = transcript(home, spare)
        spare_path.write_bytes(on_a_gateway_model(spare_path.read_bytes()))
        proc = started(home, spare)
        try:
            since = len(api.requests)
            said = claude(cli, api, home, project, "-p", "--resume", spare, "/compact")
            assert BLOCKED not in said and len(api.requests) > since  # Claude Code's own
            why = memdctl(home, "status")["compaction"]["takeover"]["last_pass"]
            assert "over the window" in why
        finally:
            assert stop_memd(proc) == 0, read_log(home)

        config.write_text(normal)
        old = transcript(home, sid).read_bytes()
        proc = started(home, sid)
        try:
            calls = len(api.requests), len(memd_api.requests)
            fork = memdctl(home, "compact", sid, "--fork")
            assert fork["forked"] and fork["api_calls"] == 0
            assert (len(api.requests), len(memd_api.requests)) == calls
            assert transcript(home, sid).read_bytes() == old
            since = len(api.requests)
            claude(cli, api, home, project, "-p", "--resume", fork["session"], "what next?")
            assert_resumed(main_requests(api, since)[0], before)

            known, since, spent = sessions(home), len(api.requests), len(memd_api.requests)
            said = claude(cli, api, home, project, "-p", "--resume", sid, "/compact")
            (taken,) = sessions(home) - known
            assert BLOCKED in said and f"claude --resume {taken}" in said, said
            assert (len(api.requests), len(memd_api.requests)) == (since, spent)
            assert transcript(home, sid).read_bytes().startswith(old)  # Claude Code appends
            claude(cli, api, home, project, "-p", "--resume", taken, "what next?")
            assert_resumed(main_requests(api, since)[0], before)

            since = len(api.requests)
            said = claude(cli, api, home, project, "-p", "--resume", sid, "/compact")
            assert BLOCKED not in said and len(api.requests) > since  # not twice in a row
        finally:
            assert stop_memd(proc) == 0, read_log(home)
