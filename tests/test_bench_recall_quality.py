"""The recall-quality benchmark (bench/recall_quality.py) on its fixture: it loads the LoCoMo
format, runs memd's real offline recall over files, and scores it; the random floor is exact."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.config import Config

BENCH = Path(__file__).resolve().parents[1] / "bench"
FIXTURE = BENCH / "data" / "recall_quality" / "fixture.json"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("recall_quality", BENCH / "recall_quality.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["recall_quality"] = module
    spec.loader.exec_module(module)
    return module


rq = _module()


def test_loads_observations_as_dated_memories_and_leaves_adversarial_out() -> None:
    conversations = rq.load(FIXTURE)
    assert len(conversations) == 2
    first = conversations[0]
    assert len(first.memories) == 6
    assert [q.category for q in first.questions] == [4, 4, 1, 2, 3]
    assert len(rq.load(FIXTURE, adversarial=True)[0].questions) == 6
    by_evidence = {m.evidence: m for m in first.memories}
    assert by_evidence["D2:1"].mtime > by_evidence["D1:1"].mtime  # dated at its session
    assert "Lisbon marathon" in by_evidence["D2:1"].text
    assert len({m.key for m in first.memories}) == 6


def test_memd_finds_the_evidence_and_a_missing_one_is_a_miss_for_all() -> None:
    table = rq.evaluate(rq.load(FIXTURE), Config(), bm25=False)
    r1, _, r5, mrr = table["memd"]["single-hop"].row()
    assert (r1, r5, mrr) == (1.0, 1.0, 1.0)
    assert table["memd"]["open-domain"].row() == (0.0, 0.0, 0.0, 0.0)
    assert table["ceiling"]["all"].row()[0] == pytest.approx(0.8)
    assert table["random"]["single-hop"].row()[0] == pytest.approx(1 / 6)


def test_cap_leaves_only_the_newest_memories_to_memd() -> None:
    table = rq.evaluate(rq.load(FIXTURE), Config(), bm25=False, cap=3)
    assert table["memd"]["single-hop"].row()[2] == pytest.approx(0.5)  # the guinea pig is old


def test_main_prints_every_category_and_refuses_a_bad_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rq.main([str(FIXTURE), "--no-bm25", "--split", "all"]) == 0
    out = capsys.readouterr().out
    for category in ("multi-hop", "temporal", "open-domain", "single-hop", "all"):
        assert f"| memd | {category} |" in out
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    assert rq.main([str(bad), "--no-bm25"]) == 2
    assert "not a LoCoMo-format file" in capsys.readouterr().err


@given(st.integers(1, 7), st.integers(0, 7))
def test_random_floor_is_the_exact_expectation(total: int, relevant: int) -> None:
    relevant = min(relevant, total)
    hits, rr = rq.random_expectation(total, relevant)
    orders = list(itertools.permutations([True] * relevant + [False] * (total - relevant)))
    first = [next((i for i, hit in enumerate(o, 1) if hit), None) for o in orders]
    for k in rq.KS:
        assert hits[k] == pytest.approx(sum(1 for f in first if f and f <= k) / len(orders))
    assert rr == pytest.approx(sum(1 / f for f in first if f) / len(orders))
