"""Every output file is written whole or not at all: to a temporary file in the same directory, then renamed over
the target (os.replace is atomic within one filesystem), so a full disk or an interrupt never leaves an empty or
half-written manifests.yaml, report or PNG behind, and a previous good file stays until the new one is complete."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_with(path: Path | str, write: Callable[[str], None]) -> Path:
    """`write(tmp)` writes the content to the file named tmp (same directory and suffix as `path`, so tools that
    infer a format from the name, such as matplotlib's savefig, still do); then tmp replaces `path`."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=f".tmp{target.suffix}")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; the file gets the mode a plain open() would give
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target


def write_text(path: Path | str, text: str) -> Path:
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    return write_with(path, write)
