"""bench/recall_semantic.py on the recall-quality fixture with the tiny model the semantic
tests build: it runs memd's offline recall with and without the semantic stage over the same
files and reports both; a model it cannot use stops it with the stage's reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip(
    "model2vec", reason="the semantic extra is not installed: pip install -e '.[semantic]'"
)

from bench import recall_semantic
from tests.semantic_support import build_model

FIXTURE = Path(__file__).resolve().parents[1] / "bench" / "data" / "recall_quality" / "fixture.json"


def test_reports_memd_with_and_without_the_semantic_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = build_model(tmp_path / "model")
    assert recall_semantic.main([str(FIXTURE), str(model), "--split", "all"]) == 0
    out = capsys.readouterr().out
    assert "| memd | all | 10 |" in out and "| memd+semantic | all | 10 |" in out
    assert "| ceiling | all | 10 |" in out


def test_a_model_it_cannot_use_stops_it_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="the semantic stage is off: no model folder at"):
        recall_semantic.main([str(FIXTURE), str(tmp_path / "none"), "--split", "dev"])


def test_several_floors_are_compared_on_the_same_memories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = build_model(tmp_path / "model")
    argv = [str(FIXTURE), str(model), "--split", "all", "--min-similarity", "0.3", "0.5"]
    assert recall_semantic.main(argv) == 0
    out = capsys.readouterr().out
    assert "| memd+semantic@0.3 | all | 10 |" in out and "| memd+semantic@0.5 | all | 10 |" in out
    assert "| memd | all | 10 |" in out


def test_latency_times_recall_with_the_stage_off_and_on_and_weighs_the_vectors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = build_model(tmp_path / "model")
    argv = [str(FIXTURE), str(model), "--split", "none", "--latency", "80"]
    assert recall_semantic.main(argv) == 0
    out = capsys.readouterr().out
    assert "whole cached recall at 80 memories" in out and "| memd |" not in out
    assert "  lexical + semantic " in out and "  lexical " in out
    per_memory = int(out.split("vectors: ")[1].split(" bytes")[0])
    assert 16 * 4 <= per_memory < 4096  # 16 dims of float32, and what keeps them


def _beam_tier(folder: Path) -> Path:
    """Two BEAM chats (the layout bench/recall_beam.py reads), one question each."""
    facts = [
        ("My weather app retries failed requests with exponential backoff.", "How do I retry?"),
        ("The budget tracker stores expenses in a SQLite table.", "Where are expenses kept?"),
    ]
    for number, (fact, question) in enumerate(facts, 1):
        chat = folder / str(number)
        (chat / "probing_questions").mkdir(parents=True)
        turns = [
            [{"role": "user", "id": 1, "content": fact}, {"role": "assistant", "id": 2}],
            [{"role": "user", "id": 3, "content": "Thanks, that settles it for today."}],
        ]
        batches = [{"time_anchor": "March-01-2024", "turns": turns}]
        (chat / "chat.json").write_text(json.dumps(batches), encoding="utf-8")
        probing = {"information_extraction": [{"question": question, "source_chat_ids": [2]}]}
        (chat / "probing_questions" / "probing_questions.json").write_text(
            json.dumps(probing), encoding="utf-8"
        )
    return folder


def test_a_beam_tier_is_read_with_bm25_and_stopwords_beside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = build_model(tmp_path / "model")
    tier = _beam_tier(tmp_path / "100K")
    assert recall_semantic.main([str(tier), str(model), "--beam", "--split", "all"]) == 0
    out = capsys.readouterr().out
    for method in ("memd", "memd+semantic", "bm25+stop", "ceiling"):
        assert f"| {method} | all | 2 |" in out
    assert "| ceiling | all | 2 | 1.000 |" in out


def test_a_folder_that_is_no_beam_tier_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = build_model(tmp_path / "model")
    assert recall_semantic.main([str(FIXTURE), str(model), "--beam"]) == 2
    assert "is not a BEAM tier's folder" in capsys.readouterr().err
