"""IPC round trips: memd's server against a bare anyio echo server with the same framing.

    python3 bench/ipc.py [--seconds 2.0] [--clients 1 8 64] [--sessions 200]
    python3 bench/ipc.py --flood [--sessions 200] [--config default tight] [--trace]

Rows: ``echo`` (bare anyio server, decodes and re-encodes each frame), ``memd`` (memd's server
answering a constant ~1 KB status dict), and ``real hello`` / ``real status``: the real daemon
(``python -m memd.daemon.main``, its real method table, the bounded-serving limits on, at their
defaults) over a generated projects tree of ``--sessions`` corpus transcripts; the echo row
for those is ``echo small`` (the same small request as theirs).

``--flood``: the real daemon, 64 connections each holding a frame just under the frame limit
(16 MiB, the last byte never sent), a well-formed client calling ``status`` meanwhile: RSS
idle and under the flood, the client's latency, and when the slow senders are dropped; with
the default limits and with a cap the flood fills exactly (``bench/ipc_flood.py``).

Each server runs in its own process. The load generator (this process, plain asyncio) opens
N connections, each sending a `status` request and waiting for the reply, over and over.
The memd server answers from a method table with a realistic ~1 KB status dict; the echo
server decodes each frame and sends it straight back. The request carries a ~1 KB payload
so both directions move the same bytes for both servers. Prints p50/p99 latency and
requests/s per server and the memd/echo ratios; the target is a p50 ratio of at most 2.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "client")]

from memd_client import protocol as p  # noqa: E402
from memd_client.client import AsyncClient  # noqa: E402

STATUS: dict[str, Any] = {
    "daemon": {"version": "0.1.0", "pid": 4242, "uptime_s": 5123.4, "rss_bytes": 48_000_000},
    "sessions": [
        {
            "id": f"0f9c2a7e-51b8-4d33-9a6e-7d1b2c3d4e{i:02d}",
            "project": "/home/ada/src/memd",
            "tokens": 91_234 + i,
            "threshold": 150_000,
            "queue": {"queued": i % 3, "running": i % 2},
            "last_extraction": "2025-11-20T10:21:33Z",
        }
        for i in range(5)
    ],
    "llm": {"enabled": True, "input_tokens": 1_234_567, "output_tokens": 45_678},
}


# -- servers (run in child processes) ---------------------------------------------------------


async def _status(params: dict[str, Any]) -> Any:
    return STATUS


async def serve_memd(path: Path) -> None:
    import anyio

    from memd.ipc.server import run_server

    async with anyio.create_task_group() as tg:
        await tg.start(
            lambda task_status: run_server(
                path,
                {"status": _status},
                max_frame_bytes=p.DEFAULT_MAX_FRAME_BYTES,
                request_timeout=30.0,
                inline=frozenset({"status"}),  # a constant: it never waits, as in memd
                task_status=task_status,
            )
        )
        print("ready", flush=True)


async def serve_echo(path: Path) -> None:
    import anyio
    from anyio.abc import SocketStream

    async def echo(stream: SocketStream) -> None:
        decoder = p.FrameDecoder()
        async with stream:
            while True:
                try:
                    data = await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return
                for frame in decoder.feed(data):
                    await stream.send(p.encode_frame(frame))

    listener = await anyio.create_unix_listener(path, mode=0o600)
    print("ready", flush=True)
    await listener.serve(echo)


def serve(kind: str, path: Path) -> None:
    import anyio

    anyio.run(serve_memd if kind == "memd" else serve_echo, path)


# -- load -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figures:
    p50_us: float
    p99_us: float
    rps: float


def _figures(latencies: list[float], elapsed: float) -> Figures:
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return Figures(statistics.median(latencies) * 1e6, p99 * 1e6, len(latencies) / elapsed)


async def _raw_client(
    path: Path,
    until: float,
    warm: float,
    out: list[float],
    method: str = "status",
    params: dict[str, Any] | None = None,
) -> None:
    reader, writer = await asyncio.open_unix_connection(str(path), limit=1 << 20)
    decoder = p.FrameDecoder()
    rid = 0
    params = {"pad": STATUS} if params is None else params
    try:
        while (start := time.perf_counter()) < until:
            rid += 1
            writer.write(p.encode_frame(p.request(rid, method, params)))
            while not decoder.feed(await reader.read(1 << 16)):
                pass
            if start >= warm:
                out.append(time.perf_counter() - start)
    finally:
        writer.close()
        await writer.wait_closed()


async def _lib_client(path: Path, until: float, warm: float, out: list[float]) -> None:
    async with AsyncClient(path, timeout=10) as client:
        while (start := time.perf_counter()) < until:
            await client.call("status", {"pad": STATUS})
            if start >= warm:
                out.append(time.perf_counter() - start)


async def load(
    path: Path, clients: int, seconds: float, *, library: bool, method: str = "status"
) -> list[float]:
    """Latencies (seconds) of every round trip after a short warm-up."""
    warmup = min(0.2, seconds / 4)
    begin = time.perf_counter()
    warm, until = begin + warmup, begin + warmup + seconds
    out: list[float] = []
    if library:
        await asyncio.gather(*(_lib_client(path, until, warm, out) for _ in range(clients)))
        return out
    params: dict[str, Any] | None = None if method == "status-pad" else {}
    name = "status" if method == "status-pad" else method
    await asyncio.gather(
        *(_raw_client(path, until, warm, out, name, params) for _ in range(clients))
    )
    return out


SHARED = REPO.parent / "shared" / "data" / "transcripts"  # beside the checkout, as tests/ has it
CORPUS = SHARED if SHARED.is_dir() else REPO / "tests" / "corpus"
SAMPLE = "spotter/short.jsonl"


def start_real(tmp: Path, sessions: int, *args: str, trace: str = "") -> subprocess.Popen[bytes]:
    """The real daemon over ``sessions`` copies of a corpus transcript, with ``args`` on its
    command line (under tracemalloc when ``trace`` names where snapshots go); waits until all
    are parsed. Its socket is linked at ``tmp/real.sock``."""
    import uuid

    from memd_client.client import Client

    home = tmp / "home"
    source = (CORPUS / SAMPLE).read_bytes()
    for i in range(sessions):
        project = home / ".claude" / "projects" / f"-bench-project-{i % 10}"
        project.mkdir(parents=True, exist_ok=True)
        (project / f"{uuid.uuid4()}.jsonl").write_bytes(source)
    runtime = tmp / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "MEMD_", "XDG_"))}
    env.update(
        HOME=str(home), MEMD_RUNTIME_DIR=str(runtime), PYTHONPATH=f"{REPO}:{REPO / 'client'}"
    )
    command = ["-m", "memd.daemon.main"]
    if trace:
        command = [str(REPO / "bench" / "traced_daemon.py")]
        env["MEMD_TRACE_OUT"] = trace
    proc = subprocess.Popen([sys.executable, *command, *args], env=env, stderr=subprocess.DEVNULL)
    (tmp / "real.sock").symlink_to(runtime / "memd.sock")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with Client(tmp / "real.sock", timeout=5) as client:
                if client.call("status")["ingest"]["parsed"] >= sessions:
                    return proc
        except Exception:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("the real daemon did not parse its sessions within 120 s")


def start_server(kind: str, path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind, str(path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise SystemExit(f"{kind} server did not start")
    return proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--flood", action="store_true")
    parser.add_argument(
        "--config", nargs="+", default=["default", "tight"], help="--flood: which limits"
    )
    parser.add_argument("--trace", action="store_true", help="--flood: under tracemalloc")
    parser.add_argument("--serve", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], Path(args.serve[1]))
        return
    tmp = Path(tempfile.mkdtemp(dir="/tmp", prefix="memd-b"))
    procs: dict[str, subprocess.Popen[Any]] = {}
    try:
        if args.flood:
            run_floods(tmp, args.sessions, args.config, trace=args.trace)
            return
        procs["real"] = start_real(tmp, args.sessions)
        for kind in ("echo", "memd"):
            procs[kind] = start_server(kind, tmp / f"{kind}.sock")
        pids = {f"{kind}.sock": proc.pid for kind, proc in procs.items()}
        report(tmp, pids, args.clients, args.seconds)
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def run_floods(tmp: Path, sessions: int, configs: list[str], *, trace: bool) -> None:
    from bench.ipc_flood import CONFIGS, flood

    print(f"load avg {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for name in configs:
        where = tmp / name
        where.mkdir()
        snapshots = str(where / "snapshot") if trace else ""
        proc = start_real(where, sessions, *CONFIGS[name], trace=snapshots)
        try:
            flood(where / "real.sock", proc.pid, name, trace=snapshots)
        finally:
            proc.terminate()
            proc.wait()


# row -> (socket, library client?, method sent)
ROWS = {
    "echo": ("echo.sock", False, "status-pad"),
    "memd": ("memd.sock", False, "status-pad"),
    "memd+client": ("memd.sock", True, "status-pad"),
    "echo small": ("echo.sock", False, "hello"),
    "real hello": ("real.sock", False, "hello"),
    "real status": ("real.sock", False, "status"),
}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(
    tmp: Path, pids: dict[str, int], client_counts: list[int], seconds: float, rounds: int = 4
) -> None:
    # Rounds alternate between the servers so a noisy neighbour hits all of them alike.
    load_avg = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"status round trips, ~1 KB each way, {seconds:.1f}s per row (load avg {load_avg})")
    print(
        f"{'clients':>7} {'server':<12} {'p50 µs':>9} {'p99 µs':>9} {'req/s':>9} {'cpu µs/req':>11}"
    )
    for n in client_counts:
        samples: dict[str, list[float]] = {name: [] for name in ROWS}
        cpu: dict[str, float] = dict.fromkeys(ROWS, 0.0)
        for _ in range(rounds):
            for name, (sock, library, method) in ROWS.items():
                pid = pids[sock]
                before = cpu_seconds(pid)
                latencies = asyncio.run(
                    load(tmp / sock, n, seconds / rounds, library=library, method=method)
                )
                cpu[name] += cpu_seconds(pid) - before
                samples[name].extend(latencies)
        rows = {name: _figures(lat, seconds) for name, lat in samples.items()}
        per_req = {name: cpu[name] / max(1, len(samples[name])) * 1e6 for name in ROWS}
        for name, f in rows.items():
            print(
                f"{n:>7} {name:<12} {f.p50_us:>9.0f} {f.p99_us:>9.0f} {f.rps:>9.0f}"
                f" {per_req[name]:>11.0f}"
            )
        for mine, base in (
            ("memd", "echo"),
            ("real hello", "echo small"),
            ("real status", "echo small"),
        ):
            a, b = rows[mine], rows[base]
            print(
                f"{'':>7} {mine + '/' + base:<24} p50 {a.p50_us / b.p50_us:>5.2f}x "
                f"p99 {a.p99_us / b.p99_us:>5.2f}x req/s {a.rps / b.rps:>5.2f}x"
                f" cpu {per_req[mine] / max(per_req[base], 1e-9):>5.2f}x"
            )


if __name__ == "__main__":
    main()
