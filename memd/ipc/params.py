"""Reading request params: typed getters that raise :class:`InvalidParams` naming the key."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memd.errors import NotFound
from memd.ipc.server import InvalidParams
from memd.state import SessionState

if TYPE_CHECKING:
    from memd.daemon.service import Daemon


def opt_str(params: dict[str, Any], key: str) -> str | None:
    value = params.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidParams(f"'{key}' must be a string, got {type(value).__name__}")
    return value


def req_str(params: dict[str, Any], key: str, what: str) -> str:
    value = opt_str(params, key)
    if not value:
        raise InvalidParams(f"'{key}' is required: {what}")
    return value


def opt_int(params: dict[str, Any], key: str, default: int | None = None) -> int | None:
    value = params.get(key, default)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidParams(f"'{key}' must be a non-negative integer, got {value!r}")
    return value


def int_param(params: dict[str, Any], key: str, default: int) -> int:
    value = opt_int(params, key, default)
    assert value is not None
    return value


def str_list(params: dict[str, Any], key: str) -> list[str]:
    value = params.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidParams(f"'{key}' must be a list of strings")
    return value


def find_session(daemon: Daemon, ident: str | None) -> SessionState:
    """A session by id or unique id prefix."""
    if not ident:
        raise InvalidParams("'session' is required: a session id or a unique prefix of one")
    exact = daemon.registry.get(ident)
    if exact is not None:
        return exact
    matches = daemon.registry.find(ident)
    if not matches:
        raise NotFound(f"no session {ident!r}; `memdctl sessions` lists the known ones")
    if len(matches) > 1:
        raise InvalidParams(f"{ident!r} matches {len(matches)} sessions; give more of the id")
    return matches[0]
