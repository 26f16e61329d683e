"""render.py -> synth.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import json
import os
import runpy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from google.protobuf import json_format

from kimi_k3.atomic import write_text
from kimi_k3.config.stack_files import SECRET_PLACEHOLDER, StackError, StackFile, project_root, read_stack_config

PROJECT = "kimi-k3"


ROOT_STACK_TYPE = "pulumi:pulumi:Stack"


SECRET_SIG = ("4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270")


REDACTED = "[redacted]"


# Placeholder outputs a cloud would compute, per resource type (inputs are never changed).
COMPUTED_PLACEHOLDERS: dict[str, dict[str, Any]] = {
    "aws:eks/cluster:Cluster": {
        "endpoint": "https://PLACEHOLDER.gr7.us-east-1.eks.amazonaws.com",
        "certificateAuthority": {"data": "UExBQ0VIT0xERVI="},
        "vpcConfig": {"clusterSecurityGroupId": "sg-placeholder-cluster"},
        "identities": [{"oidcs": [{"issuer": "https://oidc.eks.us-east-1.amazonaws.com/id/PLACEHOLDER"}]}],
    },
    "aws:iam/openIdConnectProvider:OpenIdConnectProvider": {
        "arn": "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/PLACEHOLDER"
    },
    "aws:ec2/launchTemplate:LaunchTemplate": {"latestVersion": 1},
    "gcp:container/cluster:Cluster": {
        "endpoint": "192.0.2.10",
        "masterAuth": {"clusterCaCertificate": "UExBQ0VIT0xERVI="},
    },
    "aws:fsx/lustreFileSystem:LustreFileSystem": {
        "dnsName": "fs-placeholder.fsx.us-east-1.amazonaws.com",
        "mountName": "placeholder",
    },
}


# Physical names the provider would generate (NAME-<random suffix>), where the program reads them.
AUTONAMED = {
    "aws:eks/cluster:Cluster": lambda n: {"name": f"{n}-placeholder"},
    "aws:eks/nodeGroup:NodeGroup": lambda n: {"nodeGroupName": f"{n}-placeholder"},
    "aws:iam/role:Role": lambda n: {
        "name": f"{n}-placeholder",
        "arn": f"arn:aws:iam::123456789012:role/{n}-placeholder",
    },
    "aws:iam/openIdConnectProvider:OpenIdConnectProvider": lambda n: {
        "arn": "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/PLACEHOLDER"
    },
    "aws:iam/instanceProfile:InstanceProfile": lambda n: {
        "arn": f"arn:aws:iam::123456789012:instance-profile/{n}-placeholder"
    },
    "aws:s3/bucket:Bucket": lambda n: {
        "bucket": "kimi-k3-weights-placeholder",
        "arn": "arn:aws:s3:::kimi-k3-weights-placeholder",
    },
    **{
        f"gcp:{t}": (lambda n: {"name": f"{n}-placeholder"})
        for t in (
            "container/cluster:Cluster",
            "compute/network:Network",
            "compute/subnetwork:Subnetwork",
            "compute/router:Router",
            "compute/resourcePolicy:ResourcePolicy",
        )
    },
    "gcp:storage/bucket:Bucket": lambda n: {"name": "kimi-k3-weights-placeholder"},
    "aws:secretsmanager/secret:Secret": lambda n: {
        "arn": f"arn:aws:secretsmanager:us-east-1:123456789012:secret:{n}-placeholder"
    },
}


# Manifest order: what must exist first comes first (as `kubectl apply -f` would need it).
KIND_ORDER = [
    "Namespace",
    "PersistentVolume",
    "Secret",
    "ConfigMap",
    "PersistentVolumeClaim",
    "Job",
    "DaemonSet",
    "ComputeDomain",
    "DynamoGraphDeployment",
]


class RenderError(StackError):
    """The program refused its configuration (the message is the program's own)."""

    def __init__(self, message: str, registered: list[str] | None = None):
        super().__init__(message)
        self.registered = registered or []  # urns registered before the failure: none, for a config error


@dataclass
class Rendered:
    stack: str
    resources: list[dict[str, Any]]
    objects: list[dict[str, Any]]
    outputs: dict[str, Any]
    assumed: list[str] = field(default_factory=list)  # per-user values the stack file lacks, as placeholders
    # The kimi_k3.blueprint.Blueprint the program resolved and registered from: what render's figures read.
    blueprint: Any = None

    def write(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_text(out_dir / "manifests.yaml", dump_manifests(self.objects))  # whole or not at all (atomic.py)
        doc = {"stack": self.stack, "assumed": self.assumed, "outputs": self.outputs, "resources": self.resources}
        write_text(out_dir / "resources.json", json.dumps(doc, indent=2, sort_keys=True) + "\n")


def _under(placeholders: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """Inputs as outputs, with placeholders filled in only where the inputs have nothing."""
    out = dict(placeholders)
    for k, v in inputs.items():
        out[k] = _under(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _hide(value: Any) -> Any:
    """A secret's shape without its values: map keys stay (they name what is secret), leaves become [secret]."""
    if isinstance(value, dict):
        return {k: _hide(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_hide(v) for v in value]
    return SECRET_PLACEHOLDER


def _plain(value: Any) -> Any:
    """Struct -> plain data: secrets hidden, integral floats back to ints (protobuf numbers are doubles)."""
    if isinstance(value, dict):
        if value.get(SECRET_SIG[0]) == SECRET_SIG[1]:
            return _hide(value.get("value"))
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _urn_of(provider_ref: str) -> str:
    return provider_ref.rsplit("::", 1)[0] if provider_ref else ""


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def _canonical(obj: dict[str, Any]) -> dict[str, Any]:
    """Keys sorted at every level (the wire format keeps no order), apiVersion/kind/metadata first."""
    head = [k for k in ("apiVersion", "kind", "metadata") if k in obj]
    return {k: _sorted(obj[k]) for k in head + sorted(k for k in obj if k not in head)}


def _redact_secret(obj: dict[str, Any]) -> dict[str, Any]:
    if obj.get("kind") != "Secret":
        return obj
    fields = {
        f: ({k: REDACTED for k in obj[f]} if isinstance(obj[f], dict) else REDACTED)
        for f in ("data", "stringData")
        if f in obj
    }
    return {**obj, **fields}


def dump_manifests(objects: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all([_canonical(o) for o in objects], sort_keys=False, width=120)


def _object_key(obj: dict[str, Any]) -> tuple:
    kind = obj.get("kind", "")
    meta = obj.get("metadata", {})
    order = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
    return order, kind, meta.get("namespace", ""), meta.get("name", "")


def render_config(
    stack: str,
    config: dict[str, str],
    secret_keys: set[str],
    root: Path | None = None,
    cluster: dict[str, dict[str, Any]] | None = None,
) -> Rendered:
    """Run the program with this config under the mock engine and collect what it registers.

    What the program reads from the cluster (a provided ComputeDomain) is what the stack says is there, or, given
    `cluster` ({type token: {namespace/name: object}}), that object ({} where absent)."""
    import pulumi
    from pulumi.runtime import mocks, settings
    from pulumi.runtime import resource as runtime_resource
    from pulumi.runtime import stack as runtime_stack
    from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await

    from kimi_k3.k8s import provided_domain

    root = root or project_root()
    records: list[dict[str, Any]] = []
    outputs: dict[str, Any] = {}

    class Mocks(pulumi.runtime.Mocks):
        def new_resource(self, args):
            if args.resource_id:  # a read of an existing object (never registered, never rendered)
                if cluster is not None:
                    return args.resource_id, dict(cluster.get(args.typ, {}).get(args.resource_id, {}))
                if args.typ == provided_domain.TYPE:
                    return args.resource_id, provided_domain.assumed_from_config(config, args.resource_id)
            # Outputs are the inputs plus placeholders for the few computed outputs the program reads (EKS
            # endpoint/CA/cluster security group, launch template version, FSx DNS/mount names). Only the keys with a
            # placeholder are returned: the SDK takes every other output from the inputs itself (rpc.resolve_outputs,
            # outside preview), so echoing them cost a serialization and a deserialization per property.
            computed = {**COMPUTED_PLACEHOLDERS.get(args.typ, {}), **AUTONAMED.get(args.typ, lambda n: {})(args.name)}
            merged = _under(computed, dict(args.inputs))
            return f"{args.name}-id", {k: merged[k] for k in computed}

        def call(self, args):
            return {}, None

    class RecordingMonitor(mocks.MockMonitor):
        def make_urn(self, parent: str, type_: str, name: str) -> str:
            # As the engine (pkg/resource/deploy/deployment.go generateURN): the root stack's type is not part of
            # its children's URNs; the mock monitor would add it.
            if parent and parent.split("::")[2] == ROOT_STACK_TYPE:
                parent = ""
            return super().make_urn(parent, type_, name)

        def RegisterResource(self, request):
            response = super().RegisterResource(request)
            if request.type != ROOT_STACK_TYPE:
                deps = set(request.dependencies)
                for prop in request.propertyDependencies.values():
                    deps.update(prop.urns)
                records.append(
                    {
                        "urn": response.urn,
                        "type": request.type,
                        "name": request.name,
                        "custom": request.custom,
                        "parent": request.parent,
                        "provider": _urn_of(request.provider),
                        "dependsOn": sorted(deps),
                        "protect": bool(request.protect),
                        "retainOnDelete": bool(request.retainOnDelete),
                        "ignoreChanges": sorted(request.ignoreChanges),
                        # What decides update vs replace besides the inputs (kimi_k3/offline/replacement.py reads these).
                        "replaceOnChanges": sorted(request.replaceOnChanges),
                        "deleteBeforeReplace": bool(request.deleteBeforeReplace)
                        if request.deleteBeforeReplaceDefined
                        else None,
                        "inputs": _plain(json_format.MessageToDict(request.object)),
                    }
                )
            return response

        def RegisterResourceOutputs(self, request):
            if request.urn.split("::")[2] == ROOT_STACK_TYPE:
                outputs.update(_plain(json_format.MessageToDict(request.outputs)))
            return super().RegisterResourceOutputs(request)

    m = Mocks()
    pulumi.runtime.set_all_config(config, sorted(secret_keys))
    # preview=False: the outputs Mocks leaves out resolve from the inputs (in a preview they would be unknown).
    pulumi.runtime.set_mocks(m, project=PROJECT, stack=stack, preview=False, monitor=RecordingMonitor(m))
    settings.ROOT.set(None)  # run_in_stack registers the root stack itself, as the real entrypoint does
    cwd = Path.cwd()
    sys.path.insert(0, str(root))
    os.chdir(root)
    program: dict[str, Any] = {}  # the program's globals once it has run: its `blueprint`
    # The engine's source positions (a Python stack trace per resource) are read by nothing offline, and capturing
    # them is ~20% of a render (more the deeper the caller's stack): the registrations are otherwise the same.
    capture_stack_trace = runtime_resource._get_stack_trace
    runtime_resource._get_stack_trace = _no_stack_trace
    # The mock monitor answers at once: its calls run inline, not handed to a thread pool and back (~15% of a render),
    # and serialize its plain answers at once, not by pumping the running loop from inside one of its callbacks.
    loop = _ensure_event_loop()
    loop.run_in_executor = _inline(loop)
    pump = mocks._sync_await
    mocks._sync_await = _serialized_now(pump)
    try:
        _sync_await(
            runtime_stack.run_in_stack(
                lambda: program.update(runpy.run_path(str(root / "__main__.py"), run_name="__main__"))
            )
        )
    except pulumi.RunError as err:
        _drain()
        raise RenderError(str(err), [r["urn"] for r in records]) from None
    finally:
        vars(loop).pop("run_in_executor", None)
        mocks._sync_await = pump
        runtime_resource._get_stack_trace = capture_stack_trace
        os.chdir(cwd)
        sys.path.remove(str(root))
    k8s_objects = [
        _redact_secret(r["inputs"])
        for r in records
        if r["custom"] and r["type"].startswith("kubernetes:") and "kind" in r["inputs"]
    ]
    for r in records:
        del r["custom"]
    return Rendered(
        stack=stack,
        resources=sorted(records, key=lambda r: r["urn"]),
        objects=sorted(k8s_objects, key=_object_key),
        outputs=outputs,
        blueprint=program.get("blueprint"),
    )


def _inline(loop):
    """run_in_executor that calls the function now and returns its outcome as a done future."""

    def run_in_executor(_executor, func, *args):
        done = loop.create_future()
        try:
            done.set_result(func(*args))
        except Exception as err:  # awaited by the SDK, which handles it as it would from the pool
            done.set_exception(err)
        return done

    return run_in_executor


def _serialized_now(pump):
    """The mock monitor's `_sync_await` for its serializations of what Mocks returned (plain values, nothing to wait
    for): run to the end here. The SDK's pump would step every other ready registration re-entrantly from inside
    this one (~20 calls deep on our stacks, deeper the more are ready) where the thread pool stepped none."""
    import asyncio

    from pulumi.runtime import rpc

    def sync_await(awaitable):
        if not (asyncio.iscoroutine(awaitable) and awaitable.cr_code is rpc.serialize_properties.__code__):
            return pump(awaitable)
        try:
            awaitable.send(None)
        except StopIteration as done:
            return done.value
        awaitable.close()
        raise RuntimeError("kimi-k3 bug: a mock's outputs waited on the event loop (Mocks returns plain values)")

    return sync_await


def _no_stack_trace():
    from pulumi.runtime.proto import source_pb2

    return source_pb2.StackTrace()  # what the SDK itself sends when it finds no user frame


def _drain() -> None:
    """Cancel what a run that failed mid-way left pending (registrations waiting on the failed check), so the
    next run in this process starts from an empty loop, not with the last one's tasks."""
    import asyncio

    loop = asyncio.get_event_loop()
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    from pulumi.runtime import settings

    # Else the next run raises this one's exception again: its first unhandled one, and its failed outputs' tasks.
    settings._get_rpc_manager().clear()
    with settings.SETTINGS.lock:
        settings.SETTINGS.outputs.clear()


def render_stack(stack: str, root: Path | None = None, stack_file: StackFile | None = None) -> Rendered:
    """The stack file rendered; `stack_file`: the one the caller read already (never read twice)."""
    stack_file = stack_file if stack_file is not None else read_stack_config(stack, root)
    rendered = render_config(stack, stack_file.config, stack_file.secrets, root)
    rendered.assumed = stack_file.assumed
    return rendered
