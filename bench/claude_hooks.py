"""memd's share of ``claude -p``: no hooks, no-op hooks, memd's hooks, in one run (issue 25).

``python3 bench/claude_hooks.py [--runs 9] [--version 2.1.331]``

The real Claude Code CLI (``tests/claude_cli.py``: npm, pinned) against the loopback
Messages-API server in its real-client profile, three throwaway homes that differ only in
``~/.claude/settings.json``:

The project has the same three memories in every home (Claude Code reads its own memory dir
whatever the hooks).

- ``none``: no hooks;
- ``noop``: the entries ``memdctl install-hooks`` writes (same events, matchers, timeouts,
  ``async`` flags), each command replaced by ``true``: a hook that does nothing;
- ``memd``: what the real ``memdctl install-hooks`` writes, with a real daemon (no API key:
  lexical recall) reading those memories, one of which the prompt recalls.

Runs are interleaved (none, noop, memd, none, …) so the load on the shared machine hits all
three alike. Printed: the median and p90 of each, memd − none (what a user pays) and memd −
noop (memd's share: what memd's own work costs over a hook that does nothing), also as the
median of each round's memd − noop (runs next to each other: a load that comes and goes on a
shared machine moves both). Each memd run
is checked to have had the recalled memory injected (the loopback server saw it in the
request), so a hook that failed open cannot pass for a fast one.

On a loaded machine the end-to-end figures vary by more than the hooks cost, so the same run
then times what ``claude -p`` waits for, hook by hook: each entry the ``noop`` and ``memd``
homes have for an event ``claude -p`` fires (SessionStart with ``source: startup`` only if
its matcher takes it), run as Claude Code runs it (``sh -c``, the hook's JSON on stdin)
against the same daemon, interleaved, median of ``--runs`` × 3, each round a new session
(each ``claude -p`` is one: its prompt gets the recall, which a session seen before would not
get again); their sum is memd's share of one ``claude -p``, to a millisecond.
``--callgrind`` also counts the instructions of the prompt hook's process (valgrind), which
load on the machine does not change.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import subprocess
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from memd.memory.paths import memory_dir
from memd.testing.loopback import LoopbackAPI
from memd_client.hooks_install import detached, is_memd_hook, undetached
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


def _memd_home(home: Home, project: Path, client: str | None = None) -> None:
    """``client``: the ``memd_client`` tree whose ``memdctl install-hooks`` writes the hooks
    (another checkout's, for a before/after), else this one."""
    env = {**home.env, "PYTHONPATH": client} if client else home.env
    done = memdctl(
        Home(home.root, home.runtime, env), "install-hooks", "--settings", str(_settings(home))
    )
    if done.returncode != 0:
        raise SystemExit(f"memdctl install-hooks failed: {done.stderr}")


def _memories(home: Home, project: Path) -> None:
    """The project's memories, in every home: Claude Code reads its own memory dir whatever
    the hooks (``MEMORY.md`` with auto memory on), so only the hooks differ between homes."""
    mdir = memory_dir(home.projects, project)
    mdir.mkdir(parents=True)
    index = []
    for file, (name, description, body) in MEMORIES.items():
        (mdir / file).write_text(_memory(name, description, body))
        index.append(f"- [{name}]({file}) — {description}\n")
    (mdir / "MEMORY.md").write_text("".join(index))


def _noop(settings: dict[str, Any]) -> dict[str, Any]:
    """memd's settings with each memd command replaced by ``true`` (a copy)."""
    settings = json.loads(json.dumps(settings))
    for groups in settings.get("hooks", {}).values():
        for group in groups:
            for hook in group.get("hooks", []):
                command = hook.get("command")
                if is_memd_hook(command):
                    hook["command"] = "true" if undetached(command) is None else detached("true")
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


def run(
    runs: int, version: str, client: str | None, callgrind: bool = False
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, int]]:
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
            _memories(home, home.root / "proj")
        _memd_home(homes["memd"], homes["memd"].root / "proj", client)
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
            parts = hook_parts(homes["memd"], memd_settings, runs * 3)
            counts = hook_instructions(homes["memd"], memd_settings) if callgrind else {}
        finally:
            stop_memd(daemon)
    return times, parts, counts


def _fired(settings: dict[str, Any]) -> dict[str, str]:
    """Event → the command ``claude -p`` runs for it, for the events it fires."""
    fired = {}
    for event, groups in settings.get("hooks", {}).items():
        for group in groups:
            matcher = group.get("matcher")
            if event == "SessionStart" and matcher and not re.fullmatch(matcher, "startup"):
                continue
            for hook in group.get("hooks", []):
                fired[event] = hook["command"]
    return fired


INPUTS: dict[str, dict[str, Any]] = {
    "SessionStart": {"source": "startup"},
    "UserPromptSubmit": {"prompt": PROMPT},
    "Stop": {"stop_hook_active": False},
    "SessionEnd": {"reason": "other"},
}


def _hook_input(home: Home, event: str, number: int) -> bytes:
    """``event``'s input for the ``number``-th session: each ``claude -p`` is a new session,
    whose first prompt gets the recall (a session seen before gets nothing again)."""
    sid = f"0d6f5a8e-1111-2222-3333-{number:012d}"
    common = {"session_id": sid, "cwd": str(home.root / "proj")}
    common["transcript_path"] = f"/nowhere/{sid}.jsonl"
    return json.dumps({**common, "hook_event_name": event, **INPUTS[event]}).encode()


def hook_parts(home: Home, settings: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    """Seconds Claude Code waits for each fired hook, ``memd`` and ``noop`` interleaved, a
    new session each round."""
    times: dict[str, list[float]] = {}
    for number in range(rounds):
        for config, commands in (("memd", _fired(settings)), ("noop", _fired(_noop(settings)))):
            for event, command in commands.items():
                stdin = _hook_input(home, event, number)
                started = time.perf_counter()
                done = subprocess.run(
                    ["sh", "-c", command], input=stdin, env=home.env, capture_output=True
                )
                times.setdefault(f"{config} {event}", []).append(time.perf_counter() - started)
                if (
                    config == "memd"
                    and event == "UserPromptSubmit"
                    and MARK.encode() not in done.stdout
                ):
                    raise SystemExit("memd's prompt hook injected nothing: it failed open")
    return times


def hook_instructions(home: Home, settings: dict[str, Any]) -> dict[str, int]:
    """Instructions (``valgrind --tool=callgrind``: the same on a busy machine as on a quiet
    one) of the prompt hook's own process, a new session's first prompt, and of the bare
    interpreter it starts (``-I -S -c pass``); the daemon's work is not in them."""
    command = _fired(settings)["UserPromptSubmit"]
    python = shlex.quote(shlex.split(command)[0])
    counted = {"UserPromptSubmit hook": command, "python -I -S -c pass": f"{python} -I -S -c pass"}
    found = {}
    for number, (name, line) in enumerate(counted.items()):
        stdin = _hook_input(home, "UserPromptSubmit", 10**9 + number)
        argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
        argv += shlex.split(line)
        done = subprocess.run(argv, input=stdin, env=home.env, capture_output=True)
        counts = re.findall(rb"Collected : (\d+)", done.stderr)
        found[name] = int(counts[-1]) if counts else 0
    return found


def report_parts(parts: dict[str, list[float]]) -> None:
    med = {k: statistics.median(v) * 1e3 for k, v in parts.items()}
    print("what claude -p waits for, hook by hook (median, ms)")
    for key in sorted(med):
        print(f"  {key:24} {med[key]:6.1f}")
    share = sum(v for k, v in med.items() if k.startswith("memd ")) - sum(
        v for k, v in med.items() if k.startswith("noop ")
    )
    print(f"  memd's share per claude -p (memd - noop, summed) {share:6.1f}")


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
    paired = [m - n for m, n in zip(times["memd"], times["noop"], strict=True)]
    print(
        f"  memd - noop {statistics.median(paired) * 1e3:6.0f}   (paired: median of each round's)"
    )
    print(json.dumps({k: [round(t, 4) for t in v] for k, v in times.items()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--version", default=NEWEST_VERSION)
    parser.add_argument("--client", help="the client dir whose install-hooks writes the hooks")
    parser.add_argument(
        "--callgrind", action="store_true", help="also count the prompt hook's instructions"
    )
    args = parser.parse_args()
    times, parts, counts = run(args.runs, args.version, args.client, args.callgrind)
    report(times, args.version)
    report_parts(parts)
    for name, count in counts.items():
        print(f"  instructions, {name}: {count / 1e6:.1f} M (callgrind)")


if __name__ == "__main__":
    main()
