"""The pause of one full garbage collection in a loaded daemon, with and without its loaded
code frozen (memd.gc_pauses).

Imports what a running daemon has loaded (the daemon, its features, the model SDK with a
client built, tiktoken's encoding), then times full collections (``gc.collect()``, the
event loop would be stopped meanwhile) before and after :func:`freeze_loaded`, in one run.

    python3 bench/gc_pause.py [--runs 5]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time


def load_like_the_daemon() -> None:
    import anthropic

    import memd.daemon.features
    import memd.daemon.service  # noqa: F401 - loaded for its objects
    from memd.tokens import load_soon

    anthropic.AsyncAnthropic(api_key="bench", base_url="http://127.0.0.1:9")
    load_soon()


def full_collections(runs: int) -> list[float]:
    took = []
    for _ in range(runs):
        started = time.perf_counter()
        gc.collect()
        took.append((time.perf_counter() - started) * 1000)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    load_like_the_daemon()
    time.sleep(2)  # the tokenizer loads in a thread
    tracked = len(gc.get_objects())
    before = full_collections(args.runs)
    from memd.gc_pauses import freeze_loaded

    frozen = freeze_loaded("bench")
    after = full_collections(args.runs)
    print(f"tracked objects before freezing: {tracked:,}; frozen: {frozen:,}")
    print(f"full collection p50, not frozen: {statistics.median(before):7.2f} ms")
    print(f"full collection p50, frozen:     {statistics.median(after):7.2f} ms")


if __name__ == "__main__":
    main()
