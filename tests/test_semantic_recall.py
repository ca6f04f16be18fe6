"""The optional semantic recall stage (issue 27) through the memory service, on a tiny model
the tests build (tests/semantic_support.py): off by default; on, a memory that shares no word
with the prompt but means the same is recalled; a broken or hostile model folder is a state
in ``status`` and recall still answers lexically. No fakes of memd's code: the real service,
the real library, real files."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip(
    "model2vec", reason="the semantic extra is not installed: pip install -e '.[semantic]'"
)

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file, save_file

from memd.config import Config, MemoryConfig, SemanticConfig
from memd.llm.backends import CLAUDE
from memd.llm.client import LLM, Disabled
from memd.memory.reads import RecallAnswer
from memd.memory.scan import scan_memories
from memd.memory.semantic import OFF, SemanticStage, fused, model_folder
from memd.memory.semantic_model import ModelProblem, load_encoder
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_replies import When
from tests.semantic_support import build_model, memory_file
from tests.test_memory_service import World

pytestmark = pytest.mark.anyio

PET_QUERY = "which pet"


def _config(**semantic: Any) -> Config:
    memory = MemoryConfig(
        extract_beside_claude_code=True, beside_wait_s=0, semantic=SemanticConfig(**semantic)
    )
    return Config(memory=memory)


def _world(tmp_path: Path, config: Config) -> World:
    world = World(tmp_path, Disabled("no API key"), config=config)
    memory_file(world.memory, "guinea", "Keeps a guinea pig called Biscuit", "Biscuit is old.")
    memory_file(world.memory, "baking", "Baking recipe with coconut milk", "Add vanilla.")
    memory_file(world.memory, "testing", "Never mock Postgres in integration tests", "Use sql.")
    return world


async def _settled(world: World, want: int = 3) -> dict[str, Any]:
    """Recall once (recall shows the stage the memories), then wait until the worker has
    embedded ``want`` of them; the stage's status."""
    await world.service.recall("anything", str(world.cwd))
    with anyio.fail_after(30):
        while True:
            stats = world.service.semantic.statistics()
            if stats["on"] and stats["embedded_memories"] >= want:
                return stats
            await anyio.sleep(0.01)


async def _off_reason(world: World, text: str) -> str:
    """Wait until the stage says it is off for a reason holding ``text``."""
    await world.service.recall("anything", str(world.cwd))
    with anyio.fail_after(30):
        while True:
            stats = world.service.semantic.statistics()
            if not stats["on"] and text in (stats.get("off_reason") or ""):
                return str(stats["off_reason"])
            await anyio.sleep(0.01)


def _recalled(answer: RecallAnswer) -> list[str]:
    return [m.relative for m in answer.memories]


async def test_the_stage_is_off_by_default_and_recall_stays_lexical(tmp_path: Path) -> None:
    assert Config().memory.semantic.enabled is False
    build_model(tmp_path / "model")
    world = _world(tmp_path, _config(model=str(tmp_path / "model")))
    async with anyio.create_task_group() as tg:
        await tg.start(world.service.run)
        answer = await world.service.recall(PET_QUERY, str(world.cwd))
        await anyio.sleep(0.2)  # a worker that wrongly started would have loaded by now
        assert _recalled(answer) == []  # no shared word: the lexical ranker cannot find it
        stages = world.service.statistics()["recall_stages"]
        assert stages["semantic"] == {
            "on": False,
            "model": str(tmp_path / "model"),
            "off_reason": "memory.semantic.enabled is false",
        }
        assert world.service.semantic.embedded == 0
        tg.cancel_scope.cancel()


async def test_on_a_memory_with_a_related_meaning_and_no_shared_word_is_recalled(
    tmp_path: Path,
) -> None:
    world = _world(tmp_path, _config(enabled=True, model=str(build_model(tmp_path / "m"))))
    async with anyio.create_task_group() as tg:
        await tg.start(world.service.run)
        stats = await _settled(world)
        assert stats["dims"] == 16 and stats["embedded_dirs"] == 1
        answer = await world.service.recall(PET_QUERY, str(world.cwd))
        assert _recalled(answer) == ["guinea.md"]
        assert answer.result.method == "lexical"  # no model: the fused ranking answered
        # What the session was shown is not offered again, by meaning either.
        world.service.mark_surfaced("s1", [str(world.memory / "guinea.md")])
        assert _recalled(await world.service.recall(PET_QUERY, str(world.cwd), "s1")) == []
        # A lexical match keeps its place: the words still decide where they meet.
        answer = await world.service.recall("mock postgres", str(world.cwd))
        assert _recalled(answer)[0] == "testing.md"
        stages = world.service.statistics()["recall_stages"]
        assert stages["semantic"]["on"] is True and stages["lexical"]["on"] is True
        tg.cancel_scope.cancel()


async def test_a_changed_memory_is_embedded_again_and_a_gone_one_dropped(tmp_path: Path) -> None:
    world = _world(tmp_path, _config(enabled=True, model=str(build_model(tmp_path / "m"))))
    async with anyio.create_task_group() as tg:
        await tg.start(world.service.run)
        await _settled(world)
        embedded = world.service.semantic.embedded
        path = world.memory / "baking.md"
        memory_file(world.memory, "baking", "Our dog goes to the vet on Monday", "Walks.")
        os.utime(path, (1e9, 1e9 + 5))  # another mtime, whatever the clock's granularity
        (world.memory / "guinea.md").unlink()
        await _settled(world, want=2)
        with anyio.fail_after(30):
            while world.service.semantic.embedded < embedded + 1:
                await world.service.recall("anything", str(world.cwd))
                await anyio.sleep(0.01)
        assert world.service.semantic.statistics()["embedded_memories"] == 2
        answer = await world.service.recall(PET_QUERY, str(world.cwd))
        assert _recalled(answer) == ["baking.md"]  # now about a dog; the guinea pig is gone
        assert world.service.semantic.embedded == embedded + 1  # the unchanged one was kept
        tg.cancel_scope.cancel()


async def test_a_recall_does_not_wait_behind_an_encode_that_does_not_end(tmp_path: Path) -> None:
    """An encode stuck on a text (a hostile tokenizer's pattern) holds the model: the recalls
    meanwhile answer with the words alone, at once, and the stage is used again after."""
    world = _world(tmp_path, _config(enabled=True, model=str(build_model(tmp_path / "m"))))
    async with anyio.create_task_group() as tg:
        await tg.start(world.service.run)
        await _settled(world)
        model = world.service.semantic._model
        assert model is not None and model.encoder is not None
        held = model.encoder._lock  # what a stuck encode holds
        held.acquire()
        try:
            with anyio.fail_after(20):
                for _ in range(5):
                    assert _recalled(await world.service.recall(PET_QUERY, str(world.cwd))) == []
                answer = await world.service.recall("mock postgres", str(world.cwd))
            assert _recalled(answer) == ["testing.md"]
        finally:
            held.release()
        assert _recalled(await world.service.recall(PET_QUERY, str(world.cwd))) == ["guinea.md"]
        assert world.service.semantic.statistics()["on"] is True
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("on", [False, True])
async def test_the_models_manifest_holds_an_old_memory_found_by_meaning(
    tmp_path: Path, api: LoopbackAPI, llm: LLM, on: bool
) -> None:
    """The model is shown the fused ranking's best and the newest few (R-M4's cap of 12
    here): an old memory that shares no word with the prompt is in its manifest only with
    the stage on, and then the model can choose it."""
    model = str(build_model(tmp_path / "m"))
    config = _config(enabled=on, model=model)
    memory = replace(config.memory, scan_max_files=12, recall_model_budget_s=30.0)
    config = replace(config, memory=replace(memory, recall_timeout_s=60.0))
    world = _world(tmp_path, config)
    world.llm = llm
    os.utime(world.memory / "guinea.md", (1e9, 1e9))
    for n in range(20):
        memory_file(world.memory, f"db{n}", f"Postgres note {n}", "Use sql in integration.")
    api.add_rule(When(model=CLAUDE["recall"]), replies.text('["guinea.md"]'))
    async with anyio.create_task_group() as tg:
        await tg.start(world.service.run)
        if on:
            await _settled(world, want=23)
        answer = await world.service.recall(PET_QUERY, str(world.cwd))
        prompt = str(api.requests[-1].body["messages"][0]["content"])
        assert ("guinea.md" in prompt) is on
        assert _recalled(answer) == (["guinea.md"] if on else [])
        tg.cancel_scope.cancel()


@pytest.mark.parametrize(("floor", "found"), [(0.99, False), (0.5, True)])
async def test_min_similarity_is_how_alike_a_memory_must_be(
    tmp_path: Path, floor: float, found: bool
) -> None:
    model = str(build_model(tmp_path / "m"))
    world = _world(tmp_path, _config(enabled=True, model=model, min_similarity=floor))
    async with anyio.create_task_group() as tg:
        await tg.start(world.service.run)
        await _settled(world)
        answer = await world.service.recall(PET_QUERY, str(world.cwd))
        assert _recalled(answer) == (["guinea.md"] if found else [])
        tg.cancel_scope.cancel()


async def test_a_broken_model_shows_in_status_and_recall_answers_lexically(
    tmp_path: Path,
) -> None:
    folder = build_model(tmp_path / "m")
    tensors = folder / "model.safetensors"
    tensors.write_bytes(tensors.read_bytes()[:100])  # truncated
    world = _world(tmp_path, _config(enabled=True, model=str(folder)))
    async with anyio.create_task_group() as tg:
        await tg.start(world.service.run)
        why = await _off_reason(world, "not a readable safetensors file")
        assert str(tensors) in why
        answer = await world.service.recall("mock postgres", str(world.cwd))
        assert _recalled(answer) == ["testing.md"] and answer.result.method == "lexical"
        # Fixed in place (the user fetched it again): the stage comes on without a restart.
        build_model(folder)
        await _settled(world)
        assert _recalled(await world.service.recall(PET_QUERY, str(world.cwd))) == ["guinea.md"]
        tg.cancel_scope.cancel()


async def test_a_config_reload_turns_the_stage_on_and_off(tmp_path: Path) -> None:
    model = str(build_model(tmp_path / "m"))
    world = _world(tmp_path, _config(model=model))
    async with anyio.create_task_group() as tg:
        await tg.start(world.service.run)
        assert _recalled(await world.service.recall(PET_QUERY, str(world.cwd))) == []
        world.service.reconfigure(_config(enabled=True, model=model))
        await _settled(world)
        assert _recalled(await world.service.recall(PET_QUERY, str(world.cwd))) == ["guinea.md"]
        world.service.reconfigure(_config(model=model))
        assert _recalled(await world.service.recall(PET_QUERY, str(world.cwd))) == []
        assert world.service.semantic.statistics()["off_reason"] == OFF
        tg.cancel_scope.cancel()


# -- the model folder ------------------------------------------------------------------------


def test_a_model_id_is_a_folder_under_the_state_dir_and_nothing_else_is_taken(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    assert model_folder("minishlab/potion-base-8M", state) == (
        state / "models" / "minishlab--potion-base-8M"
    )
    assert model_folder("/opt/models/tiny", state) == Path("/opt/models/tiny")
    for bad in ("potion", "../x/y", "a/../b", "a/b/c", "~/models", "", "a/.."):
        with pytest.raises(ValueError, match="neither an absolute folder nor a model id"):
            model_folder(bad, state)


def _hostile(folder: Path, how: str) -> None:
    tensors, tokenizer = folder / "model.safetensors", folder / "tokenizer.json"
    if how == "fifo":
        tensors.unlink()
        os.mkfifo(tensors)  # a reader that opened it blocking would hang here
    elif how == "link":
        target = folder.parent / "elsewhere.safetensors"
        tensors.rename(target)
        tensors.symlink_to(target)
    elif how == "tokenizer":
        tokenizer.write_bytes(b'{"model": {"type": "WordLevel", "vocab": 7}}')
    elif how == "not utf-8":
        tokenizer.write_bytes(b"\xff\xfe" * 64)
    elif how == "missing":
        (folder / "config.json").unlink()
    elif how == "no embeddings":
        save_file({"other": np.zeros((3, 3), dtype=np.float32)}, str(tensors))
    elif how == "too few rows":
        save_file({"embeddings": np.zeros((3, 16), dtype=np.float32)}, str(tensors))
    elif how == "mapping out of range":
        loaded = load_file(str(tensors))
        rows = len(loaded["embeddings"])
        mapping = np.full(rows, rows + 5, dtype=np.int64)
        save_file({"embeddings": loaded["embeddings"], "mapping": mapping}, str(tensors))


@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("fifo", "not a regular file"),
        ("link", "symbolic link"),
        ("tokenizer", "is not a tokenizer"),
        ("not utf-8", "is not a tokenizer"),
        ("missing", "config.json is missing"),
        ("no embeddings", "no 2-D 'embeddings' tensor"),
        ("too few rows", "3 vectors for a vocabulary of"),
        ("mapping out of range", "'mapping' points past the"),
    ],
)
def test_a_hostile_model_folder_is_refused_with_a_reason(
    tmp_path: Path, how: str, says: str
) -> None:
    folder = build_model(tmp_path / "m")
    _hostile(folder, how)
    with pytest.raises(ModelProblem, match=says):
        load_encoder(folder)


@settings(max_examples=60)
@given(cut=st.integers(min_value=0, max_value=4096), flips=st.binary(max_size=8))
def test_any_damage_to_the_tensor_file_loads_or_is_a_model_problem(
    tmp_path_factory: pytest.TempPathFactory, cut: int, flips: bytes
) -> None:
    folder = build_model(tmp_path_factory.mktemp("m"))
    tensors = folder / "model.safetensors"
    data = bytearray(tensors.read_bytes())
    for at, byte in enumerate(flips):  # overwrite bytes spread over the header and data
        data[(at * 97 + cut) % len(data)] = byte
    tensors.write_bytes(bytes(data[: max(cut, len(data) // 2)]))
    try:
        encoder = load_encoder(folder)
    except ModelProblem:
        return
    vectors = encoder.encode(["which pet", "guinea pig"])
    assert vectors.shape == (2, encoder.dim)


async def test_nan_vectors_in_the_model_never_make_a_memory_match(tmp_path: Path) -> None:
    folder = build_model(tmp_path / "m")
    tensors = folder / "model.safetensors"
    loaded = load_file(str(tensors))
    save_file({"embeddings": np.full_like(loaded["embeddings"], np.nan)}, str(tensors))
    world = _world(tmp_path, _config(enabled=True, model=str(folder)))
    async with anyio.create_task_group() as tg:
        await tg.start(world.service.run)
        await _settled(world)
        assert _recalled(await world.service.recall(PET_QUERY, str(world.cwd))) == []
        answer = await world.service.recall("mock postgres", str(world.cwd))
        assert _recalled(answer) == ["testing.md"]
        tg.cancel_scope.cancel()


def test_fusion_keeps_the_lexical_order_and_adds_the_semantic_hits(tmp_path: Path) -> None:
    world = _world(tmp_path, _config())
    headers = {h.relative: h for h in scan_memories(world.memory, max_files=None)}
    lexical = [(headers["testing.md"], 8.0), (headers["baking.md"], 2.0)]
    assert fused(lexical, [], 0.35) == [(headers["testing.md"], 1.0), (headers["baking.md"], 0.25)]
    hits = [(headers["guinea.md"], 0.9), (headers["baking.md"], 0.5)]
    order = [(h.relative, round(s, 3)) for h, s in fused(lexical, hits, 0.35)]
    assert order == [("testing.md", 1.0), ("guinea.md", 0.846), ("baking.md", 0.481)]


def test_a_memory_alike_by_meaning_gets_its_share_however_many_are_more_alike(
    tmp_path: Path,
) -> None:
    """Each memory at least min_similarity alike adds its share, not only the few most alike:
    a memory that the words rank second and that is also alike by meaning comes first, ahead
    of 30 that are more alike but share no word with the prompt."""
    config = _config(enabled=True, model=str(build_model(tmp_path / "m")), min_similarity=0.5)
    stage = SemanticStage(lambda: config.memory, tmp_path)
    folder = tmp_path / "memory"
    for n in range(30):
        memory_file(folder, f"animal{n}", "dog cat vet", "guinea pig")
    memory_file(folder, "notes", "dog pet postgres", "")  # cosine ~0.9 with "which pet"
    memory_file(folder, "words", "postgres database sql mock", "")  # the words' best
    headers = scan_memories(folder, max_files=None)
    stage.embed(folder, headers)
    by_key = {h.relative: h for h in headers}
    lexical = [(by_key["words.md"], 10.0), (by_key["notes.md"], 7.0)]
    order = [h.relative for h, _ in stage.fuse(folder, PET_QUERY, headers, lexical, limit=200)]
    assert order[:2] == ["notes.md", "words.md"]
    assert len(order) == 32  # the 30 alike by meaning too, within the limit


def test_the_stage_never_fuses_without_a_model(tmp_path: Path) -> None:
    config = _config(enabled=True, model=str(tmp_path / "none"))
    stage = SemanticStage(lambda: config.memory, tmp_path)
    stage.work()
    assert "no model folder at" in stage.statistics()["off_reason"]
    assert "memdctl fetch-model" in stage.statistics()["off_reason"]
    assert stage.fuse(tmp_path, PET_QUERY, [], [], limit=5) == []


def test_the_vectors_stay_within_their_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every dir's vectors together stay within MAX_VECTOR_BYTES (here room for 3 vectors of
    16 dims): the dir used least recently gives way, and a dir alone keeps its newest."""
    monkeypatch.setattr("memd.memory.semantic.MAX_VECTOR_BYTES", 3 * 16 * 4)
    config = _config(enabled=True, model=str(build_model(tmp_path / "m")))
    stage = SemanticStage(lambda: config.memory, tmp_path)
    dirs = [tmp_path / "a", tmp_path / "b"]
    for at, folder in enumerate(dirs):
        for n in range(3 + 2 * at):
            path = memory_file(folder, f"pet{n}", "a guinea pig", "the vet")
            os.utime(path, (1e9 + n, 1e9 + n))
    stage.embed(dirs[0], scan_memories(dirs[0], max_files=None))
    assert stage.statistics()["embedded_memories"] == 3
    newest = scan_memories(dirs[1], max_files=None)  # 5, newest first
    stage.embed(dirs[1], newest)
    stats = stage.statistics()
    assert (stats["embedded_dirs"], stats["embedded_memories"]) == (1, 3)
    kept = stage.fuse(dirs[1], PET_QUERY, newest, [], limit=10)
    assert [h.relative for h, _ in kept] == ["pet4.md", "pet3.md", "pet2.md"]
