"""The semantic recall stage through the real daemon (issue 27): ``memdctl fetch-model`` puts
the model under the state dir (here from a folder the test builds: nothing is downloaded), the
config file turns the stage on and names the model by id,
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

import numpy as np
from safetensors.numpy import save_file

from memd.memory.paths import memory_dir
from tests.daemon_harness import Home, call, fake_home, start_memd, stop_memd, wait_for
from tests.semantic_support import build_model, memory_file, vocabulary

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


def _memdctl(home: Home, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memd_client.cli", *args],
        env=home.env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _config(home: Home, text: str) -> None:
    config = home.root / ".config" / "memd" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text)


def test_fetch_model_keeps_only_a_model_the_daemon_can_read(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        _config(home, "memory:\n  semantic:\n    model: test/tiny\n")
        source = build_model(tmp_path / "elsewhere")
        tensors = source / "model.safetensors"
        good = tensors.read_bytes()
        tensors.write_bytes(good[:80])
        done = _memdctl(home, "fetch-model", "--from", str(source))
        assert done.returncode == 1
        assert f"cannot fetch {source} (SafetensorError" in done.stderr
        # One the library takes but the daemon would refuse: checked before it is kept.
        matrix = np.zeros((len(vocabulary()), 16), dtype=np.float32)
        mapping = np.full(len(vocabulary()), 99, dtype=np.int64)
        save_file({"embeddings": matrix, "mapping": mapping}, str(tensors))
        done = _memdctl(home, "fetch-model", "--from", str(source))
        assert done.returncode == 1 and "'mapping' points past the" in done.stderr
        models = home.state_dir / "models"
        assert not any(models.iterdir())  # nothing half-fetched left to be found
        tensors.write_bytes(good)
        done = _memdctl(home, "fetch-model", "--from", str(source))
        assert done.returncode == 0, done.stderr
        assert f"test/tiny: saved in {models / 'test--tiny'} (16 dimensions)" in done.stdout
        assert "memory.semantic.enabled: true" in done.stdout  # the next step, named
        assert [p.name for p in models.iterdir()] == ["test--tiny"]
        done = _memdctl(home, "fetch-model", "--model", "/opt/tiny")
        assert done.returncode == 2 and "nothing to fetch" in done.stderr
        done = _memdctl(home, "fetch-model", "--from", str(tmp_path / "nowhere"))
        assert done.returncode == 2 and "is not a folder" in done.stderr


@pytest.mark.parametrize("fault", ["ENOSPC", "EROFS"])
def test_fetch_model_on_a_disk_that_refuses_says_where_and_keeps_the_old_model(
    tmp_path: Path, fault: str
) -> None:
    """The state dir fills up or turns read-only: fetch-model fails (exit 1) naming the
    folder and what to do, and the model fetched before is still there, whole."""
    from tests.disk_support import faulty_disk

    with fake_home(tmp_path) as home:
        _config(home, "memory:\n  semantic:\n    model: test/tiny\n")
        source = build_model(tmp_path / "elsewhere")
        models = home.state_dir / "models"
        with faulty_disk(models) as disk:
            if not disk.real:
                pytest.skip("needs a real disk that fills up (root and tmpfs)")
            assert _memdctl(home, "fetch-model", "--from", str(source)).returncode == 0
            kept = {p.name: p.read_bytes() for p in (models / "test--tiny").iterdir()}
            disk.fault(fault)
            done = _memdctl(home, "fetch-model", "--from", str(source))
            assert done.returncode == 1, done.stderr
            assert f"cannot save the model in {models}" in done.stderr
            assert "No space left" in done.stderr or "Free some space" in done.stderr
            disk.heal()
            assert {p.name: p.read_bytes() for p in (models / "test--tiny").iterdir()} == kept


def test_a_fetch_killed_between_its_renames_gets_its_model_back_at_the_next(
    tmp_path: Path,
) -> None:
    """fetch-model moves the kept model aside, then the new one in: killed in between, the
    next fetch-model (even one that fails) puts the kept model back first."""
    with fake_home(tmp_path) as home:
        _config(home, "memory:\n  semantic:\n    model: test/tiny\n")
        source = build_model(tmp_path / "elsewhere")
        assert _memdctl(home, "fetch-model", "--from", str(source)).returncode == 0
        models = home.state_dir / "models"
        kept = {p.name: p.read_bytes() for p in (models / "test--tiny").iterdir()}
        (models / "test--tiny").rename(models / ".test--tiny.old")  # the kill's state
        (source / "model.safetensors").write_bytes(b"not a tensor file")
        done = _memdctl(home, "fetch-model", "--from", str(source))
        assert done.returncode == 1
        assert {p.name: p.read_bytes() for p in (models / "test--tiny").iterdir()} == kept


def test_the_daemon_recalls_by_meaning_and_survives_a_damaged_model(tmp_path: Path) -> None:
    cwd = tmp_path / "work" / "proj"
    cwd.mkdir(parents=True)
    with fake_home(tmp_path) as home:
        _config(home, "memory:\n  semantic:\n    enabled: true\n    model: test/tiny\n")
        fetched = _memdctl(home, "fetch-model", "--from", str(build_model(tmp_path / "built")))
        assert fetched.returncode == 0, fetched.stderr
        folder = home.state_dir / "models" / "test--tiny"
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
            shown = _memdctl(home, "status")
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
