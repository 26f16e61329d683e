"""replacement.py -> state.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

from typing import Any, Mapping


def _is_provider(rtype: str) -> bool:
    return rtype.startswith("pulumi:providers:")


SECRET_SIG = "4dabf18193072939515e22adb298388d"


SECRET = "[secret]"


def _unsecret(value: Any) -> Any:
    """State values with secrets replaced by the placeholder render uses (render never sees plaintexts)."""
    if isinstance(value, dict):
        if SECRET_SIG in value:
            return SECRET
        return {k: _unsecret(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unsecret(v) for v in value]
    return value


def records_from_state(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Resource records (as in resources.json) from `pulumi stack export` output (checkpoint version 3).

    The stack resource and default providers (which render never registers) are left out; references to a
    default provider become "" as in a render."""
    deployment = doc.get("deployment") if "deployment" in doc else doc
    out = []
    for r in (deployment or {}).get("resources") or []:
        rtype, urn = r.get("type", ""), r.get("urn", "")
        if rtype == "pulumi:pulumi:Stack" or (_is_provider(rtype) and urn.rsplit("::", 1)[-1].startswith("default")):
            continue
        provider = (r.get("provider") or "").rsplit("::", 1)[0]
        if provider.rsplit("::", 1)[-1].startswith("default"):
            provider = ""
        out.append(
            {
                "urn": urn,
                "type": rtype,
                "name": urn.rsplit("::", 1)[-1],
                "parent": r.get("parent", ""),
                "provider": provider,
                "protect": bool(r.get("protect")),
                "retainOnDelete": bool(r.get("retainOnDelete")),
                "ignoreChanges": list(r.get("ignoreChanges") or []),
                "replaceOnChanges": list(r.get("replaceOnChanges") or []),
                "deleteBeforeReplace": r.get("deleteBeforeReplace"),
                "inputs": _unsecret(r.get("inputs") or {}),
                "fromState": True,
            }
        )
    return out
