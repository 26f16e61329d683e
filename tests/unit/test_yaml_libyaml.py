"""The strict loader parses with libyaml where PyYAML has it, and reads and refuses exactly as PyYAML's own parser.

The fast path was once written as `getattr(yaml, "CParser", None)`, a name PyYAML does not export: every stack and
recipe file was parsed in pure Python (6x slower) and nothing noticed. These tests pin both halves: libyaml is
used, and switching to it changed no value read and no message a user sees."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kimi_k3 import yaml_strict
from kimi_k3.errors import UserError

ROOT = Path(__file__).resolve().parents[2]


def read_with(loader_class, text: str, label: str = "Pulumi.x.yaml"):
    """What yaml_strict.load returns or refuses when it parses with `loader_class`."""
    saved = yaml_strict.StrictLoader
    yaml_strict.StrictLoader = loader_class
    try:
        return "read", yaml_strict.load(text, label)
    except UserError as err:
        return "refused", str(err)
    finally:
        yaml_strict.StrictLoader = saved


def test_libyaml_parses_when_pyyaml_has_it():
    if not yaml.__with_libyaml__:
        pytest.skip("this PyYAML was built without libyaml: the pure-Python parser is the only one")
    assert yaml.cyaml.CParser in yaml_strict.StrictLoader.__mro__
    assert yaml_strict.StrictLoader is not yaml_strict.PureLoader


def test_every_shipped_file_reads_the_same_with_either_parser():
    files = sorted((ROOT / "recipes").rglob("*.yaml")) + sorted(ROOT.glob("Pulumi*.yaml"))
    assert len(files) > 40
    for path in files:
        text = path.read_text()
        fast = read_with(yaml_strict.StrictLoader, text, path.name)
        assert fast[0] == "read", fast
        assert fast == read_with(yaml_strict.PureLoader, text, path.name), path.name


@pytest.mark.parametrize(
    "text, names",
    [
        ("a: [1, 2\n", "expected ',' or ']'"),
        ("a:\n\tb: 1\n", "found character '\\t'"),  # libyaml alone does not say which character
        ("a: *nope\n", "undefined alias 'nope'"),  # nor which alias
        ("- a\nb: 1\n", "line 2, column 1"),
        ("a: b: c\n", "mapping values are not allowed"),
        ('k: "\\xZZ"\n', "but found 'Z'"),
        ("a: &x [*x]\n", "contains an alias of itself"),
        ("a: 1\na: 2\n", "key 'a' is already defined at line 1"),
        (
            "a: &a [1, 1, 1, 1]\n"
            + "".join(f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi")),
            "excessive aliasing",
        ),
        ("a: \x00\n", "unacceptable character #x0000"),  # the pure-Python reader refuses it before parsing
    ],
)
def test_a_malformed_file_is_refused_with_the_pure_python_message(text, names):
    fast, pure = read_with(yaml_strict.StrictLoader, text), read_with(yaml_strict.PureLoader, text)
    assert fast == pure
    assert fast[0] == "refused" and fast[1].startswith("Pulumi.x.yaml") and names in fast[1], fast
