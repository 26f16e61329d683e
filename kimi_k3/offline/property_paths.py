"""replacement.py -> property_paths.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Mapping, Optional, Sequence

_MISSING = object()


_TOKEN = re.compile(r'\[(\d+|\*|"(?:[^"\\]|\\.)*")\]|\.?([^.\[\]]+)')


def parse_path(path: str) -> tuple[Any, ...]:
    """A Pulumi property path (`a.b[0]["c.d"]`, `*` wildcards) as a tuple of str keys, int indexes and '*'."""
    out: list[Any] = []
    pos = 0
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if not m or m.end() == pos:
            raise ValueError(f"bad property path {path!r}")
        bracket, plain = m.groups()
        if bracket is not None:
            out.append("*" if bracket == "*" else int(bracket) if bracket.isdigit() else json.loads(bracket))
        else:
            out.append(plain)
        pos = m.end()
    return tuple(out)


def format_path(parts: Sequence[Any]) -> str:
    """As the providers print paths: dotted keys, [i] indexes, ["k"] for keys with . " [ ]."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif any(c in p for c in '."[]'):
            out += f"[{json.dumps(p)}]"
        else:
            out = f"{out}.{p}" if out else p
    return out


def _segment_matches(pattern: Any, part: Any) -> bool:
    return pattern == "*" or pattern == part


def path_contains(prefix: Sequence[Any], path: Sequence[Any]) -> bool:
    """PropertyPath.Contains: `prefix` equals the start of `path` (a `*` matches any key or index)."""
    return len(prefix) <= len(path) and all(_segment_matches(a, b) for a, b in zip(prefix, path))


def _reset(new: Any, old: Any, path: Sequence[Any]) -> Any:
    """`new` with the value at `path` taken from `old` (removed where `old` has none): processIgnoreChanges."""
    if not path:
        return old
    head, rest = path[0], path[1:]
    if isinstance(new, dict):
        keys = list(new) if head == "*" else [head]
        out = dict(new)
        for k in keys:
            o = old.get(k, _MISSING) if isinstance(old, dict) else _MISSING
            if o is _MISSING and not rest:
                out.pop(k, None)
            elif k in out and o is not _MISSING:
                out[k] = _reset(out[k], o, rest)
        return out
    if isinstance(new, list):
        idx = range(len(new)) if head == "*" else [head] if isinstance(head, int) and head < len(new) else []
        out_list = list(new)
        for i in idx:
            if isinstance(old, list) and i < len(old):
                out_list[i] = _reset(out_list[i], old[i], rest)
        return out_list
    return new


def apply_ignore_changes(
    new_inputs: Mapping[str, Any], old_inputs: Mapping[str, Any], ignore_changes: Iterable[str]
) -> dict[str, Any]:
    out: Any = dict(new_inputs)
    for p in ignore_changes:
        out = _reset(out, old_inputs, parse_path(p))
    return out


def _secret_only(value: Any) -> bool:
    if isinstance(value, dict):
        return bool(value) and all(_secret_only(v) for v in value.values())
    if isinstance(value, list):
        return bool(value) and all(_secret_only(v) for v in value)
    return value == "[secret]"


def _equal(a: Any, b: Any) -> bool:
    # Secrets are placeholders offline (render and state export never show plaintexts): not comparable, not a change.
    if _secret_only(a) and _secret_only(b):
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


def leaf_changes(old: Any, new: Any, path: tuple = ()) -> list[tuple[tuple, str, Any]]:
    """(path, add|update|delete, new value) for every difference, walked as pulumi-kubernetes' patchConverter
    walks a JSON merge patch: maps key by key, lists index by index, anything else compared whole."""
    if _secret_only(old) and _secret_only(new):
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new)):
            o, n = old.get(k, _MISSING), new.get(k, _MISSING)
            if o is _MISSING:
                out.append((path + (k,), "add", n))
            elif n is _MISSING:
                out.append((path + (k,), "delete", None))
            else:
                out += leaf_changes(o, n, path + (k,))
        return out
    if isinstance(old, list) and isinstance(new, list):
        out = []
        for i in range(max(len(old), len(new))):
            if i >= len(old):
                out.append((path + (i,), "add", new[i]))
            elif i >= len(new):
                out.append((path + (i,), "delete", None))
            else:
                out += leaf_changes(old[i], new[i], path + (i,))
        return out
    return [] if _equal(old, new) else [(path, "update", new)]


def _reaches(pattern: Sequence[Any], value: Any) -> bool:
    """`pattern` resolves inside `value` (client-go jsonpath over the patch slice: a [*] needs one element)."""
    if not pattern:
        return True
    head, rest = pattern[0], pattern[1:]
    if isinstance(value, dict):
        return head in value and _reaches(rest, value[head])
    if isinstance(value, list):
        if head == "*":
            return any(_reaches(rest, v) for v in value)
        return isinstance(head, int) and head < len(value) and _reaches(rest, value[head])
    return False


def force_new_match(force_new: Iterable[str], path: Sequence[Any], value: Any) -> Optional[str]:
    """The first force-new path this change hits (openapi.PatchPropertiesChanged over makePatchSlice)."""
    for fn in force_new:
        pattern = parse_path(fn)
        common = min(len(pattern), len(path))
        if not all(_segment_matches(a, b) for a, b in zip(pattern[:common], path[:common])):
            continue
        if len(pattern) <= len(path):
            return fn
        # The change sits above the force-new field: it replaces when the new value contains that field
        # (a delete carries no value, and jsonpath finds nothing below it).
        if value is not None and _reaches(pattern[len(path) :], value):
            return fn
    return None
