"""The ``/compact`` takeover's answer time: the PreCompact hook process, fork included.

    python3 bench/compact_takeover.py [--runs 10]

A real daemon (no API key) holds 2 × ``--runs`` copies of a real session cut just before its
automatic compaction (~1,250 lines, the context Claude Code compacted), each with notes that
cover all but its last ~15K tokens, as an extraction leaves them. For each copy the hook
command ``memdctl install-hooks --compact-takeover`` registers runs as Claude Code runs it (a
fresh process, the PreCompact JSON of a plain ``/compact`` on stdin) and is timed from spawn
to exit: it forks the session (a new session file written, fsynced) and prints the block.
Half the copies have had their messages read once before (a ``compact --dry-run``), as a
live session's are; the others are read for the first time since memd ingested them. Then
the hook runs again for every copy, which memd lets through (never twice in a row): a hook
that decides nothing. ``python -c pass`` is timed interleaved, so load on the (shared)
machine shows in both. Prints median, p95 and max; the target is p95 ≤ 200 ms for the
blocking answers.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "client")]

from memd.compaction.service import messages_of  # noqa: E402
from memd.session.store import ExtractionRecord  # noqa: E402
from memd.session.template import DEFAULT_TEMPLATE  # noqa: E402
from memd.transcript.conversation import Conversation  # noqa: E402
from memd_client.hooks_install import hook_command  # noqa: E402
from tests.daemon_harness import Home, call, fake_home, start_memd, stop_memd, wait_for  # noqa: E402

SOURCE = REPO.parent / "shared" / "data" / "transcripts" / "spotter"
SOURCE = SOURCE / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
SLUG = "-home-user-proj"
TAIL_TOKENS = 15_000
BASELINE = [sys.executable, "-c", "pass"]
HOOK = shlex.split(hook_command(sys.executable, str(REPO / "client" / "memd_client" / "hook.py")))


def before_boundary() -> bytes:
    lines = SOURCE.read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b'"compact_boundary"' in line)
    return b"".join(lines[:cut])


def anchor_of(data: bytes) -> str:
    """The message after which about :data:`TAIL_TOKENS` of conversation follow."""
    conv = Conversation()
    conv.add_lines(data.splitlines())
    msgs = messages_of(conv)
    tail = 0
    for i in range(len(msgs) - 1, 0, -1):
        tail += msgs[i].tokens
        if tail >= TAIL_TOKENS:
            uuid = msgs[i - 1].uuid
            assert uuid is not None
            return uuid
    raise SystemExit("the session is too short")


def plant(home: Home, sid: str, data: bytes, anchor: str) -> None:
    folder = home.projects / SLUG
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{sid}.jsonl").write_bytes(data)
    notes = folder / sid / "session-memory" / "summary.md"
    notes.parent.mkdir(parents=True)
    notes.write_text(DEFAULT_TEMPLATE + "\nWiring the annotations into SessionLive.\n")
    record = ExtractionRecord(sid, SLUG, last_summarized_id=anchor, covered_id=anchor)
    records = home.state_dir / "session-notes"
    records.mkdir(parents=True, exist_ok=True)
    (records / f"{sid}.json").write_text(json.dumps(record.to_json()))


def hook_once(home: Home, sid: str) -> tuple[float, str]:
    stdin = json.dumps(
        {
            "session_id": sid,
            "transcript_path": str(home.projects / SLUG / f"{sid}.jsonl"),
            "cwd": "/home/user/proj",
            "hook_event_name": "PreCompact",
            "trigger": "manual",
            "custom_instructions": None,
        }
    )
    t0 = time.perf_counter()
    done = subprocess.run(HOOK, input=stdin, env=home.env, capture_output=True, text=True)
    return time.perf_counter() - t0, done.stdout


def figures(name: str, times: list[float]) -> str:
    ms = sorted(t * 1000 for t in times)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return (
        f"{name}: median {statistics.median(ms):.0f} ms, p95 {p95:.0f} ms, "
        f"max {ms[-1]:.0f} ms ({len(ms)} runs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    data = before_boundary()
    anchor = anchor_of(data)
    with tempfile.TemporaryDirectory() as tmp, fake_home(Path(tmp)) as home:
        sids = [f"{n:08d}-0000-4000-8000-000000000000" for n in range(2 * args.runs)]
        for sid in sids:
            plant(home, sid, data, anchor)
        proc = start_memd(home)
        try:
            for sid in sids:
                wait_for(parsed(home, sid), timeout=60, what=sid)
            times: dict[str, list[float]] = {k: [] for k in ("cold", "warm", "pass", "python")}
            for n, sid in enumerate(sids):
                warm = n % 2 == 1
                if warm:  # its messages read once already (a dry run), as a live session's are
                    call(home, "compact", {"session": sid, "dry_run": True})
                took, out = hook_once(home, sid)
                assert '"decision": "block"' in out, (out, call(home, "status")["compaction"])
                times["warm" if warm else "cold"].append(took)
                t0 = time.perf_counter()
                subprocess.run(BASELINE, check=True)
                times["python"].append(time.perf_counter() - t0)
            for sid in sids:
                took, out = hook_once(home, sid)
                assert not out.strip(), out
                times["pass"].append(took)
        finally:
            stop_memd(proc)
    lines = len(data.splitlines())
    print(
        f"session: {lines} lines, {len(data) >> 10} KiB; notes cover all but ~{TAIL_TOKENS} tokens"
    )
    print(figures("blocked with a fork, messages read before", times["warm"]))
    print(figures("blocked with a fork, first read of the session", times["cold"]))
    print(figures("let through (the hook deciding nothing)", times["pass"]))
    print(figures("python -c pass (baseline, interleaved)", times["python"]))


def parsed(home: Home, sid: str) -> Callable[[], bool]:
    return lambda: bool(call(home, "session", {"session": sid})["parsed"])


if __name__ == "__main__":
    main()
