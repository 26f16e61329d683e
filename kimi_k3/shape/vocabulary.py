"""The type vocabulary object shapes are declared in: T and its constructors (LIST, MAP, OBJ)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class T:
    """A declared type: kind in str|int|bool|quantity|list|map|object; item (list/map) or fields (object)."""

    kind: str
    item: Optional["T"] = None
    fields: Optional[Mapping[str, "T"]] = None
    required: tuple[str, ...] = ()
    pattern: Optional[str] = None  # for str: a regex the value must match (fullmatch)
    allowed: str = ""  # for str with a pattern: what is allowed, in words


STR, INT, BOOL = T("str"), T("int"), T("bool")
QUANTITY = T("quantity")  # resource.Quantity: a string or a number (`nvidia.com/gpu: 4`, `memory: 200Gi`)
INT_OR_STR = T("int_or_str")  # intstr.IntOrString


def LIST(item: T) -> T:
    return T("list", item=item)


def MAP(item: T) -> T:
    return T("map", item=item)


def OBJ(fields: Mapping[str, T], required: tuple[str, ...] = ()) -> T:
    return T("object", fields=fields, required=required)
