"""A one-line spinner with the elapsed time, drawn on a terminal while memdctl waits."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import TextIO

FRAMES = "|/-\\"
INTERVAL_S = 0.2


class Spinner:
    """``with Spinner(sys.stderr, "extracting notes"):`` draws ``| extracting notes  3 s``.

    The line is erased when the block ends, so what follows prints on a clean line. The
    label can be changed while it runs (``spinner.label = …``) to show the state.
    """

    def __init__(self, stream: TextIO, label: str) -> None:
        self.stream = stream
        self.label = label
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._draw, name="memdctl-spinner", daemon=True)
        self._started = time.monotonic()
        self._width = 0

    def __enter__(self) -> Spinner:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._write("\r" + " " * self._width + "\r")

    def _draw(self) -> None:
        frame = 0
        while not self._stop.wait(INTERVAL_S if frame else 0.0):
            elapsed = time.monotonic() - self._started
            line = f"{FRAMES[frame % len(FRAMES)]} {self.label}  {elapsed:.0f} s"
            self._width = max(self._width, len(line))
            self._write("\r" + line.ljust(self._width))
            frame += 1

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away; the command goes on
            self._stop.set()
