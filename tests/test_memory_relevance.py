"""Abstention (issue 36, item 1): recall returns nothing when nothing is relevant enough, judged
on how much of the query's weight the best memory holds (memd.memory.relevance), not only
relative to the best hit."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.clock import FakeClock
from memd.config import Config
from memd.memory.frontmatter import Frontmatter, render_document
from memd.memory.rank import LexicalIndex, RankDoc, rank
from memd.memory.recall import recall
from memd.memory.relevance import (
    MIN_COVER,
    NAME,
    UNSEEN,
    Answerable,
    Cover,
    best_coverage,
    coverage,
    covered,
    query_weight,
)
from memd.memory.scan import MemoryHeader

LIFE = (
    "Caroline passed her driving test last spring",
    "Caroline adopted a guinea pig named Oscar",
    "Caroline went to a pottery class with Melanie in May",
    "Caroline is reading a book about the history of Portugal",
    "Caroline volunteers at the animal shelter on weekends",
    "Melanie paints landscapes with watercolours",
    "Melanie ran her first half marathon in the autumn",
    "Melanie and her husband are saving up for a camper van",
    "Evan has a dog called Rex",
    "Evan likes jazz and plays the piano on Sundays",
    "Evan moved to a flat near the river in August",
    "Evan is learning to cook Thai curries",
)


def life_index() -> LexicalIndex:
    return LexicalIndex.build(
        RankDoc(key=f"fact_{n}.md", description=text) for n, text in enumerate(LIFE)
    )


def number_of(index: LexicalIndex, key: str) -> int:
    return next(n for n, doc in enumerate(index.docs) if doc.key == key)


def idf(index: LexicalIndex, term: str) -> float:
    found = index.postings(term)
    assert found is not None
    return float(found[2])


def idf_of_one(index: LexicalIndex) -> float:
    size = len(index.docs)
    return math.log(1 + (size - 0.5) / 1.5)


def test_a_memory_holding_every_word_covers_the_whole_query() -> None:
    index = life_index()
    weight = query_weight(index, "guinea pig adopted")
    assert coverage(index, weight, number_of(index, "fact_1.md")) == pytest.approx(1.0)
    assert coverage(index, weight, number_of(index, "fact_9.md")) == 0.0


def test_a_word_no_memory_holds_weighs_twice_one_that_one_memory_holds() -> None:
    index = life_index()
    weight = query_weight(index, "pottery pagination")  # "pottery": one memory; "pagination": none
    assert weight.total == pytest.approx(idf(index, "potteri") + UNSEEN * idf_of_one(index))
    got = coverage(index, weight, number_of(index, "fact_2.md"))
    assert got == pytest.approx(1 / (1 + UNSEEN))


def test_a_name_weighs_more_and_a_month_is_no_name() -> None:
    index = life_index()
    # "Joanna" is a name no memory holds: the pottery memory holds little of the question.
    named = query_weight(index, "What did Joanna make at pottery?")  # "make": no memory's
    unseen = UNSEEN * idf_of_one(index)
    assert named.total == pytest.approx(NAME * unseen + unseen + idf(index, "potteri"))
    got = coverage(index, named, number_of(index, "fact_2.md"))
    assert got == pytest.approx(idf(index, "potteri") / named.total) and got < MIN_COVER
    # "May" inside a sentence is capitalised but no name: it weighs as a word does.
    dated = query_weight(index, "Who went to pottery in May?")
    assert coverage(index, dated, number_of(index, "fact_2.md")) == pytest.approx(1.0)


def test_a_word_counts_once_whatever_terms_it_gives() -> None:
    index = LexicalIndex.build(
        [
            RankDoc(key="hooks.md", description="useEffect cleanup runs before the next effect"),
            RankDoc(key="use.md", description="use the staging cluster for load tests"),
            RankDoc(key="other.md", description="the release train leaves on Tuesdays"),
        ]
    )
    weight = query_weight(index, "useEffect")
    assert len(weight.words) == 1  # useeffect, use, effect: one word
    assert coverage(index, weight, number_of(index, "hooks.md")) == pytest.approx(1.0)
    partial = coverage(index, weight, number_of(index, "use.md"))
    assert 0 < partial < 1  # "use" is a part of the word, and the commonest


def test_a_related_word_covers_part_of_the_query() -> None:
    """ "What pet does Evan have?" shares only the name with "Evan has a dog called Rex";
    the related-words table relates "pet" and "dog", as the ranker does."""
    index = life_index()
    weight = query_weight(index, "What pet does Evan have?")
    dog = coverage(index, weight, number_of(index, "fact_8.md"))
    jazz = coverage(index, weight, number_of(index, "fact_9.md"))  # the name alone
    assert dog >= MIN_COVER and dog > jazz > 0


_VOCABULARY = """bike pottery Portugal guinea pig dog jazz river parser module deploy fix test the
a of Caroline Evan Joanna May useEffect 2023 4 rebuild"""
_WORDS = st.sampled_from(_VOCABULARY.split())


@settings(max_examples=200, deadline=None)
@given(query=st.lists(_WORDS, max_size=12).map(" ".join), extra=st.lists(_WORDS, max_size=8))
def test_coverage_is_a_share_and_the_query_itself_covers_all(query: str, extra: list[str]) -> None:
    docs = [RankDoc(key=f"fact_{n}.md", description=text) for n, text in enumerate(LIFE)]
    docs.append(RankDoc(key="query.md", description=f"{query} {' '.join(extra)}"))
    index = LexicalIndex.build(docs)
    weight = query_weight(index, query)
    for number in range(len(index.docs)):
        assert 0.0 <= coverage(index, weight, number) <= 1.0 + 1e-9
    if weight.words:
        assert coverage(index, weight, number_of(index, "query.md")) == pytest.approx(1.0)
        assert best_coverage(index, query, range(len(index.docs))).share == pytest.approx(1.0)


def test_rank_gives_nothing_for_a_prompt_about_nothing_it_holds() -> None:
    """Before, a coding prompt got the memory that shares "fix" and "test" with it, and a
    question about someone else got every memory that shares a word."""
    index = life_index()
    assert rank(index, "fix the failing test in the parser module") == []
    assert rank(index, "What did Joanna read last week?") == []
    assert [r.key for r in rank(index, "Which book is Caroline reading?")][:1] == ["fact_3.md"]
    assert [r.key for r in rank(index, "What pet does Evan have?")][:1] == ["fact_8.md"]


def write_life(memory_dir: Path) -> None:
    memory_dir.mkdir(parents=True)
    for n, text in enumerate(LIFE):
        meta = Frontmatter(name=f"fact {n}", description=text, type="user")
        (memory_dir / f"fact_{n}.md").write_text(render_document(meta, text + "\n"))


@pytest.mark.anyio
async def test_recall_without_a_model_says_why_it_gives_nothing(tmp_path: Path) -> None:
    write_life(tmp_path / "memory")
    clock = FakeClock(start=time.time())

    async def ask(query: str) -> tuple[list[str], str]:
        result = await recall(
            query, memory_dir=tmp_path / "memory", llm=None, cfg=Config(), clock=clock
        )
        return [m.relative for m in result.memories], result.reason

    got, reason = await ask("add pagination to the list API and fix the failing test")
    assert got == []
    assert "nothing relevant enough" in reason and f"{MIN_COVER:.0%} needed" in reason
    got, reason = await ask("which pet did Caroline adopt?")
    assert got[:1] == ["fact_1.md"] and "nothing relevant" not in reason


def header(relative: str) -> MemoryHeader:
    return MemoryHeader(Path("/m") / relative, relative, 0, None, None, None, "", ())


def test_with_the_semantic_stage_only_what_it_found_alike_may_answer() -> None:
    """Below the floor, a lexical answer keeps only the memories the semantic stage lifted
    (their fused score is above their share of the best lexical score)."""
    a, b, c = header("a.md"), header("b.md"), header("c.md")
    lexical = [(a, 2.0), (b, 1.0)]
    fused = [(a, 1.0), (b, 0.5), (c, 0.4)]  # c: a semantic hit; a and b: as before
    low = Answerable(Cover(MIN_COVER / 2), lexical, fused)
    assert not low.any and low.alike() == {"c.md"}
    assert Answerable(Cover(MIN_COVER / 2), lexical, None).alike() == set()
    assert Answerable(Cover(MIN_COVER), lexical, None).any


def test_three_words_met_answer_a_long_question_unless_it_names_a_stranger() -> None:
    """A long question meets its memory on three words while most of its wording (about the
    conversation itself) is in no memory: answered. The same with a name no memory holds:
    not (a question about someone else)."""
    index = life_index()
    memory = number_of(index, "fact_7.md")  # Melanie ... saving up for a camper van
    long = (
        "Can you walk me through the order in which I brought up the saving for the camper "
        "van across our conversations, in order? Mention ONLY and ONLY three items, briefly."
    )
    got = covered(index, query_weight(index, long), memory)
    assert got.words >= 3 and got.share < MIN_COVER and got.enough
    assert [r.key for r in rank(index, long)][:1] == ["fact_7.md"]
    named = long.replace("I brought up", "Joanna brought up")
    got = covered(index, query_weight(index, named), memory)
    assert got.words >= 3 and got.stranger and not got.enough
    assert rank(index, named) == []
