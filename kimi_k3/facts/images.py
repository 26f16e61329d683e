"""Container image references: is one pinned, and does its tag name a Dynamo runtime version.

One implementation for the config check (kimi_k3/graph/build.py) and the policy rules (policies/rules/)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from kimi_k3.data import recipe_file

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


# CPU architectures, in Kubernetes' names (the kubernetes.io/arch node label), of the nodes these clusters run.
NODE_ARCHES = ("amd64", "arm64")
_AWS_ARCH = {"x86_64": "amd64", "arm64": "arm64", "amd64": "amd64"}


def kube_arch(arch: str) -> str:
    """AWS/EC2 architecture name -> kubernetes.io/arch value."""
    return _AWS_ARCH.get(arch, arch)


@dataclass(frozen=True)
class ImageFacts:
    arch: Optional[frozenset[str]]  # None: unknown (not in recipes/facts/images.yaml)
    efa: bool
    user: Optional[tuple[int, int]] = None  # (uid, gid) of the image's USER; None: unknown


def repository(image: str) -> str:
    """`registry/path/name` without tag or digest (Docker Hub official images: just `name`)."""
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    last = last.split(":", 1)[0]
    repo = f"{head}/{last}" if head else last
    return repo.removeprefix("docker.io/library/").removeprefix("library/")


def image_facts(image: Optional[str]) -> ImageFacts:
    """Architectures and EFA support of an image, from recipes/facts/images.yaml."""
    entry = (recipe_file("facts/images.yaml")["repositories"] or {}).get(repository(image or ""))
    if entry is None:
        return ImageFacts(None, False)
    user = entry.get("user")
    tag = image_tag(image or "") or ""
    facts = (entry.get("tags") or {}).get(tag)
    if facts is None and "@" not in (image or ""):
        facts = next((f for suffix, f in (entry.get("suffixes") or {}).items() if tag.endswith(suffix)), None)
    facts = facts or entry["default"]
    return ImageFacts(
        frozenset(facts["arch"]), bool(facts.get("efa")), (int(user["uid"]), int(user["gid"])) if user else None
    )


def operator_default_fs_group() -> int:
    """The fsGroup the Dynamo operator gives a component pod whose template sets no securityContext (images.yaml)."""
    return int(recipe_file("facts/images.yaml")["operator_default_fs_group"])


def runtime_user() -> tuple[int, int]:
    """(uid, gid) the Dynamo runtime images run as (recipes/facts/images.yaml `runtime_user`): what serving containers are
    given explicitly, whatever image a stack names, and what the compile cache's access point writes as."""
    u = recipe_file("facts/images.yaml")["runtime_user"]
    return int(u["uid"]), int(u["gid"])
