"""Compaction cost on the largest real sessions.

For each corpus transcript with an automatic compaction, the session is cut just before its
compact boundary, so the active conversation is the ~170K-token context Claude Code itself
compacted. Then:

- level 1 (session-memory compaction, zero API calls): server-side latency of building the
  compaction input from the in-memory conversation and cutting it, median over runs; tokens
  before and after;
- level 2 (one summary call through the real SDK to the loopback server): API calls and
  input tokens billed.

    python3 bench/compact.py [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import anyio

from memd.compaction.full import compact_full
from memd.compaction.service import messages_of
from memd.compaction.session_memory import Compacted, compact_with_notes
from memd.compaction.tokencache import TokenCache
from memd.config import CompactionConfig
from memd.config_llm import LLMConfig
from memd.llm.backends import open_llm
from memd.llm.client import Disabled, close_llm
from memd.session.template import DEFAULT_TEMPLATE
from memd.testing.loopback import LoopbackAPI
from memd.tokens import estimate_content
from memd.transcript.conversation import Conversation

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "transcripts"


def before_boundary(path: Path) -> list[bytes] | None:
    lines = path.read_bytes().splitlines()
    for i, line in enumerate(lines):
        if b'"compact_boundary"' in line and b'"auto"' in line:
            return lines[:i]
    return None


def filled_notes(words: int) -> str:
    """The template with ~``words`` words of plausible notes under each section."""
    filler = " ".join(
        f"step{i} edited src/module{i % 9}.py and reran pytest" for i in range(words // 8)
    )
    out = []
    for line in DEFAULT_TEMPLATE.splitlines():
        out.append(line)
        if line.startswith("_") and line.endswith("_"):
            out.append(filler)
    return "\n".join(out)


def level1(conv: Conversation, notes: str, runs: int) -> tuple[float, float, float, Compacted]:
    """Cold (first request, estimates computed) and warm build times, and the cut time."""
    cfg = CompactionConfig()
    cache = TokenCache()
    t0 = time.perf_counter()
    msgs = messages_of(conv, cache)
    cold = time.perf_counter() - t0
    cut_uuid = msgs[int(len(msgs) * 0.7)].uuid
    build: list[float] = []
    cut: list[float] = []
    result = None
    for _ in range(runs):
        t0 = time.perf_counter()
        msgs = messages_of(conv, cache)
        t1 = time.perf_counter()
        result = compact_with_notes(
            msgs,
            notes=notes,
            template=DEFAULT_TEMPLATE,
            last_summarized_uuid=cut_uuid,
            threshold=167_000,
            cfg=cfg,
            estimate=estimate_content,
        )
        t2 = time.perf_counter()
        build.append(t1 - t0)
        cut.append(t2 - t1)
    assert isinstance(result, Compacted), result
    return cold, statistics.median(build), statistics.median(cut), result


async def level2(conv: Conversation) -> tuple[int, int]:
    with LoopbackAPI() as api:
        api.reply_text("<analysis>a</analysis><summary>the summary</summary>")
        env = {"ANTHROPIC_API_KEY": "bench", "ANTHROPIC_BASE_URL": api.url}
        llm = open_llm(LLMConfig(), env)
        assert not isinstance(llm, Disabled)
        try:
            full = await compact_full(
                llm,
                "claude-sonnet-4-6",
                messages_of(conv),
                cfg=CompactionConfig(),
                estimate=estimate_content,
                trigger="auto",
            )
        finally:
            await close_llm(llm)
        totals = api.totals()
        return full.spent.api_calls, totals.input_tokens + totals.cache_read_input_tokens


def round_trips(
    sessions: list[tuple[str, list[bytes], str]], notes: str, runs: int
) -> dict[str, float]:
    """Median ``compact`` round trip through a real daemon (level 1, warm), per session."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    from memd.session.store import ExtractionRecord
    from memd_client.client import Client
    from memd_client.errors import MemdClientError

    home = Path(tempfile.mkdtemp(prefix="memd-bench-"))
    runtime = Path(tempfile.mkdtemp(prefix="mb-", dir="/tmp"))
    project = home / ".claude" / "projects" / "-bench"
    records = home / ".local" / "state" / "memd" / "session-notes"
    records.mkdir(parents=True)
    for sid, lines, anchor in sessions:
        (project / sid / "session-memory").mkdir(parents=True)
        (project / f"{sid}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
        (project / sid / "session-memory" / "summary.md").write_text(notes)
        record = ExtractionRecord(sid, "-bench", last_summarized_id=anchor, covered_id=anchor)
        (records / f"{sid}.json").write_text(json.dumps(record.to_json()))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "XDG_", "MEMD_"))}
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(runtime))
    proc = subprocess.Popen(
        [sys.executable, "-m", "memd.daemon.main"], env=env, stderr=subprocess.DEVNULL
    )
    out: dict[str, float] = {}
    try:
        sock = runtime / "memd" / "memd.sock"
        deadline = time.monotonic() + 60
        while True:
            try:
                with Client(sock, timeout=5) as c:
                    if all(r["parsed"] for r in c.call("sessions")) and len(
                        c.call("sessions")
                    ) == len(sessions):
                        break
            except MemdClientError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the daemon did not read the sessions in time")
            time.sleep(0.05)
        with Client(sock, timeout=30) as c:
            for sid, _, _ in sessions:
                c.call("compact", {"session": sid, "dry_run": True})  # warm the estimates
                times = []
                for _ in range(runs):
                    t0 = time.perf_counter()
                    result = c.call("compact", {"session": sid, "trigger": "auto"})
                    times.append(time.perf_counter() - t0)
                    assert result["level"] == 1 and result["api_calls"] == 0, result
                out[sid] = statistics.median(times)
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    notes = filled_notes(400)
    print(
        f"notes: {estimate_content(notes)} tokens; level-1 figures are medians of {args.runs} runs"
    )
    print(
        f"{'session':<10} {'msgs':>5} {'before':>8} {'after':>7} {'cold ms':>8} {'build ms':>9} "
        f"{'cut ms':>7} {'L1 warm':>8} {'L2 calls':>9} {'L2 input':>9}"
    )
    sessions: list[tuple[str, list[bytes], str]] = []
    for path in sorted(CORPUS.rglob("*.jsonl")):
        lines = before_boundary(path)
        if lines is None or "subagents" in path.parts:
            continue
        conv = Conversation()
        conv.add_lines(lines)
        msgs = messages_of(conv)
        sessions.append((path.stem[:8], lines, str(msgs[int(len(msgs) * 0.7)].uuid)))
        estimate_content("warm up the tokenizer")
        cold, build, cut, result = level1(conv, notes, args.runs)
        calls, billed = anyio.run(level2, conv)
        print(
            f"{path.stem[:8]:<10} {conv.message_count:>5} {result.tokens_before:>8} "
            f"{result.tokens_after:>7} {cold * 1e3:>8.1f} {build * 1e3:>9.1f} {cut * 1e3:>7.1f} "
            f"{(build + cut) * 1e3:>8.1f} {calls:>9} {billed:>9}"
        )
    print("round trip through the daemon (memdctl's client, level 1, warm), median:")
    for sid, seconds in round_trips(sessions, notes, args.runs).items():
        print(f"  {sid}: {seconds * 1e3:.1f} ms")
    print("target: level 1 under 50 ms server-side on a ~170K-token session")


if __name__ == "__main__":
    main()
