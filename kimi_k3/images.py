"""Container image references: is one pinned, and does its tag name a Dynamo runtime version.

One implementation for the config check (kimi_k3/graph.py) and the policy rules (policies/rules/)."""
from __future__ import annotations

import re
from typing import Optional

# Only a plain MAJOR.MINOR.PATCH tag names a runtime version: a pre-release such as 1.4.0-kimi-k3-dev.1 sorts
# before 1.4.0, so the Dynamo operator needs runtimeVersionOverride for it.
RUNTIME_VERSION = re.compile(r"^v?\d+\.\d+\.\d+$")


def image_tag(image: str) -> Optional[str]:
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else None


def pin_problem(image: Optional[str]) -> Optional[str]:
    """Why an image reference is not pinned, or None: a digest, or a tag other than latest."""
    if not image:
        return "has no image"
    if "@sha256:" in image:
        return None
    tag = image_tag(image)
    if tag is None:
        return f"image {image} is untagged (means latest)"
    if tag == "latest":
        return f"image {image} uses the latest tag"
    return None


def names_runtime_version(image: str) -> bool:
    tag = image_tag(image)
    return tag is not None and bool(RUNTIME_VERSION.match(tag))
