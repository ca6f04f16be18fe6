"""``memdctl team …`` and ``memdctl sync``: memories over git remotes (issue 37).

    memdctl team sync [--project P] [--mode ref|folder] [--allow-deletes]
    memdctl team status | auto on|off | log [--limit N]
    memdctl team share MEMORY | unshare MEMORY | restore MEMORY [--commit C]
    memdctl sync --remote URL [--project P] [--allow-deletes]

Run inside the repository (its folder is the project), or name a project synced before
with ``--project``. The daemon runs git with the user's own config and credentials; this
command forwards the variables git needs to reach them from this shell (the ssh agent,
proxies, which git config), which the daemon keeps in memory only. Exit codes as for every
memdctl command; a sync that did not complete exits 1 with its reason.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any

from memd_client.cli_base import COUNT, EXIT_OK, EXIT_REMOTE, Ctx, Registrar

SYNC_TIMEOUT_S = 1800.0  # the daemon's own limit ends a sync before this
# Variables of this shell git may need to reach the user's credentials (the daemon keeps
# only the ones it knows: memd.team.store.FORWARDED_KEYS).
_FORWARDED_PREFIXES = ("SSH_", "GIT_SSH", "GIT_CONFIG_GLOBAL", "GIT_SSL_", "SSL_CERT_")
_FORWARDED_NAMES = frozenset(
    {"HOME", "XDG_CONFIG_HOME", "GIT_CONFIG_NOSYSTEM"}
    | {f"{p}_proxy" for p in ("http", "https", "no", "all")}
    | {f"{p}_PROXY" for p in ("HTTP", "HTTPS", "NO", "ALL")}
)


def register(reg: Registrar) -> None:
    team = reg.add("team", cmd_help, "share a repository's team/ memories over its git remote")
    ops = team.add_subparsers(dest="team_op", metavar="OP")
    sync = _op(reg, ops, "sync", cmd_sync, "fetch, merge and push the team memories now")
    sync.add_argument("--mode", choices=("ref", "folder"), help="ref (default) or folder")
    sync.add_argument("--allow-deletes", action="store_true", help="past the mass-removal hold")
    _op(reg, ops, "status", cmd_status, "held back, quarantined, the last sync")
    auto = _op(reg, ops, "auto", cmd_auto, "sync automatically (on) or only when asked (off)")
    auto.add_argument("state", choices=("on", "off"))
    for name, text in (
        ("share", "move a memory into team/ (checked as a sync checks it)"),
        ("unshare", "move a team memory out of team/ (the next sync removes it there)"),
    ):
        p = _op(reg, ops, name, cmd_share, text)
        p.add_argument("memory", help="the memory file, relative to the memory dir")
    log = _op(reg, ops, "log", cmd_log, "what changed in the team memories, newest first")
    log.add_argument("--limit", type=COUNT, default=20, help="commits shown (default 20)")
    restore = _op(reg, ops, "restore", cmd_restore, "bring back a removed team memory")
    restore.add_argument("memory", help="its path in team/ (e.g. deploy.md)")
    restore.add_argument("--commit", help="the version at this commit (default: the last)")
    mine = reg.add(
        "sync",
        cmd_personal,
        "keep this project's own memories in a private git remote of yours",
        timeout=SYNC_TIMEOUT_S,
    )
    mine.add_argument("--remote", help="the remote's URL (needed once; remembered)")
    _where_options(mine)
    mine.add_argument("--allow-deletes", action="store_true", help="past the mass-removal hold")


def _op(reg: Registrar, ops: Any, name: str, run: Any, text: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = ops.add_parser(name, help=text, description=text)
    from memd_client.cli_base import add_common_options

    add_common_options(parser, top=False)
    parser.set_defaults(run=run, default_timeout=SYNC_TIMEOUT_S)
    _where_options(parser)
    return parser


def _where_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--project", metavar="P", help="a project synced before (default: this repository)"
    )


def _where(args: argparse.Namespace) -> dict[str, Any]:
    return {"project": args.project} if args.project else {"cwd": os.getcwd()}


def forwarded(env: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v for k, v in env.items() if k in _FORWARDED_NAMES or k.startswith(_FORWARDED_PREFIXES)
    }


def cmd_help(ctx: Ctx) -> int:
    ctx.warn("say what to do: memdctl team sync|status|auto|share|unshare|log|restore")
    return 2


def cmd_sync(ctx: Ctx) -> int:
    args = ctx.args
    params = {**_where(args), "op": "sync", "allow_deletes": args.allow_deletes}
    if args.mode:
        params["mode"] = args.mode
    return _synced(ctx, ctx.call("team", {**params, "env": forwarded(ctx.env)}))


def cmd_personal(ctx: Ctx) -> int:
    args = ctx.args
    params: dict[str, Any] = {**_where(args), "op": "sync", "scope": "personal"}
    params["allow_deletes"] = args.allow_deletes
    if args.remote:
        params["remote"] = args.remote
    return _synced(ctx, ctx.call("team", {**params, "env": forwarded(ctx.env)}))


def _synced(ctx: Ctx, result: dict[str, Any]) -> int:
    ctx.emit(result, render_sync)
    return EXIT_OK if result.get("ok") else EXIT_REMOTE


def cmd_status(ctx: Ctx) -> int:
    return ctx.emit(ctx.call("team", {**_where(ctx.args), "op": "status"}), render_project)


def cmd_auto(ctx: Ctx) -> int:
    params = {**_where(ctx.args), "op": "auto", "on": ctx.args.state == "on"}
    result = ctx.call("team", params)
    return ctx.emit(result, lambda r: f"automatic sync of {r['project']}: {ctx.args.state}")


def cmd_share(ctx: Ctx) -> int:
    op = ctx.args.team_op
    result = ctx.call("team", {**_where(ctx.args), "op": op, "memory": ctx.args.memory})
    return ctx.emit(result, lambda r: f"{r['memory']} is now {r['now']}")


def cmd_log(ctx: Ctx) -> int:
    params = {**_where(ctx.args), "op": "log", "limit": ctx.args.limit}
    return ctx.emit(ctx.call("team", params), render_log)


def cmd_restore(ctx: Ctx) -> int:
    params: dict[str, Any] = {**_where(ctx.args), "op": "restore", "memory": ctx.args.memory}
    if ctx.args.commit:
        params["commit"] = ctx.args.commit
    result = ctx.call("team", params)
    ctx.emit(result, render_restore)
    return EXIT_OK if result.get("sync", {}).get("ok") else EXIT_REMOTE


# -- rendering ------------------------------------------------------------------------------


def render_sync(r: dict[str, Any]) -> str:
    lines = [f"{r.get('scope', 'team')} sync of {r.get('project')}: {r.get('message')}"]
    for key, label in (
        ("pushed", "shared"),
        ("taken", "taken"),
        ("removed_here", "removed here"),
        ("conflicts", "both versions kept (the next dream reconciles them)"),
        ("lines_merged", "index merged by lines"),
        ("changed_meanwhile", "changed during the sync (the next sync merges them)"),
    ):
        names = r.get(key) or []
        if names:
            lines.append(f"  {label}: {', '.join(names[:10])}{' …' if len(names) > 10 else ''}")
    lines += _reasons("held back (never pushed)", r.get("held") or {})
    lines += _reasons("quarantined (not written here)", r.get("quarantined") or {})
    refused = {x["name"]: x["reason"] for x in r.get("refused") or []}
    lines += _reasons("refused from the remote", refused)
    return "\n".join(lines)


def _reasons(title: str, rows: Mapping[str, str], limit: int = 10) -> list[str]:
    if not rows:
        return []
    shown = [f"    {path}: {reason}" for path, reason in list(rows.items())[:limit]]
    more = [f"    … and {len(rows) - limit} more (--json lists all)"] if len(rows) > limit else []
    return [f"  {title}:", *shown, *more]


def render_project(r: dict[str, Any]) -> str:
    last = r.get("last") or {}
    lines = [
        f"team memories of {r.get('project')} ({r.get('memory_dir', '')})",
        f"  automatic sync: {'on' if r.get('auto') else 'off'}",
        f"  last sync: {last.get('at') or 'never'}"
        + (f" ({'ok' if last.get('ok') else 'failed'}: {last.get('message')})" if last else ""),
    ]
    held = {x["path"]: x["reason"] for x in r.get("held") or []}
    quarantined = {x["path"]: x["reason"] for x in r.get("quarantined") or []}
    lines += _reasons(f"held back ({r.get('held_count', len(held))})", held)
    lines += _reasons(f"quarantined ({r.get('quarantined_count', 0)})", quarantined)
    if r.get("refused_count"):
        lines.append(f"  refused from the remote: {r['refused_count']} (memdctl team sync)")
    return "\n".join(lines)


def render_log(r: dict[str, Any]) -> str:
    commits = r.get("commits") or []
    if not commits:
        return "no synced history yet (memdctl team sync)"
    lines: list[str] = []
    for c in commits:
        lines.append(f"{c['commit'][:10]}  {c.get('at') or '?'}  {c.get('author')}")
        lines += [f"    {x['status']} {x['path']}" for x in c.get("changes") or []]
        if c.get("more_changes"):
            lines.append(f"    … and {c['more_changes']} more")
    return "\n".join(lines)


def render_restore(r: dict[str, Any]) -> str:
    head = f"restored {r.get('restored')} (from {str(r.get('from'))[:10]})"
    return head + "\n" + render_sync(r.get("sync") or {})


def render_team_status(team: Any) -> list[str]:
    """``memdctl status``'s lines for the team section (the projects synced)."""
    if not isinstance(team, dict) or not team.get("projects"):
        return []
    lines = ["team:"]
    for row in team["projects"][:10]:
        last = row.get("last") or {}
        state = "syncing" if row.get("running") else ("ok" if last.get("ok") else "failed")
        state = state if last else "never synced"
        extra = []
        if row.get("held_count"):
            extra.append(f"{row['held_count']} held back")
        if row.get("quarantined_count"):
            extra.append(f"{row['quarantined_count']} quarantined")
        auto = "auto" if row.get("auto") else "manual"
        lines.append(
            f"  {row.get('project')} [{row.get('scope')}, {auto}]: {state}"
            + (f" at {last.get('at')}" if last.get("at") else "")
            + (f" ({', '.join(extra)})" if extra else "")
            + (f" — {last.get('message')}" if last and not last.get("ok") else "")
        )
    return lines
