"""The shape check: every problem of a document (or any value) against its declared type, with its JSON path."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kimi_k3.shape.kubernetes import SPECS, TOP
from kimi_k3.shape.vocabulary import T


@dataclass(frozen=True)
class Problem:
    path: str  # JSON path inside the document, e.g. spec.components[1].podTemplate.spec.containers[0].env
    message: str  # what was found and what is allowed

    def __str__(self) -> str:
        return f"{self.path or '(document)'}: {self.message}"


_NAMES = {
    "str": "a string",
    "int": "a whole number",
    "bool": "true or false",
    "quantity": "a quantity (4, 200Gi)",
    "int_or_str": "a whole number or a string",
    "list": "a list",
    "map": "a mapping",
    "object": "a mapping",
}


def _whole(value: Any) -> bool:
    # JSON Schema's integer, as the schemas say it: 2 and 2.0 (the policy pack receives every number as a double)
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def found(value: Any) -> str:
    """What a value is, for a message; short (a long value is cut)."""
    kind = (
        "null"
        if value is None
        else "a boolean"
        if isinstance(value, bool)
        else "a whole number"
        if isinstance(value, int)
        else "a number"
        if isinstance(value, float)
        else "a string"
        if isinstance(value, str)
        else "a list"
        if _is_list(value)
        else "a mapping"
        if isinstance(value, Mapping)
        else type(value).__name__
    )
    try:  # the policy pack's values are read-only proxies: show their contents
        shown = dict(value) if isinstance(value, Mapping) else list(value) if _is_list(value) else value
    except Exception:  # noqa: BLE001 - a value that cannot be read (unknown during preview) is shown by its kind
        shown = "..."
    text = repr(shown)
    return f"{kind} {text if len(text) <= 60 else text[:57] + '...'}"


def _join(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    key = str(key)
    plain = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", key)
    return (f"{path}.{key}" if path else key) if plain else f"{path}[{key!r}]"


def _allowed(t: T) -> str:
    if t.kind == "list":
        return (
            f"a list of {_allowed(t.item)}"
            if t.item.kind != "object"
            else "a list of " + _allowed(t.item).replace("a mapping", "mappings", 1)
        )
    if t.kind == "map":
        return f"a mapping of name -> {_allowed(t.item)}"
    if t.kind == "object" and t.fields:
        return f"a mapping ({', '.join(list(t.fields)[:6])}{', ...' if len(t.fields) > 6 else ''})"
    return _NAMES[t.kind]


_KIND_CHECKS = {  # one test per kind, evaluated only for the value's own kind (the pack checks every input)
    "str": lambda v: isinstance(v, str),
    "int": _whole,
    "bool": lambda v: isinstance(v, bool),
    "quantity": lambda v: isinstance(v, (str, int, float)) and not isinstance(v, bool),
    "int_or_str": lambda v: isinstance(v, str) or _whole(v),
    "list": _is_list,
    "map": lambda v: isinstance(v, Mapping),
    "object": lambda v: isinstance(v, Mapping),
}


def _check(value: Any, t: T, path: str, out: list[Problem]) -> None:
    if value is None:  # null is absent; required fields are checked by the parent
        return
    ok = _KIND_CHECKS[t.kind](value)
    if not ok:
        out.append(Problem(path, f"{found(value)}; allowed: {_allowed(t)}"))
        return
    if t.kind == "str" and t.pattern and not re.fullmatch(t.pattern, value):
        out.append(Problem(path, f"{found(value)}; allowed: {t.allowed}"))
    elif t.kind == "list":
        for i, item in enumerate(value):
            _check(item, t.item, _join(path, i), out)
    elif t.kind == "map":
        for key, item in value.items():
            if not isinstance(key, str):
                out.append(Problem(_join(path, key), f"key {found(key)}; allowed: string keys"))
            _check(item, t.item, _join(path, key), out)
    elif t.kind == "object":
        for key in t.required:
            if value.get(key) is None:
                what = _allowed(t.fields[key]) if t.fields and key in t.fields else "a value"
                out.append(Problem(_join(path, key), f"missing; required: {what}"))
        for key, item in value.items():
            if not isinstance(key, str):
                out.append(Problem(_join(path, key), f"key {found(key)}; allowed: string keys"))
            elif t.fields and key in t.fields:
                _check(item, t.fields[key], _join(path, key), out)


def problems(doc: Any) -> list[Problem]:
    """Every shape problem of one YAML document, as (JSON path, message); [] for a well-formed object."""
    if not isinstance(doc, Mapping):
        return [
            Problem("", f"{found(doc)}; allowed: a Kubernetes object (a mapping with apiVersion, kind and metadata)")
        ]
    out: list[Problem] = []
    _check(doc, TOP, "", out)
    if out:  # without a valid kind nothing below can be typed
        return out
    meta = doc["metadata"]
    if meta.get("name") is None and meta.get("generateName") is None:
        out.append(Problem("metadata.name", "missing; required: a name (or generateName)"))
    kind = doc["kind"]
    if kind == "List":
        return out + [Problem("kind", "a List; allowed: the objects themselves (check reads a List's items)")]
    spec_type = SPECS.get(kind)
    if spec_type is not None:
        _check(doc.get("spec"), spec_type, "spec", out)
    return out


def check_type(value: Any, t: T, path: str = "") -> list[Problem]:
    """The problems of any value against a declared type (records and state files use this too)."""
    out: list[Problem] = []
    if value is None and path == "":
        return [Problem("", f"{found(value)}; allowed: {_allowed(t)}")]
    _check(value, t, path, out)
    return out
