"""Cold ingest per source, through the session registry as the daemon reads a session (tail in
bounded steps, the source's reader, the conversation, the published figures), against a bare
read-and-decode baseline of the same bytes (msgspec's untyped decoder, every line).

    python3 bench/ingest_sources.py [--rounds 3] [--copies 40]

Corpora: Claude Code's (the shared transcripts, else tests/corpus/), and the real CLIs'
Codex and Gemini samples (tests/corpus/agents/), each file's lines written ``--copies`` times
over into one session (the samples are small: 0.5 MB together), as a long resumed session.
Prints MB/s per source, memd's and the baseline's, and their ratio; the rounds alternate so
load bursts hit all alike.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

import anyio  # noqa: E402
import msgspec  # noqa: E402

from memd import tokens  # noqa: E402
from memd.config import TranscriptsConfig  # noqa: E402
from memd.daemon.sessions import SessionRegistry  # noqa: E402
from memd.sources.base import Source  # noqa: E402
from memd.sources.claude_code import ClaudeCode  # noqa: E402
from memd.sources.codex import Codex  # noqa: E402
from memd.sources.gemini import Gemini  # noqa: E402

SHARED = REPO.parent / "shared" / "data" / "transcripts"
CLAUDE = SHARED if SHARED.is_dir() else REPO / "tests" / "corpus"
AGENTS = REPO / "tests" / "corpus" / "agents"


def claude_tree(root: Path, copies: int) -> tuple[Source, list[Path]]:
    """Claude Code's corpus as it is: main transcripts, one project folder each."""
    del copies
    files = []
    for i, path in enumerate(sorted(CLAUDE.rglob("*.jsonl"))):
        if "subagents" in path.parts or "agents" in path.relative_to(CLAUDE).parts[:1]:
            continue
        folder = root / "projects" / f"-p{i}"
        folder.mkdir(parents=True)
        shutil.copy(path, folder / path.name)
        files.append(folder / path.name)
    return ClaudeCode(root / "projects"), files


def codex_tree(root: Path, copies: int) -> tuple[Source, list[Path]]:
    """Each sample rollout as ``copies`` resumed runs in one file (its lines repeated)."""
    source = Codex(root / "codex")
    day = source.root / "2026" / "11" / "26"
    day.mkdir(parents=True)
    files = []
    for path in sorted((AGENTS / "codex-0.169.0").glob("*.jsonl")):
        (day / path.name).write_bytes(path.read_bytes() * copies)
        files.append(day / path.name)
    return source, files


def gemini_tree(root: Path, copies: int) -> tuple[Source, list[Path]]:
    """Each sample chat as ``copies`` resumed runs in one file (headers, ``$set`` histories,
    upserts and rewinds repeated: state replacement all along)."""
    source = Gemini(root / "gemini")
    folder = source.root / "proj"
    (folder / "chats").mkdir(parents=True)
    (folder / ".project_root").write_text(str(root))
    files = []
    for path in sorted((AGENTS / "gemini-cli-0.61.0").rglob("*.jsonl")):
        (folder / "chats" / path.name).write_bytes(path.read_bytes() * copies)
        files.append(folder / "chats" / path.name)
    return source, files


def baseline(files: list[Path]) -> None:
    decode = msgspec.json.Decoder().decode
    for path in files:
        for line in path.read_bytes().split(b"\n"):
            if line:
                decode(line)


def through_registry(source: Source, files: list[Path]) -> None:
    async def run() -> None:
        registry = SessionRegistry([source], TranscriptsConfig(), {}, started_at=0.0)
        for path in files:
            state = await registry.ingest(path)
            assert state is not None and not state.bad_lines, path

    anyio.run(run)


def seconds(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--copies", type=int, default=40)
    args = parser.parse_args()
    tokens.estimate_text("load the tokenizer before timing")
    with tempfile.TemporaryDirectory() as tmp:
        trees = {
            "claude_code": claude_tree(Path(tmp), args.copies),
            "codex": codex_tree(Path(tmp), args.copies),
            "gemini": gemini_tree(Path(tmp), args.copies),
        }
        best: dict[tuple[str, str], float] = {}
        for _ in range(args.rounds):
            for name, (source, files) in trees.items():
                for side, run in (
                    ("baseline", lambda f=files: baseline(f)),
                    ("memd", lambda s=source, f=files: through_registry(s, f)),
                ):
                    took = seconds(run)
                    best[name, side] = min(best.get((name, side), took), took)
        print(f"best of {args.rounds}; baseline = read + msgspec untyped decode of every line")
        for name, (_, files) in trees.items():
            mb = sum(p.stat().st_size for p in files) / 1e6
            memd, base = best[name, "memd"], best[name, "baseline"]
            print(
                f"{name:12} {len(files):4} files {mb:6.1f} MB: memd {mb / memd:6.0f} MB/s, "
                f"baseline {mb / base:6.0f} MB/s, ratio {base / memd:.0%}"
            )


if __name__ == "__main__":
    main()
