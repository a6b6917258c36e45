"""Typed dataclasses from plain mappings: unknown keys get a suggestion, wrong types and values out
of range a one-line error naming the key. The schemas (training.contract.config, the launcher's settings)
declare bounds and choices with `ranged` and `one_of`. Torch-free."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import field
from typing import Any

from training.contract.errors import ConfigError


def ranged(default: Any, *, ge: float | None = None, gt: float | None = None, lt: float | None = None,
           le: float | None = None):
    """A dataclass field whose value `build` checks against bounds, e.g. `ranged(50, ge=1)`."""
    bounds = {k: v for k, v in (("ge", ge), ("gt", gt), ("lt", lt), ("le", le)) if v is not None}
    return field(default=default, metadata={"bounds": bounds})


def one_of(default: str, *choices: str):
    """A string dataclass field that `build` checks against `choices`."""
    return field(default=default, metadata={"choices": (default, *choices)})


_BOUND_TESTS = {"ge": (lambda v, b: v >= b, ">="), "gt": (lambda v, b: v > b, ">"),
                "le": (lambda v, b: v <= b, "<="), "lt": (lambda v, b: v < b, "<")}


def _check_bounds(value: Any, bounds: dict, path: str) -> None:
    if value is None:
        return
    for name, bound in bounds.items():
        test, symbol = _BOUND_TESTS[name]
        if not test(value, bound):
            rule = " and ".join(f"{_BOUND_TESTS[n][1]} {b:g}" for n, b in bounds.items())
            raise ConfigError(f"{path}={value!r} is out of range: it must be {rule}")


def suggest(word: str, choices: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else f"valid keys: {', '.join(sorted(map(str, choices)))}"


def _check_type(value: Any, hint: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _check_type(value, inner, path)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, path)
    expected = origin or hint
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
        dict: isinstance(value, dict),
        list: isinstance(value, list),
    }.get(expected, True)
    if not ok:
        name = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
                "dict": "a mapping", "list": "a list"}[expected.__name__]
        raise ConfigError(f"{path}={value!r} is not {name}: set it to {name}")
    return float(value) if expected is float else value


def build(cls: type, data: Any, path: str = ""):
    """Build dataclass `cls` from a plain mapping, rejecting unknown keys (with a suggestion) and
    values of the wrong type; missing keys take the dataclass defaults."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'config'}={data!r} must be a mapping of {cls.__name__} fields")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in hints:
            raise ConfigError(f"unknown key '{where}': {suggest(key, fields)}")
        kwargs[key] = _check_type(value, hints[key], where)
        _check_bounds(kwargs[key], fields[key].metadata.get("bounds", {}), where)
        choices = fields[key].metadata.get("choices")
        if choices and value not in choices:
            raise ConfigError(f"{where}={value!r} is not one of {', '.join(choices)}: {suggest(value, choices)}")
    return cls(**kwargs)
