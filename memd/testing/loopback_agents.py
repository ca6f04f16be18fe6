"""Loopback model servers for the other agents' real CLIs: OpenAI's Responses API (Codex CLI)
and Gemini's ``generateContent`` (Gemini CLI), on 127.0.0.1, for tests.

Both answer every model request with one short text and record every request, so a test can
see what the CLI put before the model (a hook's context, for one)::

    with LoopbackAgentAPI("responses", text="OK from stub") as api:
        # Codex: [model_providers.stub] base_url = api.url + "/v1", wire_api = "responses"
        ...
        assert "memd" in api.texts()

- ``"responses"`` (Codex): ``POST …/responses`` is answered with the server-sent events Codex
  reads (``response.created``, one assistant ``message`` item, ``response.completed`` with
  usage); any other path gets a 404 in the API's error shape.
- ``"gemini"`` (Gemini CLI, ``GOOGLE_GEMINI_BASE_URL=api.url``):
  ``POST /v1beta/models/<model>:streamGenerateContent`` is answered with ``data:`` events,
  ``:generateContent`` with one JSON response, ``:countTokens`` with a count; both carry
  ``usageMetadata``.

Tools: ``calls`` are function calls the model makes first, one per request, in order. Gemini:
the next one that no ``functionResponse`` in the request answers yet (``ToolCall("",
"read_file", {"file_path": "README.md"})``; an MCP tool is named as Gemini offers it,
``mcp_memd_recall``). Codex (``ToolCall("mcp__memd", "recall", {"query": "deploy"})``, the
shape Codex sends an MCP tool in): a request answers the next one whose output its input does
not carry yet, and the text once all have one. As a real model can, it calls an MCP server's
tool only once the request offers that server's tools: Codex 0.171 starts its MCP servers in
the background and offers their tools from the first request after a server answered, so
until then the model waits in a shell (``sleep``, at most :data:`MAX_WAITS` times).

Codex's memory consolidation (its sub-agent ``memory_consolidation``, a model run at Codex's
start when its memories folder changed, with one tool: ``exec``, JavaScript that calls
Codex's tools) is answered with the text, as any request; after
:meth:`LoopbackAgentAPI.expect_consolidation` the next one runs a shell command in the
memories folder through ``tools.exec_command`` first. As a real model's consolidation takes
seconds, it calls the tool only once the session's own first request came (its start, hooks
included, is over), and the session's turn is answered only once the consolidation is done
or :data:`CONSOLIDATION_WAIT_S` passed (``codex exec`` stops the consolidation when its turn
ends). Nothing else is
simulated (no limits, no faults): that is :mod:`.loopback`'s job for the Messages API, which
memd itself speaks.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from memd.testing.loopback_http import Events, Served, json_reply
from memd.testing.loopback_replies import ApiError, Message, Reply

Wire = Literal["responses", "gemini"]
MAX_WAITS = 60  # shell waits for an MCP server's tools to be offered (0.5 s each)
WAIT_S = 0.5
CONSOLIDATION_WAIT_S = 20.0
CONSOLIDATION_CALL = "call_memd_consolidation"


@dataclass(frozen=True)
class AgentRequest:
    """One request as the server saw it."""

    method: str
    path: str
    headers: Mapping[str, str]  # lower-case names
    body: Any  # the decoded JSON, or None when the body was not JSON


class ToolCall(NamedTuple):
    """One function call the Responses model makes (``namespace`` ``mcp__<server>`` for MCP)."""

    namespace: str
    name: str
    arguments: Mapping[str, Any]


class LoopbackAgentAPI(Served):
    """The server (thread-safe); ``text`` answers every model request (after ``calls``)."""

    def __init__(
        self,
        wire: Wire,
        *,
        text: str = "OK from stub",
        calls: tuple[ToolCall, ...] = (),
        host: str = "127.0.0.1",
    ) -> None:
        super().__init__((host, 0))
        self.wire: Wire = wire
        self.text = text
        self.calls = calls
        self._lock = threading.Lock()
        self._records: list[AgentRequest] = []
        self._count = 0
        self._consolidation: str | None = None  # the next consolidation's shell command
        self._turn_came = threading.Event()  # a request of the session itself arrived
        self._consolidated = threading.Event()  # the consolidation's tool ran and it answered

    @property
    def requests(self) -> list[AgentRequest]:
        with self._lock:
            return list(self._records)

    def expect_consolidation(self, command: str) -> None:
        """The next Codex memory consolidation runs ``command`` in the memories folder (see
        the module doc), and the session's turns wait for it."""
        with self._lock:
            self._consolidation = command
            self._turn_came.clear()
            self._consolidated.clear()

    def texts(self, since: int = 0) -> str:
        """Every model request's body from ``since`` on, as one JSON text (what the model saw)."""
        model = [r.body for r in self.requests[since:] if _is_model_call(self.wire, r.path)]
        return json.dumps(model, ensure_ascii=False)

    # -- the backend (memd.testing.loopback_http.Backend) -------------------------------------

    def serve(
        self, method: str, path: str, headers: Mapping[str, str], raw: bytes
    ) -> tuple[Reply, Any]:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        with self._lock:
            self._records.append(AgentRequest(method, path, headers, body))
            self._count += 1
            number = self._count
        if method != "POST" or not _is_model_call(self.wire, path):
            return ApiError(404, "not_found", f"no such endpoint: {method} {path}"), None
        with self._lock:
            command = self._consolidation
        if self.wire == "responses" and command is not None:
            if _is_consolidation(body):
                return self._consolidate(number, body, command)
            self._turn_came.set()
            self._consolidated.wait(CONSOLIDATION_WAIT_S)
        if self.wire == "responses":
            pending = next_call(self.calls, body)
            if pending is not None:
                return Message(()), Events(call_events(f"resp_loop{number}", *pending))
            return Message(()), Events(responses_events(f"resp_loop{number}", self.text))
        if path.endswith(":countTokens"):
            return json_reply({"totalTokens": len(json.dumps(body)) // 4})
        call = next_gemini_call(self.calls, body)
        answer = gemini_response(self.text) if call is None else gemini_call(call)
        if path.endswith(":streamGenerateContent"):
            return Message(()), Events(((None, answer),))
        return json_reply(answer)

    def _consolidate(self, number: int, body: Any, command: str) -> tuple[Reply, Any]:
        """Codex's memory consolidation: ``command`` through its ``exec`` tool, then the
        text."""
        if any(
            i.get("call_id") == CONSOLIDATION_CALL for i in _items(body, "custom_tool_call_output")
        ):
            with self._lock:
                self._consolidation = None
            self._consolidated.set()
            return Message(()), Events(responses_events(f"resp_loop{number}", self.text))
        self._turn_came.wait(CONSOLIDATION_WAIT_S)
        args = json.dumps({"cmd": command})
        code = f"const r = await tools.exec_command({args});\ntext(JSON.stringify(r));\n"
        item = {
            "type": "custom_tool_call",
            "id": f"ctc_resp_loop{number}",
            "status": "completed",
            "call_id": CONSOLIDATION_CALL,
            "name": "exec",
            "input": code,
        }
        return Message(()), Events(_stream(f"resp_loop{number}", item, 10))


def _is_consolidation(body: Any) -> bool:
    """Whether a Responses request is Codex's memory consolidation sub-agent's."""
    meta = body.get("client_metadata") if isinstance(body, dict) else None
    return isinstance(meta, dict) and meta.get("x-openai-subagent") == "memory_consolidation"


def _items(body: Any, kind: str) -> list[dict[str, Any]]:
    items = body.get("input") if isinstance(body, dict) else None
    if not isinstance(items, list):
        return []
    return [i for i in items if isinstance(i, dict) and i.get("type") == kind]


def _is_model_call(wire: Wire, path: str) -> bool:
    if wire == "responses":
        return path.rstrip("/").endswith("/responses")
    return path.startswith("/v1beta/models/") and path.rsplit(":", 1)[-1] in (
        "generateContent",
        "streamGenerateContent",
        "countTokens",
    )


def call_outputs(body: Any) -> list[Any]:
    """The ``function_call_output`` items of a Responses request's input, in order."""
    return _items(body, "function_call_output")


def next_call(calls: tuple[ToolCall, ...], body: Any) -> tuple[str, ToolCall] | None:
    """The call id and call of the first of ``calls`` whose output the request does not carry
    yet (by ``call_id``); a shell wait instead while it is an MCP server's tool that the
    request does not offer yet."""
    answered = {i.get("call_id") for i in call_outputs(body)}
    for number, tool in enumerate(calls):
        if f"call_loop{number}" in answered:
            continue
        waited = sum(1 for i in answered if isinstance(i, str) and i.startswith("call_wait"))
        mcp = tool.namespace.startswith("mcp__")
        if mcp and not offered(body, tool.namespace) and waited < MAX_WAITS:
            wait = ToolCall("", "exec_command", {"cmd": f"sleep {WAIT_S}"})
            return f"call_wait{waited}", wait
        return f"call_loop{number}", tool
    return None


def offered(body: Any, namespace: str) -> bool:
    """Whether a Responses request offers the tools of ``namespace`` (a ``namespace`` tool of
    that name, or functions named under it)."""
    tools = body.get("tools") if isinstance(body, dict) else None
    for tool in tools if isinstance(tools, list) else []:
        name = tool.get("name") if isinstance(tool, dict) else None
        if isinstance(name, str) and (name == namespace or name.startswith(namespace + "__")):
            return True
    return False


def call_events(
    response_id: str, call_id: str, tool: ToolCall
) -> tuple[tuple[str | None, dict[str, Any]], ...]:
    """The Responses API's stream for one function call."""
    item = {
        "type": "function_call",
        "id": f"fc_{response_id}",
        "status": "completed",
        "call_id": call_id,
        "name": tool.name,
        "namespace": tool.namespace,
        "arguments": json.dumps(dict(tool.arguments)),
    }
    return _stream(response_id, item, 10)


def responses_events(response_id: str, text: str) -> tuple[tuple[str | None, dict[str, Any]], ...]:
    """The Responses API's stream for one assistant message saying ``text``."""
    item = {
        "type": "message",
        "role": "assistant",
        "id": f"msg_{response_id}",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    return _stream(response_id, item, max(1, len(text) // 4))


def _stream(
    response_id: str, item: dict[str, Any], tokens: int
) -> tuple[tuple[str | None, dict[str, Any]], ...]:
    usage = {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 100 + tokens,
    }
    return (
        ("response.created", {"type": "response.created", "response": {"id": response_id}}),
        ("response.output_item.done", {"type": "response.output_item.done", "item": item}),
        (
            "response.completed",
            {"type": "response.completed", "response": {"id": response_id, "usage": usage}},
        ),
    )


def next_gemini_call(calls: tuple[ToolCall, ...], body: Any) -> ToolCall | None:
    """The first of ``calls`` not answered yet: as many are answered as the request's
    ``contents`` hold ``functionResponse`` parts (Gemini sends each call's answer back)."""
    contents = body.get("contents") if isinstance(body, dict) else None
    answered = sum(
        1
        for content in (contents if isinstance(contents, list) else ())
        if isinstance(content, dict) and isinstance(content.get("parts"), list)
        for part in content["parts"]
        if isinstance(part, dict) and "functionResponse" in part
    )
    return calls[answered] if answered < len(calls) else None


def gemini_call(call: ToolCall) -> dict[str, Any]:
    """One ``GenerateContentResponse`` calling ``call`` (its name as Gemini offers the tool:
    an MCP server's is ``mcp_<server>_<tool>``; ``namespace`` is not used)."""
    return gemini_response("", [{"functionCall": {"name": call.name, "args": call.arguments}}])


def gemini_response(text: str, parts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One ``GenerateContentResponse`` saying ``text`` (or made of ``parts``)."""
    tokens = max(1, len(text) // 4)
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": parts or [{"text": text}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 100,
            "candidatesTokenCount": tokens,
            "totalTokenCount": 100 + tokens,
        },
        "modelVersion": "loopback",
    }
