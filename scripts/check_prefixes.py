"""Every prefix of every corpus transcript: valid for the API, and equal to the oracle.

    python3 scripts/check_prefixes.py [--oracle-every N] [PATH ...]

CI checks sampled prefixes (tests/test_transcript_corpus.py); this checks all of them. The
strict validator runs at every prefix; the oracle (O(prefix) each time) every N lines
(default 1). Prints a line per file and exits 1 on the first difference.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "client")]

from memd.testing.api_rules import request_problems  # noqa: E402
from memd.transcript.conversation import Conversation  # noqa: E402
from tests.conftest import all_transcripts  # noqa: E402
from tests.transcript_oracle import load, read_values  # noqa: E402


def check(path: Path, every: int) -> int:
    lines = path.read_bytes().splitlines()
    values = [load(line) for line in lines]
    sidechain = "subagents" in path.parts
    conv = Conversation(sidechain=sidechain)
    for end, line in enumerate(lines, start=1):
        conv.add_lines([line])
        messages = conv.api_messages()
        if messages:
            body = {"model": "m", "max_tokens": 1, "messages": messages}
            problems = request_problems(body, strict_alternation=True)
            if problems:
                raise SystemExit(f"{path}: prefix {end}: {problems[:3]}")
        if end % every and end != len(lines):
            continue
        want = read_values(values[:end], sidechain_file=sidechain)
        got = (
            [e.uuid for e in conv.active_chain()],
            [list(m.uuids) for m in conv.messages()],
            list(conv.pending_uuids),
            conv.context().tokens,
        )
        if got != (want.chain, want.message_uuids, want.pending, want.context_tokens):
            raise SystemExit(f"{path}: prefix {end}: memd and the oracle differ")
    return len(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--oracle-every", type=int, default=1)
    parser.add_argument("paths", nargs="*", type=Path)
    args = parser.parse_args()
    files = args.paths or all_transcripts()
    total = 0
    start = time.monotonic()
    for path in files:
        total += check(path, args.oracle_every)
        print(f"ok {path.name}", flush=True)
    print(f"{len(files)} files, {total} prefixes, {time.monotonic() - start:.0f}s: all valid")


if __name__ == "__main__":
    main()
