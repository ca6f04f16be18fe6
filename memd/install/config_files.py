"""Adding and removing one MCP server entry in an agent's config file (pure: text in, text out).

Two formats:

* JSON (Claude Code, Cursor, Gemini CLI): an object under a key path (``mcpServers``) maps
  server names to entries. The file is rewritten with the indentation, key order, ASCII
  escaping and final newline it had, so a file written by the agent itself (or by
  ``json.dumps(indent=…)``) changes only where memd's entry is.
* TOML (Codex CLI): the table ``[mcp_servers.<name>]``, edited with tomlkit, which keeps
  comments, spacing and the order of everything else.

Each edit returns the new text, or ``None`` when the file already says what was asked (so a
second install changes nothing). A file that cannot be parsed, or whose server map is not a
map, raises :class:`ConfigFileError`: an agent's config is never overwritten on a guess.

Removing the entry from a file that was otherwise left alone restores it byte for byte: the
installer gives back the backup taken before the install when it says (:func:`parsed`) the
same as the file without memd's entry (:mod:`memd_client.config_backup`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import tomlkit
import tomlkit.exceptions
from tomlkit.container import OutOfOrderTableProxy
from tomlkit.items import Table

from memd_client import foreign_file
from memd_client.json_layout import dump_like

Format = Literal["json", "toml"]


class ConfigFileError(ValueError):
    """The existing file cannot be edited safely; the message names the problem."""


# ---------------------------------------------------------------------------------------------
# JSON


def _json_load(text: str) -> dict[str, Any]:
    """The object of ``text`` (blank: ``{}``), its nesting judged before it is decoded."""
    try:
        return foreign_file.decode_json_object(text)
    except ValueError as exc:
        raise ConfigFileError(f"it {exc}; fix or move it first") from None


def _json_dump(data: Mapping[str, Any], like: str) -> str:
    """``data`` in the layout of ``like`` (:func:`memd_client.json_layout.dump_like`)."""
    return dump_like(data, like)


def _servers(data: dict[str, Any], keys: Sequence[str], *, create: bool) -> dict[str, Any] | None:
    node: Any = data
    for key in keys:
        child = node.get(key)
        if child is None:
            if not create:
                return None
            child = node[key] = {}
        if not isinstance(child, dict):
            raise ConfigFileError(f"{'.'.join(keys)} is not a JSON object")
        node = child
    return node  # type: ignore[no-any-return]


def json_add(text: str, keys: Sequence[str], name: str, entry: Mapping[str, Any]) -> str | None:
    data = _json_load(text)
    servers = _servers(data, keys, create=True)
    assert servers is not None
    if servers.get(name) == entry:
        return None
    servers[name] = dict(entry)
    return _json_dump(data, text)


def json_remove(text: str, keys: Sequence[str], name: str) -> str | None:
    data = _json_load(text)
    servers = _servers(data, keys, create=False)
    if servers is None or name not in servers:
        return None
    del servers[name]
    _drop_emptied(data, keys)
    return _json_dump(data, text)


def _drop_emptied(data: dict[str, Any], keys: Sequence[str]) -> None:
    """Remove the objects along ``keys`` that removing memd's entry left empty, deepest first."""
    for depth in range(len(keys), 0, -1):
        parent: Any = data
        for key in keys[: depth - 1]:
            parent = parent[key]
        if parent[keys[depth - 1]]:
            return
        del parent[keys[depth - 1]]


# ---------------------------------------------------------------------------------------------
# TOML


def toml_load(text: str) -> tomlkit.TOMLDocument:
    """``text`` parsed for editing; :class:`ConfigFileError` when it is not TOML, or nests
    too deep or spells a key in too many parts for tomlkit (which recurses) to see it."""
    try:
        foreign_file.check_toml(text)
    except ValueError as exc:
        raise ConfigFileError(f"it {exc}; fix or move it first") from None
    try:
        return tomlkit.parse(text)
    except (tomlkit.exceptions.TOMLKitError, RecursionError) as exc:
        raise ConfigFileError(f"it is not valid TOML ({exc}); fix or move it first") from None


TomlTable = Table | OutOfOrderTableProxy  # a table defined in parts (``[a.b]`` before ``[a]``)


def toml_table(
    parent: tomlkit.TOMLDocument | TomlTable, key: str, *, create: bool
) -> TomlTable | None:
    """The table ``key`` of ``parent``; None when absent and not ``create``. Raises
    :class:`ConfigFileError` when ``key`` holds something else (a user's own value)."""
    node = parent.get(key)
    if node is None:
        if not create:
            return None
        node = tomlkit.table(is_super_table=True)
        parent[key] = node
    if not isinstance(node, Table | OutOfOrderTableProxy):
        raise ConfigFileError(f"'{key}' is not a table; fix it by hand")
    return node


def toml_add(text: str, key: str, name: str, entry: Mapping[str, Any]) -> str | None:
    doc = toml_load(text)
    servers = toml_table(doc, key, create=True)
    assert servers is not None
    current = servers.get(name)
    if current is not None and _unwrap(current) == dict(entry):
        return None
    table = tomlkit.table()
    for field, value in entry.items():
        table[field] = value
    if current is not None:
        del servers[name]
    servers[name] = table
    out = tomlkit.dumps(doc)
    return out if text.endswith("\n") or not text or out.endswith("\n") else out + "\n"


def toml_remove(text: str, key: str, name: str) -> str | None:
    doc = toml_load(text)
    servers = toml_table(doc, key, create=False)
    if servers is None or name not in servers:
        return None
    del servers[name]
    if not servers:
        del doc[key]
    return tomlkit.dumps(doc)


def _unwrap(value: Any) -> Any:
    return value.unwrap() if hasattr(value, "unwrap") else value


# ---------------------------------------------------------------------------------------------
# Both


def add_entry(
    fmt: Format, text: str, keys: Sequence[str], name: str, entry: Mapping[str, Any]
) -> str | None:
    """``text`` with the server ``name`` set to ``entry``; ``None`` when already so."""
    if fmt == "json":
        return json_add(text, keys, name, entry)
    return toml_add(text, keys[0], name, entry)


def remove_entry(fmt: Format, text: str, keys: Sequence[str], name: str) -> str | None:
    """``text`` without the server ``name``; ``None`` when it has no such entry."""
    if fmt == "json":
        return json_remove(text, keys, name)
    return toml_remove(text, keys[0], name)


def parsed(fmt: Format, text: str) -> Any:
    """The data a config text says (for comparing two texts whatever their layout)."""
    return _json_load(text) if fmt == "json" else toml_load(text).unwrap()
