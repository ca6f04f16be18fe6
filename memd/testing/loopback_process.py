"""The loopback server as its own process, for end-to-end tests of a daemon subprocess.

Run it by hand or from a test::

    python -m memd.testing.loopback_process --port 0 --script replies.jsonl

or, from a test, with :class:`LoopbackProcess`::

    with LoopbackProcess(script=path) as api:
        env = {"ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "test"}
        ...  # start the daemon with env, let it work
        assert api.totals()["messages"] == 2

The process prints its URL as the first line of stdout, serves until SIGTERM or SIGINT, and
answers ``GET /_loopback/requests``, ``GET /_loopback/totals``, ``POST /_loopback/script``
(JSON-lines entries to add) and ``POST /_loopback/reset``.
"""

from __future__ import annotations

import argparse
import json
import select
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from memd.testing import loopback_billing as billing
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; print the URL first."""
    parser = argparse.ArgumentParser(
        prog="python -m memd.testing.loopback_process",
        description="A local Messages-API server for memd's tests and benchmarks.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--script", type=Path, help="JSON-lines replies and rules")
    parser.add_argument("--context-limit", type=int, default=200_000)
    parser.add_argument("--min-cache-tokens", type=int, default=billing.DEFAULT_MIN_CACHE_TOKENS)
    parser.add_argument("--default-text", default="OK.")
    parser.add_argument("--api-key", help="accept only this key (default: any non-empty key)")
    args = parser.parse_args(argv)
    api = LoopbackAPI(
        host=args.host,
        port=args.port,
        context_limit=args.context_limit,
        min_cache_tokens=args.min_cache_tokens,
        default_text=args.default_text,
        api_key=args.api_key,
    )
    if args.script is not None:
        try:
            api.load_script(replies.load_script(args.script))
        except (OSError, replies.ScriptError) as exc:
            parser.exit(2, f"loopback: cannot use the script: {exc}\n")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with api:
        print(api.url, flush=True)
        while not stop.wait(0.5):
            pass
    return 0


class LoopbackProcess:
    """Start ``python -m memd.testing.loopback_process`` and talk to its control endpoints."""

    def __init__(
        self,
        *,
        script: Path | None = None,
        extra_args: tuple[str, ...] = (),
        start_timeout: float = 20.0,
    ) -> None:
        self._argv = [sys.executable, "-m", "memd.testing.loopback_process", "--port", "0"]
        if script is not None:
            self._argv += ["--script", str(script)]
        self._argv += list(extra_args)
        self._start_timeout = start_timeout
        self._proc: subprocess.Popen[str] | None = None
        self.url = ""
        # Loopback traffic must not go through a proxy named in the environment.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def __enter__(self) -> LoopbackProcess:
        self._proc = subprocess.Popen(self._argv, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], self._start_timeout)
        line = self._proc.stdout.readline().strip() if ready else ""
        if not line.startswith("http://"):
            self.close()
            raise RuntimeError(f"the loopback process did not start: {line or 'no URL printed'}")
        self.url = line
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._proc = None

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def requests(self) -> list[dict[str, Any]]:
        """Every request so far (as JSON; credentials headers left out)."""
        result: list[dict[str, Any]] = self._call("GET", "requests")
        return result

    def totals(self) -> dict[str, int]:
        result: dict[str, int] = self._call("GET", "totals")
        return result

    def add_script(self, text: str) -> None:
        """Append JSON-lines entries (queued replies and rules) to the running server."""
        self._call("POST", "script", text.encode("utf-8"))

    def reset(self) -> None:
        self._call("POST", "reset", b"")

    def _call(self, method: str, what: str, data: bytes | None = None) -> Any:
        request = urllib.request.Request(f"{self.url}/_loopback/{what}", data, method=method)
        try:
            with self._opener.open(request, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")
            exc.close()
            raise RuntimeError(f"loopback {method} {what} failed: {detail}") from None


if __name__ == "__main__":
    raise SystemExit(main())
