"""Search terms from free text, for the lexical ranker: pure, cached, model-free.

``analyze`` turns text into stemmed terms:

* words are runs of letters and digits (``.`` and ``/`` separate words, so a path gives its
  parts); identifiers are split on ``_`` and ``-`` and on camelCase humps
  (``parseHTTPHeader`` -> ``parse``, ``http``, ``header``), and a
  joined compound is kept too (``parsehttpheader``), so ``getUserName`` in a memory matches
  both "get user name" and ``get_user_name`` in a query;
* English stopwords and one-letter words are dropped, and so are "kind", "sort" and "type"
  before "of" (in "what kind of music" the topic is "music"; "kind" would match "kind
  words"); numbers are kept whatever their length, without leading zeros (``4`` and ``04``
  in "December 4" and "04/12" meet);
* a handful of common developer abbreviations also emit their long form (``db`` ->
  ``database``), in documents and queries alike, so either spelling finds the other;
* the English Snowball stemmer (Porter2, :mod:`memd.memory.porter2`) maps
  ``cache/caches/cached/caching`` to one term, and ``vacation/vacationed``,
  ``organize/organization`` too.
"""

from __future__ import annotations

import re
from functools import lru_cache

from memd.memory import porter2

_WORD = re.compile(r"[^\W_]+(?:[_\-][^\W_]+)*")
_SEPARATORS = re.compile(r"[_\-]")
_PART = re.compile(r"[^\W_\d]+|\d+")
_HUMP = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[^\W\d_A-Za-z]+|\d+")

_STOPWORD_TEXT = """\
    a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing done down during each
    else etc few for from further get got had has have having he her here hers him his how
    i if in into is it its itself just let like me more most my no nor not now of off on once
    only or other our ours out over own same she should so some such than that the their them
    then there these they this those through to too under until up us very via was we were what
    when where which while who whom why will with would you your yours don doesn didn isn aren
    wasn weren won shouldn couldn wouldn"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_HEDGES = frozenset(("kind", "kinds", "sort", "sorts", "type", "types"))  # before "of"

ABBREVIATIONS: dict[str, str] = {
    "db": "database",
    "repo": "repository",
    "cfg": "configuration",
    "conf": "configuration",
    "config": "configuration",
    "auth": "authentication",
    "env": "environment",
    "k8s": "kubernetes",
    "js": "javascript",
    "ts": "typescript",
    "py": "python",
    "deps": "dependencies",
    "dep": "dependency",
    "msg": "message",
    "err": "error",
    "dir": "directory",
    "pkg": "package",
    "impl": "implementation",
    "perf": "performance",
    "doc": "documentation",
    "docs": "documentation",
    "prod": "production",
    "dev": "development",
    "tmp": "temporary",
    "pr": "pull request",
    "ci": "continuous integration",
}

_WARNING_TEXT = """\
    gotcha gotchas warning warn caveat pitfall careful beware never avoid
    trap footgun quirk broken breaks break bug buggy fails failure fail flaky hang hangs danger
    dangerous mistake wrong instead"""
WARNING_CUES = frozenset(_WARNING_TEXT.split())
_WARNING_PHRASES = ("don't", "do not", "must not", "watch out", "doesn't work", "does not work")


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The English Snowball stem of a lower-case word (:mod:`memd.memory.porter2`); a word
    with a digit or other non-letter is kept as it is."""
    return porter2.stem(word) if word.isalpha() else word


def split_identifier(word: str) -> list[str]:
    """``parseHTTPHeader_v2`` -> ``["parse", "HTTP", "Header", "v", "2"]`` (case kept)."""
    parts: list[str] = []
    for piece in _SEPARATORS.split(word):
        parts.extend(_HUMP.findall(piece))
    return parts


@lru_cache(maxsize=8192)
def analyze(text: str) -> tuple[str, ...]:
    """Stemmed search terms of ``text``, in order, with repeats (see the module docstring)."""
    return tuple(term for word in _words(text) for term in word)


@lru_cache(maxsize=1024)
def query_words(query: str) -> tuple[tuple[str, ...], ...]:
    """The terms of ``query`` word by word (:func:`analyze`'s, grouped by the word they come
    from: ``useEffect`` gives one group of ``useeffect``, ``use``, ``effect``), each term in
    its first word only, words without terms left out."""
    seen: set[str] = set()
    grouped: list[tuple[str, ...]] = []
    for word in _words(query):
        fresh = tuple(dict.fromkeys(t for t in word if t not in seen))
        if fresh:
            seen.update(fresh)
            grouped.append(fresh)
    return tuple(grouped)


def _words(text: str) -> list[tuple[str, ...]]:
    words = _WORD.findall(text)
    return [
        _word_terms(word)
        for at, word in enumerate(words)
        # "what kind of music": the topic is the word after "of"
        if not (word.lower() in _HEDGES and at + 1 < len(words) and words[at + 1].lower() == "of")
    ]


@lru_cache(maxsize=65536)
def _word_terms(word: str) -> tuple[str, ...]:
    parts = [p.lower() for p in split_identifier(word)]
    terms: list[str] = []
    if len(parts) > 1:
        _add(terms, "".join(parts))
    for part in parts:
        _add(terms, part)
    return tuple(terms)


def _add(terms: list[str], token: str) -> None:
    if token.isdigit():
        token = token.lstrip("0") or "0"  # "04" and "4" meet; "4" is a term (a date, a count)
    elif len(token) < 2 or token in STOPWORDS:
        return
    terms.append(stem(token))
    long_form = ABBREVIATIONS.get(token)
    if long_form is not None:
        terms.extend(stem(w) for w in long_form.split())


_CALENDAR_TEXT = """\
    january february march april may june july august september october november december
    monday tuesday wednesday thursday friday saturday sunday"""
CALENDAR = frozenset(stem(word) for word in _CALENDAR_TEXT.split())  # capitalised, not names


@lru_cache(maxsize=1024)
def entity_terms(query: str) -> frozenset[str]:
    """Terms of the names in ``query``: capitalised words that do not start a sentence
    ("What did Caroline paint?" -> ``carolin``). Stopwords are not names."""
    found: set[str] = set()
    for match in re.finditer(r"\b[A-Z][a-z]+\b", query):
        before = query[: match.start()].rstrip()
        if not before or before[-1] in ".!?:\n":
            continue
        found.update(_word_terms(match.group()))
    return frozenset(found)


def terms_of(query: str) -> dict[str, float]:
    """Query terms with their weights (each distinct term counts once)."""
    return dict.fromkeys(analyze(query), 1.0)


def mentions_warning(text: str, *, strong_only: bool = False) -> bool:
    """Whether ``text`` reads like a warning or gotcha rather than plain usage notes.

    ``strong_only`` looks only for explicit cues (warning, gotcha, never, do not…), for long
    texts such as a body where a word like "bug" is often just a topic.
    """
    lowered = text.lower()
    if any(phrase in lowered for phrase in _WARNING_PHRASES):
        return True
    cues = _STRONG_STEMS if strong_only else _WARNING_STEMS
    return any(stem(word) in cues for word in _PART.findall(lowered))


_WARNING_STEMS = frozenset(stem(word) for word in WARNING_CUES)
_STRONG_STEMS = frozenset(
    stem(word) for word in ("gotcha", "warning", "caveat", "pitfall", "beware", "never", "footgun")
)
