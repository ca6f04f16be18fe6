"""Issue 35: the agent is the unit. Everything that differs between agents is in the agent's
room (``memd/sources/<agent>/``) or its table in the client (``memd_client/agents/``); the
rest of the house loops over the registries. So no module outside those tests an agent's
name (``if agent == "codex"``, ``agent in ("claude", …)``, ``table["gemini"]``, a ``match``
case, a per-agent dict, a default argument), and the daemon's rooms and the client's tables
know the same agents by the same names."""

from __future__ import annotations

import ast
from pathlib import Path

from memd.sources.registry import ROOMS, room_named
from memd_client import hook
from memd_client.agents import AGENTS, UNNAMED, named

ROOT = Path(__file__).resolve().parents[1]
NAMES = {name for t in AGENTS for name in (t.name, *t.aliases)} | {
    name for room in ROOMS for name in (room.name, *room.aliases)
}
# Where an agent's name may be tested: its room, its table, and the registries.
ROOMS_AT = ROOT / "memd" / "sources"
TABLES_AT = ROOT / "client" / "memd_client" / "agents"
# The loopback servers stand in for the agents' APIs; the model backends are rooms of their
# own, whose names one agent shares (Gemini's API is a backend, Gemini CLI an agent).
ALLOWED = {ROOT / "memd" / "testing", ROOT / "memd" / "llm"}


def _names_in(node: ast.AST | None) -> set[str]:
    """The agent names a constant, or a tuple/list/set of constants, spells."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES:
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return {n for e in node.elts for n in _names_in(e)}
    return set()


def _is_literal_type(node: ast.AST) -> bool:
    """``Literal[…]``: a type, whose values are the config's (a backend may be "gemini")."""
    return (isinstance(node, ast.Name) and node.id == "Literal") or (
        isinstance(node, ast.Attribute) and node.attr == "Literal"
    )


def agent_tests(tree: ast.Module) -> list[tuple[int, str]]:
    """Where a module tests an agent's name (or names one at its top, for others to test
    it by: ``CLAUDE = "claude"``): (line, what)."""
    found: list[tuple[int, str]] = [
        (node.lineno, ", ".join(sorted(_names_in(node.value))))
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign) and _names_in(node.value)
    ]
    for node in ast.walk(tree):
        names: set[str] = set()
        if isinstance(node, ast.Compare):
            names = {n for side in (node.left, *node.comparators) for n in _names_in(side)}
        elif isinstance(node, ast.match_case):
            names = {
                n
                for pattern in ast.walk(node.pattern)
                if isinstance(pattern, ast.MatchValue)
                for n in _names_in(pattern.value)
            }
        elif isinstance(node, ast.Subscript) and not _is_literal_type(node.value):
            names = _names_in(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("get", "pop", "setdefault") and node.args:
                names = _names_in(node.args[0])
        elif isinstance(node, ast.Dict):
            keyed = {n for key in node.keys for n in _names_in(key)}
            names = keyed if len(keyed) > 1 else set()  # a per-agent table
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            defaults = (*node.args.defaults, *node.args.kw_defaults)
            names = {n for d in defaults for n in _names_in(d)}
        if names:
            where = node.pattern if isinstance(node, ast.match_case) else node
            line = int(getattr(where, "lineno", 0))
            found.append((line, ", ".join(sorted(names))))
    return found


def outside_rooms() -> list[Path]:
    """Every module of memd and memd_client but the rooms, the tables and the registries."""
    paths = [*(ROOT / "memd").rglob("*.py"), *(ROOT / "client" / "memd_client").rglob("*.py")]
    return [
        p
        for p in paths
        if not p.is_relative_to(ROOMS_AT)
        and not p.is_relative_to(TABLES_AT)
        and not any(p.is_relative_to(a) for a in ALLOWED)
    ]


def test_no_module_outside_the_rooms_tests_an_agents_name() -> None:
    offences = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in outside_rooms()
        for line, what in agent_tests(ast.parse(path.read_text()))
    ]
    assert offences == []


def test_the_check_sees_each_way_of_testing_a_name() -> None:
    source = """
if agent == "codex": pass
if agent in ("claude", "x"): pass
spec = TABLE["gemini"]
value = table.get("claude_code")
match agent:
    case "gemini": pass
folder = {"cursor": ".cursor", "gemini": ".gemini"}
def f(agent="claude"): pass
section = {"claude_code": 1}
CLAUDE = "claude"
"""
    lines = [line for line, _ in agent_tests(ast.parse(source))]
    assert sorted(set(lines)) == [2, 3, 4, 5, 7, 8, 9, 11]


def test_a_room_in_the_daemon_has_a_table_in_the_client_by_the_same_names() -> None:
    for room in ROOMS:
        table = named(room.name)
        assert table is not None, room.name
        assert (table.name, table.aliases) == (room.name, room.aliases)
        assert table.title == room.title
        assert table.hooks is not None  # memd serves each room's agent through hooks
    assert UNNAMED.name == ROOMS[0].name  # a hook naming no agent is the same agent's
    for table in AGENTS:
        assert room_named(table.name) is not None or table.hooks is None, table.name
        assert len(table.short) <= 6


def test_the_hook_forwards_what_the_agents_tables_say() -> None:
    """The hook carries a copy (it imports nothing it can do without)."""
    wanted = [name for table in AGENTS for name in table.forwarded_env]
    assert sorted(hook.FORWARDED_ENV) == sorted(set(wanted))
