"""``memdctl fetch-model``: the semantic recall stage's model, fetched once (issue 27).

The fetching lives in the ``memd`` package (:mod:`memd.memory.semantic_fetch`), because it
needs the ``memd[semantic]`` extra and ``memd_client`` stays msgpack-only; memdctl runs it as
``python -m memd.memory.semantic_fetch`` with its own interpreter, the one memd is installed
in. The daemon never downloads: it reads the folder this saves.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from memd_client.cli_base import Registrar

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def register(reg: Registrar) -> None:
    p = reg.add(
        "fetch-model",
        lambda ctx: cmd_fetch_model(ctx.args),
        "fetch the semantic recall model once into memd's state dir (memory.semantic.model)",
    )
    p.add_argument("--model", metavar="ID", help="owner/name (default: memory.semantic.model)")
    p.add_argument(
        "--from", dest="source", metavar="DIR", help="copy a model2vec folder on this machine"
    )
    p.add_argument("--config", metavar="FILE", help="memd's config file (default: as memd)")


def cmd_fetch_model(args: argparse.Namespace) -> int:
    argv = [sys.executable, "-m", "memd.memory.semantic_fetch"]
    given = {"--model": args.model, "--from": args.source, "--config": args.config}
    for flag, value in given.items():
        if value:
            argv.append(f"{flag}={value}")  # a dash-leading value stays a value
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    sys.stdout.write(done.stdout)
    if "No module named memd" in done.stderr:
        print(
            f"memdctl: fetch-model needs the memd package in {sys.executable}; "
            "install memd there with its semantic extra (pip install 'memd[semantic]')",
            file=sys.stderr,
        )
        return EXIT_USAGE
    sys.stderr.write(done.stderr)
    return done.returncode if done.returncode in (EXIT_OK, EXIT_FAILED, EXIT_USAGE) else EXIT_FAILED
