"""The kill loop's world: a fake user's transcripts that grow, its notes and memory files,
and the checks that no kill tore any of them (``tests/kill_loop_support.py`` runs the loop)."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from memd.atomic import LEGACY_TEMP, STALE_TEMP
from memd.memory.index import parse_index
from memd.session.template import DEFAULT_TEMPLATE, Intact, check_skeleton
from tests.conftest import CORPUS
from tests.daemon_harness import Home
from tests.session_support import TranscriptBuilder

SLUG = "-home-user-killloop"
SOURCE = CORPUS / "napoli-matcha" / "05_a737f62fb9_4_full.jsonl"
SESSIONS = ("k1", "k2")
BIG = "big"
BIG_CWD = "/work/ignored-big"  # opted out (privacy.ignore_projects): read, never summarized
BIG_STEP_BYTES = 16 * 1024 * 1024
WORKLOG = "_One terse line per step: what was tried and what came of it._\n"
NOTE_LINE = "- progress noted\n"
MEMORY_BODY = "---\nname: seeded\ndescription: a memory seeded by the test\ntype: user\n---\n\nx\n"
REWRITTEN = (
    "---\nname: seeded\ndescription: a memory rewritten by the kill loop\ntype: user\n---\n\n"
    + "".join(f"- fact {i}: the kill loop rewrote this memory whole\n" for i in range(400))
)


@dataclass
class Growth:
    """Generated turns continuing a transcript: a prompt, a tool call and its result, an
    answer, a turn end; the context the answers report grows by 300 tokens a turn."""

    builder: TranscriptBuilder
    cwd: str
    tokens: int = 20_000

    def turns(self, count: int) -> bytes:
        builder, first = self.builder, len(self.builder.lines)
        for _ in range(count):
            builder.user(f"step {builder.count}: look at the next file")
            read = (("Read", {"file_path": f"/work/src/f{builder.count}.py"}),)
            _, ids = builder.assistant("Reading it.", read, prompt_tokens=self.tokens)
            builder.results(ids, "x = 1\n" * 20)
            self.tokens += 300
            builder.assistant("Done with this step.", prompt_tokens=self.tokens)
            self._turn_end()
        new = builder.lines[first:]
        for line in new:
            line["cwd"] = self.cwd
        return b"".join(json.dumps(line).encode() + b"\n" for line in new)

    def _turn_end(self) -> None:
        builder = self.builder
        builder.count += 1
        uuid = f"{builder.session_id}-u{builder.count:04d}"
        builder.lines.append(
            {
                "type": "system",
                "subtype": "turn_duration",
                "durationMs": 1000,
                "uuid": uuid,
                "parentUuid": builder.parent,
                "sessionId": builder.session_id,
                "timestamp": "2025-01-01T01:00:00.000Z",
                "isSidechain": False,
            }
        )
        builder.parent = uuid


@dataclass
class World:
    """The fake user's files the loop feeds and checks."""

    home: Home
    rng: random.Random
    growth: dict[str, Growth]
    memory: Path
    big: Growth = field(default_factory=lambda: Growth(TranscriptBuilder(session_id=BIG), BIG_CWD))
    index_version: str | None = None  # MEMORY.md once written: it never changes after that

    @property
    def project(self) -> Path:
        return self.home.projects / SLUG


def temp_files(root: Path) -> list[Path]:
    """Every file under ``root`` named like one of memd's atomic-write temp files."""
    found = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            if STALE_TEMP.fullmatch(name) or LEGACY_TEMP.fullmatch(name):
                found.append(Path(dirpath) / name)
    return found


def check_notes(text: str) -> None:
    """A notes file is the template plus whole added lines: never a torn write."""
    base = text.replace(NOTE_LINE, "")
    assert check_skeleton(text, DEFAULT_TEMPLATE) == Intact(), text[:400]
    assert WORKLOG in base and base.count(WORKLOG) == 1, text[:400]


def check_memory(world: World) -> str:
    """The memory file is its seeded or its rewritten version (which, is returned); the
    index, absent or whole (and always the same once written)."""
    text = (world.memory / "seeded.md").read_text()
    assert text in (MEMORY_BODY, REWRITTEN), text[:400]
    version = "seeded" if text == MEMORY_BODY else "rewritten"
    index = world.memory / "MEMORY.md"
    if not index.exists():
        return version
    current = index.read_text()
    world.index_version = world.index_version or current
    assert current == world.index_version, (current, world.index_version)
    entries = parse_index(current)
    assert current.endswith("\n") and len(entries) == len(current.splitlines()), current
    assert [e.file for e in entries] == ["seeded.md"], current
    return version


def state_files(state_dir: Path) -> Iterator[Path]:
    for dirpath, _, names in os.walk(state_dir):
        for name in names:
            if name.endswith(".json"):
                yield Path(dirpath) / name


def append_some(world: World) -> None:
    for sid in SESSIONS:
        with open(world.project / f"{sid}.jsonl", "ab") as f:
            f.write(world.growth[sid].turns(world.rng.randint(1, 4)))


def grow_big(world: World) -> None:
    """Append about BIG_STEP_BYTES of generated turns to the big transcript."""
    builder, text = world.big.builder, "lorem ipsum dolor sit amet " * 150  # ~4 KB a message
    first = len(builder.lines)
    while len(builder.lines) - first < BIG_STEP_BYTES // 4096:
        builder.user(text)
        builder.assistant(text, prompt_tokens=2_000)
    for line in builder.lines[first:]:
        line["cwd"] = BIG_CWD
    with open(world.project / f"{BIG}.jsonl", "ab") as f:
        f.write(b"".join(json.dumps(line).encode() + b"\n" for line in builder.lines[first:]))
    del builder.lines[:]  # written: only the chain's last uuid is needed from here on
