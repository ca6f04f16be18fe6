"""The daemon's loaded code is kept out of the garbage collector's full collections.

A full collection stops the event loop while it walks every tracked object; a daemon's
imports are most of them. The real daemon, once its features are loaded, has them frozen
(``gc.freeze``) and says so in ``status``, with its full collections and the longest.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

from memd.daemon.gc_pauses import Pauses
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
            assert found["full_collections"] >= 0 and found["longest_full_ms"] >= 0
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_every_full_collection_is_timed_and_the_longest_kept() -> None:
    pauses = Pauses()
    gc.callbacks.append(pauses)
    try:
        gc.collect(0)  # a young collection is no full one
        assert pauses.full == 0
        started = time.perf_counter()
        gc.collect()
        took = (time.perf_counter() - started) * 1000
    finally:
        gc.callbacks.remove(pauses)
    assert pauses.full == 1 and 0 < pauses.longest_ms <= took
    assert pauses.status()["full_collections"] == 1
