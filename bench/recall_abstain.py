"""Does recall stay quiet when nothing is relevant? (issue 36)

Recall runs on every prompt; without a model (no key, a Codex or Gemini user) its lexical
answer is what the agent gets. This bench asks three kinds of query of memories made from a
LoCoMo-format file (``locomo10.json``, as ``bench/recall_quality.py`` makes them: one project
per conversation, one memory per observed fact) and prints how often recall returns something:

* ``relevant``: each conversation's own questions (category 5 left out), asked in its own
  project; beside the share answered, R@5 (an evidence memory among those returned);
* ``off-topic``: the questions of the next conversation whose people have other names (three
  conversations have a John each: a question about John is not off-topic where a John is),
  asked in this one's project, where nothing is about the people they name;
* ``coding``: :data:`PROMPT_COUNT` ordinary coding prompts, generated from templates and
  parts (:func:`coding_prompts`, a fixed seed), asked in every project: none of them is about
  anyone's holidays.

and, as a check that the coding memories it is meant for still get their answers, the
hand-written set of ``bench/recall.py`` (56 memories of a shop's monorepo, 32 queries that
each have memories a good recall returns): answered share, recall@5 and hit@5.

``memd`` is :func:`memd.memory.recall.recall` itself (no model, default config) over real
files. Projects are split as in ``recall_quality.py`` (even conversations ``dev``, odd
``held-out``); the coding prompts too (even-numbered prompts ``dev``).

Run: ``python3 bench/recall_abstain.py PATH/locomo10.json [--split dev|held-out|all|both]
[--beam PATH/chats/100K ...]``; ``--beam``: also BEAM's questions asked in their own chat's
project (``bench/recall_beam.py``), answered share and R@5 per half.
Targets (issue 36): off-topic answered ≤ 10 %, coding ≤ 5 %, relevant ≥ 95 %.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from bench import recall as handwritten  # noqa: E402  (the hand-written set)
from bench import recall_beam  # noqa: E402
from bench import recall_quality as rq  # noqa: E402
from memd.config import Config  # noqa: E402

_SPEAKER = re.compile(r"^name: ([^,\n]+),", re.MULTILINE)
PROMPT_COUNT = 200
SEED = 36

_MODULES = [
    "parser",
    "auth",
    "billing",
    "scheduler",
    "cache",
    "router",
    "exporter",
    "importer",
    "logger",
    "config",
    "cli",
    "worker",
    "uploader",
    "notifier",
    "search",
    "payments",
    "session",
    "storage",
    "metrics",
    "migrations",
]
_FEATURES = [
    "pagination",
    "dark mode",
    "retry with exponential backoff",
    "rate limiting",
    "CSV export",
    "a health check endpoint",
    "structured logging",
    "input validation",
    "a progress bar",
    "caching",
    "sorting by date",
    "a dry-run flag",
    "email notifications",
    "two-factor login",
    "search filters",
    "an undo button",
    "i18n support",
    "a loading spinner",
    "request timeouts",
    "audit logging",
]
_COMPONENTS = [
    "list API",
    "settings page",
    "CLI",
    "background worker",
    "upload form",
    "admin dashboard",
    "user profile page",
    "REST client",
    "signup flow",
    "checkout page",
    "report generator",
    "webhook handler",
    "build script",
    "login screen",
    "data pipeline",
]
_ERRORS = [
    "a KeyError",
    "a segfault",
    "connection refused",
    "a timeout",
    "an import error",
    "a null pointer exception",
    "permission denied",
    "an off-by-one error",
    "a race condition",
    "a memory leak",
    "a 500 error",
    "a type error",
]
_TOOLS = [
    "pre-commit",
    "ruff",
    "eslint",
    "prettier",
    "docker compose",
    "GitHub Actions",
    "mypy",
    "pytest-cov",
    "a Makefile",
    "poetry",
]
_LANGUAGES = [
    "TypeScript",
    "Rust",
    "Go",
    "async/await",
    "dataclasses",
    "SQLAlchemy",
    "React hooks",
    "pathlib",
    "a context manager",
    "generators",
]
_TEMPLATES = (
    "fix the failing test in the {module} module",
    "add {feature} to the {component}",
    "refactor the {module} module to use {language}",
    "why does the {component} crash with {error}",
    "write unit tests for the {module} module",
    "rename the {module} helpers and update every import",
    "the {component} is slow with large inputs, profile it",
    "update the README with the new install steps for the {component}",
    "explain what the {module} module does",
    "bump the dependencies of the {component} to the latest versions",
    "the CI build fails with {error} in the {module} tests",
    "add type hints to the {module} module",
    "implement {feature} in the {component}",
    "remove the dead code in the {module} module",
    "set up {tool} for this repo",
    "handle the case where the {component} gets an empty response",
    "make the {component} return a 404 when the item is missing",
    "debug why the {module} tests are flaky",
    "split the {module} module into smaller files",
    "add logging around the {module} retries",
    "review my changes to the {component} before I open a PR",
    "the {component} throws {error} after the last merge",
    "port the {module} module to {language}",
    "add a migration for the new column in the {module} tables",
    "write a docstring for every public function in the {module} module",
)


def coding_prompts(count: int = PROMPT_COUNT, seed: int = SEED) -> list[str]:
    """``count`` distinct coding prompts, each a template filled with random parts."""
    rng = random.Random(seed)
    prompts: dict[str, None] = {}
    while len(prompts) < count:
        template = rng.choice(_TEMPLATES)
        prompt = template.format(
            module=rng.choice(_MODULES),
            feature=rng.choice(_FEATURES),
            component=rng.choice(_COMPONENTS),
            error=rng.choice(_ERRORS),
            tool=rng.choice(_TOOLS),
            language=rng.choice(_LANGUAGES),
        )
        prompts.setdefault(prompt, None)
    return list(prompts)


@dataclass
class Tally:
    asked: int = 0
    answered: int = 0
    returned: int = 0
    found: int = 0  # relevant questions with an evidence memory among those returned

    def add(self, got: Sequence[str], wanted: frozenset[str] = frozenset()) -> None:
        self.asked += 1
        self.answered += bool(got)
        self.returned += len(got)
        self.found += any(key in wanted for key in got[:5])

    def row(self, name: str, relevant: bool) -> str:
        n = max(1, self.asked)
        r5 = f"{self.found / n:.3f}" if relevant else "-"
        return (
            f"| {name} | {self.asked} | {self.answered / n:.1%} | {self.returned / n:.2f} | {r5} |"
        )


def evaluate(
    conversations: Sequence[rq.Conversation], prompts: Sequence[str], cfg: Config
) -> dict[str, Tally]:
    tallies = {name: Tally() for name in ("relevant", "off-topic", "coding")}
    with tempfile.TemporaryDirectory(prefix="memd-recall-abstain-") as tmp:
        rankers = []
        for number, conv in enumerate(conversations):
            memory_dir = Path(tmp) / f"project{number}"
            rq.write_memories(memory_dir, conv.memories)
            rankers.append(rq.memd_ranker(memory_dir, cfg))
        for number, (conv, ranker) in enumerate(zip(conversations, rankers, strict=True)):
            keys_of: dict[str, set[str]] = {}
            for memory in conv.memories:
                keys_of.setdefault(memory.evidence, set()).add(memory.key)
            for question in conv.questions:
                wanted = frozenset(k for e in question.evidence for k in keys_of.get(e, ()))
                tallies["relevant"].add(ranker(question.text), wanted)
            for question in unrelated(conversations, number).questions:
                tallies["off-topic"].add(ranker(question.text))
            for prompt in prompts:
                tallies["coding"].add(ranker(prompt))
    return tallies


def speakers(conv: rq.Conversation) -> frozenset[str]:
    """The names of the people a conversation's memories are about (their ``name: Person,
    date`` lines)."""
    return frozenset(m.group(1) for memory in conv.memories if (m := _SPEAKER.search(memory.text)))


def unrelated(conversations: Sequence[rq.Conversation], number: int) -> rq.Conversation:
    """The next conversation after ``number`` (cyclically) about none of its people; an empty
    one when there is none."""
    mine = speakers(conversations[number])
    count = len(conversations)
    for step in range(1, count):
        other = conversations[(number + step) % count]
        if not speakers(other) & mine:
            return other
    return rq.Conversation("", (), ())


def evaluate_handwritten(cfg: Config) -> tuple[Tally, float]:
    """The hand-written set through recall: its tally and recall@5 (the share of each query's
    expected memories returned, averaged)."""
    tally, shares = Tally(), []
    ranker = rq.memd_ranker(handwritten.DATA / "memories", cfg)
    for query in handwritten.load_queries():
        got = ranker(query.text)
        tally.add(got, frozenset(query.expected))
        shares.append(sum(k in got[:5] for k in query.expected) / len(query.expected))
    return tally, sum(shares) / len(shares)


def report(title: str, tallies: dict[str, Tally]) -> str:
    lines = [f"### {title}", "", "| queries | n | answered | results a query | R@5 |"]
    lines.append("|---|---|---|---|---|")
    for name, tally in tallies.items():
        lines.append(tally.row(name, relevant=name == "relevant"))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("data", type=Path, help="a LoCoMo-format JSON file (locomo10.json)")
    parser.add_argument("--split", choices=("dev", "held-out", "all", "both"), default="both")
    parser.add_argument(
        "--beam", type=Path, action="append", default=[], help="a BEAM tier's folder too"
    )
    args = parser.parse_args(argv)
    try:
        conversations = rq.load(args.data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"recall_abstain: {args.data} is not a LoCoMo-format file: {exc}", file=sys.stderr)
        return 2
    cfg, prompts = Config(), coding_prompts()
    splits = {
        "dev": (conversations[0::2], prompts[0::2]),
        "held-out": (conversations[1::2], prompts[1::2]),
        "all": (conversations, prompts),
    }
    chosen = ("dev", "held-out") if args.split == "both" else (args.split,)
    for name in chosen:
        convs, asked = splits[name]
        title = f"{name} ({len(convs)} conversations, {len(asked)} coding prompts)"
        print(report(title, evaluate(convs, asked, cfg)))
        print()
    for folder in args.beam:
        chats = recall_beam.load(folder)
        for name, part in (("dev", chats[0::2]), ("held-out", chats[1::2])):
            tally = evaluate(part, (), cfg)["relevant"]
            print(f"BEAM {folder.name} {name}, relevant: " + tally.row("relevant", True))
    tally, recall_at_5 = evaluate_handwritten(cfg)
    answered, hit = tally.answered / tally.asked, tally.found / tally.asked
    print(
        f"hand-written coding set ({tally.asked} queries): answered {answered:.1%}, "
        f"recall@5 {recall_at_5:.3f}, hit@5 {hit:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
