"""Dreams asked for one answer of a weak model (issue 34): can a bad answer ever lose or
corrupt a memory, and what does a one-answer dream cost?

Each round builds a fresh memory dir of ``--notes`` notes (seeded: pairs whose names start
alike, one a "yesterday" to date, an index line each, a few transcripts beside it), then the
real dream service runs one forced dream on the ``local`` backend (the openai SDK against the
loopback server) asked for one answer; :class:`~memd.testing.weak_model.WeakModel` answers
badly one time in three, in turn: cut short, not JSON, a path outside the memory dir,
everything deleted into one note. After each run:

* a failed run left the memory dir byte for byte as it was, the lock's mtime too;
* a completed one left every note valid (frontmatter, UTF-8), every body line of the notes
  before in some note after, and every index line pointing at a note that is there.

    python3 bench/dream_weak.py [--rounds 30] [--notes 12] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

from memd.clock import SystemClock  # noqa: E402
from memd.config import Config  # noqa: E402
from memd.config_llm import BackendConfig, LLMConfig  # noqa: E402
from memd.dream import wipe  # noqa: E402
from memd.dream.exclusion import DirExclusion  # noqa: E402
from memd.dream.lock import FLOCK_NAME, LOCK_NAME  # noqa: E402
from memd.dream.service import DreamService  # noqa: E402
from memd.llm.backends import open_llm  # noqa: E402
from memd.llm.client import Backend  # noqa: E402
from memd.llm.guard import CostGuard  # noqa: E402
from memd.llm.ledger import LEDGER_FILE, Ledger  # noqa: E402
from memd.llm.models import Models  # noqa: E402
from memd.memory.frontmatter import parse_document  # noqa: E402
from memd.memory.index import parse_index  # noqa: E402
from memd.memory.location import Location  # noqa: E402
from memd.testing.loopback import LoopbackAPI  # noqa: E402
from memd.testing.weak_model import WeakModel  # noqa: E402

PRIOR_NS = 1_700_000_000_000_000_000
TOPICS = ("deploy", "release", "testing", "database", "logging", "frontend", "caching", "auth")


def note(name: str, description: str, body: str) -> str:
    return f"---\nname: {name}\ndescription: {description}\ntype: project\n---\n\n{body}\n"


def build(root: Path, notes: int, rng: random.Random) -> Path:
    """A memory dir of ``notes`` notes, two of them alike (a merge to make), one dated
    "yesterday", the index, and a few transcripts that mention them."""
    memory = root / "projects" / "proj" / "memory"
    memory.mkdir(parents=True)
    index = []
    for n in range(notes):
        topic = TOPICS[n % len(TOPICS)]
        name = f"{topic} rule {n}" if n != 1 else f"{TOPICS[0]} notes"
        body = " ".join(f"{topic}-fact-{n}-{rng.randrange(10**6)}" for _ in range(3)) + "."
        if n == 2:
            body += " It was changed yesterday."
        file = f"project_{n:02d}.md"
        (memory / file).write_text(note(name, f"What holds for {topic}", body))
        index.append(f"- [{name}]({file}) — What holds for {topic}\n")
    (memory / "MEMORY.md").write_text("".join(index))
    lock = memory / LOCK_NAME
    lock.write_text("")
    os.utime(lock, ns=(PRIOR_NS, PRIOR_NS))
    for s in range(3):
        lines = [{"type": "user", "message": {"content": f"the {t} rule moved"}} for t in TOPICS]
        (memory.parent / f"s{s}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return memory


def tree(memory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(memory)): p.read_bytes()
        for p in sorted(memory.rglob("*"))
        if p.is_file() and p.name not in (LOCK_NAME, FLOCK_NAME)
    }


def problems(before: dict[str, bytes], after: dict[str, bytes], failed: bool) -> list[str]:
    """What a run lost or corrupted (empty: nothing)."""
    if failed:
        return [] if after == before else ["a failed run changed the memory dir"]
    found: list[str] = []
    texts = {name: data.decode("utf-8") for name, data in after.items()}
    for name, text in texts.items():
        if wipe.is_topic(name) and wipe.frontmatter_problem(text) is not None:
            found.append(f"{name}: {wipe.frontmatter_problem(text)}")
    bodies = "\n".join(parse_document(t).body for n, t in texts.items() if wipe.is_topic(n))
    for name, data in before.items():
        if not wipe.is_topic(name):
            continue
        for word in parse_document(data.decode()).body.split():
            if "-fact-" in word and word.rstrip(".") not in bodies:
                found.append(f"{word} of {name} is gone")
    for entry in parse_index(texts.get("MEMORY.md", "")):
        if entry.file not in texts:
            found.append(f"the index points at {entry.file}, which is gone")
    return found


def service_for(root: Path, llm: Backend) -> DreamService:
    clock = SystemClock()
    ledger = Ledger(root / LEDGER_FILE, clock)
    cfg = Config()

    async def locate(cwd: str) -> Location:
        raise AssertionError("the benchmark names its project")

    return DreamService(
        root / "projects",
        root / "state",
        cfg,
        clock,
        ledger,
        CostGuard(cfg.budget, ledger, clock),
        lambda: Models.single(llm, protocol="whole"),
        locate,
        DirExclusion(),
    )


async def one_dream(root: Path, llm: Backend) -> dict[str, Any]:
    service = service_for(root, llm)
    memory = root / "projects" / "proj" / "memory"
    async with anyio.create_task_group() as tg:
        await tg.start(service.run)
        answer = await service.check(cwd=None, project="proj", force=True)
        assert answer["started"], answer
        running = service.find_dir(memory).running
        if running is not None:
            await running.done.wait()
        tg.cancel_scope.cancel()
    run: dict[str, Any] = service.row(memory)["last_runs"][0]
    return run


async def campaign(rounds: int, notes: int, seed: int, tmp: Path) -> dict[str, Any]:
    rng = random.Random(seed)
    weak = WeakModel(fault_every=3)
    out: dict[str, Any] = {"runs": 0, "completed": 0, "failed": 0, "lost": [], "requests": 0}
    out.update(merged=0, dated=0)
    prompt = output = 0
    with LoopbackAPI(context_limit=1_000_000) as api:
        api.set_handler(weak)
        config = LLMConfig(provider="openai", base_url=api.url + "/v1", openai=BackendConfig())
        llm = open_llm(config, {})
        assert isinstance(llm, Backend), llm
        try:
            for n in range(rounds):
                root = tmp / f"r{n}"
                memory = build(root, notes, rng)
                before = tree(memory)
                since = len(api.requests)
                run = await one_dream(root, llm)
                failed = run["state"] != "completed"
                out["runs"] += 1
                out["failed" if failed else "completed"] += 1
                after = tree(memory)
                out["lost"] += problems(before, after, failed)
                out["merged"] += sum(map(wipe.is_topic, before)) - sum(map(wipe.is_topic, after))
                out["dated"] += sum(
                    b"yesterday" in before[n] and n in after and b"yesterday" not in after[n]
                    for n in before
                )
                if failed and (memory / LOCK_NAME).stat().st_mtime_ns != PRIOR_NS:
                    out["lost"].append("a failed run kept the lock's new mtime")
                for request in api.requests[since:]:
                    if request.usage is not None:
                        out["requests"] += 1
                        prompt += request.usage.prompt_tokens
                        output += request.usage.output_tokens
        finally:
            await llm.aclose()
    out.update(faults=dict(weak.faults), prompt=prompt, output=output)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--notes", type=int, default=12)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = anyio.run(campaign, args.rounds, args.notes, args.seed, Path(tmp))
    runs, bad = out["runs"], sum(out["faults"].values())
    print(
        f"{runs} one-answer dreams of {args.notes} notes: {out['completed']} completed, "
        f"{out['failed']} failed (nothing changed); {out['merged']} notes merged away, "
        f"{out['dated']} dated; bad answers {bad} {out['faults']}; requests {out['requests']} "
        f"({out['requests'] / runs:.1f} a dream), prompt tokens {out['prompt'] / runs:,.0f} and "
        f"output {out['output'] / runs:,.0f} a dream; notes lost or corrupted "
        f"{len(out['lost'])}  ({time.perf_counter() - started:.1f} s)"
    )
    for problem in out["lost"][:20]:
        print("  LOST:", problem)
    sys.exit(1 if out["lost"] else 0)


if __name__ == "__main__":
    main()
