"""SIGTERM, SIGINT and SIGHUP from the first instant of ``memd`` to its last.

Python's defaults end the process on SIGHUP and raise ``KeyboardInterrupt`` (a traceback) on
SIGINT. The event loop's receiver (:func:`memd.daemon.shutdown.run_signals`) replaces them
only once the daemon's task group runs, and puts the defaults back when it closes: a SIGHUP
in the first second of a start ended memd. So :meth:`Signals.install` is the first thing
``main()`` does, and the handlers stay in place to the end, in three phases. This module, like
:mod:`memd.daemon.main`, imports at its top only what the interpreter's own start has loaded
(``os``, ``sys``, ``time``; ``signal`` over the loaded ``_signal`` and ``enum``): every import
before ``main()`` is an instant with no handler (``logging``, ``threading``, ``argparse`` and
``json`` there took ~0.1 s, and a SIGHUP in it ended memd), so what the handlers need later is
imported when they need it.

* **starting** (before the event loop): a SIGHUP is remembered and replayed by the receiver
  once the daemon serves (the config is read after it anyway); SIGTERM or SIGINT raises
  :class:`Stopped` in the main thread, which unwinds the start (the instance lock is let go)
  and ``main()`` exits 0 with one line.
* **running**: signals are only remembered until the receiver takes over and replays them.
* **stopping** (the receiver is closed): a SIGHUP is ignored, a second SIGTERM or SIGINT
  changes nothing.

The first SIGTERM or SIGINT also arms a backstop: a process still there
:data:`STOP_DEADLINE_S` later (stuck in a read of a failing disk, a worker thread that never
returns) logs one line and exits 0 at once. Every write memd makes is atomic and the next start
repairs a kill at any instant, so that loses only what the next start rebuilds.
"""

from __future__ import annotations

import os
import signal
import sys
import time

TYPE_CHECKING = False  # typing is not loaded yet: see the module docstring
if TYPE_CHECKING:
    import threading
    from types import FrameType
    from typing import Literal

    Phase = Literal["starting", "running", "stopping"]

STOP_DEADLINE_S = 10.0  # from the first SIGTERM/SIGINT to the end of the process (README)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Stopped(BaseException):
    """SIGTERM or SIGINT before the event loop ran: start-up unwinds and ``memd`` exits 0.
    A ``BaseException``, as ``KeyboardInterrupt`` is: no ``except Exception`` swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Signals:
    """The process's signal handlers and what they were told (see the module docstring).

    Until :meth:`install` it changes nothing (a daemon run inside a test process leaves the
    test's handlers alone)."""

    def __init__(self) -> None:
        self.installed = False
        self.phase: Phase = "starting"
        self.stop_signal: int | None = None  # the first SIGTERM/SIGINT
        self.stop_at: float | None = None  # time.monotonic() when it came
        self.reload_pending = False  # a SIGHUP came before the receiver took over
        self._backstop: threading.Timer | None = None

    def install(self) -> None:
        """Put the handlers in place (the main thread; before anything else starts)."""
        for signum in HANDLED:
            signal.signal(signum, self._handle)
        self.installed = True

    def enter_loop(self) -> None:
        """The event loop is about to run: from now on signals are remembered, not raised."""
        self.phase = "running"

    def leave_loop(self) -> None:
        """The receiver closed (and put the defaults back): our handlers again, to the end."""
        self.phase = "stopping"
        if self.installed:
            self.install()

    def take_reload(self) -> bool:
        """Whether a SIGHUP came before the receiver took over (and forget it)."""
        pending, self.reload_pending = self.reload_pending, False
        return pending

    def stop_requested(self, signum: int) -> bool:
        """Record a SIGTERM/SIGINT; True for the first one (which arms the backstop)."""
        if self.stop_signal is not None:
            return False
        self.stop_signal, self.stop_at = signum, time.monotonic()
        if self.installed:
            self._arm_backstop()
        return True

    def _arm_backstop(self) -> None:
        """Start the backstop's timer, importing nothing: this runs in a signal handler, which
        may interrupt the import of the very module it would import (a SIGTERM while ``copy``
        loaded ``weakref`` and ``_weakrefset`` made ``import threading`` in here raise
        ``ImportError``, a traceback instead of the one line). Before ``threading`` is loaded
        memd is starting, and :class:`Stopped` unwinds the start at once, with no thread to
        wait for."""
        timer = getattr(sys.modules.get("threading"), "Timer", None)
        if timer is None:
            return
        self._backstop = timer(STOP_DEADLINE_S, self._give_up)
        self._backstop.daemon = True
        self._backstop.start()

    @property
    def stop_name(self) -> str | None:
        """The first stop signal's name (``SIGTERM``), None without one."""
        return signal.Signals(self.stop_signal).name if self.stop_signal else None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            self.reload_pending = self.phase != "stopping"
            return
        first = self.stop_requested(signum)
        if first and self.phase == "starting":
            raise Stopped(signum)

    def _give_up(self) -> None:
        """The backstop: the deadline passed and the process is still here."""
        import logging

        logging.getLogger(__name__).error(
            "%s %.0f s ago and memd has not finished stopping (something is stuck); "
            "exiting now: the next start repairs what was left",
            self.stop_name or "the stop",
            STOP_DEADLINE_S,
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stderr.flush()
        os._exit(0)
