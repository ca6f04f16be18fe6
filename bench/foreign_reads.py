"""What a hostile file of another tool costs memd to read, through the one door and as the
reads it replaced did (issue 33, item 1).

    python3 bench/foreign_reads.py [--size-mib N] [--dotted-parts P]

Each case runs in a fresh interpreter, so its time and peak RSS are its own:

* ``.git`` file: a sparse ``--size-mib`` file as the ``.git`` above a working directory;
  the project root found (``memd.memory.paths.find_git_root``), against the old read of the
  whole file as text (``Path.read_text``, which the door replaced);
* ``commondir``: the same size as a linked worktree's ``commondir``;
* Codex's ``config.toml`` with one dotted key of ``--dotted-parts`` parts: the door
  (``foreign_file.read_toml``: judged on the text, refused) against ``tomllib.loads``.

Prints seconds and peak RSS (MiB) of each, and the ratio to the old read.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, resource, sys, time, tomllib
from pathlib import Path
case, path = sys.argv[1], Path(sys.argv[2])
start = time.perf_counter()
if case == "door-root":
    from memd.memory.paths import find_git_root
    find_git_root(path)
elif case == "old-read":
    try:
        path.read_text(encoding="utf-8")
    except (OSError, ValueError):
        pass
elif case == "door-toml":
    from memd_client import foreign_file
    foreign_file.read_toml(path, 1 << 20, links="follow")
elif case == "old-toml":
    tomllib.loads(path.read_text())
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "peak_mib": peak}))
"""


def run(case: str, path: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, case, str(path)], capture_output=True, text=True
    )
    if done.returncode != 0:
        return {"seconds": float("nan"), "peak_mib": float("nan")}
    result: dict[str, float] = json.loads(done.stdout)
    return result


def row(name: str, new: dict[str, float], old: dict[str, float]) -> str:
    ratio = old["seconds"] / new["seconds"] if new["seconds"] else float("inf")
    return (
        f"{name:28} door {new['seconds']:8.3f} s {new['peak_mib']:8.0f} MiB   "
        f"old {old['seconds']:8.3f} s {old['peak_mib']:8.0f} MiB   {ratio:8.0f}x faster"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-mib", type=int, default=512)
    p.add_argument("--dotted-parts", type=int, default=10_000)
    args = p.parse_args()
    size = args.size_mib * 1024 * 1024
    with tempfile.TemporaryDirectory(prefix="memd-bench-foreign-") as tmp:
        root = Path(tmp)
        (root / "a" / "b").mkdir(parents=True)
        with open(root / "a" / ".git", "wb") as f:
            f.truncate(size)
        print(
            row(
                f".git file ({args.size_mib} MiB)",
                run("door-root", root / "a" / "b"),
                run("old-read", root / "a" / ".git"),
            )
        )
        main_git, tree = root / "main" / ".git" / "worktrees" / "w", root / "w"
        main_git.mkdir(parents=True)
        tree.mkdir()
        (tree / ".git").write_text(f"gitdir: {main_git}\n")
        (main_git / "gitdir").write_text(f"{tree / '.git'}\n")
        with open(main_git / "commondir", "wb") as f:
            f.truncate(size)
        print(
            row(
                f"commondir ({args.size_mib} MiB)",
                run("door-root", tree),
                run("old-read", main_git / "commondir"),
            )
        )
        config = root / "config.toml"
        config.write_text("a" + ".a" * (args.dotted_parts - 1) + " = 1\n")
        print(
            row(
                f"config.toml ({args.dotted_parts} parts)",
                run("door-toml", config),
                run("old-toml", config),
            )
        )


if __name__ == "__main__":
    main()
