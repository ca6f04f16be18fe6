"""``python -m memd.install {install,uninstall}``: what ``memdctl install-mcp`` runs.

memdctl (``memd_client``) imports msgpack only, so the config writers, which need tomlkit,
live in the ``memd`` package and memdctl runs them in a subprocess of the same interpreter.

Exit codes: 0 every agent done (or nothing to do), 1 some agent's file could not be edited
(the others were still done), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from memd.install.agents import AGENTS, NAMES, apply

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="memdctl install-mcp", description=__doc__.splitlines()[0])
    p.add_argument("action", choices=("install", "uninstall"))
    p.add_argument("--agent", choices=(*NAMES, "all"), default="all", help="default: all")
    p.add_argument("--scope", choices=("user", "project"), default="user", help="default: user")
    p.add_argument(
        "--project", metavar="DIR", help="project root for --scope project (default: cwd)"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    project = Path(os.path.abspath(args.project or os.getcwd()))
    if args.scope == "project" and not project.is_dir():
        print(f"--project {project} is not a directory", file=sys.stderr)
        return EXIT_USAGE
    agents = AGENTS if args.agent == "all" else (args.agent,)
    outcomes = apply(agents, args.scope, args.action, project, os.environ)
    if args.json:
        print(json.dumps([o.as_dict() for o in outcomes], indent=2))
    else:
        for o in outcomes:
            extra = f" ({o.detail})" if o.detail else ""
            backup = f"; backup {o.backup}" if o.backup else ""
            print(f"{o.agent:11} {o.result:9} {o.where}{extra}{backup}")
    return EXIT_FAILED if any(o.result == "failed" for o in outcomes) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
