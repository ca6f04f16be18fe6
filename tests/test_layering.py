"""The dependency rules the architecture relies on, checked on the source."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_client_never_imports_memd_and_depends_on_msgpack_only() -> None:
    for path in (ROOT / "client" / "memd_client").rglob("*.py"):
        bad = {m for m in imported_modules(path) if m == "memd" or m.startswith("memd.")}
        assert not bad, f"{path} imports {bad}"
    project = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    assert [d.split(">")[0].split("=")[0] for d in project["dependencies"]] == ["msgpack"]


def test_only_the_llm_client_imports_the_sdk() -> None:
    users = [
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "memd").rglob("*.py")
        if any(m == "anthropic" or m.startswith("anthropic.") for m in imported_modules(path))
    ]
    assert users == ["memd/llm/client.py"]


def test_the_daemon_and_the_hook_start_without_heavy_imports() -> None:
    probe = (
        "import sys, memd.daemon.service, memd_client.hook;"
        "print(sorted(m for m in ('anthropic', 'tiktoken', 'memd')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['memd']"  # no SDK, no tokenizer at import time
    hook_only = "import sys, memd_client.hook; print('anyio' in sys.modules, 'memd' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", hook_only], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False False"
