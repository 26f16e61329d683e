"""What the shared stack file must never carry, refused by the offline commands before they write anything.

`make` refuses a per-user key in `Pulumi.<stack>.yaml` (kimi_k3/config/user_values.py refresh); `kimi-k3 render` and
`check` run in CI without make, so they refuse the same keys (user_config.PER_USER_KEYS, the one list), and a
literal credential in any rendered container env (policies/rules/secrets.py), which render would otherwise write
into build/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from kimi_k3.config.stack_files import StackError
from kimi_k3.config.user_values import PER_USER_KEYS, PLAIN_PER_USER_KEYS, get_path, has_path, user_config_path
from kimi_k3.errors import read_text


def _shown(key: str, value: Any) -> str:
    # Reservation ids and CIDRs are not secrets (user_config.PLAIN_PER_USER_KEYS): name them; anything else stays unshown.
    if key.rsplit(".", 1)[-1] in PLAIN_PER_USER_KEYS:
        return f"{key} = {value!r}"
    return f"{key} (value not shown)"


def refuse_per_user_values(stack: str, root: Path) -> None:
    """A StackError naming each per-user key the shared stack file sets, with how to move it."""
    path = root / f"Pulumi.{stack}.yaml"
    try:
        doc = yaml.safe_load(read_text(path, "stack file"))
    except yaml.YAMLError:
        return  # read_stack_config reports the file's syntax
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        return
    shared = [k for k in PER_USER_KEYS if has_path(config, k)]
    if shared:
        rel = user_config_path(root, stack).relative_to(root)
        keys = "; ".join(_shown(k, get_path(config, k)) for k in shared)
        raise StackError(
            f"{path.name}: {keys}: a per-user value set in the shared stack file (it would be committed "
            f"and used by everyone); allowed there: no per-user values ({', '.join(PER_USER_KEYS)}). "
            f"Remove it (pulumi config rm --path KEY --stack {stack}) and set it in {rel} (pulumi config "
            f"set --path KEY VALUE --stack {stack} --config-file {rel}); nothing was written"
        )


def refuse_literal_secrets(stack: str, objects: Iterable[Mapping[str, Any]]) -> None:
    """A StackError naming every container env that would render a credential as a literal (value not shown)."""
    from policies.rules.base import Context
    from policies.rules.secrets import check_env_secrets_from_secret

    found = [
        f"{r.target}: {r.message.split('; allowed:')[0]}"
        for obj in objects
        for r in check_env_secrets_from_secret(obj, Context())
    ]
    if found:
        raise StackError(
            f"Pulumi.{stack}.yaml: {'; '.join(found)}; a credential in kimi-k3:serving.roles.<role>.env "
            "or kimi-k3:serving.frontend.env is rendered into build/ and stored in plain text; allowed: "
            "no credentials in env (the Hugging Face token: pulumi config set --secret kimi-k3:hfToken, "
            "which the program mounts from a Secret); nothing was written"
        )
