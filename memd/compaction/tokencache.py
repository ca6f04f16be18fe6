"""Token estimates of transcript messages, remembered across restarts.

A message's lines never change once written, and a message that gains a line gets a new key,
so an entry is never stale. Tokenizing is ~40x slower than cutting a conversation, so this is
what keeps a level-1 compaction within a few milliseconds, and keeping it across a restart is
what keeps the first compaction after one that fast (issue 12: a 170K-token session costs
~40 ms to tokenize, and more while the daemon is starting). The most recently used
:data:`SAVED_ENTRIES` are kept.

The key is a 64-bit BLAKE2b digest of the message's line uuids: the same in every process
(``hash()`` of a str is not), 8 bytes an entry, and no uuid kept alive after its session goes.
Least recently used out first. Thread-safe.

The file (``token-estimates.bin`` in the state dir) is a header — magic, then the estimator's
identity — and 12-byte records, oldest first: the key and the estimate, little-endian. It is
a cache: one that cannot be read, or was written by another estimator, is set aside with a
warning and the estimates are computed again.
"""

from __future__ import annotations

import hashlib
import logging
import struct
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from memd.atomic import persist
from memd.regular_file import read_regular
from memd.tokens import estimate_content, estimator_id, using_tokenizer

if TYPE_CHECKING:
    from memd.transcript.conversation import Conversation
    from memd.transcript.messages import ApiMessage

log = logging.getLogger(__name__)

TOKENS_FILE = "token-estimates.bin"
MAGIC = b"memd-tok1\n"
RECORD = struct.Struct("<QI")
MAX_ENTRIES = 200_000
# Kept across a restart: the most recently used (~250 sessions near their compaction
# threshold; ~5 MiB resident once loaded, 600 KB on disk).
SAVED_ENTRIES = 50_000


def message_key(uuids: Iterable[str]) -> int:
    """A message's key: the same for the same line uuids in any process. A uuid is text from
    a hostile file: a lone surrogate in it is digested as it is, never an error."""
    joined = "\n".join(uuids).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(joined, digest_size=8).digest(), "little")


class TokenCache:
    """Estimates by message key; see the module docstring."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._entries: dict[int, int] = {}
        self._max = max_entries
        self._lock = threading.Lock()
        self._changed = 0  # entries added since the last save or load

    def tokens(self, m: ApiMessage) -> int:
        key = message_key(m.uuids)
        hit = self._get(key)
        if hit is not None:
            return hit
        value = estimate_content(m.content)
        with self._lock:
            self._put(key, value)
        return value

    def _put(self, key: int, value: int) -> None:
        self._entries[key] = value
        self._changed += 1
        while len(self._entries) > self._max:
            del self._entries[next(iter(self._entries))]

    def _get(self, key: int) -> int | None:
        with self._lock:
            hit = self._entries.pop(key, None)
            if hit is not None:
                self._entries[key] = hit  # now the most recently used
            return hit

    def known(self, uuids: tuple[str, ...]) -> bool:
        key = message_key(uuids)
        with self._lock:
            return key in self._entries

    def warm(self, conv: Conversation) -> int:
        """Estimate the messages of ``conv`` not cached yet, reading only their lines;
        returns how many (blocking: run in a thread under the session's lock)."""
        missing = [m for m in conv.outline() if not self.known(m.uuids)]
        for message in conv.fill(missing):
            self.tokens(message)
        return len(missing)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def changed(self) -> int:
        """Entries added since the last :meth:`save` or :meth:`load`."""
        return self._changed

    # -- the file --------------------------------------------------------------------------

    @classmethod
    def load(cls, path: Path, max_entries: int = MAX_ENTRIES) -> TokenCache:
        """The cache saved at ``path``; an empty one when there is none, or it cannot be
        used (logged). Blocking."""
        cache = cls(max_entries)
        header = _header()
        max_entries = min(max_entries, SAVED_ENTRIES)
        try:
            data = read_regular(path, len(header) + RECORD.size * max_entries + 1)
        except FileNotFoundError:
            return cache
        except OSError as exc:
            log.warning("token estimates not reused: cannot read %s: %s", path, exc)
            return cache
        body = memoryview(data)[len(header) :]
        if not data.startswith(header):
            log.warning("token estimates not reused: %s is from another estimator", path)
        elif len(body) % RECORD.size or len(body) > RECORD.size * max_entries:
            log.warning("token estimates not reused: %s is cut short or too long", path)
        else:
            cache._entries = dict(RECORD.iter_unpack(body))
            log.info("reusing %d token estimates from %s", len(cache._entries), path)
        return cache

    def save(self, path: Path) -> None:
        """Write the cache, oldest first, atomically (blocking). Estimates of the chars/4
        fallback (no tokenizer) are not written: they are not what the file's header says."""
        if not using_tokenizer():
            return
        with self._lock:
            records = list(self._entries.items())[-SAVED_ENTRIES:]
            self._changed = 0
        body = b"".join(RECORD.pack(key, min(value, 0xFFFF_FFFF)) for key, value in records)
        persist(path, _header() + body, mode=0o600)


def _header() -> bytes:
    return MAGIC + estimator_id().encode("ascii") + b"\n"
