"""``memd``: run the daemon in the foreground (systemd or launchd supervise it).

Exit codes: 0 clean stop, 2 bad configuration or usage, 3 another instance is running or a
directory is unusable, 1 an unexpected failure (logged with a traceback).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import anyio

from memd import __version__
from memd.config import load_config
from memd.errors import ConfigError, StartupError

EXIT_OK, EXIT_FAILURE, EXIT_CONFIG, EXIT_STARTUP = 0, 1, 2, 3

DESCRIPTION = """\
memd watches Claude Code transcripts under ~/.claude/projects, keeps per-session working
notes and persistent memories, and serves agents over a Unix socket.

Run it in the foreground; use `memdctl install-service` to have systemd (Linux) or launchd
(macOS) keep it running. Without ANTHROPIC_API_KEY it still tracks every session and serves
everything that needs no model; `memdctl status` says what is disabled and why.
"""

EPILOG = """\
environment:
  MEMD_CONFIG          config file (default ~/.config/memd/config.yaml)
  MEMD_PROJECTS_ROOT   transcripts root (default $CLAUDE_CONFIG_DIR/projects or ~/.claude/projects)
  MEMD_STATE_DIR       state (default $XDG_STATE_HOME/memd or ~/.local/state/memd)
  MEMD_RUNTIME_DIR     socket directory (default $XDG_RUNTIME_DIR/memd or /tmp/memd-<uid>)
  ANTHROPIC_API_KEY    enables the model-backed features

exit codes: 0 stopped cleanly, 1 unexpected failure, 2 bad configuration, 3 cannot start
(another instance is running, or a directory is unusable)
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memd",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", nargs="?", choices=["run"], default="run", help="run (default)")
    parser.add_argument("--config", metavar="FILE", help="config file (overrides $MEMD_CONFIG)")
    parser.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="override one config key, e.g. --set session_notes.init_tokens=20000",
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more logging (-vv: debug)"
    )
    parser.add_argument("--version", action="version", version=f"memd {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * (args.verbose + 1)
    logging.basicConfig(
        level=max(level, logging.DEBUG),
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
    overrides: dict[str, str] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"memd: --set needs KEY=VALUE, got {item!r}", file=sys.stderr)
            return EXIT_CONFIG
        overrides[key] = value
    try:
        loaded = load_config(config_file=args.config, overrides=overrides)
    except ConfigError as exc:
        print(f"memd: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    from memd.daemon.pidlock import hold_instance_lock
    from memd.daemon.service import Daemon, run_daemon

    try:
        loaded.paths.runtime_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with hold_instance_lock(loaded.paths.lock_path, loaded.paths.socket_path):
            daemon = Daemon.load(loaded, env=dict(os.environ))
            anyio.run(run_daemon, daemon)
    except StartupError as exc:
        print(f"memd: {exc}", file=sys.stderr)
        return EXIT_STARTUP
    except OSError as exc:
        print(f"memd: cannot start: {exc}", file=sys.stderr)
        return EXIT_STARTUP
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
