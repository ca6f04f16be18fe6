"""``memdctl``: see what memd is doing and ask it for things.

Exit codes: 0 success; 1 the daemon answered with an error, or the command's work failed;
2 usage error (including an ambiguous session id); 3 the daemon is not running (or not
reachable); 4 the named thing was not found. A reader that goes away (``memdctl status |
head -1``) ends memdctl quietly with 141, as it would any Unix tool.

Adding a command: write ``register(reg: Registrar)`` in your own module (see
:mod:`memd_client.cli_base`) and add it to :data:`COMMAND_GROUPS`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from memd_client import (
    cli_daemon,
    cli_doctor,
    cli_dream,
    cli_local,
    cli_mcp,
    cli_model,
    cli_team,
    cli_top,
)
from memd_client.cli_base import (
    EXIT_DOWN,
    EXIT_NOT_FOUND,
    EXIT_PIPE,
    EXIT_REMOTE,
    CliFailure,
    Ctx,
    MemdctlParser,
    Registrar,
    add_common_options,
)
from memd_client.errors import ClientTimeout, DaemonNotRunning, MemdClientError, RemoteError

EPILOG = """\
options --json, --socket and --timeout go before or after the command.
exit codes: 0 ok, 1 the daemon reported an error or the work failed, 2 usage error (an
ambiguous id lists the candidates), 3 daemon not running, 4 not found.
"""

# Every command group, in the order `memdctl --help` lists them. A feature's module adds its
# commands by adding its `register(reg)` here (an explicit table, no import-time registry).
COMMAND_GROUPS: tuple[Callable[[Registrar], None], ...] = (
    cli_daemon.register_session_commands,
    cli_daemon.register_memory_commands,
    cli_top.register,
    cli_doctor.register,
    cli_daemon.register_admin_commands,
    cli_dream.register,
    cli_team.register,
    cli_local.register,
    cli_mcp.register,
    cli_model.register,
)


def build_parser() -> argparse.ArgumentParser:
    parser = MemdctlParser(
        prog="memdctl",
        description="Inspect and steer the memd daemon.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=cli_local.version_text())
    add_common_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    reg = Registrar(sub)
    for register in COMMAND_GROUPS:
        register(reg)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ctx = Ctx(args)
    try:
        code = _run(ctx)
        ctx.out.flush()  # a reader that went away shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        # The reader is gone: point stdout at /dev/null so the interpreter's final flush
        # does not print a second traceback, and end like any tool whose pipe closed.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_PIPE
    finally:
        ctx.close()


def _run(ctx: Ctx) -> int:
    try:
        return int(ctx.args.run(ctx))
    except CliFailure as exc:
        return _fail(ctx, exc.message, exc.exit_code, exc.kind, exc.data)
    except DaemonNotRunning as exc:
        return _fail(ctx, str(exc), EXIT_DOWN, "not_running", {})
    except RemoteError as exc:
        code = EXIT_NOT_FOUND if exc.code == "not_found" else EXIT_REMOTE
        return _fail(ctx, exc.message, code, exc.code, {})
    except ClientTimeout as exc:
        hint = "; memd may be busy: give it longer with --timeout, or see `memdctl logs`"
        return _fail(ctx, f"{exc}{hint}", EXIT_REMOTE, "timeout", {})
    except MemdClientError as exc:
        return _fail(ctx, str(exc), EXIT_DOWN, "unreachable", {})


def _fail(ctx: Ctx, message: str, code: int, kind: str, data: dict[str, object]) -> int:
    """Say what went wrong on stderr; with ``--json`` also as an object on stdout."""
    ctx.warn(message)
    if ctx.json:
        error = {"code": kind, "message": message, "exit_code": code, **data}
        ctx.print(json.dumps({"error": error}, indent=2, sort_keys=True))
    return code


if __name__ == "__main__":
    sys.exit(main())
