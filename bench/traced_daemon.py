"""``memd`` under tracemalloc, for measuring where its Python heap goes (bench/ipc.py --trace).

    MEMD_TRACE_OUT=/tmp/snap python3 bench/traced_daemon.py [memd args]

SIGUSR1 writes a snapshot to ``$MEMD_TRACE_OUT.<n>`` (n = 1, 2, ...), then an empty
``$MEMD_TRACE_OUT.<n>.done``. tracemalloc roughly doubles the daemon's RSS: read RSS
figures from an untraced run.
"""

from __future__ import annotations

import os
import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "client")]

_taken = 0


def _dump(signum: int, frame: FrameType | None) -> None:
    global _taken
    _taken += 1
    out = f"{os.environ['MEMD_TRACE_OUT']}.{_taken}"
    tracemalloc.take_snapshot().dump(out)
    Path(f"{out}.done").touch()


if __name__ == "__main__":
    tracemalloc.start(12)
    signal.signal(signal.SIGUSR1, _dump)
    from memd.daemon.main import main

    sys.exit(main())
