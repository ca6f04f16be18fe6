"""What a notes run and a memory extraction cost through each agent's own CLI (issue 34), on
the same transcripts and trigger points as ``bench/backends.py`` measures the API backends.

    python3 bench/cli_backends.py [--limit N] [--points K] [PATH ...]

Each CLI (``claude -p``, ``codex exec``, ``gemini -p``, the versions the tests pin, installed
under ``~/.cache/memd-tests``) runs as memd's backend exactly as the daemon runs it
(:mod:`memd.llm.cli_run`), logged in with a login of its own in a throwaway home, its model
the loopback server speaking its wire (Messages, Responses, ``generateContent``) and
answering as the scripted model of the whole-answer protocol (the whole notes with one line
added, one memory operation). The ``local`` row is the same protocol through the openai SDK
straight to the server (``bench/backends.py``'s), the baseline measured in the same run.

Reported per backend and job: the requests the server saw, the prompt and output tokens it
counted (cl100k on what each request carried: what the CLI sends around memd's prompt, its
own system text and framing, shows as the difference from ``local``), the tokens memd's
ledger recorded from what the CLI reported (they must match the server's), and the time per
call, the CLI's start included.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

import anyio  # noqa: E402

from bench.backends import chosen_sessions, one_session, opened  # noqa: E402
from bench.extraction_cost import CORPUS, Point  # noqa: E402
from memd.config import parse_config_text  # noqa: E402
from memd.llm.backends import open_backend  # noqa: E402
from memd.llm.client import Backend, LLMReply  # noqa: E402
from memd.testing.loopback import LoopbackAPI  # noqa: E402
from memd.testing.weak_model import WeakModel  # noqa: E402
from tests.cli_backend_support import AGENTS, installed, logged_in  # noqa: E402
from tests.other_cli import NO_EGRESS  # noqa: E402

NOTES_SYSTEM = "complete, updated notes file"


@dataclass
class Figures:
    requests: int = 0
    prompt: int = 0
    output: int = 0
    ledger: int = 0  # prompt + output tokens the CLI reported, as memd's ledger took them
    calls: int = 0
    seconds: float = 0.0


class Counting:
    """A backend whose replies are counted per job (what memd's ledger takes of them)."""

    def __init__(self, inner: Backend, figures: dict[str, Figures]) -> None:
        self.inner = inner
        self.figures = figures

    async def create_message(self, **kwargs: object) -> LLMReply:
        reply = await self.inner.create_message(**kwargs)  # type: ignore[arg-type]
        job = "notes" if NOTES_SYSTEM in str(kwargs.get("system")) else "memory"
        row = self.figures[job]
        row.ledger += reply.usage.total_tokens
        row.calls += 1
        row.seconds += reply.seconds
        return reply


def cli_backend(agent: str, api: LoopbackAPI, home: Path, runtime: Path) -> Backend:
    command = installed(agent)
    if command is None:
        raise SystemExit(f"the {agent} CLI is not installed and npm is absent")
    cli = logged_in(agent, command, home)
    config = parse_config_text(cli.config(api, timeout_s="300")).llm
    env = {
        "HOME": str(home),
        "PATH": os.environ["PATH"],
        "XDG_RUNTIME_DIR": str(runtime),
        **NO_EGRESS,
    }
    backend = open_backend(cli.backend, config, env)
    assert isinstance(backend, Backend), backend
    return backend


async def measure(
    name: str, sessions: list[tuple[str, list[Point]]], tmp: Path
) -> dict[str, Figures]:
    figures = {"notes": Figures(), "memory": Figures()}
    async with LoopbackAPI(profile="real_client", context_limit=1_000_000) as api:
        api.set_handler(WeakModel(fault_every=0))
        if name == "local":
            llm = opened("local", api)
        else:
            home, runtime = tmp / name / "home", Path(tempfile.mkdtemp(dir="/tmp"))
            home.mkdir(parents=True)
            llm = cli_backend(name.removesuffix("_cli"), api, home, runtime)
        counting = Counting(llm, figures)
        try:
            for session, points in sessions:
                root = tmp / name / session
                for point in points:
                    await one_session(counting, "whole", [point], session, root)  # type: ignore[arg-type]
        finally:
            await llm.aclose()
        for request in api.requests:
            if request.usage is None:
                continue
            row = figures["notes" if NOTES_SYSTEM in str(request.body) else "memory"]
            row.requests += 1
            row.prompt += request.usage.prompt_tokens
            row.output += request.usage.output_tokens
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[CORPUS])
    parser.add_argument("--limit", type=int, default=4, help="sessions (default 4)")
    parser.add_argument("--points", type=int, default=4, help="trigger points per session")
    parser.add_argument("--only", choices=[*(f"{a}_cli" for a in AGENTS), "local"], action="append")
    args = parser.parse_args()
    sessions = chosen_sessions(args.paths, args.limit, args.points)
    started = time.perf_counter()
    print(f"{len(sessions)} sessions, {sum(len(p) for _, p in sessions)} trigger points")
    print(
        f"{'backend':<11} {'job':<7} {'requests':>8} {'prompt tok':>11} {'output tok':>10} "
        f"{'ledger tok':>10} {'s/call':>7}"
    )
    names = args.only or ["local", *(f"{a}_cli" for a in AGENTS)]
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            figures = anyio.run(measure, name, sessions, Path(tmp))
            for job, row in figures.items():
                per_call = row.seconds / row.calls if row.calls else 0.0
                print(
                    f"{name:<11} {job:<7} {row.requests:>8} {row.prompt:>11,} {row.output:>10,} "
                    f"{row.ledger:>10,} {per_call:>7.2f}"
                )
    print(f"took {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
