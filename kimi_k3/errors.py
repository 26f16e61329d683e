"""The one exception type for bad input: its message names the file or key, the value and what is allowed.

Every command prints it as one line (`kimi-k3 <command>: <message>`) and exits 2; `__main__.py` turns it into a
`pulumi.RunError` before anything is registered. No dependencies: importable before anything else."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Iterable, Optional


class UserError(Exception):
    """Bad input, reported as one message (file/key, value, what is allowed); never a traceback."""


def did_you_mean(value: str, allowed: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for a likely misspelling of one of `allowed`, else ''."""
    close = difflib.get_close_matches(value, list(allowed), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


SHOWN_CHARS = 120  # an echoed value longer than this is cut, with its length: one line stays one line


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """`repr(value)` for a message, cut to `limit` characters with a note of the full length."""
    text = value if isinstance(value, str) else None
    out = repr(value)
    if len(out) <= limit:
        return out
    length = f"{len(text):,} characters" if text is not None else f"{len(out):,} characters as text"
    return out[:limit] + f"... ({length})"


def yaml_error_message(path: Path | str, exc: Exception) -> str:
    """A YAML syntax error as `FILE line L, column C: problem` (PyYAML's marks are 0-based)."""
    mark = getattr(exc, "problem_mark", None)
    where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = " ".join(str(p) for p in (getattr(exc, "context", None), getattr(exc, "problem", None)) if p) or str(exc)
    return f"{path}{where}: not valid YAML ({problem})"


def read_text(path: Path | str, what: str, hint: Optional[str] = None) -> str:
    """The file's text, or a UserError naming the file and why it cannot be read."""
    p = Path(path)
    try:
        return p.read_text()
    except FileNotFoundError:
        raise UserError(f"{what} {path}: no such file" + (f"; {hint}" if hint else "")) from None
    except IsADirectoryError:
        raise UserError(f"{what} {path}: is a directory, not a file" + (f"; {hint}" if hint else "")) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{what} {path}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None


def check_writable_dir(path: Path | str, flag: str) -> Path:
    """A UserError unless `path` is a directory that exists, or could be created, and can be written.

    Checked without creating anything (so a run that fails later leaves nothing behind)."""
    import os

    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UserError(f"{flag} {path}: exists and is not a directory; allowed: a directory (created if missing)")
    probe = p
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"{flag} {path}: cannot be created, {probe} is a file, not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {path}: cannot be written, {probe} is not writable by this user")
    return p
