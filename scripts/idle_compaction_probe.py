"""What Claude Code 2.1.332 writes, and which hooks it runs, when it compacts a session while
idle (issue 38, item 3), with memd's hooks (the takeover's PreCompact included) and daemon.

Claude Code compacts while idle only in an attended (interactive) session whose prompt cache
lives an hour, 90% of the hour after the last main request went out (54 minutes), with a
context of at least max(100K, CLAUDE_CODE_IDLE_COMPACT_MIN_TOKENS or 200K) tokens. This probe
runs the real CLI in a terminal (a pty) against the loopback model with a one-hour cache
(ENABLE_PROMPT_CACHING_1H), on a session of ~140K tokens, with libfaketime (Debian's
``faketime``) preloaded as tests/test_claude_code_idle.py does (whose steps it shares): when
the loopback server receives one turn's request, the CLI's wall clock moves on 54 minutes less
a few seconds (the monotonic clock does not: Bun stops on a faked one), so the timer Claude
Code arms at the turn's end is due a few seconds later. Then one more prompt. It prints what
it found:

    python3 scripts/idle_compaction_probe.py [--skip-switch] [--keep DIR]

(``--skip-switch``: with CLAUDE_CODE_DISABLE_PRECOMPACT_SKIP=1.) It needs the pinned CLI
(tests/agent_cli.py's cache) and ``apt-get install faketime``; a probe for people (it prints
what it saw, in about 30 s), where tests/test_claude_code_idle.py asserts what memd must
keep across an idle compaction.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memd.testing.loopback import LoopbackAPI  # noqa: E402
from memd.testing.loopback_replies import Message  # noqa: E402
from tests import test_claude_code_idle as idle  # noqa: E402
from tests.claude_cli import ClaudeCLI, installed_claude  # noqa: E402
from tests.claude_tui import Terminal, libfaketime, moved_clock_env  # noqa: E402
from tests.daemon_harness import (  # noqa: E402
    Home,
    call,
    fake_home,
    read_log,
    start_memd,
    stop_memd,
    wait_for,
)
from tests.test_claude_code_cli import main_requests  # noqa: E402
from tests.test_claude_code_compact import NOTES_LINE, transcript  # noqa: E402
from tests.test_claude_code_idle import lines_of  # noqa: E402

VERSION = "2.1.332"


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


def idle_turn(api: LoopbackAPI, path: Path, since: int, requests: int) -> dict[str, Any]:
    """The turn on the command line, and what came of it."""
    found: dict[str, Any] = {}
    try:
        idle.idle_compacted(api, path, since)
        found["compacted"] = True
    except AssertionError as exc:
        found["compacted"], found["why_not"] = False, str(exc)
    asked = json.dumps([r.body for r in api.requests[requests:]])
    found["cache_ttls_asked"] = sorted(set(re.findall(r'"ttl": ?"[^"]*"', asked)))
    found["written_after_turn"] = [brief(e) for e in lines_of(path)[since:]]
    found["requests_after_turn"] = [
        {"messages": len(r.body.get("messages", [])),
         "last_user_head": json.dumps(r.body.get("messages", [{}])[-1])[:200]}
        for r in api.requests[requests:] if isinstance(r.body, dict)
    ]  # fmt: skip
    return found


def next_turn(term: Terminal, api: LoopbackAPI) -> dict[str, Any]:
    """The prompt after it: memd's notes once, beside Claude Code's summary, or twice?"""
    sent = len(api.requests)
    term.type(idle.NEXT + "\r")
    main = wait_for(lambda: main_requests(api, sent), timeout=90, what="the next request")
    text = json.dumps(main[0].body["messages"], ensure_ascii=False)
    return {
        "messages": len(main[0].body["messages"]),
        "memd_notes_blocks": text.count(NOTES_LINE),
        "claude_code_summary_blocks": text.count(idle.SUMMARY_LINE),
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
        project, sid = idle.prepared(cli, home, memd_api, api.url)
        path, clock = transcript(home, sid), tmp / "faketime.rc"
        proc = start_memd(home)
        idle.session(home, sid, path)
        api.add_rule(idle.SUMMARY_ASKED, Message(({"type": "text", "text": idle.SUMMARY},)))
        api.set_handler(idle.moves_the_clock(clock))
        env = faked(cli.env(home.env, api.url), clock, skip_switch)
        since, requests = len(lines_of(path)), len(api.requests)
        argv = [str(command), "--debug", "--resume", sid, idle.TURN]
        term = Terminal(argv, project, env)
        try:
            report |= idle_turn(api, path, since, requests)
            report["memd_takeover"] = call(home, "status")["compaction"]["takeover"]
            row = call(home, "session", {"session": sid})
            report["memd_session"] = {k: row.get(k) for k in MEMD_FIELDS}
            if report["compacted"]:
                report["next_request"] = next_turn(term, api)
            report["claude_code_debug"] = debug_lines(home)
        except AssertionError as exc:  # wait_for's timeout
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
