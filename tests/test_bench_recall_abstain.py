"""The abstention bench (bench/recall_abstain.py) on the recall-quality fixture: the prompts it
generates are fixed, the off-topic questions come from a conversation about other people, and
the tallies count what memd's real recall returns."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from memd.config import Config

BENCH = Path(__file__).resolve().parents[1] / "bench"
FIXTURE = BENCH / "data" / "recall_quality" / "fixture.json"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("recall_abstain", BENCH / "recall_abstain.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["recall_abstain"] = module
    spec.loader.exec_module(module)
    return module


ra = _module()


def test_prompts_are_distinct_and_the_same_every_run() -> None:
    prompts = ra.coding_prompts()
    assert len(prompts) == len(set(prompts)) == ra.PROMPT_COUNT
    assert prompts == ra.coding_prompts()
    assert all("{" not in p for p in prompts)


def test_off_topic_questions_come_from_a_conversation_about_other_people() -> None:
    first, second = ra.rq.load(FIXTURE)  # both about Ada and Ben
    assert ra.speakers(first) == ra.speakers(second) == {"Ada", "Ben"}
    assert ra.unrelated([first, second], 0).questions == ()  # no one else to ask about
    renamed = [
        dataclasses.replace(m, text=m.text.replace("Ada", "Zoe").replace("Ben", "Yan"))
        for m in second.memories
    ]
    third = dataclasses.replace(second, memories=tuple(renamed))
    assert ra.speakers(third) == {"Zoe", "Yan"}
    assert ra.unrelated([first, second, third], 0) is third
    assert ra.unrelated([first, second, third], 2) is first


def test_tallies_count_what_recall_returns() -> None:
    conversations = ra.rq.load(FIXTURE)
    tallies = ra.evaluate(conversations, ra.coding_prompts(10), Config())
    relevant = tallies["relevant"]
    assert relevant.asked == sum(len(c.questions) for c in conversations)
    assert 0 < relevant.answered <= relevant.asked and relevant.found >= 1
    assert tallies["coding"].asked == 20
    assert tallies["coding"].answered == 0  # nothing in the fixture is about code
