"""Build ``memd/memory/related.txt``, the related-words table the lexical ranker expands
queries with (:mod:`memd.memory.related`), from a static embedding model, offline.

    python3 bench/thesaurus_build.py MODEL_DIR [--k 5] [--floor 0.5] [--out PATH]

``MODEL_DIR`` is a model2vec static model (``tokenizer.json`` with a WordPiece vocabulary,
``model.safetensors`` with one ``embeddings`` row per token): the table shipped is built from
sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0) distilled by model2vec to 256 dims
(BENCHMARKS.md, "the semantic stage measured", says how). Needs numpy and safetensors (the
``semantic`` extra); memd itself reads the table with neither.

The words are the vocabulary's whole words (alphabetic tokens without ``##``, at least three
letters, not stopwords), each mapped to memd's term (:func:`memd.memory.terms.analyze`, the
Snowball stem); the words of one term pool their unit vectors. For each term, the ``k``
others nearest by cosine and at least ``floor`` alike are kept, nearest first, each with its
cosine in hundredths (the ranker weighs a related term by it). The output is deterministic
for one model: terms sorted by code point, ties by term.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "client")]

from memd.memory.related import HEADER_MARK  # noqa: E402
from memd.memory.terms import STOPWORDS, analyze  # noqa: E402

OUT = REPO / "memd" / "memory" / "related.txt"
BLOCK = 2048  # rows of the cosine matrix computed at once


def whole_words(model: Path) -> dict[str, int]:
    """Word -> token id: the vocabulary's whole words (see the module docstring)."""
    tokenizer = json.loads((model / "tokenizer.json").read_text(encoding="utf-8"))
    vocab: dict[str, int] = tokenizer["model"]["vocab"]
    return {
        word: number
        for word, number in vocab.items()
        if word.isascii() and word.isalpha() and len(word) >= 3 and word not in STOPWORDS
    }


def term_vectors(model: Path) -> tuple[list[str], npt.NDArray[np.float32]]:
    """The terms, sorted, and one unit vector each (the mean of its words' unit vectors)."""
    from safetensors.numpy import load_file

    matrix = load_file(str(model / "model.safetensors"))["embeddings"].astype(np.float32)
    words_of: dict[str, list[int]] = {}
    for word, number in whole_words(model).items():
        terms = analyze(word)
        if len(terms) == 1 and terms[0].isalpha():
            words_of.setdefault(terms[0], []).append(number)
    names = sorted(words_of)
    rows = []
    for term in names:
        vectors = matrix[words_of[term]]
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)
        rows.append(vectors.mean(axis=0))
    pooled = np.stack(rows)
    pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-9)
    return names, pooled


def neighbours(
    names: list[str], vectors: npt.NDArray[np.float32], k: int, floor: float
) -> dict[str, list[tuple[str, int]]]:
    """Each term's ``k`` nearest others at least ``floor`` alike, nearest first, with the
    cosine in hundredths (at most 99, so two digits)."""
    table: dict[str, list[tuple[str, int]]] = {}
    for start in range(0, len(names), BLOCK):
        cosines = vectors[start : start + BLOCK] @ vectors.T
        for row, similar in enumerate(cosines):
            own = start + row
            similar[own] = -1.0
            best = np.argpartition(-similar, k)[: k + 1]
            order = sorted(best, key=lambda n: (-float(similar[n]), names[n]))
            kept = [
                (names[n], min(99, round(float(similar[n]) * 100)))
                for n in order
                if similar[n] >= floor
            ][:k]
            if kept:
                table[names[own]] = kept
    return table


def write(
    table: dict[str, list[tuple[str, int]]], out: Path, model: Path, k: int, floor: float
) -> None:
    header = [
        f"{HEADER_MARK} memd related-words table: term, then its nearest terms, nearest first,",
        "# each followed by the cosine in hundredths.",
        "# Derived from sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), distilled by",
        "# model2vec to static embeddings; the cosines of memd's terms (Snowball stems of the",
        "# vocabulary's whole words) in that space.",
        f"# Regenerate: python3 bench/thesaurus_build.py MODEL_DIR --k {k} --floor {floor}",
        f"# (built from {model.name}: {len(table)} terms)",
    ]
    lines = [
        f"{term} {' '.join(f'{near} {alike:02d}' for near, alike in found)}"
        for term, found in sorted(table.items())
    ]
    out.write_text("\n".join(header + lines) + "\n", encoding="ascii")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--floor", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    names, vectors = term_vectors(args.model)
    table = neighbours(names, vectors, args.k, args.floor)
    write(table, args.out, args.model, args.k, args.floor)
    print(f"{len(names)} terms, {len(table)} with neighbours, {args.out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
