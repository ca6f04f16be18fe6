"""The garbage collector's pauses: the daemon's loaded code out of every full collection.

A full collection walks every object the collector tracks, with the event loop stopped
meanwhile. Most of a running daemon's objects come from its imports (the model SDK and its
validation library, the MCP types, tiktoken, memd itself): about 180,000, which one full
collection walked in 30–130 ms on the machines here, a pause in any request or append that
met it. They live as long as the process, so :func:`freeze_loaded` collects once and moves
every object then alive out of the collector's view (:func:`gc.freeze`): later full
collections walk only what came since. It runs when the features are loaded and again when
the model client is first opened (the SDK's import), each time taking what came since.

``status`` says how many objects were frozen, as counted at the last freeze:
:func:`gc.get_freeze_count` walks the whole frozen list (~5 ms for 170,000 objects on
CPython 3.11), which made every ``status`` cost 40 ``hello``. Full collections are not timed from a
:data:`gc.callbacks` hook: a callback is Python code that runs wherever a collection starts,
so the start's signal handler (which raises to stop it, :mod:`memd.daemon.signals`) could
raise inside it, where the interpreter only prints the exception and drops it.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

from memd.changes import CHANGES

log = logging.getLogger(__name__)
_FROZEN = [0]  # objects frozen, counted at the last freeze (a few die since: not counted)


def status() -> dict[str, Any]:
    """``status``'s ``daemon.gc``: how many objects full collections no longer walk."""
    return {"frozen": _FROZEN[0]}


def freeze_loaded(why: str) -> int:
    """Collect once, then keep every object alive now out of later collections; how many
    objects the collector no longer walks in all. Blocking: call it on the loop only where a
    pause of one collection is due anyway (right after loading)."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    frozen = _FROZEN[0] = gc.get_freeze_count()
    CHANGES.bump()
    log.debug(
        "%s: %d objects kept out of garbage collection (%.0f ms)",
        why,
        frozen,
        (time.perf_counter() - started) * 1000,
    )
    return frozen
