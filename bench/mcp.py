"""``memd-mcp``: spawn-to-``initialize`` and spawn-to-``list_tools`` time and a ``recall``
round trip, next to a bare ``python -I -c pass`` (issue 38's yardstick) and
``python -c 'import mcp'`` in the same run.

    python3 bench/mcp.py [--runs 10] [--memories 100] [--recalls 20]

Starts the real daemon in a throwaway HOME (no API key: recall uses the lexical ranker) with
``--memories`` memory files in one project. Each run spawns ``python -m memd.mcp`` through
the MCP SDK's own stdio client, exactly as an agent would, and times the spawn up to the
``initialize`` answer and up to the ``list_tools`` answer; then ``--recalls`` ``recall`` calls
in that session (the first one is where memd-mcp loads the MCP SDK), each a round trip agent
→ memd-mcp → daemon → memd-mcp → agent. The baselines ``python -I -c pass`` and ``python -c
'import mcp'`` run interleaved with the spawns, so that load on the shared machine hits all
alike. Prints medians and p90s, and the ratios of the medians to the bare start.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

# Run as a script, this file's folder comes first on sys.path and its name would hide the SDK.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from memd.memory.paths import memory_dir  # noqa: E402
from memd_client.client import Client  # noqa: E402
from memd_client.errors import MemdClientError  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TOPICS = ("database", "release", "testing", "deploy", "logging", "caching", "auth", "docs")


def plant(home: Path, project: Path, count: int) -> None:
    mdir = memory_dir(home / ".claude" / "projects", project)
    mdir.mkdir(parents=True)
    index = []
    for n in range(count):
        topic = TOPICS[n % len(TOPICS)]
        name = f"feedback_{topic}_{n}.md"
        (mdir / name).write_text(
            f"---\nname: {topic} rule {n}\ndescription: how we handle {topic} case {n}\n"
            f"type: feedback\n---\n\nFor {topic} work, rule {n}: keep it simple. " * 3
        )
        index.append(f"- [{topic} rule {n}]({name}) — how we handle {topic} case {n}")
    (mdir / "MEMORY.md").write_text("\n".join(index) + "\n")


def start_daemon(env: dict[str, str], sock: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "memd.daemon.main"], env=env, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with Client(sock, timeout=1.0) as c:
                c.call("hello")
                return proc
        except MemdClientError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("memd did not start in 60 s")


async def one_run(
    env: dict[str, str], project: Path, recalls: int
) -> tuple[float, float, list[float]]:
    """Spawn to the ``initialize`` answer, spawn to the ``list_tools`` answer, the recalls."""
    params = StdioServerParameters(
        command=sys.executable, args=["-P", "-m", "memd.mcp"], env=env, cwd=str(project)
    )
    t0 = time.perf_counter()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        initialized = time.perf_counter() - t0
        tools = await session.list_tools()
        spawn = time.perf_counter() - t0
        assert len(tools.tools) == 6
        trips = []
        for n in range(recalls):
            t1 = time.perf_counter()
            result = await session.call_tool("recall", {"query": f"{TOPICS[n % 8]} case {n}"})
            trips.append(time.perf_counter() - t1)
            assert not result.is_error, result
    return initialized, spawn, trips


def bare(*args: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, cwd="/")
    return time.perf_counter() - t0


def ms(values: list[float], q: float) -> str:
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.0f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--memories", type=int, default=100)
    ap.add_argument("--recalls", type=int, default=20)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="memd-bench-mcp-"))
    runtime = Path(tempfile.mkdtemp(prefix="mbm-", dir="/tmp"))
    project = home / "repo"
    (project / ".git").mkdir(parents=True)
    plant(home, project, args.memories)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "MEMD_", "XDG_"))}
    path = os.pathsep.join(p for p in (str(REPO), str(REPO / "client"), env.get("PYTHONPATH")) if p)
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(runtime), PYTHONPATH=path)
    proc = start_daemon(env, runtime / "memd" / "memd.sock")
    inits: list[float] = []
    spawns: list[float] = []
    trips: list[float] = []
    firsts: list[float] = []
    imports: list[float] = []
    starts: list[float] = []
    try:
        bare("-c", "import mcp")  # warm the page cache for all
        for _ in range(args.runs):
            starts.append(bare("-I", "-c", "pass"))
            imports.append(bare("-c", "import mcp"))
            initialized, spawn, round_trips = anyio.run(one_run, env, project, args.recalls)
            inits.append(initialized)
            spawns.append(spawn)
            firsts.append(round_trips[0])
            trips.extend(round_trips[1:])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)
    load = os.getloadavg()[0]
    each = f"{args.memories} memories, {args.recalls} recalls each"
    print(f"{args.runs} runs, {each}, load {load:.1f}")
    start = statistics.median(starts)
    print(f"python -I -c pass           median {ms(starts, 0.5)}  p90 {ms(starts, 0.9)}")
    print(f"python -c 'import mcp'      median {ms(imports, 0.5)}  p90 {ms(imports, 0.9)}")
    print(f"spawn → initialize answer   median {ms(inits, 0.5)}  p90 {ms(inits, 0.9)}")
    print(f"  ratio to the bare start   {statistics.median(inits) / start:.1f}")
    print(f"spawn → list_tools answer   median {ms(spawns, 0.5)}  p90 {ms(spawns, 0.9)}")
    print(f"  ratio to the bare start   {statistics.median(spawns) / start:.1f}")
    print(f"first recall (SDK loaded)   median {ms(firsts, 0.5)}  p90 {ms(firsts, 0.9)}")
    if trips:
        print(f"later recall round trip     median {ms(trips, 0.5)}  p90 {ms(trips, 0.9)}")


if __name__ == "__main__":
    main()
