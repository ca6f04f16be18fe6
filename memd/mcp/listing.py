"""``listing.json``: the SDK server's own answers that :mod:`memd.mcp.front` gives before the
SDK is loaded. ``python -m memd.mcp.listing`` writes it again (after a change to memd's tools,
their descriptions, memd's version or the SDK); ``tests/test_mcp_front.py`` fails while it
differs.

The answers are read off the wire: the SDK server (:func:`memd.mcp.server.main`) runs as a
child and is asked, in each era, what the front answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from memd.mcp.front import (
    LISTING,
    META,
    MODERN_ANSWERS,
    MODERN_VERSIONS,
    RESOURCES,
    VERSION_KEY,
)

SDK_SERVER = "from memd.mcp.server import main; main()"
CLIENT = {"name": "memd-listing", "version": "1"}
ENVELOPE = {
    VERSION_KEY: MODERN_VERSIONS[-1],
    META + "clientInfo": CLIENT,
    META + "clientCapabilities": {},
}


def request(ident: int | None, method: str, params: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if ident is not None:
        body["id"] = ident
    if params is not None:
        body["params"] = params
    return json.dumps(body).encode() + b"\n"


def handshake_requests(version: str) -> list[bytes]:
    """What an agent of the handshake era asks first."""
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": CLIENT}
    return [
        request(0, "initialize", params),
        request(None, "notifications/initialized"),
        request(1, "tools/list"),
        request(2, "ping"),
    ]


def modern_requests(meta: dict[str, Any] | None = None) -> list[bytes]:
    """The 2026 era's requests the front answers, in :data:`memd.mcp.front.MODERN_ANSWERS`'
    order, then ``resources/list``."""
    envelope = {"_meta": ENVELOPE if meta is None else meta}
    methods = (*MODERN_ANSWERS, RESOURCES)
    return [request(n, method, envelope) for n, method in enumerate(methods)]


def sdk_answers(
    requests: list[bytes],
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    timeout_s: float = 120.0,
) -> list[Any]:
    """The SDK server's replies to ``requests`` (one at a time: it answers concurrently),
    decoded, in order; run in ``cwd`` under ``env`` (default: an empty folder, where no
    project is named and so no daemon asked)."""
    with tempfile.TemporaryDirectory() as empty:
        return _answers(requests, env, cwd or empty, timeout_s)


def _answers(
    requests: list[bytes], env: dict[str, str] | None, cwd: str, timeout_s: float
) -> list[Any]:
    if env is None:
        env = {**os.environ, "HOME": cwd, "CLAUDE_PROJECT_DIR": ""}
    with subprocess.Popen(
        [sys.executable, "-c", SDK_SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=cwd,
    ) as child:
        assert child.stdin is not None and child.stdout is not None
        answers: list[Any] = []
        try:
            for line in requests:
                child.stdin.write(line)
                child.stdin.flush()
                if b'"id"' in line:
                    answers.append(json.loads(child.stdout.readline()))
        finally:
            child.stdin.close()
            child.wait(timeout_s)
    return answers


def listing() -> dict[str, Any]:
    """What ``listing.json`` holds: the results the front answers with, per era (that of
    ``resources/list`` with no resources: the front asks the daemon for them; here the SDK
    server runs in an empty folder that is its HOME, which names no project)."""
    initialized, tools, _ping = sdk_answers(handshake_requests("2025-06-18"))
    modern = sdk_answers(modern_requests())
    results = {m: a["result"] for m, a in zip((*MODERN_ANSWERS, RESOURCES), modern, strict=True)}
    return {
        "handshake": {"initialize": initialized["result"], "tools/list": tools["result"]},
        "modern": results,
    }


def main() -> None:
    text = json.dumps(listing(), ensure_ascii=False, indent=1, sort_keys=True) + "\n"
    Path(LISTING).write_text(text, encoding="utf-8")
    print(f"wrote {LISTING}")


if __name__ == "__main__":
    main()
