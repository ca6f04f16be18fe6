"""What a reload did (SIGHUP and ``memdctl reload`` share it), kept for ``memdctl status``.

Most settings apply at once, the model client is opened again from the env file; the paths
(socket, state, transcripts root), the IPC server's limits and the watcher's timing are fixed
when the daemon starts, so a reload that changes them says they wait for a restart instead of
claiming they took effect.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, fields
from typing import Any

from memd.config import LoadedConfig

# What the watcher is started with (memd/daemon/watch.py): a reload does not restart it.
WATCHER_SETTINGS = ("watch_step_ms", "watch_debounce_ms", "poll_interval_ms")


@dataclass(frozen=True)
class ReloadOutcome:
    at: float
    outcome: str  # "reloaded" or "failed"
    message: str | None  # why it failed
    restart_needed: tuple[str, ...]  # settings that changed and wait for a restart

    @classmethod
    def reloaded(cls, waiting: list[str]) -> ReloadOutcome:
        return cls(time.time(), "reloaded", None, tuple(waiting))

    @classmethod
    def failed(cls, message: str) -> ReloadOutcome:
        return cls(time.time(), "failed", message, ())

    @property
    def text(self) -> str:
        """The outcome in words, as ``memdctl reload`` prints it."""
        if self.outcome == "failed":
            return self.message or "reload failed"
        waiting = ", ".join(self.restart_needed)
        return "reloaded" + (f"; after a restart: {waiting}" if waiting else "")

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["restart_needed"] = list(self.restart_needed)
        return data


def restart_needed(running: LoadedConfig, fresh: LoadedConfig) -> list[str]:
    """Pure: the dotted names of start-time settings that differ between the two."""
    waiting = [
        f"paths.{f.name}"
        for f in fields(running.paths)
        if getattr(running.paths, f.name) != getattr(fresh.paths, f.name)
    ]
    ipc_now, ipc_new = running.config.ipc, fresh.config.ipc
    waiting += [
        f"ipc.{f.name}"
        for f in fields(ipc_now)
        if getattr(ipc_now, f.name) != getattr(ipc_new, f.name)
    ]
    now, new = running.config.transcripts, fresh.config.transcripts
    waiting += [
        f"transcripts.{name}"
        for name in WATCHER_SETTINGS
        if getattr(now, name) != getattr(new, name)
    ]
    return waiting
