"""After a restart, sessions near compaction are rebuilt and tokenized before anything else.

The real daemon, real transcripts, a real restart: the session above half its compaction
threshold is resident again without any request for it; the small one stays on disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CORPUS, on_a_gateway_model
from tests.daemon_harness import call, fake_home, read_log, start_memd, stop_memd, wait_for
from tests.test_daemon_e2e import SLUG, expected_figures

pytestmark = pytest.mark.slow

HOT = CORPUS / "napoli-matcha" / "05_a737f62fb9_1_full.jsonl"
COLD = CORPUS / "spotter" / "short.jsonl"
RESERVE, BUFFER = 20_000, 13_000  # the config defaults the threshold is computed from


def rows(listing: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["session_id"]: r for r in listing}


def test_sessions_near_compaction_are_warm_after_a_restart(tmp_path: Path) -> None:
    hot_tokens = expected_figures(HOT.read_bytes())[1]
    cold_tokens = expected_figures(COLD.read_bytes())[1]
    threshold = int(hot_tokens * 1.5)  # hot is above half of it, cold far below
    assert cold_tokens < threshold // 2 < hot_tokens
    window = threshold + RESERVE + BUFFER
    args = (f"--set=compaction.default_context_window={window}",)
    with fake_home(tmp_path) as home:

        def since_restart() -> str:
            log = (home.root / "memd.log").read_text(errors="replace")
            return log[log.rindex("ready on") :]

        project = home.projects / SLUG
        project.mkdir(parents=True)
        (project / "hot.jsonl").write_bytes(on_a_gateway_model(HOT.read_bytes()))
        (project / "cold.jsonl").write_bytes(on_a_gateway_model(COLD.read_bytes()))
        proc = start_memd(home, *args)
        wait_for(lambda: call(home, "status")["ingest"]["parsed"] == 2, timeout=60, what="ingest")
        messages = rows(call(home, "sessions"))["hot"]["message_count"]
        wait_for(
            lambda: call(home, "status", {"limit": 0})["ingest"]["token_estimates"] >= messages,
            timeout=60,
            what="the hot session's messages to be estimated as it was read",
        )
        assert stop_memd(proc) == 0, read_log(home)
        saved = home.root / ".local" / "state" / "memd" / "token-estimates.bin"
        assert saved.stat().st_size > 12 * 15  # the estimates of its 16 messages are kept

        proc = start_memd(home, *args)
        try:
            found = wait_for(
                lambda: (r := rows(call(home, "sessions")))["hot"]["in_memory"] and r,
                timeout=60,
                what="the hot session to be warmed",
            )
            assert found["hot"]["compact_threshold"] == threshold
            assert not found["cold"]["in_memory"]  # unchanged and small: left on disk
            assert call(home, "status")["ingest"]["in_memory"] == 1
            wait_for(lambda: "startup scan:" in since_restart(), timeout=60, what="the scan")
        finally:
            assert stop_memd(proc) == 0, read_log(home)
        log = since_restart()
        assert log.index("warmed 1 sessions above half") < log.index("startup scan:")
        # Its messages were estimated before the restart: none is tokenized again.
        assert "(0 messages estimated, the others' estimates were kept)" in log
