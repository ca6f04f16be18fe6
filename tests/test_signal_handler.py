"""The stop handler imports nothing (memd.daemon.signals): it runs between any two bytecodes of
the start, the middle of an import included, where an import of its own found a module half
made (``ImportError: cannot import name 'WeakSet' from partially initialized module
'_weakrefset'``, a SIGTERM at 0.01 s of a start)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

PROBE = textwrap.dedent(
    """
    import sys
    from memd.daemon.signals import Signals

    class NoImports:
        def find_spec(self, name, path=None, target=None):
            raise ImportError(f"the handler imported {name}")

    signals = Signals()
    signals.installed = True  # as install() leaves it, without replacing this probe's handlers
    sys.meta_path.insert(0, NoImports())
    if %(before_threading)s:
        # A start before anything loaded threading. Some Pythons load it in every process
        # (a site-packages .pth file does, on the project's CI machine): taken out here.
        sys.modules.pop("threading", None)
    print(signals.stop_requested(%(signal)d), signals.stop_name, signals._backstop is not None)
    """
)


def probe(preload: str) -> str:
    values = {"before_threading": not preload, "signal": signal.SIGTERM}
    code = (preload + "\n" if preload else "") + PROBE % values
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_stop_before_threading_is_loaded_imports_nothing_and_is_recorded() -> None:
    assert probe("") == "True SIGTERM False"


def test_a_stop_once_threading_is_loaded_arms_the_backstop() -> None:
    assert probe("import threading") == "True SIGTERM True"
