"""IPC methods for ``memdctl doctor``: ``probe_api`` proves the key and the API work."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from memd.errors import LLMError
from memd.ipc.server import Handler
from memd.llm.client import Backend
from memd.llm.models import Route

if TYPE_CHECKING:
    from memd.ipc.face import DoctorFace

PROBE_TIMEOUT_S = 10.0  # a network probe; an agent CLI's is its start (PROBE_MAX_S)


def doctor_methods(daemon: DoctorFace) -> dict[str, Handler]:
    async def probe_api(params: dict[str, Any]) -> Any:
        """A cheap call through each backend a job uses (Anthropic's: an unbilled token
        count). Result: ``ok`` (every one answered), ``detail`` (what was reached, or why
        not, with the fix), ``base_url`` (the first backend's), ``backends`` (per backend:
        ``ok``, ``detail``, ``jobs``)."""
        models = daemon.llm
        if models is None:
            return {"ok": False, "detail": "the model client is still loading; try again"}
        if not models.enabled:
            return {"ok": False, "detail": f"model features are off: {models.reason}"}
        served: dict[str, list[Route]] = {}
        for route in models.routes.values():
            if isinstance(route, Route):
                served.setdefault(route.backend, []).append(route)
        rows: dict[str, Any] = dict.fromkeys(served)
        async with anyio.create_task_group() as tg:  # at once: an agent CLI's start is slow
            for name, routes in served.items():
                tg.start_soon(_probe, rows, name, routes)
        bad = [f"{n}: {r['detail']}" for n, r in rows.items() if not r["ok"]]
        good = [f"{n}: {r['detail']}" for n, r in rows.items() if r["ok"]]
        first: dict[str, Any] = next(iter(rows.values()), {})
        return {
            "ok": not bad,
            "detail": "; ".join(bad or good),
            "base_url": first.get("base_url"),
            "backends": rows,
        }

    async def _probe(rows: dict[str, Any], name: str, routes: list[Route]) -> None:
        llm = routes[0].llm
        jobs = [r.kind for r in routes]
        if not isinstance(llm, Backend):
            rows[name] = {"ok": True, "detail": "a test model client is in use", "jobs": jobs}
            return
        try:
            said = await llm.probe(model=routes[0].model, timeout=PROBE_TIMEOUT_S)
        except LLMError as exc:
            rows[name] = {"ok": False, "detail": str(exc), "jobs": jobs}
        else:
            rows[name] = {"ok": True, "detail": said, "jobs": jobs}
        rows[name]["base_url"] = llm.facts().where

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
