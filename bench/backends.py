"""Per backend, what a notes run and a memory extraction cost on the same transcripts, and
whether a weak model can ever lose or corrupt a note or a memory (issue 34).

    python3 bench/backends.py [--limit N] [--points K] [--weak-runs R] [PATH ...]

PATHs are transcripts (default: the shared corpus). For each of the first N sessions with a
notes trigger, its first K trigger points are replayed (as ``bench/extraction_cost.py``
does) through ``extract_notes`` and, at each, a memory extraction of the messages since the
previous point through ``extract_memories``: once per backend, each through its real SDK
against the loopback server speaking its wire:

* ``anthropic``, ``openai``, ``gemini``: the tool loop (the scripted agent adds one worklog
  line with Edit, or writes one memory with Write, then says "Done.");
* ``local`` (an OpenAI-compatible server on this machine): the whole-answer protocol (the
  scripted model answers the whole notes with one line added, or one memory operation).

Reported per backend and job: requests, prompt tokens, output tokens (the loopback server
counts with cl100k on what each request carried, so the figures compare protocols and
wires, not providers' tokenizers).

Then the weak-model campaign: the ``local`` backend with :class:`WeakModel` answering badly
one time in three (cut short, sections renamed, content dropped, invalid JSON), ``R`` runs of
each job over the same sessions; after every run the notes must keep the template and every
line a good answer added, and every memory file and index line written so far must still be
there and parse. Reported: runs, bad answers by kind, answers refused (counted), notes or
memories lost or corrupted (must be 0).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

import anyio  # noqa: E402

from bench.extraction_cost import CORPUS, Point, _agent, transcripts, trigger_points  # noqa: E402
from memd.clock import FakeClock  # noqa: E402
from memd.config import SessionNotesConfig  # noqa: E402
from memd.config_llm import BackendConfig, LLMConfig  # noqa: E402
from memd.errors import MalformedAnswer  # noqa: E402
from memd.llm.backends import open_llm  # noqa: E402
from memd.llm.client import Backend  # noqa: E402
from memd.llm.ledger import Ledger  # noqa: E402
from memd.memory.extract import ExtractSettings, extract_memories  # noqa: E402
from memd.memory.frontmatter import parse_document  # noqa: E402
from memd.memory.index import parse_index  # noqa: E402
from memd.memory.plan import Job  # noqa: E402
from memd.session.extract import NotesJob, NotesSetup, extract_notes  # noqa: E402
from memd.session.notes import notes_path, read_notes  # noqa: E402
from memd.session.prompts import DEFAULT_PROMPT  # noqa: E402
from memd.session.template import DEFAULT_TEMPLATE, Intact, check_skeleton  # noqa: E402
from memd.testing import loopback_replies as replies  # noqa: E402
from memd.testing.loopback import LoopbackAPI  # noqa: E402
from memd.testing.loopback_replies import When  # noqa: E402
from memd.testing.weak_model import WeakModel  # noqa: E402

BACKENDS = ("anthropic", "openai", "gemini", "local")
MEMORY_SYSTEM = "long-term memory of an AI coding assistant"
MEMORY = "---\nname: {n}\ndescription: A rule the user stated\ntype: feedback\n---\n\nRule {n}.\n"


@dataclass
class Cost:
    requests: int = 0
    prompt: int = 0
    output: int = 0

    def add(self, api: LoopbackAPI, since: int) -> None:
        for request in api.requests[since:]:
            if request.usage is not None:
                self.requests += 1
                self.prompt += request.usage.prompt_tokens
                self.output += request.usage.output_tokens


def opened(name: str, api: LoopbackAPI) -> Backend:
    keys = {"ANTHROPIC_API_KEY": "x", "OPENAI_API_KEY": "x", "GEMINI_API_KEY": "x"}
    config = {
        "anthropic": LLMConfig(base_url=api.url, timeout_s=120),
        "openai": LLMConfig(provider="openai", base_url=api.url + "/v1", timeout_s=120),
        "gemini": LLMConfig(provider="gemini", base_url=api.url, timeout_s=120),
        "local": LLMConfig(provider="openai", base_url=api.url + "/v1", openai=BackendConfig()),
    }[name]
    llm = open_llm(config, keys)
    assert isinstance(llm, Backend), llm
    return llm


def script(api: LoopbackAPI, name: str, weak: WeakModel | None = None) -> None:
    if name == "local":
        api.set_handler(weak or WeakModel(fault_every=0))
        return
    count = [0]
    notes_agent = _agent(count)
    api.set_handler(
        lambda body: None if MEMORY_SYSTEM in replies.system_text(body) else notes_agent(body)
    )
    api.add_rule(
        When(
            system_match=MEMORY_SYSTEM,
            turn="first",
            match="The memory directory is (?P<dir>/\\S+?)\\. ",
        ),
        replies.tool_use(
            "Write", {"file_path": "{dir}/feedback_rule.md", "content": MEMORY.format(n=1)}
        ),
    )
    api.add_rule(When(system_match=MEMORY_SYSTEM, turn="after_tool"), replies.text("Done."))


async def one_session(
    llm: Backend, protocol: str, points: list[Point], session: str, root: Path
) -> tuple[int, int, int]:
    """Notes at every point, a memory extraction of what is new at each; (refused, runs,
    notes or memories found lost or corrupted after a run)."""
    setup = NotesSetup(
        SessionNotesConfig(),
        root,
        DEFAULT_TEMPLATE,
        DEFAULT_PROMPT,
        "m",
        1024,
        300.0,
        protocol=protocol,  # type: ignore[arg-type]
    )
    settings = ExtractSettings(model="m", max_turns=4, max_tokens=2048, timeout_s=300)
    ledger = Ledger(root / "ledger.json", FakeClock())
    refused = runs = lost = 0
    cursor: str | None = None
    seen = 0
    for point in points:
        job = NotesJob(session, "bench", point.messages, point.context_tokens, cursor)
        runs += 2
        try:
            done = await extract_notes(llm, setup, job, ledger=ledger, clock=FakeClock())
            cursor = done.covered_uuid or cursor
        except MalformedAnswer:
            refused += 1
        new = point.messages[seen:] or point.messages[-1:]
        seen = len(point.messages)
        try:
            await extract_memories(
                llm,
                settings,
                Job(new, point.messages[-1].uuids[-1]),
                memory_dir=root / "memory",
                project="bench",
                session=session,
                ledger=ledger,
                clock=FakeClock(),
                protocol=protocol,  # type: ignore[arg-type]
            )
        except MalformedAnswer:
            refused += 1
        try:
            check_intact(root, session)
        except Lost as exc:
            print(f"LOST: {exc}")
            lost += 1
    return refused, runs, lost


class Lost(AssertionError):
    pass


_kept: dict[str, tuple[int, set[str]]] = {}


def check_intact(root: Path, session: str) -> None:
    """The notes keep the template and every line a good answer added; every memory written
    so far is still there and parses; every index line points to one."""
    text = read_notes(notes_path(root, "bench", session))
    if text is None or not isinstance(check_skeleton(text, DEFAULT_TEMPLATE), Intact):
        raise Lost(f"the notes of {session} lost their template")
    steps, files = _kept.get(str(root), (0, set()))
    now = text.count("Step ") + text.count("- Extraction ")
    if now < steps:
        raise Lost(f"the notes of {session} lost lines ({steps} -> {now})")
    memory = root / "memory"
    present = {p.name for p in memory.glob("*.md") if p.name != "MEMORY.md"}
    if not files <= present:
        raise Lost(f"memories lost: {sorted(files - present)}")
    for name in present:
        if parse_document((memory / name).read_text()).meta.type is None:
            raise Lost(f"memory {name} does not parse")
    index = (memory / "MEMORY.md").read_text() if (memory / "MEMORY.md").exists() else ""
    if any(e.file not in present for e in parse_index(index)):
        raise Lost("an index line points to no memory")
    _kept[str(root)] = (now, present)


async def costs(name: str, sessions: list[tuple[str, list[Point]]], tmp: Path) -> dict[str, Cost]:
    async with LoopbackAPI(context_limit=1_000_000) as api:
        script(api, name)
        llm = opened(name, api)
        protocol = "whole" if name == "local" else "tools"
        try:
            notes, memory = Cost(), Cost()
            for session, points in sessions:
                root = tmp / name / session
                for point in points:  # notes and memory costs apart: one point at a time
                    await one_session(llm, protocol, [point], session, root)
            for request in api.requests:
                if request.usage is None:
                    continue
                notes_call = "You keep the working notes of a coding session" in str(request.body)
                target = notes if notes_call else memory
                target.requests += 1
                target.prompt += request.usage.prompt_tokens
                target.output += request.usage.output_tokens
            return {"notes": notes, "memory": memory}
        finally:
            await llm.aclose()


async def weak_campaign(
    sessions: list[tuple[str, list[Point]]], runs: int, tmp: Path
) -> dict[str, Any]:
    model = WeakModel(fault_every=3)
    refused = total = lost = 0
    async with LoopbackAPI(context_limit=1_000_000) as api:
        api.set_handler(model)
        llm = opened("local", api)
        try:
            for _ in range(runs):
                for session, points in sessions:
                    root = tmp / "weak" / session
                    got, made, gone = await one_session(llm, "whole", points, session, root)
                    refused, total, lost = refused + got, total + made, lost + gone
        finally:
            await llm.aclose()
    return {"runs": total, "bad_answers": dict(model.faults), "refused": refused, "lost": lost}


def chosen_sessions(paths: list[Path], limit: int, points: int) -> list[tuple[str, list[Point]]]:
    """The first ``limit`` transcripts with trigger points, and their first ``points``."""
    sessions: list[tuple[str, list[Point]]] = []
    for path in transcripts(paths):
        found = trigger_points(path, SessionNotesConfig())[:points]
        if found:
            sessions.append((path.stem, found))
        if len(sessions) >= limit:
            break
    return sessions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[CORPUS])
    parser.add_argument("--limit", type=int, default=4, help="sessions (default 4)")
    parser.add_argument("--points", type=int, default=4, help="trigger points per session")
    parser.add_argument("--weak-runs", type=int, default=3, help="rounds of the weak campaign")
    args = parser.parse_args()
    sessions = chosen_sessions(args.paths, args.limit, args.points)
    started = time.perf_counter()
    print(f"{len(sessions)} sessions, {sum(len(p) for _, p in sessions)} trigger points")
    print(f"{'backend':<10} {'job':<7} {'requests':>8} {'prompt tok':>11} {'output tok':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in BACKENDS:
            figures = anyio.run(costs, name, sessions, Path(tmp))
            for job, cost in figures.items():
                print(
                    f"{name:<10} {job:<7} {cost.requests:>8} {cost.prompt:>11,} {cost.output:>10,}"
                )
        weak = anyio.run(weak_campaign, sessions, args.weak_runs, Path(tmp))
    print(
        f"weak model (a bad answer one time in three): {weak['runs']} runs, bad answers "
        f"{weak['bad_answers']}, refused and counted {weak['refused']}, notes or memories "
        f"lost or corrupted {weak['lost']}  ({time.perf_counter() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
