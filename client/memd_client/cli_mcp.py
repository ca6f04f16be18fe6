"""``memdctl install-mcp`` / ``uninstall-mcp``: memd-mcp in each agent's MCP configuration.

The writers live in the ``memd`` package (:mod:`memd.install`), because editing Codex's
``config.toml`` without losing its comments takes a TOML library and ``memd_client`` stays
msgpack-only. memdctl runs them as ``python -m memd.install`` with its own interpreter: the
one memd is installed in, so the server command written into the configs is that one too.
"""

from __future__ import annotations

import argparse
import sys

from memd_client.agents import AGENTS, choices
from memd_client.cli_base import Registrar, run_memd_module


def register(reg: Registrar) -> None:
    titles = ", ".join(t.title for t in AGENTS if t.mcp is not None)
    for name, text in (
        ("install-mcp", f"add memd-mcp to the MCP config of {titles}"),
        ("uninstall-mcp", "remove memd-mcp's entry from those configs (nothing else)"),
    ):
        p = reg.add(name, lambda ctx: cmd_mcp_config(ctx.args), text)
        p.add_argument(
            "--agent", choices=(*choices(mcp=True), "all"), default="all", help="default: all"
        )
        p.add_argument(
            "--scope",
            choices=("user", "project"),
            default="user",
            help="user: the agent's own config (default); project: files in the project",
        )
        p.add_argument("--project", metavar="DIR", help="project root for --scope project")


def cmd_mcp_config(args: argparse.Namespace) -> int:
    action = "install" if args.command == "install-mcp" else "uninstall"
    argv = [sys.executable, "-m", "memd.install", action, "--agent", args.agent]
    argv += ["--scope", args.scope]
    if args.project:
        argv.append(f"--project={args.project}")  # a dash-leading path stays a value
    if args.json:
        argv.append("--json")
    return run_memd_module(argv, args.command, " (pip install memd)")
