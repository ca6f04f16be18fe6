"""Per job, the right backend (issue 34): what is found, the plan, the routes, the probe."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from memd.config import load_config
from memd.config_llm import BackendConfig, LLMConfig, ModelsConfig
from memd.llm.client import Disabled
from memd.llm.local_probe import LocalServer, model_ids, probe, probe_all
from memd.llm.models import Found, Route, discover, open_models, plan, split_job_model


def NO_PROBE(addresses: list[str], timeout: float) -> list[LocalServer]:
    return []


def ollama(addresses: list[str], timeout: float) -> list[LocalServer]:
    return [LocalServer("http://127.0.0.1:11434/v1", "Ollama", ("qwen2.5-coder:7b", "llama3"))]


def test_the_defaults_pick_an_anthropic_key_first_then_openai_gemini_local() -> None:
    env = {"OPENAI_API_KEY": "o", "GEMINI_API_KEY": "g", "ANTHROPIC_API_KEY": "a"}
    for keys, expected in (
        (("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"), "anthropic"),
        (("OPENAI_API_KEY", "GEMINI_API_KEY"), "openai"),
        (("GEMINI_API_KEY",), "gemini"),
        ((), "local"),
    ):
        found = discover(LLMConfig(), {k: env[k] for k in keys}, ollama)
        assert plan(LLMConfig(), found).default == expected


def test_nothing_found_disables_every_job_saying_how_to_turn_one_on() -> None:
    models = open_models(LLMConfig(), {}, probe=NO_PROBE)
    assert not models.enabled
    assert models.reason is not None and "OPENAI_API_KEY" in models.reason
    assert "ollama serve" in models.reason
    status = models.status()
    assert set(status["turn_on"]) >= {"anthropic", "openai", "gemini", "local"}


def test_a_job_names_its_backend_and_a_model_with_colons_stays_whole() -> None:
    assert split_job_model("local:qwen2.5-coder:7b") == ("local", "qwen2.5-coder:7b")
    assert split_job_model("qwen2.5-coder:7b") == (None, "qwen2.5-coder:7b")
    assert split_job_model("anthropic:") == ("anthropic", "")
    config = LLMConfig(models=ModelsConfig(session_notes="local:llama3", dream="anthropic:"))
    found = {"anthropic": Found("anthropic", "key"), "local": Found("local", "Ollama", ("x",))}
    chosen = plan(config, found).choices
    notes, dream, recall = chosen["session_notes"], chosen["dream"], chosen["recall"]
    assert not isinstance(notes, str) and (notes.backend, notes.model) == ("local", "llama3")
    assert not isinstance(dream, str) and dream.model == "claude-sonnet-4-6"
    assert not isinstance(recall, str) and (recall.backend, recall.model) == (
        "anthropic",
        "claude-haiku-4-5",
    )
    assert "llm.models.session_notes names it" in notes.why


def test_a_local_server_serves_its_first_model_by_the_whole_answer_protocol() -> None:
    models = open_models(LLMConfig(), {}, probe=ollama)
    route = models.route("session_notes")
    assert isinstance(route, Route)
    assert (route.backend, route.model, route.protocol, route.priced) == (
        "local",
        "qwen2.5-coder:7b",
        "whole",
        False,
    )
    tools = open_models(LLMConfig(local=BackendConfig(protocol="tools")), {}, probe=ollama)
    assert isinstance(r := tools.route("memory_extract"), Route) and r.protocol == "tools"
    # per model: the big local model drives tools, the small one answers whole
    local = BackendConfig(tools_models=("qwen2.5-coder:32b",))
    jobs = ModelsConfig(session_notes="local:qwen2.5-coder:32b")
    mixed = open_models(LLMConfig(local=local, models=jobs), {}, probe=ollama)
    notes, extract = mixed.route("session_notes"), mixed.route("memory_extract")
    assert isinstance(notes, Route) and notes.protocol == "tools"
    assert isinstance(extract, Route) and extract.protocol == "whole"


def test_status_says_what_was_found_and_not_used() -> None:
    env = {"ANTHROPIC_API_KEY": "a", "GEMINI_API_KEY": "g"}
    models = open_models(LLMConfig(), env, probe=ollama)
    status = models.status()
    assert {j["backend"] for j in status["jobs"].values()} == {"anthropic"}
    assert set(status["found_unused"]) == {"gemini", "local"}
    assert "GEMINI_API_KEY is set" in status["found_unused"]["gemini"]
    assert "llm.provider: gemini" in status["found_unused"]["gemini"]  # the line to use it
    assert "openai" in status["turn_on"] and "anthropic" not in status["turn_on"]


def test_an_openai_compatible_server_on_this_machine_needs_no_key(tmp_path: Path) -> None:
    config = LLMConfig(provider="openai", base_url="http://127.0.0.1:9/v1", models=ModelsConfig())
    models = open_models(config, {}, probe=NO_PROBE)
    route = models.route("memory_extract")
    assert isinstance(route, Route) and route.backend == "openai" and not route.priced
    remote = open_models(LLMConfig(provider="openai"), {}, probe=NO_PROBE)
    off = remote.route("memory_extract")
    assert isinstance(off, Disabled) and "OPENAI_API_KEY" in off.reason


def test_the_provider_key_and_sections_load_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "llm:\n  provider: openai\n  base_url: http://127.0.0.1:11434/v1\n"
        "  models:\n    dream: 'anthropic:claude-opus-4-1'\n  local:\n    protocol: tools\n"
    )
    llm = load_config(config_file=str(path), env={"HOME": str(tmp_path)}).config.llm
    assert (llm.provider, llm.local.protocol, llm.models.dream) == (
        "openai",
        "tools",
        "anthropic:claude-opus-4-1",
    )


# -- the probe -------------------------------------------------------------------------------


@pytest.fixture
def model_server() -> Iterator[tuple[str, list[bytes]]]:
    answers: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = answers.pop(0) if answers else b"{}"
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", answers
    server.shutdown()
    server.server_close()


def test_the_probe_reads_the_models_a_server_lists(model_server: tuple[str, list[bytes]]) -> None:
    address, answers = model_server
    answers.append(json.dumps({"data": [{"id": "qwen2.5:7b"}, {"id": "x" * 500}, 7]}).encode())
    found = probe(address, 2.0)
    assert found is not None and found.models == ("qwen2.5:7b",)
    assert found.base_url == f"http://{address}/v1"
    answers.append(b"<html>not a model server</html>")
    assert probe(address, 2.0) is None


def test_a_closed_port_or_a_silent_one_costs_the_timeout_at_most() -> None:
    import socket
    import time

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts, never answers
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    began = time.monotonic()
    found = probe_all([f"127.0.0.1:{silent.getsockname()[1]}", f"127.0.0.1:{closed_port}"], 0.3)
    assert found == [] and time.monotonic() - began < 3.0
    silent.close()


def test_model_ids_takes_only_an_answer_that_lists_models() -> None:
    assert model_ids(b'{"models": [{"name": "llama3:8b"}]}') == ("llama3:8b",)
    for bad in (b"[]", b"null", b"{", b'{"data": "x"}', b"[" * 100_000):
        assert model_ids(bad) is None


@pytest.mark.anyio
async def test_a_stop_at_shutdown_reaches_every_backend_a_job_uses() -> None:
    from memd.errors import Unavailable

    config = LLMConfig(models=ModelsConfig(session_notes="local:"), find_local=True)
    models = open_models(config, {"GEMINI_API_KEY": "k"}, probe=ollama)
    assert set(models.backends) == {"gemini", "local"}
    models.stop("memd is stopping")
    for kind in ("session_notes", "dream"):  # local, gemini
        route = models.route(kind)
        assert isinstance(route, Route)
        with pytest.raises(Unavailable, match="stopping"):
            await route.llm.create_message(model="m", system="", messages=[], max_tokens=1)
    await models.aclose()


def test_a_reload_finds_a_server_started_since_and_keeps_what_did_not_change() -> None:
    before = open_models(LLMConfig(), {}, probe=NO_PROBE)
    assert not before.enabled
    after = open_models(LLMConfig(), {}, before, probe=ollama)
    assert after is not before and after.enabled
    assert open_models(LLMConfig(), {}, after, probe=ollama) is after  # nothing to reopen
