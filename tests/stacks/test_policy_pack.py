"""The real pack, started the way `pulumi preview --policy-pack policies` starts it, driven over gRPC.

The Pulumi CLI boots a Python pack through the `pulumi-analyzer-policy-python` shim with the arguments
`<engine address> . -virtualenv=<runtime.options.virtualenv>` and the pack directory as working directory;
the shim runs `<virtualenv>/bin/python -u -m pulumi.policy <engine address> .`, which runs `__main__.py`,
whose PolicyPack prints the gRPC port it serves on. The shim ships only with the CLI, so when it is not on
PATH this test performs the same steps itself.
"""

import os
import shutil
import subprocess
from pathlib import Path

import grpc
import pytest
import yaml
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc
from test_rules import UPSTREAM, comp, dgd_of, env, good_objects, main

from policies import rules

PACK = Path(__file__).resolve().parents[2] / "policies"
ENGINE = "127.0.0.1:1"  # the pack only dials the engine to log; no engine runs here


def launch_command(pack: Path) -> list[str]:
    runtime = yaml.safe_load((pack / "PulumiPolicy.yaml").read_text())["runtime"]
    assert runtime["name"] == "python"
    options = [f"-{k}={v}" for k, v in (runtime.get("options") or {}).items() if str(v)]
    shim = shutil.which("pulumi-analyzer-policy-python")
    if shim:
        return [shim, ENGINE, ".", *options]
    virtualenv = (runtime.get("options") or {}).get("virtualenv")
    python = (pack / virtualenv / "bin" / "python") if virtualenv else Path(shutil.which("python3"))
    assert python.exists(), f"{python}: PulumiPolicy.yaml's virtualenv must exist, as the shim requires"
    return [str(python), "-u", "-m", "pulumi.policy", ENGINE, "."]


@pytest.fixture(scope="module")
def analyzer():
    env_vars = {k: v for k, v in os.environ.items() if k != "PYTHONHOME"}
    proc = subprocess.Popen(
        launch_command(PACK), cwd=PACK, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_vars
    )
    try:
        line = proc.stdout.readline().decode().strip()
        assert line.isdigit(), f"pack printed {line!r}; stderr: {proc.stderr.read1().decode()}"
        channel = grpc.insecure_channel(f"127.0.0.1:{line}")
        grpc.channel_ready_future(channel).result(timeout=30)
        yield analyzer_pb2_grpc.AnalyzerStub(channel)
        channel.close()
    finally:
        proc.kill()
        proc.wait()


def pulumi_type(obj) -> str:
    api = obj["apiVersion"] if "/" in obj["apiVersion"] else f"core/{obj['apiVersion']}"
    return f"kubernetes:{api}:{obj['kind']}"


def resource(obj, protect=False):
    props = json_format.ParseDict(obj, struct_pb2.Struct())
    name = obj["metadata"]["name"]
    return analyzer_pb2.AnalyzerResource(
        type=pulumi_type(obj),
        properties=props,
        urn=f"urn:pulumi:test::kimi-k3::{pulumi_type(obj)}::{name}",
        name=name,
        options=analyzer_pb2.AnalyzerResourceOptions(protect=protect),
    )


def analyze(stub, obj):
    r = resource(obj)
    return stub.Analyze(
        analyzer_pb2.AnalyzeRequest(type=r.type, properties=r.properties, urn=r.urn, name=r.name, options=r.options)
    )


def by_policy(response):
    return sorted((d.policyName, d.enforcementLevel) for d in response.diagnostics)


def test_pack_describes_every_rule(analyzer):
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty())
    assert info.name == "kimi-k3"
    levels = {p.name: analyzer_pb2.EnforcementLevel.Name(p.enforcementLevel).lower() for p in info.policies}
    assert levels == {r.name: r.level for r in rules.RULES}
    stack_kind = {p.name: p.policy_type == analyzer_pb2.POLICY_TYPE_STACK for p in info.policies}
    assert stack_kind == {r.name: r.scope == "stack" for r in rules.RULES}


def test_configure_then_analyze_good_graph_reports_nothing(analyzer):
    config = struct_pb2.Struct()
    config.update({"gpu_node_pool_nodes": 6})
    analyzer.Configure(
        analyzer_pb2.ConfigureAnalyzerRequest(
            policyConfig={
                "graph-fits-node-pool": analyzer_pb2.PolicyConfig(
                    enforcementLevel=analyzer_pb2.MANDATORY, properties=config
                )
            }
        )
    )
    for obj in good_objects():
        assert by_policy(analyze(analyzer, obj)) == [], obj["kind"]
    stack = analyzer.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=[resource(o) for o in good_objects()]))
    assert by_policy(stack) == [], "the claim is retained, not protected (retainOnDelete: not visible here)"


def test_analyze_catches_frontend_bug_replay_and_ucx_contradiction(analyzer):
    objects = good_objects()
    main(objects, "Frontend")["args"] += ["--model-path", "$(MODEL_PATH)"]
    env(objects, "prefill", "UCX_TLS", "^cuda_ipc")
    env(objects, "prefill", "UCX_CUDA_IPC_ENABLE_MNNVL", "y")
    response = analyze(analyzer, dgd_of(objects))
    # The unresolved path also means the frontend's model path is not under a cache mount.
    assert by_policy(response) == [
        ("env-refs-resolve", analyzer_pb2.MANDATORY),
        ("model-path-under-cache-mount", analyzer_pb2.MANDATORY),
        ("ucx-settings-consistent", analyzer_pb2.MANDATORY),
    ]
    messages = "\n".join(d.message for d in response.diagnostics)
    assert (
        "DynamoGraphDeployment/kimi-k3: component Frontend container main: $(MODEL_PATH) has no env entry" in messages
    )


def test_analyze_stack_cross_object_rules(analyzer):
    objects = good_objects()
    comp(objects, "decode")["podTemplate"]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "gone"
    response = analyzer.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=[resource(o) for o in objects]))
    assert by_policy(response) == [("multinode-claims-compute-domain", analyzer_pb2.MANDATORY)]
    # protect=False and retainOnDelete invisible to the analyzer: not evaluated, not passed.
    not_applicable = {n.policy_name: n.reason for n in response.not_applicable}
    assert "retainOnDelete is not visible" in not_applicable["model-cache-retained"]


def test_upstream_gb200_disagg_over_grpc(analyzer):
    if not UPSTREAM.is_dir():
        pytest.skip(f"{UPSTREAM} absent")
    objects = [o for o in yaml.safe_load_all((UPSTREAM / "disagg-gb200-agentic" / "deploy.yaml").read_text()) if o]
    analyzer.Configure(analyzer_pb2.ConfigureAnalyzerRequest())  # no node pool known: that rule is not applicable
    response = analyze(analyzer, dgd_of(objects))
    assert sorted({d.policyName for d in response.diagnostics}) == [
        "frontend-in-workers-zone",
        "frontend-migrates-requests",
        "runtime-version-declared",
        "tp-group-pinned-to-clique",
        "ucx-settings-consistent",
        "worker-block-size-is-vllms",
    ]
