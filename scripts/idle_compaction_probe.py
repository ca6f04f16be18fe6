"""What Claude Code 2.1.332 writes, and which hooks it runs, when it compacts a session while
idle (issue 38, item 3), with memd's hooks (the takeover's PreCompact included) and daemon.

Claude Code compacts while idle only in an attended (interactive) session whose prompt cache
lives an hour, 90% of the hour after the last main request went out (54 minutes), with a
context of at least max(100K, CLAUDE_CODE_IDLE_COMPACT_MIN_TOKENS or 200K) tokens. This probe
runs the real CLI in a terminal (a pty) against the loopback model with a one-hour cache
(ENABLE_PROMPT_CACHING_1H), on a session of ~145K tokens, with libfaketime (Debian's
``faketime``) preloaded: while one turn's answer is on its way, the wall clock moves on 54
minutes (the monotonic clock does not: Bun stops on a faked one), so the timer Claude Code arms
at the turn's end is due a few seconds later. Then one more prompt. It prints what it found:

    python3 scripts/idle_compaction_probe.py [--skip-switch] [--keep DIR]

(``--skip-switch``: with CLAUDE_CODE_DISABLE_PRECOMPACT_SKIP=1.) It needs the pinned CLI
(tests/agent_cli.py's cache) and ``apt-get install faketime``; a probe for people (it prints
what it saw, about a minute), where tests/test_claude_code_idle.py asserts what memd must
keep across an idle compaction.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memd.testing.loopback import LoopbackAPI  # noqa: E402
from memd.testing.loopback_replies import Message, When  # noqa: E402
from memd_client import hook as hook_module  # noqa: E402
from memd_client.agents.claude_code import TAKEOVER_HOOKS  # noqa: E402
from memd_client.hooks_install import hook_command, install_hooks  # noqa: E402
from tests.claude_cli import ClaudeCLI, installed_claude  # noqa: E402
from tests.claude_tui import Terminal, libfaketime, moved_clock_env, trust  # noqa: E402
from tests.daemon_harness import Home, call, fake_home, read_log, stop_memd  # noqa: E402
from tests.test_claude_code_cli import setup  # noqa: E402
from tests.test_claude_code_compact import (  # noqa: E402
    NOTES_LINE,
    plant_notes,
    started,
    transcript,
)
from tests.test_claude_code_idle import lines_of  # noqa: E402

VERSION = "2.1.332"
IDLE_FIRES_S = 0.9 * 3600  # the timer: 90% of a one-hour cache's life after the last request
SUMMARY = (
    "<analysis>The user walks through a rollout plan step by step.</analysis>\n<summary>\n"
    "1. Primary Request and Intent: go through the parts of the rollout plan.\n"
    "2. Current Work: step 3 was answered.\n3. Pending Tasks: the next steps.\n</summary>"
)
SUMMARY_LINE = "go through the parts of the rollout plan"
SUMMARY_REPLY = ({"type": "text", "text": SUMMARY},)
OK_REPLY = ({"type": "text", "text": "ok"},)
BIG_PROMPT_CHARS = 520_000  # ~130K tokens: past the 100K floor of an idle compaction


def wait(what: str, check: Any, timeout: float) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if found := check():
            return found
        time.sleep(0.2)
    raise TimeoutError(what)


def brief(entry: dict[str, Any]) -> dict[str, Any]:
    """A transcript line without its text."""
    keep = ("type", "subtype", "isCompactSummary", "isMeta", "compactMetadata", "requestedModel")
    shown = {k: entry[k] for k in keep if k in entry}
    message = entry.get("message")
    if isinstance(message, dict):
        content = message.get("content")
        shown["text_chars"] = len(json.dumps(content)) if content is not None else 0
        if "usage" in message:
            shown["usage"] = message["usage"]
    if isinstance(entry.get("content"), str):
        shown["content"] = entry["content"][:200]
    return shown


MEMD_FIELDS = ("context_tokens", "context_stale", "boundaries_seen", "compact_threshold")


def a_big_session(command: Path, home: Home, project: Path, env: dict[str, str]) -> str:
    """A session of ~145K tokens (three turns, the first a long prompt); its id."""
    words = " ".join(f"part{k} of the rollout plan" for k in range(BIG_PROMPT_CHARS // 24))
    first = [str(command), "-p"]
    subprocess.run(first, input=words[:BIG_PROMPT_CHARS], cwd=project, env=env,
                   capture_output=True, text=True, timeout=180, check=True)  # fmt: skip
    (path,) = home.projects.glob("*/*.jsonl")
    for prompt in ("step 1: and then?", "step 2: and then?"):
        again = [str(command), "-p", "--resume", path.stem, prompt]
        subprocess.run(again, cwd=project, env=env, capture_output=True, timeout=120, check=True)
    return path.stem


def faked(env: dict[str, str], clock: Path, skip_switch: bool) -> dict[str, str]:
    """The CLI's environment: a one-hour cache, the 100K floor, the wall clock from ``clock``."""
    library = libfaketime()
    assert library is not None
    fake = {
        **moved_clock_env(env, library, clock),
        "ENABLE_PROMPT_CACHING_1H": "1",
        "CLAUDE_CODE_PROMPT_CACHE_TTL": "1h",
        "CLAUDE_CODE_IDLE_COMPACT_MIN_TOKENS": "100000",
    }
    if skip_switch:
        fake["CLAUDE_CODE_DISABLE_PRECOMPACT_SKIP"] = "1"
    return fake


def answered(path: Path, since: int) -> bool:
    return any(e.get("type") == "assistant" for e in lines_of(path)[since:])


def compacted(path: Path, since: int) -> bool:
    return any(e.get("subtype") == "compact_boundary" for e in lines_of(path)[since:])


def idle_turn(term: Terminal, api: LoopbackAPI, path: Path, clock: Path) -> dict[str, Any]:
    """One turn, and the wall clock moved on while its answer comes (see the module doc):
    Claude Code records a main request's cache as of when it went out and arms its idle timer
    at the turn's end, due 90% of the cache's hour after the request: 5 s after the turn."""
    found: dict[str, Any] = {}
    before, requests_before = len(lines_of(path)), len(api.requests)
    api.add_rule(When(match=r"(?i)summary of the conversation"), Message(SUMMARY_REPLY))
    api.add_rule(When(match="step 3"), Message(OK_REPLY, delay_s=6.0), times=1)
    term.type("step 3: what next?\r")
    time.sleep(2.5)
    clock.write_text(f"+{int(IDLE_FIRES_S - 5 - 6.5)}\n")
    wait("the turn", lambda: answered(path, before), 90)
    asked = json.dumps([r.body for r in api.requests[requests_before:]])
    found["cache_ttls_asked"] = sorted(set(re.findall(r'"ttl": ?"[^"]*"', asked)))
    seen, idle = len(lines_of(path)), len(api.requests)
    try:
        wait("an idle compaction", lambda: compacted(path, seen), 60)
        found["compacted"] = True
    except TimeoutError:
        found["compacted"] = False
    time.sleep(3)
    found["written_after_turn"] = [brief(e) for e in lines_of(path)[seen:]]
    found["requests_while_idle"] = [
        {"messages": len(r.body.get("messages", [])),
         "last_user_head": json.dumps(r.body.get("messages", [{}])[-1])[:200]}
        for r in api.requests[idle:] if isinstance(r.body, dict)
    ]  # fmt: skip
    return found


def next_turn(term: Terminal, api: LoopbackAPI, clock: Path) -> dict[str, Any]:
    """The prompt after it: memd's notes once, beside Claude Code's summary, or twice?"""
    clock.write_text(f"+{int(IDLE_FIRES_S) + 60}\n")
    after = len(api.requests)
    term.type("step 4: and now?\r")
    wait("the next turn", lambda: len(api.requests) > after, 90)
    time.sleep(2)
    main = [r for r in api.requests[after:] if isinstance(r.body, dict) and r.body.get("tools")]
    text = json.dumps(main[0].body["messages"], ensure_ascii=False) if main else ""
    return {
        "messages": len(main[0].body["messages"]) if main else None,
        "memd_notes_blocks": text.count(NOTES_LINE),
        "claude_code_summary_blocks": text.count(SUMMARY_LINE),
    }


def debug_lines(home: Home) -> list[str]:
    """What Claude Code's --debug log says of hooks and compaction."""
    return [
        line[:240]
        for f in sorted((home.root / ".claude" / "debug").glob("*.txt"))
        for line in f.read_text(errors="replace").splitlines()
        if re.search(r"Hook|compact", line)
    ][-30:]


def probe(skip_switch: bool, keep: Path | None) -> dict[str, Any]:
    command = installed_claude(version=VERSION)
    if command is None or libfaketime() is None:
        raise SystemExit("needs the pinned claude (npm) and faketime (apt-get install faketime)")
    cli, tmp = ClaudeCLI(command, VERSION), Path(keep or tempfile.mkdtemp(prefix="idle-probe-"))
    report: dict[str, Any] = {"claude_code": VERSION, "skip_switch": skip_switch}
    with (
        LoopbackAPI(profile="real_client", default_text="OK from stub") as api,
        LoopbackAPI() as memd_api,
        fake_home(tmp) as home,
    ):
        project = setup(home, memd_api, {})
        settings = home.root / ".claude" / "settings.json"
        install_hooks(settings, hook_command(sys.executable, hook_module.__file__), TAKEOVER_HOOKS)
        env = cli.env(home.env, api.url)
        trust(home.root, project)
        sid = a_big_session(command, home, project, env)
        plant_notes(home, sid, covered_turns=1)
        proc, clock = started(home, sid), tmp / "faketime.rc"
        argv = [str(command), "--debug", "--resume", sid]
        term = Terminal(argv, project, faked(env, clock, skip_switch))
        try:
            time.sleep(4)
            report |= idle_turn(term, api, transcript(home, sid), clock)
            report["memd_takeover"] = call(home, "status")["compaction"]["takeover"]
            row = call(home, "session", {"session": sid})
            report["memd_session"] = {k: row.get(k) for k in MEMD_FIELDS}
            report["next_request"] = next_turn(term, api, clock)
            report["claude_code_debug"] = debug_lines(home)
        except TimeoutError as exc:
            report["stopped_waiting_for"] = str(exc)
        finally:
            term.close()
            (tmp / "terminal.log").write_bytes(bytes(term.out))
            assert stop_memd(proc) == 0, read_log(home)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--skip-switch", action="store_true", help="run with CLAUDE_CODE_DISABLE_PRECOMPACT_SKIP=1"
    )
    parser.add_argument("--keep", type=Path, help="a folder for the home (kept)")
    args = parser.parse_args()
    print(json.dumps(probe(args.skip_switch, args.keep), indent=2, default=str))


if __name__ == "__main__":
    main()
