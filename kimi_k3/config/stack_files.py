"""Stack files: where the project is, which stacks it has, and each stack's config as the engine passes it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from kimi_k3 import yaml_strict
from kimi_k3.config.base import ConfigError
from kimi_k3.config.stack import namespaced
from kimi_k3.errors import UserError, did_you_mean, read_text

SECRET_PLACEHOLDER = "[secret]"
# Set per user with `pulumi config set --secret`, so a stack file in the repo never holds them.
USER_SECRETS = ("kimi-k3:hfToken",)
# Per-user values a shared stack file cannot hold (each team buys its own Capacity Block); offline tools assume
# this placeholder, `pulumi up` refuses to run without the real one.
RESERVATION_PLACEHOLDER = "cr-00000000000000000"
# The networks allowed to reach the EKS API endpoint are per user too (TEST-NET-3, RFC 5737: routes nowhere).
PUBLIC_CIDR_PLACEHOLDER = "203.0.113.0/24"
# No commit of the model is known to this repository: offline tools assume git's null object id where a stack file
# pins none, `pulumi up` refuses the stack until it does (config.check_modes), and the fetchers refuse this value.
REVISION_PLACEHOLDER = "0" * 40


class StackError(UserError):
    """A stack that cannot be read, or whose configuration the program refuses."""


def project_root() -> Path:
    """The Pulumi project holding the working directory, else the one this package was installed from."""
    for d in [Path.cwd(), *Path.cwd().parents]:
        if (d / "Pulumi.yaml").is_file() and (d / "__main__.py").is_file():
            return d
    return Path(__file__).resolve().parent.parent.parent


def stack_names(root: Path | None = None) -> list[str]:
    root = root or project_root()
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in root.glob("Pulumi.*.yaml"))


def unknown_stack_message(stack: str, root: Path) -> str:
    """`no stack 'x'`, with the stacks there are and the likely meant one (a file name given for a stack too)."""
    names = stack_names(root)
    file_form = stack.removeprefix("Pulumi.").removesuffix(".yaml")
    if file_form != stack and file_form in names:
        return f"{stack!r} is a stack file; give the stack name: {file_form}"
    return (
        f"no stack {stack!r} (no Pulumi.{stack}.yaml in {root}){did_you_mean(stack, names)}; "
        f"allowed: {', '.join(names)}"
    )


@dataclass
class StackFile:
    config: dict[str, str]  # key -> value as the engine passes it (objects JSON-encoded)
    secrets: set[str]  # keys the engine would mark secret
    assumed: list[str]  # per-user values the file does not hold, filled with placeholders


def read_stack_config(stack: str, root: Path | None = None) -> StackFile:
    """Pulumi.<stack>.yaml as the engine would pass it; secrets and per-user values become placeholders."""
    root = root or project_root()
    path = root / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise StackError(unknown_stack_message(stack, root))
    try:
        doc = yaml_strict.load(read_text(path, "stack file"), path.name) or {}
    except UserError as err:
        raise StackError(str(err)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config") or {}, dict):
        raise StackError(
            f"{path.name}: allowed: a mapping with a `config:` mapping of `kimi-k3:<key>: value` entries "
            "(see the configuration reference, docs/configure.md)"
        )
    config: dict[str, str] = {}
    secrets: set[str] = set()
    try:
        doc_config = namespaced(doc.get("config") or {}, path.name)
    except ConfigError as err:
        raise StackError(str(err)) from None
    for key, value in doc_config.items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            config[key], _ = SECRET_PLACEHOLDER, secrets.add(key)
        else:
            config[key] = value if isinstance(value, str) else json.dumps(value, default=str)  # YAML dates as text
    assumed = []
    # Offline tools cannot decrypt secrets; one the stack file does not hold yet (set per user) is assumed set.
    for key in USER_SECRETS:
        if key not in config:
            config[key], _ = SECRET_PLACEHOLDER, secrets.add(key)
            assumed.append(f"{key} = {SECRET_PLACEHOLDER}")
    try:
        cluster = json.loads(config.get("kimi-k3:cluster", "{}"))
    except json.JSONDecodeError:
        cluster = None  # not a mapping: the configuration check reports it
    gpu_nodes = cluster.get("gpuNodes", {}) if isinstance(cluster, dict) else None
    if (
        isinstance(gpu_nodes, dict)
        and cluster.get("mode") == "eks"
        and gpu_nodes.get("capacityType", "CAPACITY_BLOCK") == "CAPACITY_BLOCK"
        and "capacityReservationId" not in gpu_nodes
    ):
        cluster["gpuNodes"] = {**gpu_nodes, "capacityReservationId": RESERVATION_PLACEHOLDER}
        config["kimi-k3:cluster"] = json.dumps(cluster)
        assumed.append(f"kimi-k3:cluster.gpuNodes.capacityReservationId = {RESERVATION_PLACEHOLDER}")
    if (
        isinstance(cluster, dict)
        and cluster.get("mode") == "eks"
        and cluster.get("endpointPublicAccess", True)
        and "publicAccessCidrs" not in cluster
    ):
        cluster["publicAccessCidrs"] = [PUBLIC_CIDR_PLACEHOLDER]
        config["kimi-k3:cluster"] = json.dumps(cluster)
        assumed.append(f"kimi-k3:cluster.publicAccessCidrs = [{PUBLIC_CIDR_PLACEHOLDER}]")
    if isinstance(cluster, dict) and cluster.get("mode") == "gke" and isinstance(cluster.get("gke", {}), dict):
        gke, seen = dict(cluster.get("gke", {})), []  # per-user values of gke mode (kimi_k3/config/gke.py PER_USER)
        for key, value in GKE_PLACEHOLDERS.items():
            head, _, tail = key.partition(".")
            block = gke.get(head, {}) if tail else gke
            if isinstance(block, dict) and (tail or head) not in block:
                block = {**block, (tail or head): value}
                gke = {**gke, head: block} if tail else block
                seen.append(f"kimi-k3:cluster.gke.{key} = {value}")
        if seen:
            config["kimi-k3:cluster"] = json.dumps({**cluster, "gke": gke})
            assumed += seen
    try:
        model = json.loads(config.get("kimi-k3:model", "{}"))
    except json.JSONDecodeError:
        model = None  # not a mapping: the configuration check reports it
    if isinstance(model, dict) and "revision" not in model:
        config["kimi-k3:model"] = json.dumps({**model, "revision": REVISION_PLACEHOLDER})
        assumed.append(f"kimi-k3:model.revision = {REVISION_PLACEHOLDER} (no commit pinned: `pulumi up` refuses)")
    return StackFile(config, secrets, assumed)


GKE_PLACEHOLDERS: dict = {
    "project": "placeholder-project",
    "projectNumber": "123456789012",
    "gpuNodes.reservation": "placeholder/reservationBlocks/placeholder/reservationSubBlocks/placeholder",
    "authorizedNetworks": ["192.0.2.0/24"],
}


def in_stack_file(stack: str, err: Exception) -> str:
    """A configuration error, prefixed with the file it is about (recipe-file errors name theirs)."""
    message = str(err)
    return message if message.startswith(("recipes/", "Pulumi.")) else f"Pulumi.{stack}.yaml: {message}"


# Pulumi's own rule for a stack name (pulumi/pulumi pkg/backend/diy/backend.go, stackNameAndProjectRegexp and
# validateStackName): letters, digits, '-', '_', '.', 1 to 100 characters.
PULUMI_STACK_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


def stack_name_problem(name: str) -> str | None:
    """Why Pulumi would refuse `name` as a stack name, or None."""
    if PULUMI_STACK_NAME.fullmatch(name):
        return None
    return f"stack name {name[:120]!r} is not one Pulumi accepts; allowed: 1 to 100 letters, digits, '-', '_' or '.'"
