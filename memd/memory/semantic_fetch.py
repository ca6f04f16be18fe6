"""``python -m memd.memory.semantic_fetch``: what ``memdctl fetch-model`` runs (issue 27).

Fetches the semantic recall stage's model once, into ``<state_dir>/models/<owner>--<name>``,
where ``memory.semantic.model: <owner>/<name>`` finds it: the daemon itself never downloads.
The model id is ``--model``, else the config's ``memory.semantic.model``; ``--from DIR``
takes a model2vec folder already on this machine (copied from another) instead of the
network. The model is written under a temporary name beside its place, read back by the
loader the daemon uses, and only then renamed into place, so a half-fetched or unusable model
is never found there.

Exit codes: 0 fetched, 1 failed (the reason on stderr: without the ``semantic`` extra, which
one to install), 2 usage error. The model's modules need that extra (numpy, model2vec), so
they are imported only once the command runs, where a missing one is that line, not a
traceback.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from memd.config import load_config
from memd.errors import ConfigError
from memd.memory.semantic import missing_extra, model_folder

if TYPE_CHECKING:
    from memd.memory.semantic_model import Encoder

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="memdctl fetch-model", description=__doc__.splitlines()[0])
    p.add_argument("--model", metavar="ID", help="owner/name (default: memory.semantic.model)")
    p.add_argument(
        "--from", dest="source", metavar="DIR", help="a model2vec folder on this machine"
    )
    p.add_argument("--config", metavar="FILE", help="memd's config file (default: as memd)")
    return p


def fetch(model: str, target: Path, source: Path | None = None) -> Encoder:
    """Fetch ``model`` (or copy ``source``) into ``target``; the loaded model. Raises
    :class:`ModelProblem` only; ``target`` is untouched then."""
    from memd.memory.semantic_model import guarded, import_library, load_encoder

    old = target.with_name(f".{target.name}.old")
    if old.is_dir() and not target.exists():
        old.rename(target)  # a fetch killed between its two renames: the model it had
    library = import_library()
    where = str(source) if source is not None else model
    static = guarded(f"cannot fetch {where}", lambda: library.StaticModel.from_pretrained(where))
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        guarded(f"cannot save the model in {target.parent}", lambda: static.save_pretrained(temp))
        encoder = load_encoder(temp)  # the daemon's own reading, before it is kept
        shutil.rmtree(old, ignore_errors=True)
        if target.exists():
            target.rename(old)
        try:
            temp.rename(target)
        except OSError:
            if old.exists():
                old.rename(target)  # the model it had stays
            raise
        shutil.rmtree(old, ignore_errors=True)
        return encoder
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        loaded = load_config(config_file=args.config, env=os.environ)
    except ConfigError as exc:
        print(f"memdctl fetch-model: {exc}", file=sys.stderr)
        return EXIT_USAGE
    model = args.model or loaded.config.memory.semantic.model
    source = Path(args.source).absolute() if args.source else None
    try:
        target = model_folder(model, loaded.paths.state_dir)
    except ValueError as exc:
        print(f"memdctl fetch-model: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if model.startswith("/"):
        print(
            f"memdctl fetch-model: memory.semantic.model names a folder ({model}), not a model "
            "id: nothing to fetch; give --model owner/name to fetch one",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if source is not None and not source.is_dir():
        print(f"memdctl fetch-model: --from {source} is not a folder", file=sys.stderr)
        return EXIT_USAGE
    try:
        from memd.memory.semantic_model import ModelProblem
    except ImportError as exc:  # numpy, which the extra brings, is missing
        print(f"memdctl fetch-model: {missing_extra(exc)}", file=sys.stderr)
        return EXIT_FAILED
    try:
        encoder = fetch(model, target, source)
    except ModelProblem as exc:
        print(f"memdctl fetch-model: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:  # the state dir refused: full, read-only
        why = exc.strerror or str(exc)
        print(
            f"memdctl fetch-model: cannot save the model in {target.parent}: {why}; nothing "
            "was changed there. Free some space or make it writable, then run this again",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(f"{model}: saved in {target} ({encoder.dim} dimensions)")
    semantic = loaded.config.memory.semantic
    if not semantic.enabled or semantic.model != model:
        print(
            f"to use it: memory.semantic.enabled: true and memory.semantic.model: {model} in "
            "memd's config.yaml, then `memdctl reload`"
        )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
