"""``claude -p`` wall time with memd's hooks vs with none (``bench/hook.py --claude N``).

The real Claude Code CLI (``tests/claude_cli.py``: npm, pinned) against the loopback
Messages-API server in its real-client profile; the real daemon (no API key: lexical recall)
with one memory in the project. Two throwaway homes that differ only in
``~/.claude/settings.json``: one with memd's hooks installed (SessionStart, UserPromptSubmit,
Stop, SessionEnd run the hook command), one without. Runs are interleaved so
load on the shared machine hits both alike; medians and p90s are printed.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from memd.memory.paths import memory_dir
from memd.testing.loopback import LoopbackAPI
from memd_client.agents.claude_code import HOOKS as CLAUDE_HOOKS
from memd_client.hooks_install import install_hooks
from tests.claude_cli import ClaudeCLI, installed_claude
from tests.daemon_harness import Home, fake_home, start_memd, stop_memd

PROMPT = "how do we deploy this service?"
MEMORY = (
    "---\nname: Deploy\ndescription: how deploys work\nmetadata:\n  type: project\n---\n\n"
    "Deploys go through scripts/bg-deploy.sh with a 10 minute canary.\n"
)


def _home(home: Home, hooks: str | None) -> Path:
    project = home.root / "proj"
    project.mkdir()
    settings = home.root / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text("{}")
    if hooks:
        install_hooks(settings, hooks, CLAUDE_HOOKS)
        mdir = memory_dir(home.projects, project)
        mdir.mkdir(parents=True)
        (mdir / "deploy.md").write_text(MEMORY)
        (mdir / "MEMORY.md").write_text("- [Deploy](deploy.md) — how deploys work\n")
    return project


def _once(cli: ClaudeCLI, home: Home, project: Path, api: LoopbackAPI) -> float:
    started = time.perf_counter()
    done = cli.run(["-p", PROMPT], cwd=project, env=cli.env(home.env, api.url))
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"claude -p failed: {done.stderr[-500:]}")
    return took


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) >= 2 else values[0]


def run_claude_bench(runs: int, hook: str = f"{sys.executable} -m memd_client.hook") -> None:
    """``hook``: the command installed (``bench/hook.py --regular`` passes the regular
    install's ``python …/hook.py``)."""
    command = installed_claude()
    if command is None:
        print("claude -p: skipped (npm is not installed)")
        return
    cli = ClaudeCLI(command)
    with (
        tempfile.TemporaryDirectory() as a,
        tempfile.TemporaryDirectory() as b,
        fake_home(Path(a)) as with_hooks,
        fake_home(Path(b)) as without,
        LoopbackAPI(profile="real_client", default_text="OK from stub") as api,
    ):
        hooked, bare = _home(with_hooks, hook), _home(without, None)
        daemon = start_memd(with_hooks)
        try:
            _once(cli, with_hooks, hooked, api)  # warm both (page cache, first start)
            _once(cli, without, bare, api)
            times: dict[str, list[float]] = {"hooks": [], "none": []}
            for _ in range(runs):
                times["hooks"].append(_once(cli, with_hooks, hooked, api))
                times["none"].append(_once(cli, without, bare, api))
        finally:
            stop_memd(daemon)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    p90 = {k: _p90(v) * 1e3 for k, v in times.items()}
    print(
        f"claude -p ({runs} runs each)  with memd's hooks {med['hooks']:7.0f} ms "
        f"(p90 {p90['hooks']:6.0f})   no hooks {med['none']:7.0f} ms "
        f"(p90 {p90['none']:6.0f})   added {med['hooks'] - med['none']:5.0f} ms"
    )
    print(f"hook command: {hook}")
    print(json.dumps({k: [round(t, 4) for t in v] for k, v in times.items()}))
