"""memd's share of ``claude -p``: no hooks, no-op hooks, memd's hooks, in one run (issue 25).

``python3 bench/claude_hooks.py [--runs 9] [--version 2.1.331]``

The real Claude Code CLI (``tests/claude_cli.py``: npm, pinned) against the loopback
Messages-API server in its real-client profile, three throwaway homes that differ only in
``~/.claude/settings.json``:

- ``none``: no hooks;
- ``noop``: the entries ``memdctl install-hooks`` writes (same events, matchers, timeouts,
  ``async`` flags), each command replaced by ``true``: a hook that does nothing;
- ``memd``: what the real ``memdctl install-hooks`` writes, with a real daemon (no API key:
  lexical recall) holding three memories of the project, one of which the prompt recalls.

Runs are interleaved (none, noop, memd, none, …) so the load on the shared machine hits all
three alike. Printed: the median and p90 of each, memd − none (what a user pays) and memd −
noop (memd's share: what memd's own work costs over a hook that does nothing). Each memd run
is checked to have had the recalled memory injected (the loopback server saw it in the
request), so a hook that failed open cannot pass for a fast one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from memd.memory.paths import memory_dir
from memd.testing.loopback import LoopbackAPI
from memd_client.hooks_install import is_memd_hook
from tests.claude_cli import NEWEST_VERSION, ClaudeCLI, installed_claude
from tests.daemon_harness import Home, fake_home, memdctl, start_memd, stop_memd

PROMPT = "how do we deploy this service?"
MEMORIES = {
    "deploy.md": ("Deploy", "how deploys work", "Deploys go through scripts/bg-deploy.sh."),
    "style.md": ("Style", "code style", "Tabs in Makefiles, four spaces elsewhere."),
    "oncall.md": ("Oncall", "who is on call", "The rota lives in docs/oncall.md."),
}
MARK = "scripts/bg-deploy.sh"  # in the recalled memory: seen in the request when injected
CONFIGS = ("none", "noop", "memd")


def _memory(name: str, description: str, body: str) -> str:
    return (
        f"---\nname: {name}\ndescription: {description}\nmetadata:\n  type: project\n---\n\n"
        f"{body}\n"
    )


def _settings(home: Home) -> Path:
    path = home.root / ".claude" / "settings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _memd_home(home: Home, project: Path) -> None:
    done = memdctl(home, "install-hooks", "--settings", str(_settings(home)))
    if done.returncode != 0:
        raise SystemExit(f"memdctl install-hooks failed: {done.stderr}")
    mdir = memory_dir(home.projects, project)
    mdir.mkdir(parents=True)
    index = []
    for file, (name, description, body) in MEMORIES.items():
        (mdir / file).write_text(_memory(name, description, body))
        index.append(f"- [{name}]({file}) — {description}\n")
    (mdir / "MEMORY.md").write_text("".join(index))


def _noop(settings: dict[str, Any]) -> dict[str, Any]:
    """memd's settings with each memd command replaced by ``true``."""
    for groups in settings.get("hooks", {}).values():
        for group in groups:
            for hook in group.get("hooks", []):
                if is_memd_hook(hook.get("command")):
                    hook["command"] = "true"
    return settings


def _once(cli: ClaudeCLI, home: Home, api: LoopbackAPI) -> float:
    started = time.perf_counter()
    done = cli.run(["-p", PROMPT], cwd=home.root / "proj", env=cli.env(home.env, api.url))
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"claude -p failed: {done.stderr[-500:]}")
    return took


def _injected(api: LoopbackAPI, before: int) -> bool:
    return any(MARK in json.dumps(r.body) for r in api.requests[before:])


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) >= 2 else values[0]


def run(runs: int, version: str) -> dict[str, list[float]]:
    command = installed_claude(version=version)
    if command is None:
        raise SystemExit("claude -p: skipped (npm is not installed)")
    cli = ClaudeCLI(command)
    times: dict[str, list[float]] = {c: [] for c in CONFIGS}
    with ExitStack() as stack:
        tmp = {c: Path(stack.enter_context(tempfile.TemporaryDirectory())) for c in CONFIGS}
        homes = {c: stack.enter_context(fake_home(tmp[c])) for c in CONFIGS}
        for home in homes.values():
            (home.root / "proj").mkdir()
        _memd_home(homes["memd"], homes["memd"].root / "proj")
        memd_settings = json.loads(_settings(homes["memd"]).read_text())
        _settings(homes["noop"]).write_text(json.dumps(_noop(memd_settings)))
        _settings(homes["none"]).write_text("{}")
        api = stack.enter_context(LoopbackAPI(profile="real_client", default_text="OK"))
        daemon = start_memd(homes["memd"])
        try:
            for config in CONFIGS:  # warm each (page cache, first start)
                _once(cli, homes[config], api)
            for _ in range(runs):
                for config in CONFIGS:
                    before = len(api.requests)
                    times[config].append(_once(cli, homes[config], api))
                    if config == "memd" and not _injected(api, before):
                        raise SystemExit("memd's hook injected nothing: it failed open")
        finally:
            stop_memd(daemon)
    return times


def report(times: dict[str, list[float]], version: str) -> None:
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    p90 = {k: _p90(v) * 1e3 for k, v in times.items()}
    runs = len(times["memd"])
    print(f"claude -p {version}, {runs} interleaved runs each (median / p90, ms)")
    for config in CONFIGS:
        print(f"  {config:5} {med[config]:7.0f} / {p90[config]:6.0f}")
    print(f"  memd - none {med['memd'] - med['none']:6.0f}   (what a user pays)")
    print(f"  noop - none {med['noop'] - med['none']:6.0f}   (the hook processes themselves)")
    print(f"  memd - noop {med['memd'] - med['noop']:6.0f}   (memd's share)")
    print(json.dumps({k: [round(t, 4) for t in v] for k, v in times.items()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--version", default=NEWEST_VERSION)
    args = parser.parse_args()
    report(run(args.runs, args.version), args.version)


if __name__ == "__main__":
    main()
