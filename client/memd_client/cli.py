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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memd_client.cli_mcp import add_mcp_commands, cmd_mcp_config
from memd_client.client import Client
from memd_client.errors import DaemonNotRunning, MemdClientError, RemoteError
from memd_client.render import (
    render_compact,
    render_config,
    render_memories,
    render_notes,
    render_notes_status,
    render_recall,
    render_session,
    render_sessions,
    render_status,
)

EXIT_OK, EXIT_REMOTE, EXIT_USAGE, EXIT_DOWN, EXIT_NOT_FOUND = 0, 1, 2, 3, 4
DEFAULT_TIMEOUT_S = 10.0
# An extraction run is waited for up to 60 s; a full compaction is a model call or more.
LONG_TIMEOUTS = {"extract": 90.0, "compact": 600.0}

EPILOG = """\
exit codes: 0 ok, 1 the daemon reported an error, 2 usage error, 3 daemon not running,
4 not found. Every command takes --json for machine-readable output.
"""


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    common.add_argument(
        "--socket",
        metavar="PATH",
        help="daemon socket (default: $MEMD_SOCKET or the standard path)",
    )
    common.add_argument(
        "--timeout",
        type=float,
        help="seconds to wait for the daemon (default 10; extract 90, compact 600)",
    )
    return common


def _session_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    sub.add_parser("status", parents=[common], help="health, sessions and what is queued")
    p = sub.add_parser("sessions", parents=[common], help="list every known session, newest first")
    p.add_argument("--project", help="only sessions of this project folder")
    p.add_argument("--limit", type=int, default=0, help="at most this many")
    for name, text in (
        ("session", "one session in detail"),
        ("notes", "print a session's working notes"),
        ("extract", "update a session's notes now, ignoring the thresholds"),
        ("compact", "compact a session (see --dry-run)"),
    ):
        p = sub.add_parser(name, parents=[common], help=text)
        p.add_argument("session_id", metavar="ID", help="session id or a unique prefix")
        if name == "extract":
            p.add_argument("--no-wait", action="store_true", help="queue the run, return at once")
        if name == "compact":
            p.add_argument(
                "--dry-run",
                action="store_true",
                help="show the level that would serve, tokens before/after and the cut; no model",
            )
            p.add_argument(
                "--context-window", type=int, help="the model's window (default: config)"
            )
            p.add_argument("--max-output", type=int, help="the model's max output tokens")


def _memory_commands(sub: Any, common: argparse.ArgumentParser) -> None:
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
        "--project", metavar="DIR", help="the project's directory (default: the current directory)"
    )


def _admin_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    sub.add_parser("config", parents=[common], help="print the effective configuration")
    sub.add_parser("reload", parents=[common], help="reload the config file (like SIGHUP)")
    p = sub.add_parser(
        "install-service",
        parents=[common],
        help="install the systemd user unit (Linux) or launchd agent (macOS)",
    )
    p.add_argument("--no-start", action="store_true", help="write the unit, do not start it")
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


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="memdctl",
        description="Inspect and steer the memd daemon.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _session_commands(sub, common)
    _memory_commands(sub, common)
    _admin_commands(sub, common)
    add_mcp_commands(sub, common)
    return parser


LOCAL_COMMANDS = {"install-service", "install-hooks", "install-mcp", "uninstall-mcp"}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "install-service":
        return cmd_install_service(args)
    if args.command == "install-hooks":
        return cmd_install_hooks(args)
    if args.command in ("install-mcp", "uninstall-mcp"):
        return cmd_mcp_config(args)
    command: Callable[[Client, argparse.Namespace], int] = COMMANDS[args.command]
    try:
        timeout = args.timeout or LONG_TIMEOUTS.get(args.command, DEFAULT_TIMEOUT_S)
        with Client(Path(args.socket) if args.socket else None, timeout=timeout) as client:
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


if __name__ == "__main__":
    sys.exit(main())
