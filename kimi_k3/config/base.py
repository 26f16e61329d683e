"""stack.py -> base.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import json
import re
import typing
from typing import Annotated, Any, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kimi_k3.errors import UserError, did_you_mean

NAMESPACE = "kimi-k3"  # the project name (Pulumi.yaml): Pulumi passes `kimi-k3:<key>` to this program


# What a pattern means, for error messages (a user is told the rule in words, never the regex).
PATTERN_ALLOWED: dict[str, str] = {}


def allowed_as(regex: str, allowed: str) -> str:
    """`regex`, recorded with the words an error message gives for it."""
    PATTERN_ALLOWED[regex] = allowed
    return regex


INSTANCE_TYPE = allowed_as(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$", "an EC2 instance type FAMILY.SIZE, e.g. m7i.8xlarge")


InstanceType = Annotated[str, Field(pattern=INSTANCE_TYPE)]


Zone = Annotated[
    str,
    Field(
        pattern=allowed_as(
            r"^[a-z]{2}(-[a-z]+)+-\d([a-z]|(-[a-z0-9]+)+)$",
            "an availability or Local Zone name, e.g. us-east-1a or us-east-1-dfw-2a",
        )
    ),
]


QUANTITY = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"


DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


Quantity = Annotated[str, Field(pattern=allowed_as(QUANTITY, "a Kubernetes quantity, e.g. 16Gi, 512Mi or 1000"))]


# A flag map: `--flag: value`; `true` is a bare flag; `null` (in overrides) drops the flag.
FlagValue = Union[bool, str, int, float, None]


class ConfigError(UserError):
    """One clear, user-facing configuration error (key, value, what is allowed)."""


MAX_TEXT = 4096  # longest text any key takes (a flag's JSON value is ~200): a pasted blob is refused, cut when shown


YAML11_BOOLS = {"y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF"}


def _scalar_kind(annotation: Any) -> Any:
    """bool, int or float for a field of that type (or Optional of it), else None."""
    args = (
        [a for a in typing.get_args(annotation) if a is not type(None)]
        if typing.get_origin(annotation) is Union
        else [annotation]
    )
    return args[0] if len(args) == 1 and args[0] in (bool, int, float) else None


class Strict(BaseModel):
    # Finite numbers only (an .inf price printed "$inf"); no text longer than MAX_TEXT.
    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, frozen=True, allow_inf_nan=False, str_max_length=MAX_TEXT
    )

    @field_validator("*", mode="before")
    @classmethod
    def _typed_scalars(cls, v: Any, info: Any) -> Any:
        """true/false only where a boolean goes, and never where a number goes (pydantic would take 'yes' and 1 as
        true, and true as 1): Pulumi reads stack files as YAML 1.2, where yes/no/on/off are text."""
        kind = _scalar_kind(cls.model_fields[info.field_name].annotation)
        if kind is bool and v is not None and not isinstance(v, bool):
            hint = (
                " (Pulumi reads stack files as YAML 1.2, where yes, no, on and off are text)"
                if isinstance(v, str) and v in YAML11_BOOLS
                else ""
            )
            raise ValueError(f"allowed: true or false{hint}")
        if kind in (int, float) and isinstance(v, bool):
            raise ValueError("allowed: a number, not true/false")
        return v


def _key_of(loc: tuple[Any, ...]) -> str:
    """pydantic location -> the config key a user types, e.g. kimi-k3:serving.roles.decode.replicas."""
    names = [str(p) for p in loc if not str(p).startswith(("function-", "literal["))]
    names = [n if len(n) <= 80 else f"{n[:80]}... ({len(n):,} characters)" for n in names]  # a pasted blob as a key
    if not names:
        return f"{NAMESPACE}:<stack>"
    return f"{NAMESPACE}:{names[0]}" + "".join(f".{n}" for n in names[1:])


def _yaml_number_hint(value: Any) -> str:
    """Why a number reached a text field: YAML reads an unquoted 1.30 as the float 1.3."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ""
    return f" (YAML read the unquoted value as the number {value!r}" + (
        ', dropping trailing zeros: 1.30 becomes 1.3; quote it in the stack file, e.g. "1.30")'
        if isinstance(value, float)
        else f'; quote it in the stack file, e.g. "{value}")'
    )


GO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)? [-+]\d{4} ")  # yaml_strict: an unquoted timestamp


def _yaml_text_hint(value: Any) -> str:
    """Why text reached a number field or broke a pattern: YAML 1.2 words and timestamps, as Pulumi reads them."""
    if isinstance(value, str) and value in YAML11_BOOLS:
        return f" (Pulumi reads stack files as YAML 1.2, where {value} is text, not a boolean)"
    if isinstance(value, str) and GO_TIME.match(value):
        return (
            f" (YAML read the unquoted date as a timestamp, which Pulumi passes as {value!r}; quote it in the "
            f'stack file, e.g. "{value[:10]}")'
        )
    return ""


def echo(value: Any, limit: int = 120) -> str:
    """A value as JSON for a message, cut to `limit` characters with a note of its length."""
    text = json.dumps(value, default=str)
    if len(text) <= limit:
        return text
    length = len(value) if isinstance(value, (str, list, dict)) else len(text)
    unit = "characters" if isinstance(value, str) else "items" if isinstance(value, (list, dict)) else "characters"
    return f"{text[:limit]}... ({length:,} {unit})"


def _message(e: dict[str, Any], siblings: list[str]) -> str:
    """One validation error in words: what is wrong and what is allowed (never a raw regex)."""
    kind, msg, ctx = e["type"], e["msg"].removeprefix("Value error, "), e.get("ctx") or {}
    if kind == "string_pattern_mismatch":
        return (
            "allowed: "
            + PATTERN_ALLOWED.get(ctx.get("pattern", ""), f"a value matching {ctx.get('pattern')}")
            + _yaml_text_hint(e.get("input"))
        )
    if kind in ("int_parsing", "float_parsing", "int_type", "float_type"):
        return msg + _yaml_text_hint(e.get("input"))
    if kind == "finite_number":
        return "allowed: a finite number (not .inf, inf or nan)"
    if kind == "string_too_long":
        return f"allowed: at most {ctx.get('max_length')} characters"
    if kind == "string_type":
        return "must be text" + _yaml_number_hint(e.get("input"))
    if kind == "literal_error":
        return "allowed: " + str(ctx.get("expected", msg)).replace("'", "")
    if kind == "model_type" or kind == "dict_type":
        return "must be a mapping of keys to values" + (f"; allowed keys: {', '.join(siblings)}" if siblings else "")
    return msg


def _field_names(model: Any, loc: tuple[Any, ...]) -> list[str]:
    """The keys a user may write where `loc` points (for 'unknown key' and 'must be a mapping' messages)."""
    for part in loc[:-1]:
        field = getattr(model, "model_fields", {}).get(str(part)) or next(
            (f for f in getattr(model, "model_fields", {}).values() if f.alias == str(part)), None
        )
        if field is None:
            return []
        inner = [
            a
            for a in [field.annotation, *typing_args(field.annotation)]
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if not inner:
            return []
        model = inner[0]
    return sorted((f.alias or n) for n, f in getattr(model, "model_fields", {}).items())


def typing_args(annotation: Any) -> list[Any]:
    import typing

    out = []
    for a in typing.get_args(annotation):
        out += [a, *typing.get_args(a)]
    return out


def format_validation_error(err: ValidationError, model: Any = None) -> str:
    lines = []
    for e in err.errors():
        key = _key_of(e["loc"])
        if e["type"] == "extra_forbidden":
            known = _field_names(model, e["loc"]) if model is not None else []
            hint = did_you_mean(str(e["loc"][-1]), known) + (
                f"; allowed keys: {', '.join(known)}"
                if known
                else " (check the spelling against the configuration reference, docs/configure.md)"
            )
            lines.append(f"{key}: unknown key{hint}")
        elif e["type"] == "missing":
            lines.append(f"{key}: required but not set")
        else:
            siblings = _field_names(model, (*e["loc"], "")) if model is not None else []
            lines.append(f"{key} = {echo(e.get('input'))}: {_message(e, siblings)}")
    return "invalid stack configuration:\n  " + "\n  ".join(lines)
