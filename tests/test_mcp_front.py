"""memd-mcp answers the handshake and the tool list before the MCP SDK is loaded (issue 38):
the front's answers are the SDK's own, byte for byte decoded, and a tool call hands the
connection over to the SDK server, which serves it as if it had been there from the start
(``tests/test_mcp_e2e.py`` runs every tool through the SDK's own client that way)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp_types import PROTOCOL_VERSION_META_KEY
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from memd import __version__
from memd.install.agents import server_command
from memd.mcp import front
from memd.mcp.front import META, VERSION_KEY
from memd.mcp.listing import (
    CLIENT,
    ENVELOPE,
    handshake_requests,
    listing,
    modern_requests,
    sdk_answers,
)
from memd.memory.paths import memory_dir
from tests.daemon_harness import fake_home, read_log, start_memd, stop_memd

REWRITE = "memd/mcp/listing.json is behind the SDK's answers: run `python -m memd.mcp.listing`"


def initialize(version: str, ident: object = 0, **extra: Any) -> bytes:
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": CLIENT, **extra}
    return line({"jsonrpc": "2.0", "id": ident, "method": "initialize", "params": params})


def line(message: object) -> bytes:
    return json.dumps(message).encode() + b"\n"


def a_front() -> front.Front:
    listing = front.load_listing()
    assert listing is not None
    return front.Front(listing)


def answers_of(
    ours: front.Front, requests: list[bytes], resources: list[Any] | None = None
) -> list[Any]:
    """The front's replies to ``requests`` (each one answered; ``resources/list`` with
    ``resources``), decoded."""
    out = []
    for request in requests:
        reply = ours.answer(request)
        if isinstance(reply, front.Later):
            result = {**reply.template, "resources": resources or []}
            out.append({"jsonrpc": "2.0", "id": reply.ident, "result": result})
        elif isinstance(reply, bytes):
            out.append(json.loads(reply))
        else:
            assert reply is None, request
    return out


@pytest.mark.slow
@pytest.mark.parametrize("version", ["2025-06-18", "2099-01-01"])
def test_the_fronts_answers_are_the_sdks(version: str) -> None:
    """What the SDK server answers in each era, the front answers (the handshake's version
    negotiated alike, an unknown one too); listing.json holds the SDK's current answers."""
    handshake = handshake_requests(version)
    assert answers_of(a_front(), handshake) == sdk_answers(handshake)
    modern = modern_requests()
    assert answers_of(a_front(), modern) == sdk_answers(modern)
    if version == "2025-06-18":
        assert front.load_listing() == listing(), REWRITE


def test_the_front_speaks_the_sdks_versions_and_envelope() -> None:
    assert front.HANDSHAKE_VERSIONS == HANDSHAKE_PROTOCOL_VERSIONS
    assert front.MODERN_VERSIONS == MODERN_PROTOCOL_VERSIONS
    assert front.VERSION_KEY == PROTOCOL_VERSION_META_KEY


def test_after_the_first_line_it_does_not_answer_the_handshake_era_goes_to_the_sdk() -> None:
    """A request before initialize, bad initialize params, a line that is not JSON-RPC: the
    SDK takes the connection from there; after initialize, a tool call, a cursor, an
    envelope, resources or a second initialize do too, and every line after them."""
    for first in (
        line({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        initialize("2025-06-18", capabilities=[]),
        initialize("2025-06-18", clientInfo={"name": "x"}),
        b"{not json\n",
        line({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ):
        ours = a_front()
        assert ours.answer(first) is front.SDK
        assert ours.answer(initialize("2025-06-18")) is front.SDK  # handed over for good
    for message in (
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "recall"}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"cursor": "x"}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": ENVELOPE}},
        {"jsonrpc": "2.0", "id": 5, "method": "resources/list"},
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        {"jsonrpc": "1.0", "id": 6, "method": "ping"},
        {"jsonrpc": "2.0", "id": True, "method": "ping"},
        {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {}},
    ):
        ours = a_front()
        assert answered(ours.answer(initialize("2025-06-18", ident="a")))["id"] == "a"
        assert ours.answer(line(message)) is front.SDK, message
        assert ours.answer(line({"jsonrpc": "2.0", "id": 8, "method": "ping"})) is front.SDK
        assert ours.replay == [initialize("2025-06-18", ident="a")]
        assert ours.initialize_id == "a"


def test_the_modern_era_answers_its_static_requests_all_along() -> None:
    """Each 2026-era request stands alone: what is not static goes to the SDK and the front
    goes on answering the static ones; an incomplete or unknown envelope goes to the SDK."""
    ours = a_front()
    discover, *rest = modern_requests()
    assert answered(ours.answer(discover))["result"]["supportedVersions"] == ["2026-07-28"]
    call = {"name": "recall", "arguments": {"query": "x"}, "_meta": ENVELOPE}
    assert (
        ours.answer(line({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": call}))
        is front.SDK
    )
    for request in rest:
        assert isinstance(ours.answer(request), bytes | front.Later)
    assert ours.answer(initialize("2025-06-18")) is front.SDK  # refused by the SDK
    for meta in (
        {**ENVELOPE, VERSION_KEY: "2099-01-01"},
        {k: v for k, v in ENVELOPE.items() if not k.endswith("clientCapabilities")},
        {**ENVELOPE, META + "clientInfo": {"name": "x"}},
        {**ENVELOPE, "progressToken": 1},
    ):
        for request in modern_requests(meta):
            assert ours.answer(request) is front.SDK, meta
    assert not ours.replay and ours.initialize_id is None


def answered(reply: object) -> Any:
    assert isinstance(reply, bytes) and reply.endswith(b"\n")
    return json.loads(reply)


def _nest(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(children, max_size=3) | st.dictionaries(
        st.sampled_from(["jsonrpc", "id", "method", "params", "_meta", "cursor", VERSION_KEY]),
        children | st.sampled_from(["2.0", "initialize", "tools/list", "server/discover"]),
        max_size=5,
    )


@given(st.binary(max_size=300) | st.recursive(st.none() | st.integers() | st.text(), _nest))
def test_any_line_is_answered_as_listed_or_goes_to_the_sdk(value: object) -> None:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    for ours in (a_front(), _opened(initialize("2025-06-18")), _opened(modern_requests()[0])):
        reply = ours.answer(raw + b"\n")
        if isinstance(reply, bytes):
            assert json.loads(reply)["jsonrpc"] == "2.0"
        else:
            assert reply is None or reply is front.SDK or isinstance(reply, front.Later)


def _opened(first: bytes) -> front.Front:
    ours = a_front()
    assert isinstance(ours.answer(first), bytes)
    return ours


def run_server(requests: list[bytes], cwd: Path, env: dict[str, str] | None = None) -> list[Any]:
    """memd-mcp as install-mcp registers it: each request written once the one before it is
    answered; the answers."""
    with subprocess.Popen(
        server_command("user"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
    ) as child:
        assert child.stdin is not None and child.stdout is not None
        answers = []
        for request in requests:
            child.stdin.write(request)
            child.stdin.flush()
            if b'"id"' in request:
                answers.append(json.loads(child.stdout.readline()))
        _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    return answers


HANDSHAKE = [
    initialize("2025-06-18"),
    line({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    line({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
]


def broken_sdk(tmp_path: Path) -> dict[str, str]:
    """An environment whose ``mcp`` package cannot be imported."""
    broken = tmp_path / "site"
    (broken / "mcp").mkdir(parents=True)
    (broken / "mcp" / "__init__.py").write_text("raise ImportError('no SDK here')\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(broken), *sys.path])}


def tool_call(ident: int, meta: dict[str, Any] | None = None) -> bytes:
    params: dict[str, Any] = {"name": "memory_status", "arguments": {}}
    if meta is not None:
        params["_meta"] = meta
    return line({"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params})


@pytest.mark.slow
def test_memd_mcp_answers_what_agents_ask_first_without_the_sdk(tmp_path: Path) -> None:
    """With an SDK that cannot even be imported, memd-mcp answers what an agent asks at its
    start in either era (the SDK is loaded in a thread once the first request is
    answered), and a tool call then gets an error that says why."""
    env = broken_sdk(tmp_path)
    answers = run_server([*HANDSHAKE, tool_call(2)], tmp_path, env)
    assert [a["id"] for a in answers] == [0, 1, 2]
    assert answers[0]["result"]["serverInfo"] == {"name": "memd", "version": __version__}
    assert [t["name"] for t in answers[1]["result"]["tools"]][:2] == ["recall", "list_memories"]
    assert "cannot load the MCP SDK" in answers[2]["error"]["message"]
    answers = run_server([*modern_requests(), tool_call(9, ENVELOPE)], tmp_path, env)
    assert [a["id"] for a in answers] == [0, 1, 2, 3, 4, 9]
    assert all("result" in a for a in answers[:5])
    assert "cannot load the MCP SDK" in answers[5]["error"]["message"]


@pytest.mark.slow
def test_resources_are_listed_as_the_sdk_lists_them(tmp_path: Path) -> None:
    """The project's memory files, from the daemon: the front's ``resources/list`` (2026
    era) is the SDK server's, run in the same folder under the same environment."""
    with fake_home(tmp_path) as home:
        repo = home.root / "repo"
        (repo / ".git").mkdir(parents=True)
        mdir = memory_dir(home.projects, repo)
        mdir.mkdir(parents=True)
        (mdir / "MEMORY.md").write_text("- [Deploy](deploy.md) — how we deploy\n")
        (mdir / "deploy.md").write_text(
            "---\nname: Deploy\ndescription: how we deploy\ntype: project\n---\n\nCanary.\n"
        )
        (mdir / "bare.md").write_text("no frontmatter at all\n")
        proc = start_memd(home)
        try:
            listed = modern_requests()[-1:]
            sdk = sdk_answers(listed, env=home.env, cwd=str(repo))
            ours = run_server(listed, repo, home.env)
        finally:
            assert stop_memd(proc) == 0, read_log(home)
    assert ours == sdk
    names = [r["name"] for r in ours[0]["result"]["resources"]]
    assert names == ["MEMORY.md", *sorted(names[1:])] and {"deploy.md", "bare.md"} <= set(names)


@pytest.mark.slow
def test_a_tool_call_goes_to_the_sdk_server(tmp_path: Path) -> None:
    """In the handshake era it gets the initialize replayed (its answer dropped); in the
    2026 era the request alone. No daemon runs: the tool says so."""
    for requests in ([*HANDSHAKE, tool_call(2)], [*modern_requests(), tool_call(9, ENVELOPE)]):
        answers = run_server(requests, tmp_path)
        assert len(answers) == len([r for r in requests if b'"id"' in r])
        result = answers[-1]["result"]
        assert result["isError"] is True and "memd" in result["content"][0]["text"]


def test_the_console_script_and_module_start_at_the_front() -> None:
    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert 'memd-mcp = "memd.mcp.front:main"' in text
    done = subprocess.run(
        [sys.executable, "-c", "import memd.mcp.__main__, sys; print('mcp' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "False"
