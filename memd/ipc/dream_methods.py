"""IPC method ``dream``: run the gates now, abort, the change log, restore (R-D4, R-B3)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memd.dream.history import dream_log, dream_restore
from memd.dream.status import printable
from memd.ipc.params import opt_str
from memd.ipc.server import Handler, InvalidParams
from memd_client.names import unescape_name

if TYPE_CHECKING:
    from memd.ipc.face import DreamFace

OPS = ("check", "abort", "log", "restore", "status")


def dream_methods(daemon: DreamFace) -> dict[str, Handler]:
    async def dream(params: dict[str, Any]) -> Any:
        """Params: ``op`` (check (default), abort, log, restore, status); ``cwd`` (absolute)
        or ``project`` (folder name or path); ``force`` (check: skip time, throttle and
        sessions, never the lock); ``run`` (log/restore: a run id or unique prefix).
        Result: check → the verdict and the run started, if any; abort → the run's record
        once undone; log → the runs, or one run with its diffs; restore → the restore's
        record; status → the memory dir's dream row. Errors: invalid_params, not_found."""
        svc = daemon.dream
        op = opt_str(params, "op") or "check"
        if op not in OPS:
            raise InvalidParams(f"'op' must be one of {', '.join(OPS)}, got {op!r}")
        cwd, project = opt_str(params, "cwd"), opt_str(params, "project")
        project = unescape_name(project) if project else project
        run = opt_str(params, "run")
        force = params.get("force", False)
        if not isinstance(force, bool):
            raise InvalidParams("'force' must be true or false")
        try:
            if op == "check":
                return printable(await svc.check(cwd=cwd, project=project, force=force))
            if op == "abort":
                return printable(await svc.abort(cwd=cwd, project=project))
            where = await svc.where(cwd, project)
            if op == "log":
                return printable(await dream_log(svc, where.memory_dir, run))
            if op == "restore":
                return printable(await dream_restore(svc, where.memory_dir, run))
            return svc.row(where.memory_dir)
        except ValueError as exc:
            raise InvalidParams(str(exc)) from None

    return {"dream": dream}
