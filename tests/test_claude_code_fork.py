"""A fork costs nothing after it (issue 38), with the real Claude Code (the newest pinned,
2.1.332) against loopback models: memd's notes runs on (the init threshold at its default),
``memdctl compact --fork`` writes the new session, and the new session starts with the notes
it was made from, so memd runs no notes agent on it; ``claude -p --resume`` of the fork
sends the notes exactly once in its first request, with memd's hooks installed (the hook
sees the fork's summary holds them) and without them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memd.testing.loopback import LoopbackAPI, RecordedRequest
from memd_client.hooks_install import uninstall_hooks
from tests.claude_cli import ClaudeCLI
from tests.daemon_harness import Home, fake_home, read_log, stop_memd, wait_for
from tests.test_claude_code_cli import main_requests, setup
from tests.test_claude_code_compact import (
    NOTES_LINE,
    SMALL_KEEP,
    a_session,
    claude,
    ingested,
    memdctl,
    plant_notes,
    started,
    transcript,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def notes_runs(memd_api: LoopbackAPI) -> list[RecordedRequest]:
    """memd's notes agent's requests (Edit is its one tool; recall asks the model too)."""
    return [
        r
        for r in memd_api.requests
        if isinstance(r.body, dict) and [t["name"] for t in r.body.get("tools") or []] == ["Edit"]
    ]


def notes_of(home: Home, sid: str) -> dict[str, Any]:
    notes: dict[str, Any] = memdctl(home, "session", sid)["notes"]
    return notes


def fork_and_resume(
    cli: ClaudeCLI, api: LoopbackAPI, home: Home, project: Path, sid: str
) -> RecordedRequest:
    """``compact --fork`` of ``sid``, its notes checked once memd has read the new file,
    then ``claude -p --resume`` of it: its first request."""
    fork = memdctl(home, "compact", sid, "--fork")
    assert fork["forked"] and fork["api_calls"] == 0
    wait_for(ingested(home, fork["session"]), timeout=20, what="the fork ingested")
    seeded = notes_of(home, fork["session"])
    assert seeded["phase"] == "idle", seeded  # no notes run queued for it
    assert NOTES_LINE in Path(seeded["notes_path"]).read_text()  # the notes it was made from
    since = len(api.requests)
    claude(cli, api, home, project, "-p", "--resume", fork["session"], "what next?")
    wait_for(ingested(home, fork["session"]), timeout=20, what="the resume ingested")
    return main_requests(api, since)[0]


def test_a_fork_starts_with_its_notes_and_carries_them_once(
    claude_cli_newest: ClaudeCLI, claude_api: LoopbackAPI, memd_api: LoopbackAPI, tmp_path: Path
) -> None:
    cli, api = claude_cli_newest, claude_api
    with fake_home(tmp_path) as home:
        project = setup(home, memd_api, {})
        config = Path(home.env["MEMD_CONFIG"])
        # Notes runs as by default (a new session past 10K tokens is extracted); no update of
        # the planted notes is due.
        config.write_text(
            "memory:\n  extraction_quiet_s: 600\n"
            "session_notes:\n  update_tokens: 100000000\n" + SMALL_KEEP
        )
        sid = a_session(cli, api, home, project, turns=6)
        plant_notes(home, sid, covered_turns=4)
        proc = started(home, sid)
        try:
            hooked = fork_and_resume(cli, api, home, project, sid)
            uninstall_hooks(home.root / ".claude" / "settings.json")
            bare = fork_and_resume(cli, api, home, project, sid)
            for first in (hooked, bare):
                text = json.dumps(first.body["messages"], ensure_ascii=False)
                assert text.count(NOTES_LINE) == 1, text[:3000]
            assert notes_runs(memd_api) == []  # no notes agent on either fork
            assert transcript(home, sid).exists()
        finally:
            assert stop_memd(proc) == 0, read_log(home)
