"""The hook command's own wall time, next to a bare interpreter start.

    python3 bench/hook.py [--runs 40] [--regular] [--claude 10]

For each documented stdin shape (SessionStart, UserPromptSubmit, Stop; FORMAT.md §10) it runs
the hook command ``memdctl install-hooks`` registers (``<python> -I -c … <…>/memd_client/hook.py``)
as Claude Code would — a fresh process, JSON on stdin — and times the whole process from spawn
to exit. The daemon is stood in for by memd's own socket
server (:func:`memd.ipc.server.run_server`) in a thread of this process, with a method table
holding ``hello`` and ``hook``; ``hook`` answers like the daemon: an index of ~2 KB for
SessionStart, ~6 KB of recalled memories for UserPromptSubmit, nothing for Stop. Then the
same with no daemon at all (the socket path does not exist), where the hook must exit 0 at
once. Baseline: ``python -c pass``, timed interleaved with the hook runs so that load on the
(shared) machine hits both alike. Prints medians and p90s and the median ratio to the
baseline; the target is a ratio of at most 1.5.

``--regular`` repeats the runs in a regular (non-editable) install as users get it: a wheel of
the client and msgpack in a fresh venv, against that venv's ``python -c pass`` (issue 12), in
three forms: the command that venv's ``memdctl install-hooks`` writes, the ``memd-hook``
console script (what it wrote before), and ``<python> <…>/memd_client/hook.py``.

``--claude N`` adds a run through the real Claude Code CLI (``tests/claude_cli.py``, installed
with npm): ``claude -p`` wall time with memd's hooks installed (the real daemon, lexical
recall, one memory) vs with no hooks, interleaved, N runs each, medians (issue 10).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "client")]

from memd_client.hooks_install import hook_command, read_settings  # noqa: E402
from memd_client.protocol import DEFAULT_MAX_FRAME_BYTES, hello_result  # noqa: E402

TARGET_RATIO = 1.5
HOOK = shlex.split(hook_command(sys.executable, str(REPO / "client" / "memd_client" / "hook.py")))
BASELINE = [sys.executable, "-c", "pass"]

INDEX = "".join(
    f"- [Memory {n}](feedback_{n}.md) — a one-line hook about topic {n}\n" for n in range(30)
)
MEMORY_DIR = "/home/u/.claude/projects/-home-u-proj/memory"
MEMORIES = "\n\n".join(
    f"## Memory {n} (feedback memory, updated {n} days ago) — {MEMORY_DIR}/m{n}.md\n"
    + "Use the real database in integration tests; mocks hid a broken migration. " * 12
    for n in range(5)
)
ANSWERS: dict[str, str | None] = {
    "SessionStart": "Memory index of this project, kept by memd.\n\n" + INDEX,
    "UserPromptSubmit": "Memories from earlier sessions that may help.\n\n" + MEMORIES,
    "Stop": None,
}
COMMON = {
    "session_id": "0f9c2a7e-51b8-4d33-9a6e-7d1b2c3d4e5f",
    "transcript_path": "/home/u/.claude/projects/-home-u-proj/0f9c2a7e.jsonl",
    "cwd": "/home/u/proj",
    "permission_mode": "default",
}
EVENTS: dict[str, dict[str, Any]] = {
    "SessionStart": {**COMMON, "hook_event_name": "SessionStart", "source": "startup"},
    "UserPromptSubmit": {
        **COMMON,
        "hook_event_name": "UserPromptSubmit",
        "prompt": "why do the integration tests fail against the staging database?",
    },
    "Stop": {
        **COMMON,
        "hook_event_name": "Stop",
        "stop_hook_active": False,
        "last_assistant_message": "The tests pass now.",
    },
}


# -- the stand-in daemon ----------------------------------------------------------------------


async def _hello(params: dict[str, Any]) -> Any:
    return hello_result({"version": "bench"})


async def _hook(params: dict[str, Any]) -> Any:
    from memd.sources.registry import UNNAMED

    hooks = UNNAMED.hooks
    parsed = hooks.read(params["raw"]) if isinstance(params.get("raw"), bytes) else None
    name, data = parsed if parsed else (str(params.get("event")), {})
    context = ANSWERS.get(name)
    event = hooks.parse(name, {"session_id": "bench", **data}, None)
    return {"additionalContext": context, "stdout": hooks.output(event, context or "")}


@contextmanager
def stand_in_daemon(path: Path) -> Iterator[None]:
    """memd's socket server answering ``hello`` and ``hook``, in a thread of this process."""
    from anyio.from_thread import start_blocking_portal

    from memd.ipc.server import run_server

    serve = partial(
        run_server,
        path,
        {"hello": _hello, "hook": _hook},
        max_frame_bytes=DEFAULT_MAX_FRAME_BYTES,
        request_timeout=30.0,
    )
    with start_blocking_portal() as portal:
        future, _server = portal.start_task(serve)
        try:
            yield
        finally:
            future.cancel()


# -- timing -----------------------------------------------------------------------------------


def run_once(argv: list[str], stdin: bytes, env: dict[str, str]) -> tuple[float, bytes]:
    started = time.perf_counter()
    done = subprocess.run(argv, input=stdin, env=env, capture_output=True, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0 or done.stderr:
        raise SystemExit(f"{argv} failed ({done.returncode}): {done.stderr.decode()[:500]}")
    return took, done.stdout


def measure(
    event: str,
    env: dict[str, str],
    runs: int,
    hook_argv: list[str] = HOOK,
    base_argv: list[str] = BASELINE,
) -> tuple[list[float], list[float], bytes]:
    """Interleaved timings of the hook and the baseline; the hook's last stdout."""
    stdin = json.dumps(EVENTS[event]).encode()
    hook: list[float] = []
    base: list[float] = []
    out = b""
    for _ in range(runs):
        took, out = run_once(hook_argv, stdin, env)
        hook.append(took)
        base.append(run_once(base_argv, b"", env)[0])
    return hook, base, out


def check_output(event: str, out: bytes, daemon: bool) -> None:
    expected = ANSWERS[event] if daemon else None
    if expected is None:
        if out.strip():
            raise SystemExit(f"{event}: expected no output, got {out[:200]!r}")
        return
    got = json.loads(out)["hookSpecificOutput"]
    if got != {"hookEventName": event, "additionalContext": expected}:
        raise SystemExit(f"{event}: unexpected output {out[:200]!r}")


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) >= 2 else values[0]


def report(label: str, hook: list[float], base: list[float]) -> float:
    ratio = statistics.median(hook) / statistics.median(base)
    print(
        f"{label:<34} hook {statistics.median(hook) * 1e3:6.1f} ms (p90 {p90(hook) * 1e3:6.1f})"
        f"   python -c pass {statistics.median(base) * 1e3:6.1f} ms (p90 {p90(base) * 1e3:6.1f})"
        f"   ratio {ratio:4.2f}"
    )
    return ratio


def clean_env(socket: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMD_")}
    env["MEMD_SOCKET"] = str(socket)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "client"), env.get("PYTHONPATH", "")])
    return env


def regular_install(tmp: Path) -> Path:
    """A fresh venv with wheels of the client and msgpack; its bin directory."""
    wheels = tmp / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    build = [*pip, "wheel", "--no-deps", "-w", str(wheels)]
    subprocess.run([*build, str(REPO / "client")], check=True)
    import msgpack

    version = ".".join(map(str, msgpack.version))
    subprocess.run([*pip, "download", "--no-deps", "-d", str(wheels), f"msgpack=={version}"])
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    found = sorted(str(w) for w in wheels.glob("*.whl"))
    install = [*pip, "--python", str(venv / "bin" / "python"), "install", "--no-deps", *found]
    plain = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # or pip sees ours
    subprocess.run(install, check=True, env=plain)
    return venv / "bin"


def script_form(bindir: Path, env: dict[str, str]) -> list[str]:
    """``<venv python> <site-packages>/memd_client/hook.py``: the hook file run by path."""
    python = str(bindir / "python")
    found = subprocess.run(
        [python, "-c", "import memd_client, os; print(os.path.dirname(memd_client.__file__))"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return [python, os.path.join(found.stdout.strip(), "hook.py")]


def registered_form(bindir: Path, env: dict[str, str]) -> str:
    """The command the venv's own ``memdctl install-hooks`` writes to a settings file."""
    settings = bindir.parent / "settings.json"
    argv = [str(bindir / "memdctl"), "install-hooks", "--settings", str(settings)]
    subprocess.run(argv, env=env, check=True, capture_output=True)
    hooks = read_settings(settings)["hooks"]
    command: str = hooks["UserPromptSubmit"][0]["hooks"][0]["command"]
    return command


def run_regular(tmp: Path, socket: Path, runs: int) -> tuple[list[float], str]:
    """The ratios in a regular install, and the command ``install-hooks`` registers there."""
    bindir = regular_install(tmp)
    env = {k: v for k, v in clean_env(socket).items() if k != "PYTHONPATH"}
    registered = registered_form(bindir, env)
    print(f"registered: {registered}")
    forms = {
        "install-hooks": shlex.split(registered),
        "console script": [str(bindir / "memd-hook")],
        "python hook.py": script_form(bindir, env),
    }
    base = [str(bindir / "python"), "-c", "pass"]
    ratios = []
    with stand_in_daemon(socket):
        for event in EVENTS:
            for form, hook in forms.items():
                took, baseline, out = measure(event, env, runs, hook, base)
                check_output(event, out, daemon=True)
                ratio = report(f"{event} ({form})", took, baseline)
                if form == "install-hooks":
                    ratios.append(ratio)
    return ratios, registered


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="runs per event and setting")
    parser.add_argument("--regular", action="store_true", help="also in a regular install")
    parser.add_argument("--claude", type=int, default=0, help="claude -p runs with/without")
    args = parser.parse_args()
    ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="memd-hook-bench-", dir="/tmp") as tmp:
        socket = Path(tmp) / "run" / "memd.sock"
        env = clean_env(socket)
        print(f"{args.runs} runs each; {sys.executable}")
        with stand_in_daemon(socket):
            for event in EVENTS:
                hook, base, out = measure(event, env, args.runs)
                check_output(event, out, daemon=True)
                ratios.append(report(f"{event} (daemon answers)", hook, base))
        for event in EVENTS:
            hook, base, out = measure(event, env, args.runs)
            check_output(event, out, daemon=False)
            ratios.append(report(f"{event} (no daemon)", hook, base))
        command = shlex.join(HOOK)
        if args.regular:
            regular, command = run_regular(Path(tmp), Path(tmp) / "run2" / "memd.sock", args.runs)
            ratios = regular  # the target is for the regular install
        if args.claude:
            from bench.hook_claude import run_claude_bench

            run_claude_bench(args.claude, command)
    worst = max(ratios)
    verdict = "meets" if worst <= TARGET_RATIO else "misses"
    where = "regular install, registered form" if args.regular else "this interpreter"
    print(f"worst median ratio ({where}) {worst:.2f}: {verdict} the target of {TARGET_RATIO}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
