"""IPC methods for ``memdctl doctor``: ``probe_api`` proves the key and the API work."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memd.errors import LLMError
from memd.ipc.server import Handler
from memd.llm.client import AnthropicLLM, Disabled

if TYPE_CHECKING:
    from memd.ipc.face import DoctorFace

PROBE_TIMEOUT_S = 10.0


def doctor_methods(daemon: DoctorFace) -> dict[str, Handler]:
    async def probe_api(params: dict[str, Any]) -> Any:
        """A cheap, unbilled token count through the daemon's own model client. Result:
        ``ok``, ``detail`` (what was reached, or why not, with the fix), ``base_url``."""
        llm = daemon.llm
        if llm is None:
            return {"ok": False, "detail": "the model client is still loading; try again"}
        if isinstance(llm, Disabled):
            return {"ok": False, "detail": f"model features are off: {llm.reason}"}
        if not isinstance(llm, AnthropicLLM):
            return {"ok": True, "detail": "a test model client is in use"}
        model = daemon.loaded.config.llm.models.session_notes
        try:
            counted = await llm.count_tokens(model=model, text="ping", timeout=PROBE_TIMEOUT_S)
        except LLMError as exc:
            return {"ok": False, "detail": str(exc), "base_url": llm.base_url}
        return {
            "ok": True,
            "detail": f"{llm.base_url} answered a token count for {model} ({counted} tokens)",
            "base_url": llm.base_url,
        }

    async def doctor_facts(params: dict[str, Any]) -> Any:
        """What only the daemon knows for the doctor's checks: its directories and their
        owner and mode, the transcripts root, the env file."""
        paths = daemon.loaded.paths
        return {
            "uid": os.getuid(),
            "runtime_dir": _dir_facts(paths.runtime_dir),
            "state_dir": _dir_facts(paths.state_dir),
            "projects_root": _dir_facts(paths.projects_root),
            "env_file": daemon.env_file.status(),
            "claude_dir": str(paths.claude_dir),
        }

    return {"probe_api": probe_api, "doctor_facts": doctor_facts}


def _dir_facts(path: Path) -> dict[str, Any]:
    try:
        info = path.stat()
    except OSError as exc:
        return {"path": str(path), "exists": False, "error": exc.strerror}
    return {
        "path": str(path),
        "exists": True,
        "is_dir": path.is_dir(),
        "uid": info.st_uid,
        "mode": info.st_mode & 0o7777,
    }
