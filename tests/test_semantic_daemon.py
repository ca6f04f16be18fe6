"""The semantic recall stage through the real daemon (issue 27): the config file turns it on
and names the model by id (a folder under the state dir, as ``memdctl fetch-model`` saves it),
``status`` says which stages are on, a prompt that shares no word with a memory recalls it, and
a model folder damaged while the daemon runs (a truncated tensor file, then a FIFO in its
place) turns the stage off with the reason in ``status`` while recall answers lexically."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "model2vec", reason="the semantic extra is not installed: pip install -e '.[semantic]'"
)

from memd.memory.paths import memory_dir
from tests.daemon_harness import Home, call, fake_home, start_memd, stop_memd, wait_for
from tests.semantic_support import build_model, memory_file

pytestmark = pytest.mark.slow


def _semantic(home: Home) -> dict[str, Any]:
    stages: dict[str, Any] = call(home, "status")["memory"]["recall_stages"]
    return dict(stages["semantic"])


def _recall(home: Home, cwd: Path, query: str) -> list[str]:
    answer = call(home, "recall", {"query": query, "cwd": str(cwd)})
    assert answer["method"] == "lexical"  # no API key: the fused ranking answers
    return [m["relative"] for m in answer["memories"]]


def _off_for(home: Home, cwd: Path, text: str) -> str:
    def off() -> str | None:
        _recall(home, cwd, "anything")  # a recall wakes the worker, which looks at the files
        stage = _semantic(home)
        why = str(stage.get("off_reason") or "")
        return why if not stage["on"] and text in why else None

    return wait_for(off, timeout=30, what=f"the stage to be off for {text!r}")


def test_the_daemon_recalls_by_meaning_and_survives_a_damaged_model(tmp_path: Path) -> None:
    cwd = tmp_path / "work" / "proj"
    cwd.mkdir(parents=True)
    with fake_home(tmp_path) as home:
        folder = build_model(home.state_dir / "models" / "test--tiny")
        config = home.root / ".config" / "memd" / "config.yaml"
        config.parent.mkdir(parents=True)
        config.write_text("memory:\n  semantic:\n    enabled: true\n    model: test/tiny\n")
        mdir = memory_dir(home.projects, cwd)
        memory_file(mdir, "guinea", "Keeps a guinea pig called Biscuit", "Biscuit is old.")
        memory_file(mdir, "testing", "Never mock Postgres in integration tests", "Use sql.")
        proc = start_memd(home)
        try:

            def embedded() -> bool:
                _recall(home, cwd, "anything")
                stage = _semantic(home)
                return bool(stage["on"] and stage["embedded_memories"] == 2)

            wait_for(embedded, timeout=30, what="the memories to be embedded")
            assert _semantic(home)["model"] == "test/tiny"
            assert _recall(home, cwd, "which pet") == ["guinea.md"]
            shown = subprocess.run(
                [sys.executable, "-m", "memd_client.cli", "status"],
                env=home.env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert "semantic test/tiny (2 embedded in 1 projects)" in shown.stdout

            tensors = folder / "model.safetensors"
            tensors.write_bytes(tensors.read_bytes()[:64])
            why = _off_for(home, cwd, "not a readable safetensors file")
            assert str(tensors) in why
            assert _recall(home, cwd, "mock postgres") == ["testing.md"]

            tensors.unlink()
            os.mkfifo(tensors)  # a reader that blocked on it would hang the worker for good
            _off_for(home, cwd, "not a regular file")
            assert _recall(home, cwd, "mock postgres") == ["testing.md"]
            assert call(home, "hello")["protocol"] == 1
        finally:
            assert stop_memd(proc) == 0
