"""What notes extraction costs per input strategy (issue 4, part 5).

    python3 bench/extraction_cost.py [--limit N] [--json] [PATH ...]

PATHs are transcript files or folders (default: the main transcripts of the shared corpus;
a file that is a byte-prefix of another — a checkpoint of the same session — is skipped).
Each transcript is replayed line by line; wherever the R-S3 trigger fires (with the default
thresholds, the baseline moved to the context at each extraction) a real extraction runs
through ``extract_notes``, the real SDK and the loopback Messages-API server, once per
strategy, each strategy against its own server and notes file:

* ``full`` — a fork of the whole conversation plus the instruction (what Claude Code does),
  with the runner's cache breakpoints;
* ``delta`` — the default: current notes plus the messages since the last extraction, with
  a small overlap, chunked when large.

The scripted model answers every fresh request with one Edit adding a worklog line (~120
tokens) and the follow-up turn with "Done."; the notes therefore grow as real ones do. The
loopback server's clock follows the transcript's timestamps, so a prompt-cache entry expires
after 5 minutes of session time as on the real API.

Reported per session: trigger points, billed-equivalent *input* tokens per strategy (uncached
input x1 + cache writes x1.25 + cache reads x0.1, as the loopback server accounts them),
output tokens, and delta / full. Target: delta <= 1/5 of the full fork.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

import anyio  # noqa: E402

from memd.clock import FakeClock  # noqa: E402
from memd.config import SessionNotesConfig  # noqa: E402
from memd.config_llm import LLMConfig  # noqa: E402
from memd.llm.backends import CLAUDE, open_llm  # noqa: E402
from memd.llm.client import LLM, Disabled, Usage, close_llm  # noqa: E402
from memd.llm.ledger import Ledger, billed_tokens  # noqa: E402
from memd.session.extract import ChunkDone, NotesJob, NotesSetup, extract_notes  # noqa: E402
from memd.session.inputs import Strategy  # noqa: E402
from memd.session.prompts import DEFAULT_PROMPT  # noqa: E402
from memd.session.template import DEFAULT_SECTIONS, DEFAULT_TEMPLATE  # noqa: E402
from memd.session.triggers import Go, TriggerInput, decide, rebase  # noqa: E402
from memd.testing import loopback_replies as replies  # noqa: E402
from memd.testing.loopback import LoopbackAPI  # noqa: E402
from memd.testing.loopback_replies import Reply  # noqa: E402
from memd.transcript.conversation import Conversation  # noqa: E402
from memd.transcript.messages import ApiMessage  # noqa: E402
from memd.transcript.parse import BadLine, parse_line  # noqa: E402

CORPUS = REPO.parent / "shared" / "data" / "transcripts"
STRATEGIES: tuple[Strategy, ...] = ("full", "delta")
TARGET = 0.2
MODEL = CLAUDE["session_notes"]
WORKLOG_LINE = f"_{DEFAULT_SECTIONS[-1][1]}_\n"


@dataclass(frozen=True)
class Point:
    """A trigger point: the conversation as it was then."""

    at: float  # session time (epoch seconds)
    messages: tuple[ApiMessage, ...]
    context_tokens: int


@dataclass
class Figures:
    requests: int = 0
    billed_input: int = 0
    output: int = 0
    usage: Usage = field(default_factory=Usage)


# ---------------------------------------------------------------------------------------------
# Corpus and trigger points


def transcripts(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        found.extend(sorted(path.rglob("*.jsonl")) if path.is_dir() else [path])
    found = [p for p in found if "subagents" not in p.parts]
    data = {p: p.read_bytes() for p in found}
    return [p for p in found if not any(q != p and data[q].startswith(data[p]) for q in found)]


def _epoch(timestamp: str | None, fallback: float) -> float:
    if not timestamp:
        return fallback
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return fallback


def trigger_points(path: Path, config: SessionNotesConfig) -> list[Point]:
    """Replay ``path`` and collect the conversation at every R-S3 trigger."""
    conv = Conversation()
    points: list[Point] = []
    baseline: int | None = None
    cursor: str | None = None
    now = 0.0
    for line in path.read_bytes().splitlines():
        try:
            entry = parse_line(line)
        except BadLine:
            continue
        if entry is None:
            continue
        conv.add_lines([line])
        now = _epoch(entry.timestamp, now)
        tokens = conv.context().tokens
        baseline = rebase(baseline, tokens)
        may = tokens >= (
            config.init_tokens if baseline is None else baseline + config.update_tokens
        )
        if not may:
            continue
        snapshot = TriggerInput(
            tokens, baseline, conv.tool_calls_since(cursor), conv.last_assistant_has_tool_calls
        )
        if isinstance(decide(snapshot, config), Go):
            points.append(Point(now, tuple(conv.messages()), tokens))
            baseline, cursor = tokens, conv.last_uuid
    return points


# ---------------------------------------------------------------------------------------------
# The scripted model


def _notes_path(body: Mapping[str, Any]) -> str:
    marker = "The notes file is "
    for message in reversed(body.get("messages", ())):
        text = replies.message_text(message)
        if marker in text:
            return text[text.rindex(marker) + len(marker) :].split(". ", 1)[0]
    raise AssertionError("no notes path in the request")


def _agent(counter: list[int]) -> Any:
    def handle(body: dict[str, Any]) -> Reply | None:
        last = replies.last_user_message(body).get("content")
        if isinstance(last, list) and any(
            b.get("type") == "tool_result" and str(b.get("tool_use_id")).startswith("toolu_loop")
            for b in last
        ):
            return replies.text("Done.")  # the answer to our own Edit, not the conversation's
        counter[0] += 1
        entry = (
            f"- Extraction {counter[0]}: read the new part of the conversation, noted the files "
            "touched, the commands run and their results, the errors met and how they were "
            "fixed, and what the assistant is about to do next; moved the current state on "
            "and kept the earlier entries short so the notes stay within their budget.\n"
        )
        args = {
            "file_path": _notes_path(body),
            "old_string": WORKLOG_LINE,
            "new_string": WORKLOG_LINE + entry,
        }
        return replies.tool_use("Edit", args)

    return handle


# ---------------------------------------------------------------------------------------------
# Running


async def replay(points: list[Point], strategy: Strategy, session: str, root: Path) -> Figures:
    clock_now = [points[0].at if points else 0.0]
    api = LoopbackAPI(clock=lambda: clock_now[0])
    api.set_handler(_agent([0]))
    async with api:
        llm = open_llm(LLMConfig(base_url=api.url, timeout_s=120.0), {"ANTHROPIC_API_KEY": "x"})
        assert not isinstance(llm, Disabled)
        try:
            await _run_points(llm, api, points, strategy, session, root, clock_now)
        finally:
            await close_llm(llm)
        figures = Figures()
        for request in api.requests:
            usage = request.usage
            if usage is None:
                raise RuntimeError(f"request {request.index} failed: {request.response}")
            figures.requests += 1
            figures.usage += usage
            figures.output += usage.output_tokens
            figures.billed_input += billed_tokens(
                Usage(
                    usage.input_tokens,
                    0,
                    usage.cache_creation_input_tokens,
                    usage.cache_read_input_tokens,
                )
            )
        return figures


async def _run_points(
    llm: LLM,
    api: LoopbackAPI,
    points: list[Point],
    strategy: Strategy,
    session: str,
    root: Path,
    clock_now: list[float],
) -> None:
    config = SessionNotesConfig(strategy=strategy)
    setup = NotesSetup(
        config, root / strategy, DEFAULT_TEMPLATE, DEFAULT_PROMPT, MODEL, 1024, 300.0
    )
    clock = FakeClock()
    ledger = Ledger(root / f"ledger-{strategy}.json", clock)
    cursor: list[str | None] = [None]

    async def on_chunk(done: ChunkDone) -> None:
        cursor[0] = done.covered_uuid or cursor[0]

    for point in points:
        clock_now[0] = point.at
        job = NotesJob(session, "bench", point.messages, point.context_tokens, cursor[0])
        await extract_notes(llm, setup, job, ledger=ledger, clock=clock, on_chunk=on_chunk)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[CORPUS])
    parser.add_argument("--limit", type=int, default=0, help="at most N sessions")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    files = transcripts(args.paths)
    config = SessionNotesConfig()
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            points = trigger_points(path, config)
            if not points:
                continue
            row: dict[str, Any] = {
                "session": f"{path.parent.name}/{path.name[:24]}",
                "points": len(points),
                "max_context": max(p.context_tokens for p in points),
            }
            for strategy in STRATEGIES:
                figures = anyio.run(replay, points, strategy, path.stem, Path(tmp) / path.stem)
                row[strategy] = figures.billed_input
                row[f"{strategy}_requests"] = figures.requests
                row[f"{strategy}_output"] = figures.output
            row["ratio"] = row["delta"] / row["full"] if row["full"] else 0.0
            rows.append(row)
            if not args.json:
                _print_row(row)
            if args.limit and len(rows) >= args.limit:
                break
    total_full = sum(r["full"] for r in rows)
    total_delta = sum(r["delta"] for r in rows)
    long = [r for r in rows if r["points"] >= 5]
    long_full = sum(r["full"] for r in long)
    summary = {
        "sessions": len(rows),
        "trigger_points": sum(r["points"] for r in rows),
        "full_billed_input": total_full,
        "delta_billed_input": total_delta,
        "ratio": total_delta / total_full if total_full else 0.0,
        "median_ratio": sorted(r["ratio"] for r in rows)[len(rows) // 2] if rows else 0.0,
        "long_sessions": len(long),
        "long_ratio": sum(r["delta"] for r in long) / long_full if long_full else 0.0,
        "seconds": round(time.perf_counter() - started, 1),
    }
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=2))
        return
    print()
    print(
        f"{summary['sessions']} sessions, {summary['trigger_points']} extractions: "
        f"full fork {total_full:,} billed input tokens, delta {total_delta:,} "
        f"-> delta/full = {summary['ratio']:.3f} (median per session "
        f"{summary['median_ratio']:.3f}; target <= {TARGET}) in {summary['seconds']} s"
    )
    print(
        f"sessions with >= 5 extractions ({summary['long_sessions']}): "
        f"delta/full = {summary['long_ratio']:.3f}; a session's first extraction costs the "
        "same either way (nothing is old yet)"
    )


def _print_row(row: dict[str, Any]) -> None:
    if not hasattr(_print_row, "header"):
        print(f"{'session':<40} {'pts':>4} {'max ctx':>8} {'full':>11} {'delta':>10} {'d/f':>6}")
        _print_row.header = True  # type: ignore[attr-defined]
    print(
        f"{row['session']:<40} {row['points']:>4} {row['max_context']:>8,} "
        f"{row['full']:>11,} {row['delta']:>10,} {row['ratio']:>6.3f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
