"""The related-words table (memd.memory.related) and the query expansion it gives recall."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.clock import FakeClock
from memd.config import Config
from memd.memory import rank, related
from memd.memory.rank import LexicalIndex, RankDoc
from memd.memory.recall import recall
from memd.memory.terms import analyze

SHIPPED = related.SOURCE
DAY = 86_400.0
PET_MEMORIES = [  # the one that answers "what pet" is the oldest: a tie on the name loses it
    "Evan has a dog called Rex that he walks every morning",
    *(
        f"Evan {what}"
        for what in (
            "bought a red car last week",
            "went hiking in the mountains",
            "started a new job at a bank",
            "is reading a novel about sailors",
            "cooked dinner for his parents",
            "painted the kitchen blue",
        )
    ),
]


@pytest.fixture(autouse=True)
def fresh_table() -> Iterator[None]:
    """Each test reads the table it sets up; the shipped one is back afterwards."""
    related.loaded.cache_clear()
    yield
    related.SOURCE = SHIPPED
    related.loaded.cache_clear()


def pet_memories(directory: Path) -> Path:
    directory.mkdir()
    now = time.time()
    for n, text in enumerate(PET_MEMORIES):
        path = directory / f"fact_{n}.md"
        path.write_text(f"---\nname: fact {n}\ndescription: {text}\ntype: user\n---\n\n{text}\n")
        stamp = now - (len(PET_MEMORIES) - n) * DAY
        os.utime(path, (stamp, stamp))
    return directory


async def lexical_recall(directory: Path, query: str) -> list[str]:
    result = await recall(query, memory_dir=directory, llm=None, cfg=Config(), clock=FakeClock())
    assert result.method == "lexical"
    return [m.relative for m in result.memories]


def test_the_shipped_table_is_small_names_its_source_and_relates_words() -> None:
    data = Path(str(SHIPPED)).read_bytes()
    assert len(data) < 1024 * 1024
    assert b"all-MiniLM-L6-v2" in data[:1000] and b"bench/thesaurus_build.py" in data[:1000]
    table = related.table()
    assert len(table) > 5_000
    (pet,) = analyze("pet")
    (dog,) = analyze("dog")
    (injury,) = analyze("injury")
    assert dog in dict(table.neighbours(pet))
    assert set(analyze("wound trauma fracture")) & dict(table.neighbours(injury)).keys()
    for line in map(table.neighbours, (pet, injury)):  # at the floor or more, nearest first
        alike = [a for _, a in line]
        assert all(0.5 <= a < 1 for a in alike) and alike == sorted(alike, reverse=True)


@pytest.mark.anyio
async def test_recall_finds_a_memory_through_a_word_related_to_the_querys(tmp_path: Path) -> None:
    """Issue 27, "no shared words": "What pet does Evan have?" shares only the name with "Evan
    has a dog called Rex"; the table relates "pet" and "dog", so that memory comes first
    rather than sixth among seven that all say "Evan"."""
    directory = pet_memories(tmp_path / "memory")
    got = await lexical_recall(directory, "What pet does Evan have?")
    assert got[0] == "fact_0.md"


@pytest.mark.anyio
async def test_a_nearer_related_word_counts_for_more_than_a_looser_one(tmp_path: Path) -> None:
    """A related word weighs by how alike it is: for "pet" the table holds "dog" (0.76) and
    "veterinarian" (0.60); a memory about Evan's dog comes before one, newer and as long,
    about his calls to the veterinarian (with one weight for both, the newer won the tie)."""
    directory = tmp_path / "memory"
    directory.mkdir()
    now = time.time()
    for n, text in enumerate(["Evan walks the dog daily", "Evan calls the veterinarian daily"]):
        path = directory / f"fact_{n}.md"
        path.write_text(f"---\nname: fact {n}\ndescription: {text}\ntype: user\n---\n\n{text}\n")
        os.utime(path, (now - (2 - n) * DAY, now - (2 - n) * DAY))
    assert await lexical_recall(directory, "What pet does Evan have?") == ["fact_0.md", "fact_1.md"]
    near = dict(related.table().neighbours("pet"))
    assert near["dog"] > near["veterinari"]


BROKEN_TABLES: dict[str, bytes | None] = {
    "missing": None,
    "no header": b"pet dog cat\n",
    "an older table": b"#memd-related 1\npet dog cat\n",
    "unsorted": b"#memd-related 2\npet dog 76\nanimal pet 70\n",
    "repeated": b"#memd-related 2\npet dog 76\npet cat 67\n",
    "not terms": b"#memd-related 2\npet Dog 76\n",
    "non-ascii": "#memd-related 2\npet d\u00f6g 76\n".encode(),
    "blank line": b"#memd-related 2\n\npet dog 76\n",
    "no similarity": b"#memd-related 2\npet dog\n",
    "similarity not two digits": b"#memd-related 2\npet dog 760\n",
    "similarity not a number": b"#memd-related 2\npet dog cat\n",
    "cut short": b"#memd-related 2\npet dog 76",
    "oversized": b"#memd-related 2\n" + b"a" * (related.MAX_BYTES + 1) + b"\n",
}


@pytest.mark.anyio
@pytest.mark.parametrize("case", list(BROKEN_TABLES))
async def test_an_unusable_table_means_no_expansion_and_one_log_line(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A missing or malformed table costs the expansion, never a recall: the answer is the
    plain ranker's, and the problem is logged once however many recalls follow."""
    source = tmp_path / "related.txt"
    if (data := BROKEN_TABLES[case]) is not None:
        source.write_bytes(data)
    related.SOURCE = source
    directory = pet_memories(tmp_path / "memory")
    with caplog.at_level(logging.WARNING, logger="memd.memory.related"):
        for _ in range(3):
            got = await lexical_recall(directory, "What pet does Evan have?")
            assert "fact_0.md" not in got  # the newest five of the seven that say "Evan"
    lines = [r.getMessage() for r in caplog.records if r.name == "memd.memory.related"]
    assert len(lines) == 1 and "recall expands no words" in lines[0]
    assert len(related.table()) == 0
    shown = related.statistics()  # what status says: off, the file named and the fix
    assert shown["read"] and shown["terms"] == 0
    assert str(source) in shown["off_reason"] and "reinstall memd" in shown["off_reason"]


def test_status_says_the_table_is_unread_until_a_recall_needs_it_then_its_size() -> None:
    assert related.statistics() == {"read": False}
    table = related.table()
    assert related.statistics() == {"read": True, "terms": len(table), "off_reason": None}


TERMS = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789"), min_size=1, max_size=12)


NEIGHBOURS = st.lists(st.tuples(TERMS, st.integers(0, 99)), max_size=4)


@given(st.dictionaries(TERMS, NEIGHBOURS, max_size=30), TERMS)
def test_a_parsed_table_finds_every_term_and_only_those(
    entries: dict[str, list[tuple[str, int]]], other: str
) -> None:
    lines = [
        " ".join([term, *(f"{near} {alike:02d}" for near, alike in found)])
        for term, found in sorted(entries.items())
    ]
    table = related.parse("\n".join([related.HEADER_MARK, "# note", *lines, ""]).encode())
    assert len(table) == len(entries)
    for term, found in [*entries.items(), (other, entries.get(other, []))]:
        assert table.neighbours(term) == tuple((near, alike / 100) for near, alike in found)


@given(st.binary(max_size=300))
def test_parse_takes_any_bytes_and_answers_a_table_or_a_problem(data: bytes) -> None:
    for candidate in (data, related.HEADER_MARK.encode() + b"\n" + data):
        try:
            table = related.parse(candidate)
        except related.Problem:
            continue
        assert all(isinstance(n, str) and 0 <= a < 1 for n, a in table.neighbours("pet"))


HOSTILE = st.one_of(
    st.text(max_size=200),
    st.binary(max_size=200).map(lambda b: b.decode("utf-8", "surrogateescape")),
    st.sampled_from(["pet" * 40_000, "\udc80\udcff", "p\x00et", "PET", " ", "caf\u00e9"]),
)


@given(HOSTILE)
def test_hostile_terms_and_queries_are_looked_up_without_harm(text: str) -> None:
    """A lookup is bounded and never raises, whatever the term; a query of such text ranks."""
    assert isinstance(related.table().neighbours(text), tuple)
    docs = [RankDoc("dog.md", description="Evan has a dog"), RankDoc("car.md", description="car")]
    ranked = rank.ranking(LexicalIndex.build(docs), text)
    assert {r.key for r in ranked} <= {"dog.md", "car.md"}
