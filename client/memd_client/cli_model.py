"""``memdctl fetch-model``: the semantic recall stage's model, fetched once (issue 27).

The fetching lives in the ``memd`` package (:mod:`memd.memory.semantic_fetch`), because it
needs the ``memd[semantic]`` extra and ``memd_client`` stays msgpack-only; memdctl runs it as
``python -m memd.memory.semantic_fetch`` with its own interpreter, the one memd is installed
in. The daemon never downloads: it reads the folder this saves.
"""

from __future__ import annotations

import argparse
import sys

from memd_client.cli_base import Registrar, run_memd_module


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
    extra = " with its semantic extra (pip install 'memd[semantic]')"
    return run_memd_module(argv, "fetch-model", extra)
