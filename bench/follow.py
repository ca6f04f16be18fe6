"""Follow latency: one line appended to a live session file, until a reply shows it.

Starts the real daemon (``python -m memd.daemon.main``) on a temp HOME with one corpus
session, waits until it is read, then appends one transcript line at a time, each after a
quiet gap (``--gap``), and measures from the ``write()``:

- raw inotify (the floor, the same write): a bare :class:`memd.daemon.inotify.Inotify` in this
  process, on the same folder, until its descriptor is readable and the event read;
- memd: ``session`` over the socket, asked again at once, until its ``bytes_parsed`` is the
  file's new size.

Both come from the same write, so a loaded machine weighs on both alike; the ratio is printed.
With ``--bulk N``, N other sessions of the same folder grow by ``--bulk-kib`` KiB of lines
every 50 ms throughout (bulk ingest beside the followed session: what a busy machine with
several agents writing gives the ingest workers).

    python3 bench/follow.py [--appends 60] [--gap 0.2] [--bulk 0] [--bulk-kib 512]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "client")]

from memd.daemon.inotify import Inotify  # noqa: E402
from memd_client.client import Client  # noqa: E402
from memd_client.errors import MemdClientError  # noqa: E402

SHARED = REPO.parent / "shared" / "data" / "transcripts"  # beside the checkout, as tests/ has it
CORPUS = SHARED if SHARED.is_dir() else REPO / "tests" / "corpus"


def pick_session() -> Path:
    """The smallest corpus main transcript over 64 KiB: a real session, quickly read."""
    files = [p for p in CORPUS.rglob("*.jsonl") if "subagents" not in p.parts]
    return min((p for p in files if p.stat().st_size > 65536), key=lambda p: p.stat().st_size)


def user_line(session_id: str, parent: str | None, n: int) -> tuple[bytes, str]:
    uid = str(uuid.uuid4())
    entry = {
        "type": "user",
        "uuid": uid,
        "parentUuid": parent,
        "sessionId": session_id,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "message": {"role": "user", "content": f"follow latency probe {n}"},
    }
    return json.dumps(entry).encode() + b"\n", uid


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def wait_parsed(client: Client, session_id: str, size: int, limit: float = 10.0) -> None:
    start = time.perf_counter()
    while client.call("session", {"session": session_id})["bytes_parsed"] < size:
        if time.perf_counter() - start > limit:
            raise SystemExit(f"memd did not read the appended line within {limit} s")


def grow(paths: list[Path], kib: int, stop: threading.Event) -> None:
    """Append ``kib`` KiB of user lines to each of ``paths`` every 50 ms until ``stop``."""
    n = 0
    while not stop.wait(0.05):
        for path in paths:
            lines: list[bytes] = []
            size = 0
            while size < kib * 1024:
                lines.append(user_line(path.stem, None, n)[0].replace(b"probe", b"bulk " * 200))
                size += len(lines[-1])
                n += 1
            with path.open("ab") as out:
                out.write(b"".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--appends", type=int, default=60)
    ap.add_argument("--gap", type=float, default=0.2, help="quiet seconds before each append")
    ap.add_argument("--set", action="append", default=[], help="memd --set KEY=VALUE")
    ap.add_argument("--bulk", type=int, default=0, help="sessions growing beside it")
    ap.add_argument("--build", type=Path, default=REPO, help="run the daemon from this tree")
    ap.add_argument("--bulk-kib", type=int, default=512, help="KiB each grows by per 50 ms")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="memd-follow-"))
    runtime = Path(tempfile.mkdtemp(prefix="mf-", dir="/tmp"))
    src = pick_session()
    project = home / ".claude" / "projects" / "-home-u-follow"
    project.mkdir(parents=True)
    session_id = str(uuid.uuid4())
    path = project / f"{session_id}.jsonl"
    shutil.copyfile(src, path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "MEMD_", "XDG_"))}
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(runtime))
    build = args.build.resolve()
    env["PYTHONPATH"] = f"{build}{os.pathsep}{build / 'client'}"
    sock = runtime / "memd" / "memd.sock"
    proc = subprocess.Popen(
        [sys.executable, "-m", "memd.daemon.main", *(f"--set={kv}" for kv in args.set)],
        env=env,
        stderr=subprocess.DEVNULL,
        cwd=home,  # ``-m`` puts the cwd first on sys.path: a checkout there would win over --build
    )
    raw: list[float] = []
    memd: list[float] = []
    try:
        deadline = time.perf_counter() + 120
        while True:
            try:
                with Client(sock, timeout=30.0) as c:
                    wait_parsed(c, session_id, path.stat().st_size, limit=120)
                break
            except MemdClientError:
                if time.perf_counter() > deadline:
                    raise SystemExit("memd did not start") from None
                time.sleep(0.05)
        time.sleep(3.0)  # the follow-up scan, the state flush and the SDK load settle
        bulk = [project / f"{uuid.uuid4()}.jsonl" for _ in range(args.bulk)]
        stop = threading.Event()
        grower = threading.Thread(target=grow, args=(bulk, args.bulk_kib, stop), daemon=True)
        grower.start()
        probe = Inotify()
        probe.add(str(project).encode())
        parent: str | None = None
        with Client(sock, timeout=30.0) as c, open(path, "ab", buffering=0) as out:
            for n in range(args.appends):
                time.sleep(args.gap)
                probe.read()  # whatever came before this append
                line, parent = user_line(session_id, parent, n)
                size = path.stat().st_size + len(line)
                t0 = time.perf_counter()
                out.write(line)
                select.select([probe.fd], [], [])
                probe.read()
                raw.append(time.perf_counter() - t0)
                wait_parsed(c, session_id, size)
                memd.append(time.perf_counter() - t0)
        probe.close()
        stop.set()
        grower.join()
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)
    print(f"follow latency, {args.appends} appends of one line, {args.gap:.2f} s apart", end="")
    beside = f"; {args.bulk} sessions growing by {args.bulk_kib} KiB / 50 ms beside"
    print(beside if args.bulk else "")
    print(f"load: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'':22}{'p50':>9}{'p90':>9}{'p99':>9}  (ms)")
    for name, xs in (("raw inotify (floor)", raw), ("memd session reply", memd)):
        p50, p90, p99 = (pct(xs, q) * 1000 for q in (0.5, 0.9, 0.99))
        print(f"{name:22}{p50:9.2f}{p90:9.2f}{p99:9.2f}")
    print(f"memd / raw p50: {statistics.median(memd) / statistics.median(raw):.1f}x")


if __name__ == "__main__":
    main()
