"""The ranker's stemmer: English Snowball (Porter2) in pure Python (issue 27)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.memory import porter2
from memd.memory.terms import analyze, stem

REFERENCE = Path(__file__).with_name("snowball_english.txt")


def _pairs() -> list[tuple[str, str]]:
    lines = REFERENCE.read_text(encoding="utf-8").splitlines()
    return [(w, s) for w, s in (line.split() for line in lines if not line.startswith("#"))]


def test_stems_are_snowballs_word_for_word() -> None:
    pairs = _pairs()
    assert len(pairs) > 250
    wrong = [(word, porter2.stem(word), want) for word, want in pairs if porter2.stem(word) != want]
    assert wrong == []


@pytest.mark.parametrize(
    "forms",
    [
        ("vacation", "vacations", "vacationed"),  # the light stemmer split these
        ("organize", "organized", "organization", "organizations"),
        ("die", "dying"),
        ("add", "added", "adding"),
    ],
)
def test_word_forms_meet_that_a_suffix_stripper_kept_apart(forms: tuple[str, ...]) -> None:
    assert len({stem(f) for f in forms}) == 1


def test_a_memory_about_a_vacation_is_found_by_a_question_about_vacationing() -> None:
    assert set(analyze("Where has Maria vacationed?")) & set(analyze("a vacation in Florida"))


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz'", max_size=30))
def test_any_word_stems_without_error_and_never_grows(word: str) -> None:
    assert len(porter2.stem(word)) <= len(word)


@given(st.text(max_size=30))
def test_any_text_stems_through_terms(word: str) -> None:
    assert isinstance(stem(word.lower()), str)
