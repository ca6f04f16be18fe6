"""The English Snowball stemmer (Porter2), in pure Python: the ranker's stemmer (issue 27).

Snowball conflates more word forms than a hand-made suffix stripper and does so
consistently: "vacation", "vacations" and "vacationed" meet, as do "organize" and
"organization". On LoCoMo (``bench/recall_quality.py``) it raised R@5 on both halves; the
compiled ``PyStemmer`` gives the same stems but would be a runtime dependency with a C
extension, for a function that costs microseconds a word and is cached. Tested word for word
against the Snowball reference output (``tests/test_memory_porter2.py``).

The algorithm is Martin Porter's "English (Porter2) stemming algorithm",
https://snowballstem.org/algorithms/english/stemmer.html. Input: one lower-case word.
"""

from __future__ import annotations

_VOWELS = frozenset("aeiouy")
_DOUBLES = ("bb", "dd", "ff", "gg", "mm", "nn", "pp", "rr", "tt")
_LI_ENDINGS = frozenset("cdeghkmnrt")
_R1_PREFIXES = ("arsen", "commun", "emerg", "gener", "inter", "later", "organ", "past", "univers")
_KEEP_EED = frozenset(("succ", "proc", "exc"))  # succeed, proceed, exceed
_KEEP_ING = frozenset(("even", "cann", "inn", "earr", "herr", "out"))  # evening, canning...

_EXCEPTIONS = {
    "skis": "ski",
    "skies": "sky",
    "idly": "idl",
    "gently": "gentl",
    "ugly": "ugli",
    "early": "earli",
    "only": "onli",
    "singly": "singl",
    "sky": "sky",
    "news": "news",
    "howe": "howe",
    "atlas": "atlas",
    "cosmos": "cosmos",
    "bias": "bias",
    "andes": "andes",
}

_STEP2: tuple[tuple[str, str], ...] = (
    ("ization", "ize"),
    ("ational", "ate"),
    ("ogist", "og"),
    ("fulness", "ful"),
    ("ousness", "ous"),
    ("iveness", "ive"),
    ("tional", "tion"),
    ("biliti", "ble"),
    ("lessli", "less"),
    ("entli", "ent"),
    ("ation", "ate"),
    ("alism", "al"),
    ("aliti", "al"),
    ("ousli", "ous"),
    ("iviti", "ive"),
    ("fulli", "ful"),
    ("enci", "ence"),
    ("anci", "ance"),
    ("abli", "able"),
    ("izer", "ize"),
    ("ator", "ate"),
    ("alli", "al"),
    ("bli", "ble"),
    ("ogi", "og"),
    ("li", ""),
)
_STEP3: tuple[tuple[str, str], ...] = (
    ("ational", "ate"),
    ("tional", "tion"),
    ("alize", "al"),
    ("icate", "ic"),
    ("iciti", "ic"),
    ("ative", ""),
    ("ical", "ic"),
    ("ness", ""),
    ("ful", ""),
)
_STEP4 = (
    "ement",
    "ance",
    "ence",
    "able",
    "ible",
    "ment",
    "ant",
    "ent",
    "ism",
    "ate",
    "iti",
    "ous",
    "ive",
    "ize",
    "ion",
    "al",
    "er",
    "ic",
)


def stem(word: str) -> str:
    """The Porter2 stem of ``word`` (lower case; words of one or two letters are kept)."""
    if len(word) <= 2:
        return word
    word = word.removeprefix("'")
    known = _EXCEPTIONS.get(word)
    if known is not None:
        return known
    word = _mark_ys(word)
    r1, r2 = _regions(word)
    word = _step1c(_step1b(_step1a(_step0(word)), r1))
    word = _step5(_step4(_step3(_step2(word, r1), r1, r2), r2), r1, r2)
    return word.replace("Y", "y")


def _mark_ys(word: str) -> str:
    """An initial y, and a y after a vowel, are consonants: written ``Y``."""
    chars = list(word)
    for at, char in enumerate(chars):
        if char == "y" and (at == 0 or chars[at - 1] in _VOWELS):
            chars[at] = "Y"
    return "".join(chars)


def _regions(word: str) -> tuple[int, int]:
    """Where R1 and R2 start (the length of the word when empty)."""
    prefix = next((p for p in _R1_PREFIXES if word.startswith(p)), None)
    r1 = len(prefix) if prefix is not None else _region_after(word, 0)
    return r1, _region_after(word, r1)


def _region_after(word: str, start: int) -> int:
    """The index after the first non-vowel that follows a vowel, from ``start``."""
    for at in range(start + 1, len(word)):
        if word[at] not in _VOWELS and word[at - 1] in _VOWELS:
            return at + 1
    return len(word)


def _ends_short(word: str) -> bool:
    """Whether ``word`` ends in a short syllable: a non-vowel, a vowel and a non-vowel other
    than w, x or Y; or a vowel and a non-vowel making the whole word; or "past"."""
    if len(word) == 2:
        return word[0] in _VOWELS and word[1] not in _VOWELS
    if word.endswith("past"):
        return True
    if len(word) < 3:
        return False
    a, b, c = word[-3], word[-2], word[-1]
    return a not in _VOWELS and b in _VOWELS and c not in _VOWELS and c not in "wxY"


def _has_vowel(text: str) -> bool:
    return any(char in _VOWELS for char in text)


def _step0(word: str) -> str:
    for suffix in ("'s'", "'s", "'"):
        if word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _step1a(word: str) -> str:
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith(("ied", "ies")):
        return word[:-2] if len(word) > 4 else word[:-1]
    if word.endswith(("us", "ss")):
        return word
    if word.endswith("s") and _has_vowel(word[:-2]):
        return word[:-1]
    return word


def _step1b(word: str, r1: int) -> str:
    for suffix in ("eedly", "eed"):
        if word.endswith(suffix):
            rest = word[: -len(suffix)]
            if rest in _KEEP_EED or len(rest) < r1:
                return word
            return rest + "ee"
    if word.endswith("ing"):
        rest = word[:-3]
        if len(rest) == 2 and rest[1] == "y" and rest[0] not in _VOWELS:
            return rest[0] + "ie"  # dying, lying, tying
        if rest in _KEEP_ING:
            return word
    for suffix in ("ingly", "edly", "ing", "ed"):
        if word.endswith(suffix):
            rest = word[: -len(suffix)]
            return _after_1b(rest, r1) if _has_vowel(rest) else word
    return word


def _after_1b(word: str, r1: int) -> str:
    if word.endswith(("at", "bl", "iz")):
        return word + "e"
    if word.endswith(_DOUBLES):
        return word if len(word) == 3 and word[0] in "aeo" else word[:-1]  # add, egg, odd
    if r1 == len(word) and _ends_short(word):
        return word + "e"
    return word


def _step1c(word: str) -> str:
    if len(word) > 2 and word[-1] in "yY" and word[-2] not in _VOWELS:
        return word[:-1] + "i"
    return word


def _step2(word: str, r1: int) -> str:
    for suffix, replacement in _STEP2:
        if word.endswith(suffix):
            start = len(word) - len(suffix)
            if start < r1:
                return word
            if suffix == "ogi" and word[start - 1] != "l":
                return word
            if suffix == "li" and word[start - 1] not in _LI_ENDINGS:
                return word
            return word[:start] + replacement
    return word


def _step3(word: str, r1: int, r2: int) -> str:
    for suffix, replacement in _STEP3:
        if word.endswith(suffix):
            start = len(word) - len(suffix)
            if start < r1 or (suffix == "ative" and start < r2):
                return word
            return word[:start] + replacement
    return word


def _step4(word: str, r2: int) -> str:
    for suffix in _STEP4:
        if word.endswith(suffix):
            start = len(word) - len(suffix)
            if start < r2:
                return word
            if suffix == "ion" and word[start - 1 : start] not in ("s", "t"):
                return word
            return word[:start]
    return word


def _step5(word: str, r1: int, r2: int) -> str:
    last = len(word) - 1
    if word.endswith("e"):
        if last >= r2 or (last >= r1 and not _ends_short(word[:-1])):
            return word[:-1]
    elif word.endswith("ll") and last >= r2:
        return word[:-1]
    return word
