"""Per-project opt-out (R-B4), cached: the check stats files, and growth events are frequent."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from memd.memory.paths import check_opt_out

TTL_S = 30.0


class OptOuts:
    """``reason(cwd)``: why memory work is off for a session in ``cwd``, or None."""

    def __init__(self, globs: Sequence[str], home: str | None) -> None:
        self.globs = tuple(globs)
        self.home = home
        self._cache: dict[str, tuple[float, str | None]] = {}

    def reason(self, cwd: str) -> str | None:
        if not cwd:
            return None
        now = time.monotonic()
        hit = self._cache.get(cwd)
        if hit is not None and now - hit[0] < TTL_S:
            return hit[1]
        out = check_opt_out(Path(cwd), self.globs, home=self.home)
        value = out.reason if out is not None else None
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[cwd] = (now, value)
        return value

    def reconfigure(self, globs: Sequence[str]) -> None:
        self.globs = tuple(globs)
        self._cache.clear()
