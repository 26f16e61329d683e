"""The Pulumi resource records the replacement and upgrade rules read: resources.json and `pulumi stack export`."""

from __future__ import annotations

from kimi_k3.shape.vocabulary import BOOL, LIST, OBJ, STR

# What kimi_k3.offline.replacement and the upgrade rules read of a resource: a `kimi-k3 render` resources.json record and a
# resource of `pulumi stack export` (checkpoint version 3, pulumi/pulumi sdk/go/common/apitype/core.go ResourceV3).
_RECORD_FIELDS = {
    "urn": STR,
    "type": STR,
    "name": STR,
    "parent": STR,
    "provider": STR,
    "dependsOn": LIST(STR),
    "protect": BOOL,
    "retainOnDelete": BOOL,
    "ignoreChanges": LIST(STR),
    "replaceOnChanges": LIST(STR),
    "deleteBeforeReplace": BOOL,
    "inputs": OBJ({}),
}
RENDER_RESOURCES = OBJ({"resources": LIST(OBJ(_RECORD_FIELDS, ("urn", "type", "name")))}, ("resources",))
STATE_EXPORT = OBJ(
    {"deployment": OBJ({"resources": LIST(OBJ({**_RECORD_FIELDS, "outputs": OBJ({})}, ("urn", "type")))})},
    ("deployment",),
)
