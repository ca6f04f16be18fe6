"""A failing filesystem below memd's own write functions, for a daemon the tests start where
no tmpfs can be mounted (not root): while the file named by ``MEMDTEST_FAULT_FILE`` exists,
every ``os.open`` that creates or writes a file under ``MEMDTEST_FAULT_DIR`` fails with the
errno named in it (``ENOSPC``, ``EROFS``), as a full or read-only disk would.

Put this folder first on the daemon's ``PYTHONPATH`` (:class:`tests.disk_support.ShimDisk`).
"""

from __future__ import annotations

import os

from tests.disk_support import install_shim

_DIR = os.environ.get("MEMDTEST_FAULT_DIR")
_FILE = os.environ.get("MEMDTEST_FAULT_FILE")
if _DIR and _FILE:
    install_shim(_DIR, _FILE)
