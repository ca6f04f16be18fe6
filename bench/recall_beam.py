"""Recall quality on BEAM, a second long-conversation benchmark (issue 36, item 5).

BEAM ("Beyond a Million Tokens", mohammadtavakoli78/BEAM on GitHub, its ``chats/`` folder; not
shipped with memd, give a tier's folder) holds long chats of a user with an assistant, mostly
about coding projects, each with probing questions whose ``source_chat_ids`` name the messages
that hold the answer. Each chat is one project: every user message becomes one memory (the
message, without BEAM's ``->-> n,m`` position mark; named after the user and the batch's date,
described by its first sentence), dated at its batch's ``time_anchor`` in the chat's order. A
question's evidence is the user messages its ids name, an assistant message standing for the
user message it answers. Questions without source ids (``abstention``) and ``summarization``
questions (their ids span whole chats) are left out: the 100K tier gives 2,866 memories and
319 questions, the 500K tier 19,029 and 559.

Methods and figures as in ``bench/recall_quality.py`` (memd's real offline recall over files,
BM25 with and without stopwords, the random floor, the ceiling), per category and overall;
chats are split by position (even ``dev``, odd ``held-out``).

Run: ``python3 bench/recall_beam.py PATH/chats/100K [--split dev|held-out|all|both]``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from bench import recall_quality as rq  # noqa: E402
from memd.config import Config  # noqa: E402
from memd.memory.frontmatter import Frontmatter, render_document  # noqa: E402

LEFT_OUT = ("abstention", "summarization")
_MARK = re.compile(r"\s*->->\s*[\d,\s]+$")
_SENTENCE = re.compile(r"^(.{20,200}?[.?!])(\s|$)", re.DOTALL)
_ANCHOR = "%B-%d-%Y"


def load(folder: Path) -> list[rq.Conversation]:
    """The chats of a BEAM tier's folder (``chats/100K``), in the order of their numbers."""
    chats = sorted(
        (p for p in folder.iterdir() if (p / "chat.json").is_file()),
        key=lambda p: (len(p.name), p.name),
    )
    return [_chat(path) for path in chats]


def _chat(path: Path) -> rq.Conversation:
    batches: list[dict[str, Any]] = json.loads((path / "chat.json").read_text(encoding="utf-8"))
    memories: list[rq.Memory] = []
    asks: dict[int, int] = {}  # a message id -> the id of the user message it belongs to
    used: set[str] = set()
    when = datetime(2024, 1, 1, tzinfo=UTC)
    for batch in batches:
        when = _anchor(batch, when)
        for turn in batch.get("turns") or []:
            user: int | None = None
            for message in turn:
                if message.get("role") == "user":
                    user = int(message["id"])
                    memories.append(_memory(message, when, len(memories), used))
                if user is not None:
                    asks[int(message["id"])] = user
    questions = list(_questions(path / "probing_questions" / "probing_questions.json", asks))
    return rq.Conversation(path.name, tuple(memories), tuple(questions))


def _anchor(batch: Mapping[str, Any], before: datetime) -> datetime:
    """The batch's ``time_anchor`` (on the batch, or on its first message), else ``before``."""
    turns = batch.get("turns") or [[{}]]
    text = batch.get("time_anchor") or (turns[0][0] if turns and turns[0] else {}).get(
        "time_anchor"
    )
    try:
        return datetime.strptime(str(text), _ANCHOR).replace(tzinfo=UTC)
    except ValueError:
        return before


def _memory(message: Mapping[str, Any], when: datetime, at: int, used: set[str]) -> rq.Memory:
    text = _MARK.sub("", str(message.get("content") or "")).strip()
    first = _SENTENCE.match(text)
    description = " ".join((first.group(1) if first else text[:200]).split())
    meta = Frontmatter(name=f"User, {when:%d %B %Y}", description=description)
    key = rq.unique_key(text, used)
    stamp = when.timestamp() + at  # keeps the chat's order
    return rq.Memory(key, render_document(meta, text + "\n"), stamp, str(message["id"]))


def _questions(path: Path, asks: Mapping[int, int]) -> Iterator[rq.Question]:
    probing: dict[str, list[dict[str, Any]]] = json.loads(path.read_text(encoding="utf-8"))
    for category, items in probing.items():
        if category in LEFT_OUT:
            continue
        for item in items:
            ids = list(_ids(item.get("source_chat_ids")))
            if not ids:
                continue
            evidence = frozenset(str(asks[i]) for i in ids if i in asks)
            yield rq.Question(str(item["question"]), category, evidence)


def _ids(value: object) -> Iterator[int]:
    """The integer ids in a ``source_chat_ids`` (a list, or a dict of lists)."""
    if isinstance(value, Mapping):
        for inner in value.values():
            yield from _ids(inner)
    elif isinstance(value, list):
        for item in value:
            yield from _ids(item)
    elif isinstance(value, int) and not isinstance(value, bool):
        yield value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("folder", type=Path, help="a BEAM tier's folder (chats/100K)")
    parser.add_argument("--split", choices=("dev", "held-out", "all", "both"), default="both")
    parser.add_argument("--no-bm25", action="store_true", help="without the bench extra")
    args = parser.parse_args(argv)
    try:
        chats = load(args.folder)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"recall_beam: {args.folder} is not a BEAM tier's folder: {exc}", file=sys.stderr)
        return 2
    if not chats:
        print(f"recall_beam: no chats in {args.folder}", file=sys.stderr)
        return 2
    memories = sum(len(c.memories) for c in chats)
    questions = sum(len(c.questions) for c in chats)
    print(f"{args.folder}: {len(chats)} chats, {memories} memories, {questions} questions\n")
    splits = {"dev": chats[0::2], "held-out": chats[1::2], "all": chats}
    chosen = ("dev", "held-out") if args.split == "both" else (args.split,)
    for name in chosen:
        table = rq.evaluate(splits[name], Config(), bm25=not args.no_bm25)
        print(rq.report(table, f"{name} ({len(splits[name])} chats)"))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
