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
