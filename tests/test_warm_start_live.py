"""Warming sessions near compaction after a restart never holds up a live session's appends.

The real daemon, real transcripts, a real restart with many sessions to warm (their token
estimates gone, so each is tokenized again): a line appended to another session right after
the restart is read while the warming still runs, not after it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import CORPUS, on_a_gateway_model
from tests.daemon_harness import call, fake_home, read_log, start_memd, stop_memd, wait_for
from tests.test_daemon_e2e import SLUG, expected_figures

pytestmark = pytest.mark.slow

HOT = CORPUS / "napoli-matcha" / "0c_c3173e5050_3_full.jsonl"
LIVE = CORPUS / "spotter" / "short.jsonl"
RESERVE, BUFFER = 20_000, 13_000  # the config defaults the threshold is computed from
COPIES = 80  # enough to warm for a good part of a second


def test_a_live_append_is_read_while_the_restart_still_warms(tmp_path: Path) -> None:
    hot_tokens = expected_figures(HOT.read_bytes())[1]
    window = int(hot_tokens * 1.5) + RESERVE + BUFFER  # every copy above half its threshold
    args = (f"--set=compaction.default_context_window={window}",)
    hot = on_a_gateway_model(HOT.read_bytes())  # the config's window is its window
    with fake_home(tmp_path) as home:
        project = home.projects / SLUG
        project.mkdir(parents=True)
        for n in range(COPIES):
            (project / f"hot-{n:02d}.jsonl").write_bytes(hot)
        live = project / "live.jsonl"
        live.write_bytes(LIVE.read_bytes())
        proc = start_memd(home, *args)
        wait_for(
            lambda: call(home, "status")["ingest"]["parsed"] == COPIES + 1,
            timeout=120,
            what="every session to be read",
        )
        assert stop_memd(proc) == 0, read_log(home)
        (home.root / ".local" / "state" / "memd" / "token-estimates.bin").unlink()

        line = json.loads(LIVE.read_bytes().splitlines()[-1])
        line["uuid"] = "0f1e2d3c-0000-4000-8000-00000000live"
        appended = (json.dumps(line) + "\n").encode()
        proc = start_memd(home, *args)
        try:
            with live.open("ab") as f:
                f.write(appended)
            size = live.stat().st_size

            def live_row_read() -> bool:
                rows = {r["session_id"]: r for r in call(home, "sessions")}
                return bool(rows["live"]["bytes_parsed"] == size)

            wait_for(live_row_read, timeout=60, what="the live append to be read")
            log = (home.root / "memd.log").read_text(errors="replace")
            since = log[log.rindex("ready on") :]
            assert "warmed" not in since, "the append waited for the warming"
            wait_for(
                lambda: "warmed" in (home.root / "memd.log").read_text(errors="replace"),
                timeout=120,
                what="the warming to end",
            )
        finally:
            assert stop_memd(proc) == 0, read_log(home)
        log = (home.root / "memd.log").read_text(errors="replace")
        assert f"warmed {COPIES} sessions above half" in log[log.rindex("ready on") :]
