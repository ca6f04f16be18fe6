"""``memdctl dream``: run the dream gates now, follow a run, abort it, show its diffs, or put a
snapshot back. Self-contained: :func:`register` adds the subcommand,
:func:`cmd_dream` runs it, :func:`render_dream` and :func:`render_dream_status` print.

    memdctl dream [PROJECT] [--force] [--wait] [--abort] [--log [RUN]] [--restore [RUN]] [--json]

PROJECT is a project folder name under the projects root, or a project's directory (default:
the current directory). Exit codes as for every memdctl command; ``--force`` exits 1 when no
run could start (the lock is held, memory is off), ``--wait`` when the run did not complete.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from memd_client.cli_base import EXIT_OK, EXIT_REMOTE, Ctx, Registrar

WAIT_POLL_S = 0.5
WAIT_LIMIT_S = 3600.0
TIMEOUT_S = 200.0  # an abort waits for the undo; a restore copies the memory dir


def register(reg: Registrar) -> None:
    p = reg.add(
        "dream",
        cmd_dream,
        "consolidate a project's memories now (gates, lock), or abort, log, restore",
        timeout=TIMEOUT_S,
    )
    p.add_argument("project", nargs="?", help="project folder name or directory (default: .)")
    p.add_argument("--force", action="store_true", help="skip time, throttle and session gates")
    p.add_argument("--wait", action="store_true", help="follow the run live until it ends")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--abort", action="store_true", help="stop the running dream and undo it")
    group.add_argument(
        "--log",
        nargs="?",
        const="",
        metavar="RUN",
        help="runs, or RUN's diffs (`--log DIR`: the runs of the project in DIR)",
    )
    group.add_argument(
        "--restore", nargs="?", const="", metavar="RUN", help="put RUN's snapshot back"
    )


def _where(args: argparse.Namespace) -> dict[str, Any]:
    project = args.project
    if not project:
        return {"cwd": os.getcwd()}
    if os.path.isdir(project) and (os.sep in project or project in (".", "..")):
        return {"cwd": os.path.abspath(project)}
    return {"project": project}


def _is_folder(value: str) -> bool:
    """A value typed as a directory (``.``, ``..`` or with a slash) that is one."""
    return os.path.isdir(value) and (os.sep in value or value in (".", ".."))


def cmd_dream(ctx: Ctx) -> int:
    args = ctx.args
    if args.log and args.project is None and _is_folder(args.log):
        args.project, args.log = args.log, ""  # `dream --log DIR`: that project's runs
    params = _where(args)
    if args.abort:
        result = ctx.call("dream", {**params, "op": "abort"})
    elif args.log is not None:
        result = ctx.call("dream", {**params, "op": "log", **_run(args.log)})
    elif args.restore is not None:
        result = ctx.call("dream", {**params, "op": "restore", **_run(args.restore)})
    else:
        result = ctx.call("dream", {**params, "op": "check", "force": args.force})
        started = result.get("started")
        if args.wait and started:
            return _follow(ctx, params, started["run_id"])
        if args.force and not started:  # a run was demanded and could not start
            ctx.emit(result, render_dream)
            return EXIT_REMOTE
    return ctx.emit(result, render_dream)


def _run(value: str) -> dict[str, str]:
    return {"run": value} if value else {}


def _follow(ctx: Ctx, params: dict[str, Any], run_id: str) -> int:
    """Print progress lines until the run ends; exit 0 only when it completed."""
    last = ""
    deadline = time.monotonic() + WAIT_LIMIT_S
    while time.monotonic() < deadline:
        row = ctx.call("dream", {**params, "op": "status"})
        running = row.get("running")
        if running and running.get("run_id") == run_id:
            line = _progress_line(running)
            if line != last and not ctx.json:
                ctx.print(line)
                ctx.out.flush()
                last = line
            time.sleep(WAIT_POLL_S)
            continue
        done = next((r for r in row.get("last_runs", []) if r.get("run_id") == run_id), None)
        if done is None:
            time.sleep(WAIT_POLL_S)
            continue
        if ctx.json:
            ctx.print(json.dumps(done, indent=2, sort_keys=True))
        else:
            ctx.print(_run_line(done))
        return EXIT_OK if done.get("state") == "completed" else EXIT_REMOTE
    ctx.warn("gave up waiting for the dream")
    return EXIT_REMOTE


def _progress_line(p: dict[str, Any]) -> str:
    text = " ".join(str(p.get("latest_text", "")).split())[:80]
    return (
        f"turn {p['turns']}  {p['tool_calls']} tool calls  {len(p['files_touched'])} files  "
        f"{p['tokens']} tokens  {text}"
    )


def _run_line(r: dict[str, Any]) -> str:
    files = ", ".join(r.get("files") or []) or "no files"
    why = f" ({r['reason']})" if r.get("reason") else ""
    flagged = f"; kept, changed by others: {', '.join(r['flagged'])}" if r.get("flagged") else ""
    return (
        f"{r['run_id']}  {r['kind']} {r['state']}{why}: {files}; {r.get('turns', 0)} turns, "
        f"{r.get('tokens', 0)} tokens, {r.get('duration_s', 0):.1f}s{flagged}"
    )


def render_dream(result: dict[str, Any]) -> str:
    """Any ``dream`` answer as text."""
    if "verdict" in result:
        v = result["verdict"]
        lines = [f"dream {result['memory_dir']}: {v['state']} - {v['reason']}"]
        if result.get("started"):
            lines.append(f"started run {result['started']['run_id']}")
        return "\n".join(lines)
    if "runs" in result:
        runs = result["runs"]
        return "\n".join([_run_line(r) for r in runs] or ["no dream runs yet"])
    if "changes" in result:
        lines = [_run_line(result["run"])]
        for change in result["changes"]:
            merged = f" (merged into {change['merged_into']})" if change.get("merged_into") else ""
            lines += [f"--- {change['action']} {change['path']}{merged}", change["diff"].rstrip()]
        return "\n".join(lines)
    if "gate_states" in result:
        return "\n".join(render_dream_status({"projects": [result]}))
    return _run_line(result)


def render_dream_status(section: dict[str, Any] | None) -> list[str]:
    """The ``dream`` part of ``memdctl status``: gates, lock holder, live run, last runs."""
    if not section:
        return []
    lines: list[str] = []
    for row in section.get("projects", []):
        gates = row["gates"]
        lines.append(f"dream     {row['memory_dir']}: {gates['state']} - {gates['reason']}")
        lock = row["lock"]
        if lock.get("holder"):
            lines.append(f"          lock held: {lock['holder']}")
        running = row.get("running")
        if running:
            lines.append(f"          running {running['run_id']}: {_progress_line(running)}")
        for past in row.get("last_runs", [])[:3]:
            lines.append(f"          {_run_line(past)}")
    return lines
