"""The config tree built from parsed YAML and checked: each key against its field's type
(:func:`build`), each number against its range (no negatives, at most :data:`MAX_NUMBER`,
fractions between 0 and 1), every problem listed at once. :mod:`memd.config` holds the tree.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Final, Literal

MAX_NUMBER: Final = 10**12
"""The largest number memd takes from outside: a config value, a request param, a token count
read from a transcript. Far above any real figure (a context of a million tokens, a budget of
a billion), far below what a reply can encode (2^64) or a timeout can wait (2^63 ns), even
summed over every session; a larger one is refused where it is read, never a figure."""


def build(cls: type[Any], data: Any, prefix: str, problems: list[str]) -> Any:
    """``cls`` (a frozen dataclass) from ``data`` (parsed YAML), every field checked against
    its type and range; each bad key is appended to ``problems`` (under ``prefix``) and left
    at its default."""
    if not isinstance(data, dict):
        problems.append(f"{prefix.rstrip('.') or '(top level)'}: expected a section (mapping)")
        return cls()
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in known:
            problems.append(f"{prefix}{key}: unknown key (known here: {', '.join(sorted(known))})")
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        hint = hints[f.name]
        name = prefix + f.name
        if dataclasses.is_dataclass(hint):
            values[f.name] = build(typing.cast(type[Any], hint), data[f.name], name + ".", problems)
            continue
        ok, value, expected = _coerce(hint, data[f.name])
        if ok:
            values[f.name] = value
        else:
            problems.append(f"{name}: expected {expected}, got {_shown(data[f.name])}")
    for name, value in values.items():
        problem = _range_problem(name, value)
        if problem:
            problems.append(prefix + problem)
    return cls(**values)


def _coerce(hint: Any, value: Any) -> tuple[bool, Any, str]:
    origin = typing.get_origin(hint)
    if hint is bool:
        return isinstance(value, bool), value, "true or false"
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return ok, value, "a whole number"
    if hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return ok, float(value) if ok else value, "a number"
    if hint is str:
        return isinstance(value, str), value, "a string"
    if origin is Literal:
        choices = typing.get_args(hint)
        return value in choices, value, "one of " + ", ".join(map(repr, choices))
    if origin is tuple:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return ok, tuple(value) if ok else value, "a list of strings"
    if origin in (types.UnionType, typing.Union):  # pragma: no cover - no such keys yet
        for arm in typing.get_args(hint):
            ok, coerced, _ = _coerce(arm, value)
            if ok:
                return True, coerced, ""
        return False, value, str(hint)
    raise TypeError(f"config field type {hint!r} has no validator")  # pragma: no cover


# Keys for which 0 means nothing sensible (an idle deadline of 0 s would close every
# connection between its requests).
_POSITIVE = frozenset({"idle_timeout_s"})


def _range_problem(name: str, value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value != value:
        return f"{name}: must be a number, got nan"
    if value > MAX_NUMBER:
        return f"{name}: must be at most {MAX_NUMBER:,}, got {_shown(value)}"
    if value < 0:
        return f"{name}: must not be negative, got {_shown(value)}"
    if name in _POSITIVE and not value:
        return f"{name}: must be more than 0, got {value}"
    if name.endswith("_fraction") and not 0 < value < 1:
        return f"{name}: must be between 0 and 1, got {value}"
    return None


def _shown(value: Any) -> str:
    """A number as a problem names it: a huge one (4,300 digits cannot even be printed) by
    its size."""
    if isinstance(value, int) and abs(value) >= 10**30:
        return f"a number of {value.bit_length()} bits"
    return repr(value)
