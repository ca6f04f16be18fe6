"""Request params: what each method takes, checked before its handler runs, and typed getters.

Every method's params are declared in :data:`METHOD_PARAMS` (name → kind). The method table
is wrapped by :func:`checked`, so for every method, whatever its handler does with its params:

- a ``null`` value answers ``invalid_params`` (leave a param out to get its default);
- a value of the wrong kind answers ``invalid_params`` naming the key and the kind, and so
  does a number out of 0 … :data:`~memd.config.MAX_NUMBER` (so no reply carries a figure it
  cannot encode);
- keys a method does not declare are ignored (newer clients may send more).

The getters below (``opt_str``, ``int_param``…) then read values that have the right kind
and check their range; each raises :class:`InvalidParams` naming the key. A test calls every
method of the table with ``null`` and with a wrong-kind value for each declared key, and
checks that handlers read only declared keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

from memd.config import MAX_NUMBER
from memd.errors import NotFound
from memd.ipc.server import Handler, InvalidParams
from memd.state import SessionState
from memd_client.names import unescape_name

if TYPE_CHECKING:
    from memd.ipc.face import HasSessions

Kind = Literal["str", "int", "number", "bool", "list[str]", "list", "map", "bytes"]

_SESSION: Final[dict[str, Kind]] = {"session": "str"}
_WINDOW: Final[dict[str, Kind]] = {"context_window": "int", "max_output_tokens": "int"}
_CWD: Final[dict[str, Kind]] = {"cwd": "str"}

METHOD_PARAMS: Final[dict[str, dict[str, Kind]]] = {
    "hello": {"protocol": "int", "client": "str"},
    "status": {"limit": "int", "notes": "bool"},
    "sessions": {"project": "str", **_CWD, "limit": "int"},
    "session": _SESSION,
    "config": {},
    "reload": {},
    "should_compact": {**_SESSION, "tokens": "int", **_WINDOW},
    "compact": {
        **_SESSION,
        "messages": "list",
        "trigger": "str",
        "dry_run": "bool",
        "fork": "bool",
        "cwd": "str",
        "custom_instructions": "str",
        **_WINDOW,
    },
    "microcompact": {**_SESSION, "messages": "list", "keep_recent": "int"},
    "notes": _SESSION,
    "extract": {**_SESSION, "wait": "number"},
    "wait_extraction": _SESSION,
    "memory_index": _CWD,
    "memories": {**_CWD, "project": "str", "check": "bool", "archived": "bool"},
    "restore_memory": {**_CWD, "project": "str", "memory": "str"},
    "recall": {
        "query": "str",
        **_CWD,
        **_SESSION,
        "recent_tools": "list[str]",
        "already_surfaced": "list[str]",
    },
    "hook": {"raw": "bytes", "event": "str", "input": "map", "env": "map", "agent": "str"},
    "remember": {
        **_CWD,
        "type": "str",
        "name": "str",
        "description": "str",
        "content": "str",
        "agent": "str",
    },
    "read_memory": {**_CWD, "name": "str"},
    "project_status": _CWD,
    "project_notes": {**_CWD, **_SESSION},
    "dream": {"op": "str", **_CWD, "project": "str", "run": "str", "force": "bool"},
    "team": {
        "op": "str",
        **_CWD,
        "project": "str",
        "scope": "str",
        "remote": "str",
        "mode": "str",
        "allow_deletes": "bool",
        "env": "map",
        "on": "bool",
        "memory": "str",
        "commit": "str",
        "limit": "int",
    },
    "probe_api": {},
    "doctor_facts": {},
}


def _bounded(value: Any, fraction: bool) -> bool:
    """A whole number (or with ``fraction`` any number) from 0 to :data:`MAX_NUMBER`, not
    NaN: every number a method takes is a count, a size or a time, and what it becomes must
    fit in a reply."""
    kinds = (int, float) if fraction else (int,)
    if isinstance(value, bool) or not isinstance(value, kinds):
        return False
    number: float = value
    return 0 <= number <= MAX_NUMBER


_KINDS: Final[dict[Kind, tuple[Callable[[Any], bool], str]]] = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "int": (lambda v: _bounded(v, False), f"a whole number from 0 to {MAX_NUMBER:,}"),
    "number": (lambda v: _bounded(v, True), f"a number from 0 to {MAX_NUMBER:,}"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "list[str]": (
        lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "a list of strings",
    ),
    "list": (lambda v: isinstance(v, list), "a list"),
    "map": (lambda v: isinstance(v, dict), "a map"),
    "bytes": (lambda v: isinstance(v, bytes), "bytes"),
}


def check_params(method: str, params: Mapping[str, Any]) -> None:
    """Refuse ``null`` values and values of the wrong kind (:class:`InvalidParams`)."""
    declared = METHOD_PARAMS.get(method, {})
    for key, value in params.items():
        if value is None:
            raise InvalidParams(f"'{key}' must not be null; leave it out for its default")
        kind = declared.get(key)
        if kind is None:
            continue
        accepts, what = _KINDS[kind]
        if not accepts(value):
            got = value if isinstance(value, int | float) else type(value).__name__
            raise InvalidParams(f"'{key}' must be {what}, got {got}")


def checked(table: Mapping[str, Handler]) -> dict[str, Handler]:
    """The method table with :func:`check_params` run before every handler."""
    return {name: _checked(name, handler) for name, handler in table.items()}


def _checked(method: str, handler: Handler) -> Handler:
    async def run(params: dict[str, Any]) -> Any:
        if params:
            check_params(method, params)
        return await handler(params)

    run.__doc__ = handler.__doc__
    run.__wrapped__ = handler  # type: ignore[attr-defined]
    return run


def opt_str(params: dict[str, Any], key: str) -> str | None:
    value = params.get(key)
    if key in params and not isinstance(value, str):
        raise InvalidParams(f"'{key}' must be a string, got {type(value).__name__}")
    return value


def req_str(params: dict[str, Any], key: str, what: str) -> str:
    value = opt_str(params, key)
    if not value:
        raise InvalidParams(f"'{key}' is required: {what}")
    return value


def opt_int(params: dict[str, Any], key: str, default: int | None = None) -> int | None:
    if key not in params:
        return default
    value = params[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidParams(f"'{key}' must be a non-negative integer, got {value!r}")
    return value


def int_param(params: dict[str, Any], key: str, default: int) -> int:
    value = opt_int(params, key)
    return default if value is None else value


def str_list(params: dict[str, Any], key: str) -> list[str]:
    value = params.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidParams(f"'{key}' must be a list of strings")
    return value


def find_session(daemon: HasSessions, ident: str | None) -> SessionState:
    """A session by id or unique id prefix, as replies show it (escaped: memd_client.names)."""
    if not ident:
        raise InvalidParams("'session' is required: a session id or a unique prefix of one")
    name = unescape_name(ident)
    exact = daemon.registry.get(name)
    if exact is not None:
        return exact
    matches = daemon.registry.find(name)
    if not matches:
        raise NotFound(f"no session {ident!r}; `memdctl sessions` lists the known ones")
    if len(matches) > 1:
        raise InvalidParams(f"{ident!r} matches {len(matches)} sessions; give more of the id")
    return matches[0]
