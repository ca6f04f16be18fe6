"""``memdctl``: see what memd is doing and ask it for things.

Exit codes: 0 success; 1 the daemon answered with an error; 2 usage error; 3 the daemon is
not running (or not reachable); 4 the named thing was not found.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memd_client.client import Client
from memd_client.errors import DaemonNotRunning, MemdClientError, RemoteError

EXIT_OK, EXIT_REMOTE, EXIT_USAGE, EXIT_DOWN, EXIT_NOT_FOUND = 0, 1, 2, 3, 4

EPILOG = """\
exit codes: 0 ok, 1 the daemon reported an error, 2 usage error, 3 daemon not running,
4 not found. Every command takes --json for machine-readable output.
"""


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    common.add_argument(
        "--socket",
        metavar="PATH",
        help="daemon socket (default: $MEMD_SOCKET or the standard path)",
    )
    common.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for the daemon (default 10)"
    )
    parser = argparse.ArgumentParser(
        prog="memdctl",
        description="Inspect and steer the memd daemon.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    sub.add_parser("status", parents=[common], help="health, sessions and what is queued")
    p = sub.add_parser("sessions", parents=[common], help="list every known session, newest first")
    p.add_argument("--project", help="only sessions of this project folder")
    p.add_argument("--limit", type=int, default=0, help="at most this many")
    p = sub.add_parser("session", parents=[common], help="one session in detail")
    p.add_argument("session_id", metavar="ID", help="session id or a unique prefix")
    p = sub.add_parser("notes", parents=[common], help="print a session's working notes")
    p.add_argument("session_id", metavar="ID", help="session id or a unique prefix")
    p = sub.add_parser(
        "extract", parents=[common], help="update a session's notes now, ignoring the thresholds"
    )
    p.add_argument("session_id", metavar="ID", help="session id or a unique prefix")
    p.add_argument("--no-wait", action="store_true", help="queue the run and return at once")
    p = sub.add_parser("memories", parents=[common], help="list a project's memories, newest first")
    p.add_argument(
        "project",
        nargs="?",
        help="project folder name or path (default: the project of the current directory)",
    )
    p = sub.add_parser(
        "recall", parents=[common], help="the memories memd would recall for a query"
    )
    p.add_argument("query")
    p.add_argument(
        "--project",
        metavar="DIR",
        help="the project's directory (default: the current directory)",
    )
    p = sub.add_parser("compact", parents=[common], help="compact a session (see --dry-run)")
    p.add_argument("session_id", metavar="ID", help="session id or a unique prefix")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="show the level that would be used, tokens before/after and the cut; no model call",
    )
    p.add_argument("--context-window", type=int, help="the model's window (default from config)")
    p.add_argument("--max-output", type=int, help="the model's max output tokens")
    sub.add_parser("config", parents=[common], help="print the effective configuration")
    sub.add_parser("reload", parents=[common], help="reload the config file (like SIGHUP)")
    p = sub.add_parser(
        "install-service",
        parents=[common],
        help="install the systemd user unit (Linux) or launchd agent (macOS)",
    )
    p.add_argument(
        "--no-start", action="store_true", help="write the unit but do not enable/start it"
    )
    p.add_argument("--print", action="store_true", help="print the unit instead of installing it")
    p = sub.add_parser(
        "install-hooks",
        parents=[common],
        help="add memd's hooks to Claude Code's settings.json (idempotent, keeps a backup)",
    )
    p.add_argument(
        "--settings",
        metavar="FILE",
        help="settings file (default: $CLAUDE_CONFIG_DIR/settings.json or ~/.claude/settings.json)",
    )
    return parser


LOCAL_COMMANDS = {"install-service", "install-hooks"}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "install-service":
        return cmd_install_service(args)
    if args.command == "install-hooks":
        return cmd_install_hooks(args)
    command: Callable[[Client, argparse.Namespace], int] = COMMANDS[args.command]
    try:
        with Client(Path(args.socket) if args.socket else None, timeout=args.timeout) as client:
            return command(client, args)
    except DaemonNotRunning as exc:
        print(f"memdctl: {exc}", file=sys.stderr)
        return EXIT_DOWN
    except RemoteError as exc:
        print(f"memdctl: {exc.message}", file=sys.stderr)
        return EXIT_NOT_FOUND if exc.code == "not_found" else EXIT_REMOTE
    except MemdClientError as exc:
        print(f"memdctl: {exc}", file=sys.stderr)
        return EXIT_DOWN


def _emit(args: argparse.Namespace, data: Any, render: Callable[[Any], str]) -> int:
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(render(data))
    return EXIT_OK


def cmd_status(client: Client, args: argparse.Namespace) -> int:
    return _emit(args, client.call("status"), render_status)


def cmd_sessions(client: Client, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"limit": args.limit}
    if args.project:
        params["project"] = args.project
    return _emit(args, client.call("sessions", params), render_sessions)


def cmd_session(client: Client, args: argparse.Namespace) -> int:
    return _emit(args, client.call("session", {"session": args.session_id}), render_session)


def cmd_memories(client: Client, args: argparse.Namespace) -> int:
    params = {"project": args.project} if args.project else {"cwd": os.getcwd()}
    return _emit(args, client.call("memories", params), render_memories)


def cmd_recall(client: Client, args: argparse.Namespace) -> int:
    cwd = os.path.abspath(args.project) if args.project else os.getcwd()
    return _emit(args, client.call("recall", {"query": args.query, "cwd": cwd}), render_recall)


def cmd_notes(client: Client, args: argparse.Namespace) -> int:
    return _emit(args, client.call("notes", {"session": args.session_id}), render_notes)


def cmd_extract(client: Client, args: argparse.Namespace) -> int:
    params = {"session": args.session_id, "wait": 0 if args.no_wait else 60}
    return _emit(args, client.call("extract", params), render_notes_status)


def cmd_compact(client: Client, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"session": args.session_id, "dry_run": args.dry_run}
    if args.context_window:
        params["context_window"] = args.context_window
    if args.max_output:
        params["max_output_tokens"] = args.max_output
    return _emit(args, client.call("compact", params), render_compact)


def cmd_config(client: Client, args: argparse.Namespace) -> int:
    return _emit(args, client.call("config"), render_config)


def cmd_reload(client: Client, args: argparse.Namespace) -> int:
    result = client.call("reload")
    _emit(args, result, lambda r: str(r["result"]))
    return EXIT_OK if result["result"] == "reloaded" else EXIT_REMOTE


def cmd_install_service(args: argparse.Namespace) -> int:
    from memd_client import service

    try:
        plan = service.plan_service(Path.home(), service.find_memd())
    except FileNotFoundError as exc:
        print(f"memdctl: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.print:
        print(plan.text, end="")
        return EXIT_OK
    try:
        done = service.install(plan, start=not args.no_start)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"memdctl: installing the {plan.kind} service failed: {exc}", file=sys.stderr)
        return EXIT_REMOTE
    return _emit(
        args,
        {"kind": plan.kind, "path": str(plan.path), "done": done},
        lambda r: "\n".join(r["done"]),
    )


def cmd_install_hooks(args: argparse.Namespace) -> int:
    import os
    import shutil

    from memd_client.hooks_install import install_hooks

    claude = Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")
    settings = Path(args.settings) if args.settings else claude / "settings.json"
    beside = Path(sys.executable).parent / "memd-hook"
    command = str(beside) if beside.exists() else shutil.which("memd-hook")
    if command is None:
        print("memdctl: cannot find the memd-hook command; install memd-client", file=sys.stderr)
        return EXIT_USAGE
    try:
        done = install_hooks(settings, command)
    except (OSError, ValueError) as exc:
        print(f"memdctl: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return _emit(args, {"settings": str(settings), "done": done}, lambda r: "\n".join(r["done"]))


COMMANDS: dict[str, Callable[[Client, argparse.Namespace], int]] = {
    "status": cmd_status,
    "sessions": cmd_sessions,
    "session": cmd_session,
    "config": cmd_config,
    "compact": cmd_compact,
    "notes": cmd_notes,
    "memories": cmd_memories,
    "recall": cmd_recall,
    "extract": cmd_extract,
    "reload": cmd_reload,
}


# -- rendering ---------------------------------------------------------------------------------


def _k(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


def render_status(s: dict[str, Any]) -> str:
    d, ing, llm = s["daemon"], s["ingest"], s["llm"]
    lines = [
        f"memd {d['version']}  pid {d['pid']}  up {d['uptime_s']:.0f}s  "
        f"rss {d['rss_bytes'] / 2**20:.1f} MiB",
        f"socket    {d['socket']}",
        f"projects  {d['projects_root']}",
        f"model     {'enabled (' + llm['provider'] + ')' if llm['enabled'] else llm['reason']}",
        f"sessions  {ing['sessions']} known, {ing['parsed']} parsed, {ing['in_memory']} in memory; "
        f"{ing['queued']} queued for reading",
        f"ingest    {ing['bytes_parsed'] / 2**20:.1f} MiB in {ing['lines']} lines, "
        f"{ing['bad_lines']} bad lines skipped",
        f"errors    {s['errors_last_hour']} in the last hour"
        + (f" (last: {s['last_error']})" if s["last_error"] else ""),
        *render_spend(s.get("usage"), s.get("guard")),
    ]
    if s["sessions"]:
        lines += ["", render_sessions(s["sessions"])]
    return "\n".join(lines)


def _when(ts: float | None) -> str:
    if not ts:
        return "-"
    return time.strftime("%H:%M:%S", time.localtime(ts))


def render_spend(usage: dict[str, Any] | None, guard: dict[str, Any] | None) -> list[str]:
    """Token spend, budget left and back-off state (R-A4, R-B1, R-B8)."""
    if not usage or not guard:
        return []
    hour, day = guard["budget"]["hour"], guard["budget"]["day"]

    def left(window: dict[str, Any]) -> str:
        if not window["limit"]:
            return "unlimited"
        return f"{_k(max(0, window['limit'] - window['spent']))} left of {_k(window['limit'])}"

    lines = [
        f"tokens    last hour {_k(usage['last_hour']['billed'])} billed in "
        f"{usage['last_hour']['calls']} calls; today {_k(usage['last_day']['billed'])}",
        f"budget    hour: {left(hour)}; day: {left(day)}",
    ]
    if guard["budget"]["paused_until"]:
        lines.append(
            "PAUSED    background work waits for budget until "
            + _when(guard["budget"]["paused_until"])
        )
    if guard.get("account_blocked"):
        lines.append(f"BLOCKED   {guard['account_blocked']}")
    for kind, k in guard["kinds"].items():
        if k["consecutive_failures"] or k["parked"]:
            lines.append(
                f"backoff   {kind}: {k['consecutive_failures']} failures in a row, next try "
                f"{_when(k['next_retry_at'])}; last error: {k['last_error']}"
                + (f"; {len(k['parked'])} parked" if k["parked"] else "")
            )
    return lines


def render_sessions(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no sessions yet (memd watches Claude Code transcripts as they are written)"
    out = [f"{'SESSION':<10} {'CONTEXT':>16} {'MSGS':>5} {'LAST ACTIVITY':<26} PROJECT"]
    for r in rows:
        ctx = "-" if not r["parsed"] else f"{_k(r['context_tokens'])}/{_k(r['compact_threshold'])}"
        if r["context_stale"]:
            ctx += "*"
        out.append(
            f"{r['session_id'][:8]:<10} {ctx:>16} {r['message_count']:>5} "
            f"{r['last_activity']:<26} {r['project']}"
        )
    if any(r["context_stale"] for r in rows):
        out.append("* estimated: compacted since the last model response")
    return "\n".join(out)


def render_session(r: dict[str, Any]) -> str:
    keys = [
        "session_id", "project", "cwd", "path", "message_count", "context_tokens",
        "context_from_usage", "context_estimated_tail", "context_stale", "compact_threshold",
        "last_activity", "boundaries_seen", "tool_uses", "turn_ends", "bytes_parsed", "offset",
        "size", "lines", "bad_lines",
    ]  # fmt: skip
    lines = [f"{k:<24} {r.get(k)}" for k in keys]
    for b in r.get("boundaries", []):
        lines.append(f"{'boundary':<24} {b}")
    return "\n".join(lines)


def render_memories(r: dict[str, Any]) -> str:
    if r.get("opted_out"):
        return f"memory is off for this project: {r['opted_out']}"
    rows = r.get("memories") or r.get("rows") or []
    if not rows:
        return f"no memories yet in {r['memory_dir']}"
    lines = [f"{r['memory_dir']}:"]
    for m in rows:
        lines.append(
            f"  [{m.get('type') or '?'}] {m.get('relative') or m.get('path')} "
            f"({m.get('age') or m.get('mtime')}): {m.get('description') or ''}"
        )
    return "\n".join(lines)


def render_recall(r: dict[str, Any]) -> str:
    if r.get("opted_out"):
        return f"memory is off for this project: {r['opted_out']}"
    found = r.get("memories") or []
    head = f"{len(found)} memories ({r.get('method')}: {r.get('reason')})"
    lines = [head]
    for m in found:
        lines.append(f"- {m.get('relative') or m.get('path')} [{m.get('type')}], {m.get('age')}")
        if m.get("warning"):
            lines.append(f"  {m['warning']}")
    if r.get("caveat"):
        lines += ["", str(r["caveat"])]
    return "\n".join(lines)


def render_notes(v: dict[str, Any]) -> str:
    if v["text"] is None:
        st = v["status"]
        return (
            f"no notes yet for {v['session_id']} ({v['path']}); the first extraction starts at "
            f"{_k(st['next_trigger_tokens'])} tokens of context (now {_k(st['context_tokens'])})"
        )
    return str(v["text"]).rstrip("\n")


def render_notes_status(s: dict[str, Any]) -> str:
    lines = [
        f"session   {s['session_id']}  ({s['phase']})",
        f"notes     {s['notes_path']}",
        f"runs      {s['extractions']}, last at {_when(s['last_extracted_at'])}, "
        f"{_k(s['last_cost_tokens'])} tokens billed",
        f"next      at {_k(s['next_trigger_tokens'])} tokens ({s['next_trigger_condition']})",
    ]
    if s["last_error"]:
        lines.append(f"error     {s['last_error']}")
    return "\n".join(lines)


def render_compact(r: dict[str, Any]) -> str:
    if r.get("dry_run"):
        head = f"would use level {r['level']}: {_k(r['tokens_before'])} tokens now"
        if r["level"] == 1:
            return (
                f"{head} -> {_k(r['tokens_after'])} after (no model call)\n"
                f"cut before message {r['cut_index']}: {r['dropped_messages']} replaced by the "
                f"notes, {r['kept_messages']} kept"
                + (
                    f"; sections cut: {', '.join(r['truncated_sections'])}"
                    if r["truncated_sections"]
                    else ""
                )
            )
        return f"{head}; level 1 does not apply: {r['reason']} (a summary call would be needed)"
    if not r.get("compacted"):
        return f"not compacted: {r['reason']}"
    return (
        f"level {r['level']}: {_k(r['tokens_before'])} -> {_k(r['tokens_after'])} tokens, "
        f"{r['api_calls']} API calls, {len(r['messages'])} messages, "
        f"{len(r['restore']['files'])} files to restore"
    )


def render_config(c: dict[str, Any]) -> str:
    lines = [f"# {k}: {v}" for k, v in c["paths"].items()]
    for section, values in c["config"].items():
        lines.append(f"{section}:")
        lines += _yaml_lines(values, "  ")
    return "\n".join(lines)


def _yaml_lines(values: dict[str, Any], indent: str) -> list[str]:
    out: list[str] = []
    for key, value in values.items():
        if isinstance(value, dict):
            out.append(f"{indent}{key}:")
            out += _yaml_lines(value, indent + "  ")
        else:
            out.append(f"{indent}{key}: {json.dumps(value)}")
    return out


if __name__ == "__main__":
    sys.exit(main())
