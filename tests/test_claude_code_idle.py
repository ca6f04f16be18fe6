"""An idle compaction of the real Claude Code 2.1.332 (issue 38, item 3), against a loopback
model, with memd's hooks (the takeover's PreCompact included) and daemon.

Claude Code compacts an attended session on its own 90% of a one-hour prompt cache's life
after its last main request went out (54 minutes), when the context is at least the larger
of 100K tokens and ``CLAUDE_CODE_IDLE_COMPACT_MIN_TOKENS``. The timer is armed at a turn's
end from the wall clock (``Date.now()``), with nothing to shorten it, so the CLI runs in a pty
with libfaketime preloaded for it alone (:mod:`tests.claude_tui`): when the loopback server
receives the turn's request, before it answers, the CLI's wall clock moves on those 54
minutes, and the timer is due as the turn ends. A ``claude -p`` of a ~120K-token prompt
makes the session; memd holds notes of it; ``claude --resume <id> "step 2: ..."`` runs the
turn in the terminal; then one more prompt is typed.

What a user relies on, asserted: memd reads the boundary (``boundaries_seen``), its context
figure is never below what Claude Code says the compaction left (``postTokens``) and is
marked stale until the next answer, then that answer's; no PreCompact reached memd (the
takeover neither took nor passed anything: Claude Code runs none for an idle compaction);
memd's SessionStart (``compact``) hook brings the notes; and the next request carries
Claude Code's summary once and memd's notes once, without the compacted prompt.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from memd.testing.loopback import LoopbackAPI, RecordedRequest
from memd.testing.loopback_replies import Message, Reply, When
from memd_client import hook as hook_module
from memd_client.agents.claude_code import TAKEOVER_HOOKS
from memd_client.errors import MemdClientError
from memd_client.hooks_install import hook_command, install_hooks
from tests.claude_cli import ClaudeCLI
from tests.claude_tui import (
    LIBFAKETIME_GLOBS,
    NO_LIBFAKETIME,
    Terminal,
    libfaketime,
    moved_clock_env,
    trust,
)
from tests.daemon_harness import (
    Home,
    call,
    fake_home,
    load_stretch,
    read_log,
    start_memd,
    stop_memd,
    wait_for,
)
from tests.test_claude_code_cli import main_requests, setup
from tests.test_claude_code_compact import (
    NOTES_LINE,
    last_turn,
    plant_notes,
    transcript,
)

pytestmark = pytest.mark.slow

IDLE_FIRES_S = 0.9 * 3600  # 90% of a one-hour cache's life after the request went out
LEAD_S = 5.0
BIG_PROMPT_CHARS = 440_000  # ~120K tokens with the system prompt: past the 100K floor
BIG_PROMPT = " ".join(f"part{k} of the rollout plan" for k in range(BIG_PROMPT_CHARS // 24))
TURN = "step 2: what next?"
NEXT = "step 3: and now?"
SUMMARY_LINE = "go through the parts of the rollout plan"
SUMMARY = (
    "<analysis>The user walks through a rollout plan step by step.</analysis>\n<summary>\n"
    f"1. Primary Request and Intent: {SUMMARY_LINE}.\n2. Current Work: step 2 was answered.\n"
    "</summary>"
)
IDLE_NOTICE = "Compacted while idle, before the prompt cache expired"
# Claude Code's compaction prompt (its last message: "CRITICAL: Respond with TEXT ONLY ...")
SUMMARY_ASKED = When(match=r"(?i)summary of the conversation")


def lines_of(path: Path) -> list[dict[str, Any]]:
    out = []
    for raw in path.read_bytes().splitlines():
        try:
            out.append(json.loads(raw))
        except ValueError:
            continue
    return out


def a_big_session(cli: ClaudeCLI, project: Path, env: dict[str, str], home: Home) -> str:
    """One ``claude -p`` turn of :data:`BIG_PROMPT` (on stdin: past an argument's limit)."""
    done = cli.run(["-p"], cwd=project, env=env, stdin=BIG_PROMPT)
    assert done.returncode == 0, (done.stdout, done.stderr)
    (path,) = home.projects.glob("*/*.jsonl")
    return path.stem


def moves_the_clock(clock: Path) -> Any:
    """A loopback handler: the turn's main request (tools offered, :data:`TURN` its prompt)
    has gone out, so, before it is answered, the CLI's wall clock moves on to
    :func:`lead` seconds before the idle timer is due (Claude Code times the cache from when
    the request went out and arms the timer at the turn's end; fired while the turn is still
    winding down, its stop hooks running, the timer finds the session busy and does nothing)."""
    asked, offset = When(match=TURN), IDLE_FIRES_S - lead()

    def handler(body: dict[str, Any]) -> Reply | None:
        if body.get("tools") and asked.captures(body) is not None:
            clock.write_text(f"+{int(offset)}\n")
        return None

    return handler


def lead() -> float:
    """How long before the timer is due the turn's answer goes out: more than the turn's
    end takes (stop hooks included), stretched with the machine's load."""
    return min(LEAD_S * load_stretch(), 30.0)


def after(path: Path, since: int, kind: str, subtype: str | None = None) -> dict[str, Any] | None:
    """The first line of ``kind`` (and ``subtype``) written after the first ``since``."""
    for entry in lines_of(path)[since:]:
        if entry.get("type") == kind and (subtype is None or entry.get("subtype") == subtype):
            return entry
    return None


def session(home: Home, sid: str, path: Path) -> dict[str, Any]:
    """memd's row of the session, once it has read every byte ``path`` holds now."""
    size = path.stat().st_size

    def read() -> dict[str, Any] | None:
        try:
            row: dict[str, Any] = call(home, "session", {"session": sid})
        except MemdClientError:  # a reply late on a loaded machine (a 0.5 MB line to read)
            return None
        return row if row["offset"] >= size else None

    found = wait_for(read, timeout=30, what="memd read the transcript")
    assert found is not None
    return found


def hook_contexts(entries: list[dict[str, Any]], event: str) -> list[str]:
    """What the ``event`` hooks added, as Claude Code records it in the transcript."""
    return [
        json.dumps(e["attachment"], ensure_ascii=False)
        for e in entries
        if e.get("type") == "attachment"
        and e["attachment"].get("type") == "hook_additional_context"
        and e["attachment"].get("hookEvent") == event
    ]


def context_of(entry: dict[str, Any]) -> int:
    """What an answer's usage says the context is: its prompt and its output."""
    usage = entry["message"]["usage"]
    keys = (
        "input_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "output_tokens",
    )
    return sum(int(usage.get(k) or 0) for k in keys)


def idle_compacted(api: LoopbackAPI, path: Path, since: int) -> tuple[int, dict[str, Any]]:
    """The turn answered, then Claude Code's summary request, its compact boundary and its
    notice: the boundary's line number and the boundary."""
    answered = wait_for(lambda: after(path, since, "assistant"), timeout=60, what="the turn")
    assert answered is not None
    wait_for(
        lambda: any(SUMMARY_ASKED.captures(r.body) is not None for r in api.requests),
        timeout=15 + lead(),  # a refusal (a context too small, a busy session) sends none
        what="Claude Code's idle compaction request (its timer fired at the turn's end)",
    )
    boundary = wait_for(
        lambda: after(path, since, "system", "compact_boundary"), timeout=20, what="boundary"
    )
    # Its last line: the SessionStart hooks' context is written by then.
    said = wait_for(
        lambda: after(path, since, "system", "informational"), timeout=20, what="its notice"
    )
    assert said is not None and str(said["content"]).startswith(IDLE_NOTICE), said
    entries = lines_of(path)
    return entries.index(boundary), boundary


def assert_next_request(request: RecordedRequest) -> None:
    """The summary once, memd's notes once, the compacted prompt gone, the new prompt last."""
    text = json.dumps(request.body["messages"], ensure_ascii=False)
    assert text.count(SUMMARY_LINE) == 1, text[:3000]
    assert text.count(NOTES_LINE) == 1, text[:3000]
    assert "part1000 of the rollout plan" not in text
    last = last_turn(request)
    assert last["role"] == "user" and NEXT in json.dumps(last)


def prepared(cli: ClaudeCLI, home: Home, memd_api: LoopbackAPI, api_url: str) -> tuple[Path, str]:
    """memd's hooks (the takeover's too) and config, a big session with memd's notes of it:
    the project and the session's id."""
    project = setup(home, memd_api, {})
    settings = home.root / ".claude" / "settings.json"
    install_hooks(settings, hook_command(sys.executable, hook_module.__file__), TAKEOVER_HOOKS)
    config = Path(home.env["MEMD_CONFIG"])
    # No extraction of memd's own at a turn's end: no model request beside the test's.
    beside = "memory:\n  extract_beside_claude_code: false\n"
    config.write_text(config.read_text().replace("memory:\n", beside))
    env = cli.env(home.env, api_url)  # onboarding done
    trust(home.root, project)
    sid = a_big_session(cli, project, env, home)
    plant_notes(home, sid, covered_turns=1)
    return project, sid


def test_an_idle_compaction_keeps_memd_right(
    claude_cli_newest: ClaudeCLI, claude_api: LoopbackAPI, memd_api: LoopbackAPI, tmp_path: Path
) -> None:
    library = libfaketime()
    if library is None:
        pytest.skip(NO_LIBFAKETIME.format(where=", ".join(LIBFAKETIME_GLOBS)))
    cli, api = claude_cli_newest, claude_api
    with fake_home(tmp_path) as home:
        project, sid = prepared(cli, home, memd_api, api.url)
        path = transcript(home, sid)
        proc = start_memd(home)
        session(home, sid, path)  # memd has read it all (its replies stretch with the load)
        clock = tmp_path / "clock"
        api.add_rule(SUMMARY_ASKED, Message(({"type": "text", "text": SUMMARY},)))
        api.set_handler(moves_the_clock(clock))
        idle_env = {
            **moved_clock_env(cli.env(home.env, api.url), library, clock),
            "ENABLE_PROMPT_CACHING_1H": "1",  # the one-hour cache an idle compaction needs
            "CLAUDE_CODE_IDLE_COMPACT_MIN_TOKENS": "100000",  # its floor (200K unset)
        }
        since = len(lines_of(path))
        term = Terminal([str(cli.command), "--resume", sid, TURN], project, idle_env)
        try:
            at, boundary = idle_compacted(api, path, since)
            assert boundary["compactMetadata"]["trigger"] == "auto"
            post = int(boundary["compactMetadata"]["postTokens"])
            row = session(home, sid, path)
            assert row["boundaries_seen"] == 1
            assert row["context_stale"] is True
            assert row["context_tokens"] >= post, (row, boundary)
            takeover = call(home, "status")["compaction"]["takeover"]
            assert (takeover["taken"], takeover["passed"]) == (0, 0)  # no PreCompact ran
            compacted = lines_of(path)[at:]
            brought = hook_contexts(compacted, "SessionStart")  # memd's hook, source compact
            assert len(brought) == 1 and NOTES_LINE in brought[0], brought

            since, sent = len(lines_of(path)), len(api.requests)
            term.type(NEXT + "\r")
            answered = wait_for(lambda: after(path, since, "assistant"), timeout=60, what="next")
            assert answered is not None
            (request, *_) = main_requests(api, sent)
            assert_next_request(request)
            assert not any(
                NOTES_LINE in c for c in hook_contexts(lines_of(path)[since:], "UserPromptSubmit")
            )
            row = session(home, sid, path)
            assert (row["boundaries_seen"], row["context_stale"]) == (1, False)
            measured = row["context_tokens"] - row["context_estimated_tail"]
            assert measured == context_of(answered), (row, answered["message"]["usage"])
        finally:
            term.close()
            assert stop_memd(proc) == 0, read_log(home)
