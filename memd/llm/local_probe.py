"""Is a local model server answering on its default port? (issue 34: Ollama 11434,
llama.cpp 8080, LM Studio 1234, vLLM 8000). Blocking and cheap: one ``GET /v1/models`` per
address with a short timeout, run by the daemon in a worker thread after READY, so a port
that never answers costs the probe's timeout and never the start.

Every byte the port sends back is hostile: the answer is read up to :data:`MAX_BYTES`, and
only model ids that are short printable strings are kept.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

MAX_BYTES = 256 * 1024
MAX_MODELS = 50
MAX_ID_CHARS = 200
KNOWN_PORTS = {11434: "Ollama", 8080: "llama.cpp", 1234: "LM Studio", 8000: "vLLM"}


@dataclass(frozen=True)
class LocalServer:
    """A server that answered: its OpenAI-compatible base URL and the models it lists."""

    base_url: str  # http://host:port/v1
    label: str  # what usually listens there ("Ollama"), or the address
    models: tuple[str, ...]


def probe(address: str, timeout: float) -> LocalServer | None:
    """``address`` (``host:port``, or a URL ending in ``/v1``) if a model server answers
    there, else None. Never raises."""
    base = address.rstrip("/")
    if "://" not in base:
        base = f"http://{base}/v1"
    try:
        scheme, _, rest = base.partition("://")
        hostport, _, path = rest.partition("/")
        host, _, port_text = hostport.rpartition(":")
        port = int(port_text) if host else (443 if scheme == "https" else 80)
        host = host or hostport
        conn_type = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        conn = conn_type(host.strip("[]"), port, timeout=timeout)
        try:
            conn.request("GET", f"/{path}/models".replace("//", "/"))
            answer = conn.getresponse()
            body = answer.read(MAX_BYTES + 1)
            status = answer.status
        finally:
            conn.close()
    except (OSError, ValueError, http.client.HTTPException):
        return None
    if status != 200 or len(body) > MAX_BYTES:
        return None
    models = model_ids(body)
    if models is None:
        return None
    return LocalServer(base, KNOWN_PORTS.get(port, hostport), models)


def model_ids(body: bytes) -> tuple[str, ...] | None:
    """The ids of an OpenAI ``/models`` answer (``{"data": [{"id": …}]}``; Ollama's
    ``{"models": [{"name": …}]}`` too); None when it is not such an answer (pure)."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    rows = data.get("data", data.get("models"))
    if not isinstance(rows, list):
        return None
    ids: list[str] = []
    for row in rows[:MAX_MODELS]:
        name = row.get("id", row.get("name")) if isinstance(row, dict) else None
        if isinstance(name, str) and 0 < len(name) <= MAX_ID_CHARS and name.isprintable():
            ids.append(name)
    return tuple(ids)


def probe_all(addresses: Sequence[str], timeout: float) -> list[LocalServer]:
    """Every address that answers, in the order given (probed at once: the slowest port
    costs ``timeout``, not the sum)."""
    if not addresses:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(addresses))) as pool:
        found = list(pool.map(lambda a: probe(a, timeout), addresses))
    return [server for server in found if server is not None]
