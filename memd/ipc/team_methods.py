"""IPC method ``team``: team memories over the repository's remote, and one person's
memories over a private one (issue 37; :mod:`memd.team.service`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memd.ipc.params import int_param, opt_str
from memd.ipc.server import Handler, InvalidParams
from memd.team.service import TeamProblem
from memd_client.names import unescape_name

if TYPE_CHECKING:
    from memd.ipc.face import TeamFace

OPS = ("sync", "status", "auto", "share", "unshare", "log", "restore")
SCOPES = ("team", "personal")


def team_methods(daemon: TeamFace) -> dict[str, Handler]:
    async def team(params: dict[str, Any]) -> Any:
        """Params: ``op`` (sync, status, auto, share, unshare, log, restore); ``cwd`` (the
        repository's folder) or ``project`` (a project folder synced before); sync:
        ``scope`` (team, personal), ``remote`` (personal: the private remote's URL),
        ``mode`` (ref, folder), ``allow_deletes``, ``env`` (the caller's git variables:
        ssh agent, proxies); auto: ``on``; share/unshare/restore: ``memory``; restore:
        ``commit``; log: ``limit``. Result: the sync's outcome, the project's row, the move,
        the commits, the restore. Errors: invalid_params (with what to do)."""
        op = opt_str(params, "op") or "status"
        if op not in OPS:
            raise InvalidParams(f"'op' must be one of {', '.join(OPS)}, got {op!r}")
        cwd, project = opt_str(params, "cwd"), opt_str(params, "project")
        project = unescape_name(project) if project else project
        try:
            return await _run(daemon, op, cwd, project, params)
        except (TeamProblem, ValueError) as exc:
            raise InvalidParams(str(exc)) from None

    return {"team": team}


async def _run(
    daemon: TeamFace, op: str, cwd: str | None, project: str | None, params: dict[str, Any]
) -> Any:
    svc = daemon.team
    if op == "sync":
        scope = opt_str(params, "scope") or "team"
        if scope not in SCOPES:
            raise InvalidParams(f"'scope' must be team or personal, got {scope!r}")
        mode = opt_str(params, "mode")
        if mode not in (None, "ref", "folder"):
            raise InvalidParams(f"'mode' must be ref or folder, got {mode!r}")
        return await svc.sync(
            cwd=cwd,
            project=project,
            scope="team" if scope == "team" else "personal",
            remote=opt_str(params, "remote"),
            mode=mode,
            allow_deletes=_flag(params, "allow_deletes"),
            env=_env(params),
        )
    if op == "auto":
        return await svc.set_auto(cwd=cwd, project=project, on=_flag(params, "on"))
    if op in ("share", "unshare"):
        memory = _memory(params)
        return await svc.share(cwd=cwd, project=project, memory=memory, out=op == "unshare")
    if op == "log":
        return await svc.log(cwd=cwd, project=project, limit=int_param(params, "limit", 20))
    if op == "restore":
        memory, commit = _memory(params), opt_str(params, "commit")
        return await svc.restore(cwd=cwd, project=project, memory=memory, commit=commit)
    return await svc.status_of(cwd=cwd, project=project)


def _flag(params: dict[str, Any], key: str) -> bool:
    value = params.get(key, False)
    if not isinstance(value, bool):
        raise InvalidParams(f"'{key}' must be true or false")
    return value


def _memory(params: dict[str, Any]) -> str:
    memory = opt_str(params, "memory")
    if not memory:
        raise InvalidParams("'memory' is required: the memory file (relative to the memory dir)")
    return unescape_name(memory)


def _env(params: dict[str, Any]) -> dict[str, str]:
    env = params.get("env", {})
    if not isinstance(env, dict):
        raise InvalidParams("'env' must be a map of strings")
    return {k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str)}
