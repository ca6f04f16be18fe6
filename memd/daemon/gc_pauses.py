"""The garbage collector's pauses: the daemon's loaded code out of every full collection,
and the longest pause shown in ``status``.

A full collection walks every object the collector tracks, with the event loop stopped
meanwhile. Most of a running daemon's objects come from its imports (the model SDK and its
validation library, the MCP types, tiktoken, memd itself): about 180,000, which one full
collection walked in 30–130 ms on the machines here, a pause in any request or append that
met it. They live as long as the process, so :func:`freeze_loaded` collects once and moves
every object then alive out of the collector's view (:func:`gc.freeze`): later full
collections walk only what came since. It runs when the features are loaded and again when
the model client is first opened (the SDK's import), each time taking what came since.

:data:`PAUSES` times every full collection (a :data:`gc.callbacks` hook), so ``status``
says how many there were and the longest.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

log = logging.getLogger(__name__)


class Pauses:
    """How many full collections there were and how long the longest took."""

    def __init__(self) -> None:
        self.full = 0
        self.longest_ms = 0.0
        self._started: float | None = None

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            took = (time.perf_counter() - self._started) * 1000
            self._started = None
            self.full += 1
            self.longest_ms = max(self.longest_ms, took)

    def status(self) -> dict[str, Any]:
        return {
            "frozen": gc.get_freeze_count(),
            "full_collections": self.full,
            "longest_full_ms": round(self.longest_ms, 1),
        }


PAUSES = Pauses()


def watch() -> None:
    """Time every full collection from now on (once per process)."""
    if PAUSES not in gc.callbacks:
        gc.callbacks.append(PAUSES)


def freeze_loaded(why: str) -> int:
    """Collect once, then keep every object alive now out of later collections; how many
    objects the collector no longer walks in all. Blocking: call it on the loop only where a
    pause of one collection is due anyway (right after loading)."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.debug(
        "%s: %d objects kept out of garbage collection (%.0f ms)",
        why,
        frozen,
        (time.perf_counter() - started) * 1000,
    )
    return frozen
