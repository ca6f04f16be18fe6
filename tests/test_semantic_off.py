"""The semantic recall stage where its extra is not installed (issue 27): the daemon's memory
service still starts and recalls, and ``status`` says the stage is off and which extra to
install. Run in a child interpreter that cannot import the extra's packages, so this holds
(and is tested) with or without the extra here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = """
import json, sys
from pathlib import Path
for name in sys.argv[2].split(","):
    sys.modules[name] = None  # what an interpreter without the package sees: ImportError
from memd.config import MemoryConfig, SemanticConfig
from memd.memory.semantic import SemanticStage
config = MemoryConfig(semantic=SemanticConfig(enabled=True, model=sys.argv[1]))
stage = SemanticStage(lambda: config, Path(sys.argv[1]))
stage.work()
stage.work()  # a second round finds the same: no crash, no other reason
print(json.dumps(stage.statistics()))
"""


@pytest.mark.parametrize("missing", ["model2vec", "numpy,model2vec"])
def test_without_the_extra_the_stage_is_off_and_names_it(tmp_path: Path, missing: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), missing],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    assert stats["on"] is False
    assert "pip install 'memd[semantic]'" in stats["off_reason"]
    assert "Traceback" not in done.stderr


# Loaded by every interpreter started with this folder on PYTHONPATH: as if the extra's
# packages were not installed.
NO_EXTRA = """
import sys
for name in ("numpy", "model2vec"):
    sys.modules[name] = None
"""


@pytest.mark.parametrize("args", [[], ["--model", "minishlab/potion-base-8M"], ["--from", "."]])
def test_fetch_model_without_the_extra_names_it_in_one_line(
    tmp_path: Path, args: list[str]
) -> None:
    """``memdctl fetch-model`` (the real command, and the module it runs) without numpy and
    model2vec: exit 1 and one line naming the extra, where it printed numpy's traceback."""
    hook = tmp_path / "no-extra"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(NO_EXTRA)
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([str(hook), *sys.path]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "memd_client.cli", "fetch-model", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("memdctl fetch-model: ") and "pip install 'memd[semantic]'" in line
    assert not (tmp_path / ".local" / "state" / "memd" / "models").exists()
