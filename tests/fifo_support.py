"""Running code that must not wait on a FIFO planted where it reads, without hanging the
test when it does."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path


def waited_on_fifos(target: Callable[[], object], fifos: Sequence[Path]) -> bool:
    """Run ``target`` in a thread; whether it was still running after 20 s (it waited on
    one of ``fifos``). A reader left waiting is then given its end of file, so the thread
    ends and the test does not hang."""
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(20)
    waited = thread.is_alive()
    for _ in range(100):
        if not thread.is_alive():
            break
        for fifo in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(0.1)
    return waited
