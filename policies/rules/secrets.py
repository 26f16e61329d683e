"""Secrets rules: no credential reaches a manifest as a literal value.

A literal `env` value is stored in the object itself: in `build/` by `kimi-k3 render`, in the Pulumi state and in
etcd in plain text, readable by anyone who can read the DynamoGraphDeployment. A credential comes from a Secret
(`valueFrom.secretKeyRef`, or `envFrom` a Secret); the names and value shapes below are what counts as one.
"""

import re
from typing import Any, Iterator, Mapping

from policies.rules.base import Context, Finding, Result, all_containers, name_of, pod_specs, target_of

# Env names that hold credentials: any *_TOKEN, *_SECRET, *_PASSWORD, API key, access/private key, credentials.
SECRET_NAME = re.compile(
    r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|SECRET_KEY|PRIVATE_KEY|CREDENTIALS?)$", re.I
)
# Values that are credentials whatever their variable is named (issuers' published token formats).
SECRET_VALUE = re.compile(
    r"hf_[A-Za-z0-9]{20,}"  # Hugging Face user access token
    r"|(AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key id (long-term / STS)
    r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub tokens
    r"|nvapi-[A-Za-z0-9_-]{20,}"  # NGC / build.nvidia.com API key
    r"|sk-[A-Za-z0-9_-]{20,}"  # OpenAI-style API keys
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)
_REF_ONLY = re.compile(r"(\$\([A-Za-z_][A-Za-z0-9_]*\))+")  # `$(OTHER_VAR)`: a reference, not a value


def redacted(value: str) -> str:
    """A secret in a message: never the value, only its length (enough to recognise which entry it is)."""
    return f"<literal, {len(value)} characters, not shown>"


def literal_secret(name: Any, value: Any) -> bool:
    """Whether an env entry NAME=value carries a credential in plain text."""
    if not isinstance(value, str) or not value or _REF_ONLY.fullmatch(value):
        return False
    return bool(isinstance(name, str) and SECRET_NAME.search(name)) or bool(SECRET_VALUE.search(value))


def _env_findings(obj: Mapping, where: str, env: Any) -> Iterator[Result]:
    for entry in env or []:
        name, value = entry.get("name"), entry.get("value")
        if literal_secret(name, value):
            yield Finding(
                target_of(obj),
                f"{where}: env {name} = {redacted(value)} is a literal secret value; "
                "allowed: valueFrom.secretKeyRef (or envFrom a Secret); for the Hugging Face token "
                "`pulumi config set --secret kimi-k3:hfToken` (the program mounts it from a Secret)",
            )
        ref = (entry.get("valueFrom") or {}).get("configMapKeyRef")
        if ref and isinstance(name, str) and SECRET_NAME.search(name):
            yield Finding(
                target_of(obj),
                f"{where}: env {name} comes from ConfigMap {ref.get('name')!r} (plain "
                "text); allowed: valueFrom.secretKeyRef",
            )


def check_env_secrets_from_secret(obj: Mapping, ctx: Context) -> Iterator[Result]:
    """Every container's env (init containers, every component, a DynamoGraphDeployment's graph-wide env)."""
    if obj.get("kind") == "DynamoGraphDeployment":
        yield from _env_findings(obj, "spec.env", (obj.get("spec") or {}).get("env"))
    for label, spec in pod_specs(obj):
        for container in all_containers(spec):
            yield from _env_findings(obj, f"{label} container {name_of(container)}", container.get("env"))
