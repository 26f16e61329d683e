"""Stack files and recipe files, read the way Pulumi reads a stack file: the one YAML loader for both.

Pulumi loads `Pulumi.<stack>.yaml` with gopkg.in/yaml.v3 (pulumi/pulumi sdk/go/common/encoding/marshal.go,
`yaml.Unmarshal`, into `any`: workspace/loaders.go LoadProjectStackBytes). PyYAML's SafeLoader reads YAML 1.1 and
differs where it matters for a stack file; this loader follows yaml.v3 v3.0.1 (go-yaml/yaml resolve.go, decode.go):
- plain `yes`, `no`, `on`, `off`, `y`, `n` are text; only true/True/TRUE/false/False/FALSE are booleans;
- no sexagesimal numbers (`1:2` is text, not 62); ints as Go's strconv.ParseInt(s, 0, 64) reads them after removing
  `_` (0x, 0o, 0b, and 0777 as octal), floats only in YAML 1.2 form; `1e999` (out of range) stays text;
- a key twice in one mapping is an error ("mapping key ... already defined at line N", decode.go d.mapping);
- aliases are expanded only within yaml.v3's budget ("document contains excessive aliasing"), and an anchor that
  contains itself is an error;
- an unquoted timestamp reaches the program as Go's time.Time.String() (config/object.go unmarshalObject), e.g.
  `2026-10-01 00:00:00 +0000 UTC`, not as the date the user typed.
Errors are UserErrors naming the file, the line and the key.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from kimi_k3.errors import UserError, shown, yaml_error_message

STR, INT, FLOAT, BOOL, NULL = ("tag:yaml.org,2002:" + t for t in ("str", "int", "float", "bool", "null"))
TIMESTAMP, MERGE = "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:merge"

# yaml.v3 resolve.go resolveMapList: the only plain scalars that are not text or numbers.
_MAP: dict[str, tuple[str, Any]] = {
    **{s: (BOOL, True) for s in ("true", "True", "TRUE")},
    **{s: (BOOL, False) for s in ("false", "False", "FALSE")},
    **{s: (NULL, None) for s in ("", "~", "null", "Null", "NULL")},
    **{s: (FLOAT, math.nan) for s in (".nan", ".NaN", ".NAN")},
    **{s: (FLOAT, math.inf) for s in (".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF")},
    **{s: (FLOAT, -math.inf) for s in ("-.inf", "-.Inf", "-.INF")},
    "<<": (MERGE, None),
}
_YAML_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")  # resolve.go yamlStyleFloat
_GO_INT = re.compile(r"^[-+]?(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)$")  # ParseInt base 0
_TIMESTAMP = re.compile(
    r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:(?:[Tt]| )(\d{1,2}):(\d{1,2}):(\d{1,2})(\.\d+)?"
    r"(Z|[-+]\d{2}:\d{2})?)?$"
)  # resolve.go allowedTimestampFormats
INT64 = (-(2**63), 2**63 - 1)
UINT64_MAX = 2**64 - 1


def _go_int(text: str) -> int | None:
    """strconv.ParseInt(text, 0, 64), then ParseUint: the int yaml.v3 reads, or None."""
    if not _GO_INT.match(text):
        return None
    sign, digits = (-1, text[1:]) if text[0] == "-" else (1, text.lstrip("+"))
    base = {"0x": 16, "0X": 16, "0o": 8, "0O": 8, "0b": 2, "0B": 2}.get(digits[:2])
    value = sign * (
        int(digits[2:], base) if base else int(digits, 8) if digits[:1] == "0" and len(digits) > 1 else int(digits)
    )
    if INT64[0] <= value <= INT64[1] or (0 <= value <= UINT64_MAX and text[0] != "+"):
        return value
    return None


def _timestamp(text: str) -> str | None:
    """An unquoted timestamp as the program receives it: Go's time.Time.String()."""
    m = _TIMESTAMP.match(text)
    if not m:
        return None
    y, mo, d, h, mi, s, frac, zone = m.groups()
    try:
        datetime.datetime(int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0))
    except ValueError:
        return None
    frac = (frac or "").rstrip("0").rstrip(".")
    offset = "+0000 UTC" if zone in (None, "Z") else f"{zone.replace(':', '')} {zone.replace(':', '')}"
    return (
        f"{int(y):04d}-{int(mo):02d}-{int(d):02d} {int(h or 0):02d}:{int(mi or 0):02d}:{int(s or 0):02d}{frac} {offset}"
    )


def resolve_plain(text: str) -> tuple[str, Any]:
    """(tag, value) of an unquoted scalar as yaml.v3 v3.0.1 resolve() reads it."""
    if text in _MAP:
        return _MAP[text]
    first = text[:1]
    if first == ".":
        return (FLOAT, float(text)) if _YAML_FLOAT.match(text) else (STR, text)
    if first.isdigit() or first in "+-":
        stamp = _timestamp(text)
        if stamp is not None:
            return TIMESTAMP, stamp
        plain = text.replace("_", "")
        value = _go_int(plain)
        if value is not None:
            return INT, value
        if _YAML_FLOAT.match(plain):
            f = float(plain)
            return (FLOAT, f) if not math.isinf(f) else (STR, text)  # ParseFloat's ErrRange: stays text
        for prefix, base in (("0b", 2), ("-0b", 2), ("0o", 8), ("-0o", 8)):
            if plain.startswith(prefix):
                try:
                    return INT, int(("-" if prefix[0] == "-" else "") + plain[len(prefix) :], base)
                except ValueError:
                    break
    return STR, text


class _Resolver(yaml.resolver.BaseResolver):
    def resolve(self, kind, value, implicit):
        if kind is ScalarNode and implicit[0]:
            return resolve_plain(value)[0]
        return super().resolve(kind, value, implicit)


class _Constructor(yaml.constructor.SafeConstructor):
    label = "<yaml>"

    def _scalar(self, node):
        if not node.style:  # plain (None; '' from libyaml): what resolve_plain read
            return resolve_plain(node.value)[1]
        return node.value  # quoted with an explicit tag: read as text (yaml.v3 refuses most of these)

    def construct_mapping(self, node, deep=False):
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode):
                line = key_node.start_mark.line + 1
                if key_node.value in seen:
                    raise UserError(
                        f"{self.label} line {line}: key {shown(key_node.value)} is already defined at line "
                        f"{seen[key_node.value]}; Pulumi's YAML parser (gopkg.in/yaml.v3) refuses a key twice in one "
                        "mapping; allowed: each key once (merge the two blocks)"
                    )
                seen[key_node.value] = line
        return super().construct_mapping(node, deep=deep)


for _tag in (INT, FLOAT, BOOL, NULL, TIMESTAMP):
    _Constructor.add_constructor(_tag, _Constructor._scalar)


# yaml.v3 decode.go allowedAliasRatio: 99% of a small document may come from aliases, 10% of a huge one.
def allowed_alias_ratio(decodes: int) -> float:
    low, high = 400_000, 4_000_000
    if decodes <= low:
        return 0.99
    if decodes >= high:
        return 0.10
    return 0.99 - 0.89 * (decodes - low) / (high - low)


def check_aliases(root, label: str) -> None:
    """Refuse what yaml.v3 refuses: an anchor inside itself, or excessive aliasing (counted without expanding)."""
    size: dict[int, int] = {}
    distinct: set[int] = set()
    on_path: set[int] = set()

    def expanded(node) -> int:
        if id(node) in size:
            return size[id(node)]
        if id(node) in on_path:
            raise UserError(
                f"{label} line {node.start_mark.line + 1}: an anchor's value contains an alias of itself; "
                "allowed: aliases of finished values (Pulumi's YAML parser refuses this too)"
            )
        on_path.add(id(node))
        distinct.add(id(node))
        children = (
            [n for pair in node.value for n in pair]
            if isinstance(node, MappingNode)
            else node.value
            if isinstance(node, SequenceNode)
            else []
        )
        total = 1 + sum(expanded(child) for child in children)
        on_path.discard(id(node))
        size[id(node)] = total
        return total

    total = expanded(root)
    aliased = total - len(distinct)
    if aliased > 100 and total > 1000 and aliased / total > allowed_alias_ratio(total):
        raise UserError(
            f"{label}: aliases expand to {total:,} values from {len(distinct):,} written; allowed: at most "
            f"{allowed_alias_ratio(total):.0%} of a document from aliases (gopkg.in/yaml.v3, which "
            "Pulumi reads stack files with, refuses it as 'excessive aliasing')"
        )


def _loader_class(parser=None):
    bases = (
        (parser,)
        if parser is not None
        else (yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, yaml.composer.Composer)
    )

    class StrictLoader(*bases, _Constructor, _Resolver):
        def __init__(self, stream):
            if parser is not None:
                parser.__init__(self, stream)
            else:
                yaml.reader.Reader.__init__(self, stream)
                yaml.scanner.Scanner.__init__(self)
                yaml.parser.Parser.__init__(self)
                yaml.composer.Composer.__init__(self)
            _Constructor.__init__(self)
            _Resolver.__init__(self)

    return StrictLoader


PureLoader = _loader_class()  # PyYAML's own reader, scanner, parser and composer
# libyaml's parser and composer, ~10x faster (perf-raw.yaml is ~100 KB); PyYAML keeps CParser in yaml.cyaml only.
StrictLoader = _loader_class(yaml.cyaml.CParser) if yaml.__with_libyaml__ else PureLoader


def load(text: str, label: str) -> Any:
    """One YAML document as Pulumi's yaml.v3 reads it; `label` (the file as the user knows it) names it in errors."""
    try:
        return _load(StrictLoader, text, label)
    except UserError:
        if StrictLoader is PureLoader:
            raise
        # libyaml's messages name less ("found character that cannot start any token": which one?); the pure-Python
        # reader's name the character, alias or escape, and a file that fails to read is the rare path.
        try:
            _load(PureLoader, text, label)
        except UserError as pure:
            raise pure from None
        raise


def _load(loader_class, text: str, label: str) -> Any:
    loader = None
    try:
        loader = loader_class(text)  # the pure-Python reader refuses control characters here
        loader.label = label
        node = loader.get_single_node()
        if node is None:
            return None
        check_aliases(node, label)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise UserError(yaml_error_message(label, exc)) from None
    except RecursionError:
        raise UserError(
            f"{label}: nested too deeply to read; allowed: a stack or recipe file of ordinary depth"
        ) from None
    finally:
        if loader is not None:
            loader.dispose()
