"""What a memory cites in the repository: paths, line ranges, symbols (pure).

A citation names a file of the repository a memory is about (relative to its work tree), the
lines the memory speaks of when its text gives them (``src/retry.py:10-24``,
``src/retry.py#L10-L24``), the symbols it names that the file holds (function, class or
config key names written in backticks: ``backoff()``, ``RetryPolicy``, ``retry.max_s``), and
what memd saw when the memory was written: the commit and branch the work tree was at and a
hash of the cited lines (of the whole file when no lines are cited).

They live in the memory's frontmatter under ``citations``, one mapping each, in words a
person reads (Claude Code keeps only the keys it knows, so the block is ignored there)::

    citations:
    - path: src/retry.py
      lines: 10-24
      symbols: [backoff]
      commit: 3f2a9c1e…
      branch: main
      hash: 9b1c0e4d5a6f7b8c
      blob: 5e1c309dae7f45e0f39b1bf3ac3cd9db12e7d689

A memory without the key (Claude Code's, a hand-written one) has its citations inferred
from its text (:func:`infer`) when memd first reads it. Everything here takes hostile text:
at most :data:`MAX_CITATIONS` per memory, paths relative, inside the work tree and not in
``.git``, numbers bounded.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

MAX_CITATIONS = 16
MAX_SYMBOLS = 8
MAX_PATH_CHARS = 300
MAX_LINE = 10_000_000
HASH_CHARS = 16

_EXT = r"\.[A-Za-z0-9_]{1,10}"
_PATH = re.compile(
    r"(?<![\w/.:@-])"  # not the tail of a word, a URL or an e-mail address
    r"((?:[\w.-]+/)*[\w-][\w.-]*" + _EXT + r")"
    r"(?:(?::|#L|\s+lines?\s+)(\d{1,8})(?:\s*[-–]\s*L?(\d{1,8}))?)?"
)
_TICKED = re.compile(r"`([^`\n]{1,120})`")
_SYMBOL = re.compile(r"[A-Za-z_][\w]*(?:[.:][A-Za-z_][\w]*)*")
_LINES_TEXT = re.compile(r"(\d{1,8})(?:\s*-\s*(\d{1,8}))?")
_HEX = re.compile(r"[0-9a-f]{4,64}")
_FILE_EXT = re.compile(
    r"\.(py|pyi|js|mjs|cjs|jsx|ts|tsx|go|rs|md|rst|txt|json|toml|yaml|yml|ini|cfg|conf|c|cc|"
    r"cpp|h|hpp|java|kt|rb|php|cs|swift|scala|sh|bash|sql|html|css|scss|vue|lua|ex|exs|el|"
    r"nix|tf|proto|gradle|xml|lock|mk|cmake)$",
    re.IGNORECASE,
)
_WORDISH = frozenset({"e.g", "i.e", "etc"})


@dataclass(frozen=True)
class Citation:
    """One cited file. ``lines`` is inclusive and 1-based; ``hash`` is :func:`content_hash`
    of those lines (or the file) as seen at ``commit``; ``None`` fields were not known."""

    path: str
    lines: tuple[int, int] | None = None
    symbols: tuple[str, ...] = ()
    commit: str | None = None
    branch: str | None = None
    hash: str | None = None
    blob: str | None = None  # git's id of the whole file as seen (unchanged files skip a read)

    @property
    def label(self) -> str:
        if self.lines is None:
            return self.path
        start, end = self.lines
        return f"{self.path}:{start}" if start == end else f"{self.path}:{start}-{end}"


def clean_path(text: str) -> str | None:
    """``text`` as a relative path inside a work tree, or ``None`` when it is not one."""
    path = text.strip().removeprefix("./")
    if not path or len(path) > MAX_PATH_CHARS or path.startswith("/") or "\\" in path:
        return None
    if any(ord(c) < 32 or c == "\x7f" for c in path):
        return None
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts) or parts[0].casefold() == ".git":
        return None
    return path


def content_hash(lines: Sequence[bytes]) -> str:
    """The hash memd keeps of cited lines: line endings and trailing blanks do not count."""
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.rstrip(b"\r\n \t"))
        digest.update(b"\n")
    return digest.hexdigest()[:HASH_CHARS]


def _lines(start: str | None, end: str | None) -> tuple[int, int] | None:
    if start is None:
        return None
    first = int(start)
    last = int(end) if end is not None else first
    if not 1 <= first <= last <= MAX_LINE:
        return None
    return first, last


def infer(text: str) -> tuple[Citation, ...]:
    """The citations a memory's text makes: paths (with lines where given) and the ticked
    names that may be symbols (kept as candidates; the caller keeps those the file holds)."""
    found: dict[tuple[str, tuple[int, int] | None], Citation] = {}
    for match in _PATH.finditer(text):
        path = clean_path(match.group(1))
        if path is None or path.casefold() in _WORDISH or not _looks_like_file(path):
            continue
        key = (path, _lines(match.group(2), match.group(3)))
        found.setdefault(key, Citation(path, key[1]))
        if len(found) >= MAX_CITATIONS:
            break
    ranged = {path for path, lines in found if lines is not None}
    symbols = candidate_symbols(text)
    return tuple(
        replace(c, symbols=symbols)
        for (path, lines), c in found.items()
        if lines is not None or path not in ranged
    )


def candidate_symbols(text: str) -> tuple[str, ...]:
    """Names in backticks that look like code identifiers (``f()`` → ``f``), not paths."""
    names: dict[str, None] = {}
    for match in _TICKED.finditer(text):
        word = match.group(1).strip().removesuffix("()")
        if _SYMBOL.fullmatch(word) and not _looks_like_file(word):
            names.setdefault(word, None)
        if len(names) >= 4 * MAX_SYMBOLS:
            break
    return tuple(names)


def _looks_like_file(word: str) -> bool:
    """A dotted word that is a file name rather than ``module.attr`` or ``section.key``: it
    has a slash, or ends in an extension source trees use."""
    return "/" in word or _FILE_EXT.search(word) is not None


def symbol_in(symbol: str, content: bytes) -> bool:
    """Whether ``content`` names ``symbol`` as a whole word (a dotted key: its last part,
    as config files spell keys in sections)."""
    word = symbol.rsplit(".", 1)[-1].rsplit(":", 1)[-1].encode()
    at = content.find(word)
    while at >= 0:  # find + a look at both neighbours: no pattern compiled per symbol
        end = at + len(word)
        if not _word_byte(content[at - 1 : at]) and not _word_byte(content[end : end + 1]):
            return True
        at = content.find(word, at + 1)
    return False


def _word_byte(byte: bytes) -> bool:
    return bool(byte) and (byte.isalnum() or byte == b"_" or byte[0] >= 0x80)


# ---------------------------------------------------------------------------------------------
# Frontmatter form


def to_frontmatter(citations: Sequence[Citation]) -> list[dict[str, Any]]:
    """The ``citations`` value written to a memory's frontmatter."""
    rows: list[dict[str, Any]] = []
    for c in citations[:MAX_CITATIONS]:
        row: dict[str, Any] = {"path": c.path}
        if c.lines is not None:
            row["lines"] = f"{c.lines[0]}-{c.lines[1]}"
        if c.symbols:
            row["symbols"] = list(c.symbols[:MAX_SYMBOLS])
        for key in ("commit", "branch", "hash", "blob"):
            if getattr(c, key):
                row[key] = getattr(c, key)
        rows.append(row)
    return rows


def from_frontmatter(extra: Sequence[tuple[str, Any]]) -> tuple[Citation, ...] | None:
    """The citations a memory's frontmatter records (``None`` when it has no such key);
    entries that do not read as a citation are passed over."""
    value = next((v for k, v in extra if k == "citations"), None)
    if value is None:
        return None
    if not isinstance(value, list):
        return ()
    read = (_citation(row) for row in value[:MAX_CITATIONS] if isinstance(row, Mapping))
    return tuple(c for c in read if c is not None)


def _citation(row: Mapping[Any, Any]) -> Citation | None:
    path = clean_path(row["path"]) if isinstance(row.get("path"), str) else None
    if path is None:
        return None
    lines = None
    given = row.get("lines")
    if isinstance(given, int) and not isinstance(given, bool):
        given = str(given)
    if isinstance(given, str):
        match = _LINES_TEXT.fullmatch(given.strip())
        lines = _lines(match.group(1), match.group(2)) if match else None
    raw = row.get("symbols")
    symbols = tuple(
        s
        for s in (raw if isinstance(raw, list) else [])[:MAX_SYMBOLS]
        if isinstance(s, str) and _SYMBOL.fullmatch(s) and len(s) <= 120
    )
    commit, digest = _hex(row.get("commit")), _hex(row.get("hash"))
    return Citation(path, lines, symbols, commit, _branch(row), digest, _hex(row.get("blob")))


def _hex(value: object) -> str | None:
    return value if isinstance(value, str) and _HEX.fullmatch(value) else None


def _branch(row: Mapping[Any, Any]) -> str | None:
    value = row.get("branch")
    if isinstance(value, str) and 0 < len(value) <= 200 and value.isprintable():
        return value
    return None
