"""IPC round trips: memd's server against a bare anyio echo server with the same framing.

    python3 bench/ipc.py [--seconds 2.0] [--clients 1 8 64]

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


async def _raw_client(path: Path, until: float, warm: float, out: list[float]) -> None:
    reader, writer = await asyncio.open_unix_connection(str(path), limit=1 << 20)
    decoder = p.FrameDecoder()
    rid = 0
    try:
        while (start := time.perf_counter()) < until:
            rid += 1
            writer.write(p.encode_frame(p.request(rid, "status", {"pad": STATUS})))
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


async def load(path: Path, clients: int, seconds: float, *, library: bool) -> list[float]:
    """Latencies (seconds) of every round trip after a short warm-up."""
    warmup = min(0.2, seconds / 4)
    begin = time.perf_counter()
    warm, until = begin + warmup, begin + warmup + seconds
    out: list[float] = []
    run = _lib_client if library else _raw_client
    await asyncio.gather(*(run(path, until, warm, out) for _ in range(clients)))
    return out


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
    parser.add_argument("--serve", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], Path(args.serve[1]))
        return
    tmp = Path(tempfile.mkdtemp(dir="/tmp", prefix="memd-b"))
    procs = {kind: start_server(kind, tmp / f"{kind}.sock") for kind in ("echo", "memd")}
    try:
        pids = {f"{kind}.sock": proc.pid for kind, proc in procs.items()}
        report(tmp, pids, args.clients, args.seconds)
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


ROWS = {
    "echo": ("echo.sock", False),
    "memd": ("memd.sock", False),
    "memd+client": ("memd.sock", True),
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
            for name, (sock, library) in ROWS.items():
                pid = pids[sock]
                before = cpu_seconds(pid)
                latencies = asyncio.run(load(tmp / sock, n, seconds / rounds, library=library))
                cpu[name] += cpu_seconds(pid) - before
                samples[name].extend(latencies)
        rows = {name: _figures(lat, seconds) for name, lat in samples.items()}
        per_req = {name: cpu[name] / max(1, len(samples[name])) * 1e6 for name in ROWS}
        for name, f in rows.items():
            print(
                f"{n:>7} {name:<12} {f.p50_us:>9.0f} {f.p99_us:>9.0f} {f.rps:>9.0f}"
                f" {per_req[name]:>11.0f}"
            )
        echo, memd = rows["echo"], rows["memd"]
        print(
            f"{'':>7} {'memd/echo':<12} {memd.p50_us / echo.p50_us:>8.2f}x "
            f"{memd.p99_us / echo.p99_us:>8.2f}x {memd.rps / echo.rps:>8.2f}x"
            f" {per_req['memd'] / max(per_req['echo'], 1e-9):>10.2f}x"
        )


if __name__ == "__main__":
    main()
