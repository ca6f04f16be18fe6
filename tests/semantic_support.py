"""A tiny model2vec model the semantic tests build (issue 27): nothing is downloaded.

The folder has what ``model2vec`` saves (``model.safetensors`` with an ``embeddings`` matrix,
``tokenizer.json``, ``config.json``); the tokenizer is a word-level one built with the
``tokenizers`` library from a small vocabulary, and related words get related vectors: each
topic has a direction of its own, each word of it that direction plus a little noise. So
"what pet" and "guinea pig" are alike, "coconut milk" and "ingredients" are alike, and the
two topics are not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip(
    "model2vec", reason="the semantic extra is not installed: pip install -e '.[semantic]'"
)

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

TOPICS: dict[str, tuple[str, ...]] = {
    "animals": ("pet", "pets", "guinea", "pig", "dog", "cat", "animal", "vet"),
    "cooking": ("ingredients", "coconut", "milk", "vanilla", "recipe", "cook", "baking"),
    "databases": ("postgres", "database", "sql", "mock", "integration"),
}
OTHER = ("the", "what", "does", "she", "have", "a", "which", "use", "i", "should", "her")
DIM = 16


def vocabulary() -> dict[str, int]:
    words = ["[UNK]", *(w for ws in TOPICS.values() for w in ws), *OTHER]
    return {w: i for i, w in enumerate(words)}


def build_model(folder: Path, *, seed: int = 0) -> Path:
    """Write the tiny model into ``folder`` (made if missing); returns it."""
    vocab = vocabulary()
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    rng = np.random.default_rng(seed)
    embeddings = np.zeros((len(vocab), DIM), dtype=np.float32)
    for axis, words in enumerate(TOPICS.values()):
        for word in words:
            embeddings[vocab[word], axis] = 1.0
            embeddings[vocab[word]] += rng.normal(0.0, 0.1, DIM).astype(np.float32)
    for word in OTHER:  # function words: small and pointing nowhere in particular
        embeddings[vocab[word]] = rng.normal(0.0, 0.02, DIM).astype(np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({"embeddings": embeddings}, str(folder / "model.safetensors"))
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "config.json").write_text(json.dumps({"normalize": True, "model_name": "tiny"}))
    return folder


def memory_file(folder: Path, name: str, description: str, body: str) -> Path:
    """A memory topic file as Claude Code writes one."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.md"
    path.write_text(f"---\nname: {name}\ndescription: {description}\ntype: user\n---\n\n{body}\n")
    return path
