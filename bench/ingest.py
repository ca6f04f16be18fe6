"""Cold ingest of transcripts: memd's pipeline against a bare read-and-decode baseline.

    python3 bench/ingest.py [--rounds 5] [--stages] [--repeat N [--baseline]] [PATH ...]

PATHs are transcript files or folders (default: the shared corpus). Both sides run in this
process, alternating, and the best round of each counts (the machine is shared):

* baseline: read each file, split it into lines and decode every line with the fastest
  general-purpose JSON decoder available (msgspec untyped or orjson, whichever is faster here),
  building nothing else;
* memd: ``Tail.read`` (256 KiB steps, one descriptor, as the daemon's read turn) +
  ``parse_line`` + ``Conversation.add`` for every line into a conversation that reads its
  content back from the file (``FileLines``), then ``context()`` and ``message_count`` once
  per file, as the daemon does after a read.

Prints MB/s for both and the ratio; the target is memd >= 50% of the baseline. The ratio to
msgspec's untyped decode (issue 28's baseline) is printed too, in wall time and in the
process's CPU time (what the other processes of a loaded machine cannot inflate). The same
ingest followed by ``api_messages()`` (decoding the contents on the active chain, what
compaction and note extraction need) is timed too, for information. ``--stages`` prints
only where memd's CPU time goes: each stage with the ones before it, beside the baseline.
``--repeat N`` runs the whole ingest (``--baseline``: the msgspec baseline) N times after
the set-up and prints nothing, for an instruction count the machine's load cannot move: the
count of ``valgrind --tool=callgrind PYTHON bench/ingest.py --repeat 2`` less that of
``--repeat 1`` (PYTHON the interpreter itself, not a pyenv shim; ``PYTHONHASHSEED=0``).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

import msgspec  # noqa: E402

from memd import tokens  # noqa: E402
from memd.transcript.content import FileLines  # noqa: E402
from memd.transcript.conversation import Conversation  # noqa: E402
from memd.transcript.parse import BadLine, parse_line  # noqa: E402
from memd.transcript.tail import Tail  # noqa: E402

CORPUS = REPO.parent / "shared" / "data" / "transcripts"
TARGET = 0.5

Decoder = Callable[[bytes], object]


def transcripts(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        found.extend(sorted(path.rglob("*.jsonl")) if path.is_dir() else [path])
    return found


def general_decoders() -> dict[str, Decoder]:
    decoders: dict[str, Decoder] = {"msgspec (untyped)": msgspec.json.Decoder().decode}
    try:
        import orjson
    except ImportError:
        return decoders
    decoders["orjson"] = orjson.loads
    return decoders


def baseline(files: list[Path], decode: Decoder) -> int:
    lines = 0
    for path in files:
        for line in path.read_bytes().split(b"\n"):
            if line:
                decode(line)
                lines += 1
    return lines


def read_conversation(path: Path, stage: int = 2) -> Conversation:
    """Tail, parse (``stage`` >= 1) and add (``stage`` >= 2) every line of ``path``."""
    conversation = Conversation(sidechain="subagents" in path.parts, lines=FileLines(path))
    with Tail(path) as tail:
        while True:
            read = tail.read()
            for at, line in zip(read.offsets, read.lines, strict=True) if stage else ():
                try:
                    entry = parse_line(line, at)
                except BadLine:
                    continue
                if entry is not None and stage > 1:
                    conversation.add(entry)
            if not read.more:
                return conversation


def ingest(files: list[Path], stage: int = 3) -> int:
    """The daemon's cold ingest; a lower ``stage`` stops after tail (0), parse (1), add (2)."""
    entries = 0
    for path in files:
        conversation = read_conversation(path, min(stage, 2))
        if stage > 2:
            conversation.context()
            _ = conversation.message_count
        entries += conversation.entry_count
    return entries


STAGES = ("tail reads", "+ parse_line", "+ Conversation.add", "+ context(), message_count")


def print_stages(files: list[Path], rounds: int) -> None:
    """CPU time of each stage with the ones before it, beside the untyped baseline."""
    runs: dict[str, Callable[[], object]] = {
        "read + msgspec untyped": functools.partial(baseline, files, msgspec.json.Decoder().decode)
    }
    for stage, name in enumerate(STAGES):
        runs[name] = functools.partial(ingest, files, stage)
    for name, cpu in best_interleaved(runs, rounds, time.process_time).items():
        print(f"  {name:28}: {cpu * 1e3:6.1f} ms CPU")


def repeat(files: list[Path], times: int, run: Callable[[], object]) -> None:
    """``run`` ``times`` times, after loading the tokenizer and reading every file once (so
    neither the page cache nor the first imports are in the difference of two counts)."""
    tokens.estimate_text("load the tokenizer before counting")
    for path in files:
        path.read_bytes()
    for _ in range(times):
        run()


def build_messages(files: list[Path]) -> int:
    messages = 0
    for path in files:
        messages += len(read_conversation(path).api_messages())
    return messages


def seconds(run: Callable[[], object], clock: Callable[[], float]) -> float:
    start = clock()
    run()
    return clock() - start


def best_interleaved(
    runs: dict[str, Callable[[], object]], rounds: int, clock: Callable[[], float]
) -> dict[str, float]:
    """Best time of each run over ``rounds``, taking turns so load bursts hit all alike."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for name, run in runs.items():
            best[name] = min(best[name], seconds(run, clock))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[CORPUS])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stages", action="store_true", help="CPU time of each stage, only")
    parser.add_argument("--repeat", type=int, default=0, help="run N times, print nothing")
    parser.add_argument("--baseline", action="store_true", help="--repeat the baseline")
    args = parser.parse_args()
    files = transcripts(args.paths)
    if args.repeat:
        run: Callable[[], object] = functools.partial(ingest, files)
        if args.baseline:
            run = functools.partial(baseline, files, msgspec.json.Decoder().decode)
        repeat(files, args.repeat, run)
        return
    if args.stages:
        tokens.estimate_text("load the tokenizer before timing")
        print_stages(files, args.rounds)
        return
    total = sum(path.stat().st_size for path in files)
    megabytes = total / 1e6

    start = time.perf_counter()
    tokens.estimate_text("load the tokenizer before timing")
    load = time.perf_counter() - start

    decoders = general_decoders()
    runs: dict[str, Callable[[], object]] = {
        name: functools.partial(baseline, files, decode) for name, decode in decoders.items()
    }
    runs["memd"] = lambda: ingest(files)
    runs["memd + api_messages"] = lambda: build_messages(files)
    best = best_interleaved(runs, args.rounds, time.perf_counter)
    cpu = best_interleaved(
        {name: runs[name] for name in ("msgspec (untyped)", "memd")}, args.rounds, time.process_time
    )
    fastest = min(decoders, key=lambda name: best[name])
    lines = baseline(files, decoders[fastest])

    print(f"corpus: {len(files)} files, {megabytes:.1f} MB, {lines} lines (best of {args.rounds})")
    print(f"tokenizer load (once per process): {load * 1e3:.0f} ms")
    for name in decoders:
        print(f"  read + decode, {name:18}: {megabytes / best[name]:6.0f} MB/s")
    print(f"baseline = read + {fastest}:     {megabytes / best[fastest]:6.0f} MB/s")
    print(f"memd (tail + parse + conversation): {megabytes / best['memd']:6.0f} MB/s")
    ratio = best[fastest] / best["memd"]
    verdict = "meets" if ratio >= TARGET else "MISSES"
    print(f"ratio memd/baseline: {ratio:.0%} ({verdict} the {TARGET:.0%} target)")
    untyped = best["msgspec (untyped)"] / best["memd"]
    untyped_cpu = cpu["msgspec (untyped)"] / cpu["memd"]
    print(f"ratio memd/msgspec untyped: wall {untyped:.0%}, CPU {untyped_cpu:.0%}")
    with_messages = best["memd + api_messages"]
    print(f"memd + api_messages() of every file: {megabytes / with_messages:6.0f} MB/s")


if __name__ == "__main__":
    main()
