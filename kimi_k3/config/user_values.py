"""Per-user values: where they live, and the stack config file `pulumi` reads.

A team shares `Pulumi.<stack>.yaml` (recipe, sizes, prices: reviewed in pull requests). What each person or CI job
brings itself - the Hugging Face token, the Capacity Block reservation, the networks that may reach the EKS API,
a kubeconfig, and the secrets provider's salt or key - lives in `.pulumi-user/Pulumi.<stack>.yaml` (gitignored).
That file is a complete stack config file: `make` rebuilds it before every pulumi command from the tracked file plus
the per-user keys it already holds, and passes it with `--config-file`. So `pulumi config set` never writes the
tracked file, and `kimi-k3 render | check | diff | plan` (which read only the tracked file and assume placeholders
for these keys, saying so) never report a user's values as a change.

`python -m kimi_k3.config.user_values STACK` rebuilds the file and prints its path.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from kimi_k3 import yaml_strict
from kimi_k3.errors import UserError, read_text

USER_DIR = ".pulumi-user"
# Per-user keys, as `pulumi config set --path` names them. Everything else comes from the tracked stack file.
PER_USER_KEYS = (
    "kimi-k3:hfToken",
    "kimi-k3:kubeconfig",
    "kimi-k3:cluster.gpuNodes.capacityReservationId",
    "kimi-k3:cluster.publicAccessCidrs",
    "kimi-k3:cluster.parked",  # whether this deployment is parked (make park / unpark)
)
# Top-level keys in which the Pulumi CLI keeps a stack's secrets provider (passphrase salt, wrapped data key).
SECRETS_PROVIDER_KEYS = ("secretsprovider", "encryptedkey", "encryptionsalt")
HEADER = (
    "# Per-user stack config (gitignored), rebuilt by `make` from Pulumi.{stack}.yaml plus the per-user keys\n"
    "# below ({keys}). Change shared settings in Pulumi.{stack}.yaml; set yours with\n"
    "#   pulumi config set [--secret] [--path] KEY VALUE --stack {stack} --config-file {path}\n"
)


def user_config_path(root: Path, stack: str) -> Path:
    return root / USER_DIR / f"Pulumi.{stack}.yaml"


def _split(key: str) -> tuple[str, list[str]]:
    top, _, rest = key.partition(".")
    return top, rest.split(".") if rest else []


def get_path(config: dict[str, Any], key: str) -> Any:
    """The value at a `--path` key (`kimi-k3:cluster.gpuNodes.capacityReservationId`), or KeyError."""
    top, parts = _split(key)
    value = config[top]
    for part in parts:
        if not isinstance(value, dict):
            raise KeyError(key)
        value = value[part]
    return value


def set_path(config: dict[str, Any], key: str, value: Any) -> None:
    top, parts = _split(key)
    if not parts:
        config[top] = value
        return
    node = config.setdefault(top, {})
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def has_path(config: dict[str, Any], key: str) -> bool:
    try:
        get_path(config, key)
        return True
    except (KeyError, TypeError):
        return False


def compose(tracked: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    """The stack config pulumi reads: the tracked file's config, the user's per-user keys, the secrets provider."""
    out: dict[str, Any] = {k: user.get(k, tracked.get(k)) for k in SECRETS_PROVIDER_KEYS if k in user or k in tracked}
    config = copy.deepcopy(tracked.get("config") or {})
    user_config = user.get("config") or {}
    for key in PER_USER_KEYS:
        if has_path(user_config, key):
            set_path(config, key, copy.deepcopy(get_path(user_config, key)))
    out["config"] = config
    return out


def _load(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        return {}
    doc = yaml_strict.load(read_text(path, what), str(path)) or {}  # as pulumi will read it
    if not isinstance(doc, dict):
        raise UserError(f"{path}: allowed: a stack config mapping (config:, encryptionsalt: ...)")
    if isinstance(doc.get("config"), dict):
        from kimi_k3.config.stack import namespaced

        doc["config"] = namespaced(doc["config"], str(path))  # bare keys are the project's, as pulumi reads them
    return doc


def _shared(config: dict[str, Any]) -> dict[str, Any]:
    """The config without its per-user keys (what must equal the tracked file's)."""
    out = copy.deepcopy(config)
    for key in PER_USER_KEYS:
        top, parts = _split(key)
        node = out.get(top)
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if parts and isinstance(node, dict):
            node.pop(parts[-1], None)
        elif not parts:
            out.pop(top, None)
    return out


def _base_path(user_path: Path) -> Path:
    return user_path.with_name(f".{user_path.stem}.shared.json")


def _check_no_shared_edits(user_path: Path, user: dict[str, Any], tracked_name: str) -> None:
    """A shared key set in the per-user file (pulumi config set --config-file ...) would be overwritten: refuse."""
    base = _base_path(user_path)
    if not user_path.is_file() or not base.is_file():
        return
    before = json.loads(base.read_text())
    now = _shared(user.get("config") or {})
    edited = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
    if edited:
        raise UserError(
            f"{user_path.name} in {user_path.parent.name}/: {', '.join(edited)} changed there, but only "
            f"{', '.join(PER_USER_KEYS)} are per-user; allowed: shared settings in {tracked_name} "
            f"(pulumi config set without --config-file). Move the change there, then delete {user_path}'s "
            "copy of the key or the whole file (make rebuilds it; per-user keys would need setting again)"
        )


_PROVIDER_LINE = re.compile(r"^(%s):.*\n?" % "|".join(SECRETS_PROVIDER_KEYS), re.M)


def refresh(root: Path, stack: str) -> Path:
    """Rebuild `.pulumi-user/Pulumi.<stack>.yaml`; secrets-provider lines the CLI put in the tracked file move there.

    A per-user key found in the tracked file is an error (it would be shared with everyone): the message says how
    to move it."""
    tracked_path = root / f"Pulumi.{stack}.yaml"
    if not tracked_path.is_file():
        from kimi_k3.config.stack_files import unknown_stack_message

        raise UserError(unknown_stack_message(stack, root))
    tracked = _load(tracked_path, "stack file")
    shared = [k for k in PER_USER_KEYS if has_path(tracked.get("config") or {}, k)]
    if shared:
        path = user_config_path(root, stack).relative_to(root)
        raise UserError(
            f"{tracked_path.name}: {', '.join(shared)} is set in the shared stack file; allowed there: "
            f"no per-user values. Remove it (pulumi config rm [--path] KEY --stack {stack}) and set it "
            f"with --config-file {path}"
        )
    user_path = user_config_path(root, stack)
    user = _load(user_path, "per-user stack config")
    # `pulumi stack init/select --create` writes a new stack's secrets provider into the default (tracked) file.
    text = tracked_path.read_text()
    moved = {k: tracked[k] for k in SECRETS_PROVIDER_KEYS if k in tracked}
    if moved:
        tracked_path.write_text(_PROVIDER_LINE.sub("", text))
        user = {**moved, **user}
    _check_no_shared_edits(user_path, user, tracked_path.name)
    doc = compose({k: v for k, v in tracked.items() if k not in SECRETS_PROVIDER_KEYS}, user)
    user_path.parent.mkdir(exist_ok=True)
    _base_path(user_path).write_text(json.dumps(_shared(doc.get("config") or {}), sort_keys=True))
    rel = user_path.relative_to(root)
    header = HEADER.format(stack=stack, keys=", ".join(PER_USER_KEYS), path=rel)
    body = yaml.safe_dump(doc, sort_keys=False, width=120)
    if not user_path.is_file() or user_path.read_text() != header + body:
        user_path.write_text(header + body)
    return user_path


PLAIN_PER_USER_KEYS = ("capacityReservationId", "publicAccessCidrs")  # per-user values that are not secrets


def set_plain_values(root: Path, stack: str, values_json: str) -> None:
    """CI: write the non-secret per-user values of `stack` from a JSON object {stack: {key: value}} (secrets go
    through `pulumi config set --secret`). A stack it does not name is an error naming what it does name."""
    try:
        values = json.loads(values_json)
    except json.JSONDecodeError as exc:
        raise UserError(f"per-user values JSON: not valid JSON ({exc})") from None
    if not isinstance(values, dict) or stack not in values or not isinstance(values[stack], dict):
        named = ", ".join(sorted(values)) if isinstance(values, dict) else "nothing"
        raise UserError(
            f"per-user values JSON: no entry for stack {stack!r} (it names {named}); allowed: "
            f'{{"{stack}": {{"capacityReservationId": "cr-...", "publicAccessCidrs": ["a.b.c.d/32"]}}}}'
        )
    unknown = sorted(set(values[stack]) - set(PLAIN_PER_USER_KEYS))
    if unknown:
        raise UserError(
            f"per-user values JSON: {stack}.{unknown[0]}: unknown key; allowed: {', '.join(PLAIN_PER_USER_KEYS)}"
        )
    path = user_config_path(root, stack)
    doc = _load(path, "per-user stack config")
    config = doc.setdefault("config", {})
    for key, value in values[stack].items():
        set_path(
            config,
            {
                "capacityReservationId": "kimi-k3:cluster.gpuNodes.capacityReservationId",
                "publicAccessCidrs": "kimi-k3:cluster.publicAccessCidrs",
            }[key],
            value,
        )
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=120))


def main(argv: list[str] | None = None) -> int:
    """`python -m kimi_k3.config.user_values STACK [--values JSON]`: rebuild the per-user file, print its path."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 3) or (len(args) == 3 and args[1] != "--values"):
        print("usage: python -m kimi_k3.config.user_values STACK [--values JSON]", file=sys.stderr)
        return 2
    from kimi_k3.config.stack_files import project_root

    try:
        root = project_root()
        path = refresh(root, args[0])
        if len(args) == 3:
            set_plain_values(root, args[0], args[2])
            path = refresh(root, args[0])
        print(path.relative_to(root))
    except UserError as err:
        print(f"kimi-k3 user config: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
