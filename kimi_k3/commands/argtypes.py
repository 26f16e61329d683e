"""argparse types for every command's flags: one place, so a bad value is refused while the arguments are parsed,
before anything starts or is written, with one line naming the flag, the value and what is allowed
(`kimi-k3 plan: argument --top: -2 is too small; allowed: 1 or more`)."""

from __future__ import annotations

import argparse
import math
import re
from typing import Callable, Iterable


def whole(least: int, most: int | None = None) -> Callable[[str], int]:
    """A whole number in [least, most] (most: None for no upper bound)."""
    allowed = f"{least} or more" if most is None else f"{least} to {most:,}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; allowed: {allowed}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{value} is too small; allowed: {allowed}")
        if most is not None and value > most:
            raise argparse.ArgumentTypeError(f"{value:,} is too large; allowed: {allowed}")
        return value

    parse.__name__ = f"whole number >= {least}"
    return parse


positive_int = whole(1)


def finite(text: str, flag: str | None = None, allowed: str | None = "a number > 0") -> float:
    """Any finite number (nan and inf are refused: they pass every comparison check or overflow later).

    `flag` prefixes the message with the flag's name; `allowed` (None: left out) ends the non-finite one."""
    said = f"{flag} {text!r}" if flag else repr(text)
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{said} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(
            f"{said} is not a finite number" + (f"; allowed: {allowed}" if allowed else "")
        )
    return value


def positive(text: str) -> float:
    """A finite number > 0 (a zero or negative time, rate, price or throughput means nothing)."""
    value = finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not positive; allowed: a number > 0")
    return value


finite_positive_float = positive


def fraction(text: str) -> float:
    """A share in (0, 1]."""
    value = finite(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is outside (0, 1]; allowed: e.g. 0.9")
    return value


def choice_list(allowed: Iterable[str]) -> Callable[[str], tuple[str, ...]]:
    """A comma-separated, non-empty list of names out of `allowed`, each at most once."""
    allowed = tuple(allowed)

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(n.strip() for n in text.split(","))
        bad = [n for n in names if n not in allowed]
        if not text.strip() or bad or len(set(names)) != len(names):
            what = f"{', '.join(map(repr, bad))} unknown" if bad else "empty or repeated names"
            raise argparse.ArgumentTypeError(f"{text!r}: {what}; allowed: {', '.join(allowed)} (comma-separated)")
        return names

    parse.__name__ = "comma-separated list"
    return parse


def model_context() -> int:
    """The longest sequence Kimi K3 takes (recipes/facts/model.yaml, text.max_position_embeddings)."""
    from kimi_k3.data import recipe_file

    return int(recipe_file("facts/model.yaml")["text"]["max_position_embeddings"])


def context_tokens(text: str) -> int:
    """A token count of one request: 1 to the model's context (a longer request is refused, not answered)."""
    return whole(1, model_context())(text)


def year_month(text: str) -> str:
    """A date YYYY-MM or YYYY-MM-DD (as the stack file's kimi-k3:pricing.asOf, kimi_k3/config/stack.py)."""
    import datetime

    m = re.fullmatch(r"(\d{4})-(\d{2})(?:-(\d{2}))?", text)
    try:
        if m is None:
            raise ValueError
        datetime.date(int(m[1]), int(m[2]), int(m[3] or 1))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a date; allowed: YYYY-MM or YYYY-MM-DD, e.g. 2026-10"
        ) from None
    return text


def nonempty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is empty; allowed: a non-empty text (where the value comes from)")
    return text


def seconds_window(text: str) -> tuple[float, float]:
    """START:END seconds, 0 <= START <= END (a time window of a trace, from its first timestamp's origin)."""
    allowed = "START:END seconds with 0 <= START <= END, e.g. 600:900"
    parts = text.split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        start, end = (float(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a window; allowed: {allowed}") from None
    if not (math.isfinite(start) and math.isfinite(end) and 0 <= start <= end):
        raise argparse.ArgumentTypeError(f"{text!r} is not a window; allowed: {allowed}")
    return start, end


def bounded(least: float, most: float) -> Callable[[str], float]:
    """A finite number in [least, most]."""

    def parse(text: str) -> float:
        value = finite(text)
        if not least <= value <= most:
            raise argparse.ArgumentTypeError(f"{text} is out of range; allowed: {least:g} to {most:g}")
        return value

    parse.__name__ = f"number in [{least:g}, {most:g}]"
    return parse
