"""The daemon's loaded code is kept out of the garbage collector's full collections.

A full collection stops the event loop while it walks every tracked object; a daemon's
imports are most of them. The real daemon, once its features are loaded, has them frozen
(``gc.freeze``) and says so in ``status``.
"""

from __future__ import annotations

from pathlib import Path

from tests.daemon_harness import call, fake_home, read_log, start_memd, stop_memd, wait_for


def test_the_loaded_daemon_keeps_its_code_out_of_full_collections(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        proc = start_memd(home)
        try:
            found = wait_for(
                lambda: (
                    call(home, "status")["daemon"]["gc"]["frozen"] > 10_000
                    and call(home, "status")["daemon"]["gc"]
                ),
                timeout=60,
                what="the features' objects to be frozen",
            )
            assert set(found) == {"frozen"}
        finally:
            assert stop_memd(proc) == 0, read_log(home)
