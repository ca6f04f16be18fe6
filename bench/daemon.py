"""Daemon start-up on a large history, idle CPU and RSS.

Builds a fake ~/.claude/projects with N old transcripts (hard links to the real corpus,
mtimes pushed back a month, so R-T6 applies: stat-ed, not parsed) plus the corpus itself as
"active" files, starts the real ``memd``, and reports:

- time until it answers ``hello`` (serving) and until the startup scan has parsed the active ones;
- CPU used while idle over a window (utime+stime from /proc), which should be ~0: no polling;
- RSS when idle.

Next to it, the same figures for a bare ``python -c`` that imports nothing (the floor).

    python3 bench/daemon.py [--old 5000] [--idle 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from memd_client.client import Client
from memd_client.errors import MemdClientError

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "transcripts"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def build_history(root: Path, old: int) -> int:
    sources = sorted(p for p in CORPUS.rglob("*.jsonl") if "subagents" not in p.parts)
    month_ago = time.time() - 30 * 86400
    for i in range(old):
        project = root / f"-home-u-old{i % 50}"
        project.mkdir(parents=True, exist_ok=True)
        target = project / f"old-{i:05d}.jsonl"
        shutil.copyfile(sources[i % len(sources)], target)
        os.utime(target, (month_ago, month_ago))
    active = root / "-home-u-active"
    active.mkdir(parents=True)
    for src in sources:
        shutil.copyfile(src, active / src.name)
    return len(sources)


def bare_python_floor() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--old", type=int, default=5000, help="old transcripts to stat, not parse")
    ap.add_argument("--idle", type=float, default=10.0, help="idle window in seconds")
    ap.add_argument("--set", action="append", default=[], help="memd --set KEY=VALUE")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="memd-bench-"))
    runtime = Path(tempfile.mkdtemp(prefix="mb-", dir="/tmp"))
    try:
        active = build_history(home / ".claude" / "projects", args.old)
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "MEMD_", "XDG_"))
        }
        env.update(HOME=str(home), XDG_RUNTIME_DIR=str(runtime))
        sock = runtime / "memd" / "memd.sock"
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "memd.daemon.main", *(f"--set={kv}" for kv in args.set)],
            env=env,
            stderr=subprocess.DEVNULL,
        )
        try:
            serving: float | None = None
            parsed: float | None = None
            while parsed is None:
                try:
                    with Client(sock, timeout=2.0) as c:
                        if serving is None:
                            c.call("hello")
                            serving = time.perf_counter() - t0
                        ing = c.call("status")["ingest"]
                        if ing["parsed"] >= active and ing["queued"] == 0 and ing["running"] == 0:
                            parsed = time.perf_counter() - t0
                except MemdClientError:
                    pass
                if time.perf_counter() - t0 > 120:
                    raise SystemExit("memd did not finish its startup scan in 120 s")
                time.sleep(0.02)
            time.sleep(2.0)  # let the follow-up scan and the state flush settle
            cpu0, w0 = cpu_seconds(proc.pid), time.perf_counter()
            time.sleep(args.idle)
            cpu1, w1 = cpu_seconds(proc.pid), time.perf_counter()
            rss = rss_mib(proc.pid)
            assert serving is not None
        finally:
            proc.terminate()
            proc.wait(30)
        floor = bare_python_floor()
        print(f"history: {args.old} old transcripts (stat only) + {active} active (parsed)")
        print(f"python -c pass:            {floor * 1000:8.1f} ms")
        print(
            f"memd serving (hello):      {serving * 1000:8.1f} ms  ({serving / floor:.1f}x python)"
        )
        print(f"memd active sessions read: {parsed * 1000:8.1f} ms")
        print(f"idle CPU over {args.idle:.0f}s:        {(cpu1 - cpu0) / (w1 - w0) * 100:8.3f} %")
        print(f"idle RSS:                  {rss:8.1f} MiB")
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)


if __name__ == "__main__":
    main()
