"""kimi-k3:serving.autoscaling: Dynamo's SLA planner in the rendered graph (under the mocks), its bounds from the
Capacity Block, its inputs from our performance model, replicas left to it, and bad input refused."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, STACKS, assert_one_clear_error, by_kind, render_with, stack_config

from kimi_k3.blueprint import stack_plan
from kimi_k3.config.stack import parse_stack_config
from kimi_k3.graph import rollout
from kimi_k3.graph.build import build_graph
from kimi_k3.sizing import aic_table
from kimi_k3.sizing import calibration as perf_calibration
from kimi_k3.sizing import layout as perf_layout
from policies import rules
from policies.rules import base as rules_base

ON = {"enabled": True, "ttftMs": 30000, "itlMs": 50}


def cluster(stack: str, **gpu_nodes) -> dict:
    c = json.loads(stack_config(stack)[0]["kimi-k3:cluster"])
    c["gpuNodes"].update(gpu_nodes)
    return c


def graph_of(stack: str, **overrides):
    config, secrets = stack_config(stack, **overrides)
    return build_graph(stack, parse_stack_config(config, secrets))


@pytest.fixture(scope="module")
def autoscaled():
    """gb300-disagg on an 18-node Capacity Block, every node joined, the planner on."""
    return render_with("gb300-disagg", cluster=cluster("gb300-disagg", desiredNodes=18), serving={"autoscaling": ON})


def dgd(objects):
    return next(o for o in objects if o["kind"] == "DynamoGraphDeployment")


def test_off_by_default_every_stack_writes_its_replicas(rendered):
    for stack in STACKS:
        comps = dgd(rendered[stack].objects)["spec"]["components"]
        assert not [c for c in comps if c["type"] == "planner"]
        assert all("replicas" in c and "scalingAdapter" not in c for c in comps), stack
        assert not [o for o in rendered[stack].objects if o["metadata"]["name"].startswith("kimi-k3-planner")]


def test_planner_component_and_workers_handed_over(autoscaled):
    comps = {c["name"]: c for c in dgd(autoscaled.objects)["spec"]["components"]}
    planner = comps.pop("Planner")
    assert planner["type"] == "planner" and planner["replicas"] == 1
    main = planner["podTemplate"]["spec"]["containers"][0]
    assert main["command"] == ["python3", "-m", "dynamo.planner"]
    assert main["args"] == ["--config", "/workspace/planner_config/planner_config.json"]
    mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
    volumes = {v["name"]: v["configMap"]["name"] for v in planner["podTemplate"]["spec"]["volumes"]}
    assert {p: volumes[n] for p, n in mounts.items()} == {
        "/workspace/planner_config": "kimi-k3-planner-config",
        "/workspace/profiling_results": "kimi-k3-planner-profile-data",
    }
    # eks: the system nodes are amd64; the GPU nodes (arm64, tainted) never run the planner
    assert planner["podTemplate"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"][0]["values"] == ["amd64"]
    # a changed budget or target reaches the planner (it reads its config once): the pod template changes
    digest = planner["podTemplate"]["metadata"]["annotations"]["kimi-k3.io/planner-config-hash"]
    other = render_with(
        "gb300-disagg", cluster=cluster("gb300-disagg", desiredNodes=18), serving={"autoscaling": {**ON, "itlMs": 40}}
    )
    moved = next(c for c in dgd(other.objects)["spec"]["components"] if c["name"] == "Planner")
    assert moved["podTemplate"]["metadata"]["annotations"]["kimi-k3.io/planner-config-hash"] != digest
    frontend = comps.pop("Frontend")
    assert frontend["replicas"] == 1 and "scalingAdapter" not in frontend
    for name, c in comps.items():  # PrefillWorker, DecodeWorker
        assert "replicas" not in c and c["scalingAdapter"] == {}, name


def test_config_maps_and_rbac_exist_before_the_graph(autoscaled):
    res = {r["name"]: r for r in autoscaled.resources}
    graph = next(r for r in autoscaled.resources if r["type"].endswith("DynamoGraphDeployment"))
    planner_objects = [r for r in autoscaled.resources if "kimi-k3-planner" in r["name"]]
    assert {r["type"] for r in planner_objects} == {
        "kubernetes:core/v1:ConfigMap",
        "kubernetes:rbac.authorization.k8s.io/v1:Role",
        "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding",
    }
    assert {r["urn"] for r in planner_objects} <= set(graph["dependsOn"])
    binding = next(o for o in by_kind(autoscaled.objects, "RoleBinding") if o["metadata"]["name"] == "kimi-k3-planner")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "planner-serviceaccount", "namespace": "kimi-k3"}]
    role = next(o for o in by_kind(autoscaled.objects, "Role") if o["metadata"]["name"] == "kimi-k3-planner")
    granted = {(res_, verb) for rule in role["rules"] for res_ in rule["resources"] for verb in rule["verbs"]}
    # the calls Dynamo 1.6.1's planner makes (connectors/clients/kubernetes_api.py): read/patch the graph, read and
    # patch a scaling adapter's scale, list worker metadata and pods
    assert {
        ("dynamographdeployments", "get"),
        ("dynamographdeployments", "patch"),
        ("dynamographdeploymentscalingadapters/scale", "get"),
        ("dynamographdeploymentscalingadapters/scale", "patch"),
        ("dynamoworkermetadatas", "list"),
        ("pods", "list"),
    } <= granted
    assert not any(v in ("create", "delete", "update", "*") for _, v in granted)
    assert res  # resources.json was recorded


def config_of(objects) -> dict:
    cm = next(o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"] == "kimi-k3-planner-config")
    return json.loads(cm["data"]["planner_config.json"])


def profile_of(objects) -> dict:
    cm = next(o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"] == "kimi-k3-planner-profile-data")
    return {k: json.loads(v) for k, v in cm["data"].items()}


def test_budget_and_floors_come_from_the_capacity_block_and_the_recipe(autoscaled):
    c = config_of(autoscaled.objects)
    graph = graph_of("gb300-disagg", cluster=cluster("gb300-disagg", desiredNodes=18), serving={"autoscaling": ON})
    # the same bounds `kimi-k3 plan` prints: 18 instances x 4 GPUs, each role growing with the others at their floor
    bounds = rollout.scaling_bounds(graph, 18, 4, 0, minimum={"prefill": 1, "decode": 2})
    assert c["max_gpu_budget"] == bounds.max_gpus == 72
    assert dict(graph.autoscaling.max_replicas) == bounds.max_replicas == {"prefill": 7, "decode": 8}
    # the block's hours: EKS empties the node group 40 min before its end, a scale-up needs its load time on top
    hours = graph.autoscaling.lines()[-1]
    load = graph.autoscaling.scale_up_seconds / 60
    assert hours.startswith("autoscaling hours: EKS empties the node group 40 min") and f"~{load + 40:.0f} min" in hours
    assert (c["prefill_min_endpoint"], c["decode_min_endpoint"]) == (1, 2)  # the recipe's 1 prefill + 2 decode
    assert (c["prefill_engine_num_gpu"], c["decode_engine_num_gpu"]) == (8, 8)  # TP8 per replica
    assert (c["ttft_ms"], c["itl_ms"], c["mode"], c["backend"], c["environment"]) == (
        30000.0,
        50.0,
        "disagg",
        "vllm",
        "kubernetes",
    )
    assert c["optimization_target"] == "sla" and c["profile_results_dir"] == "/workspace/profiling_results"
    main = next(x for x in dgd(autoscaled.objects)["spec"]["components"] if x["name"] == "Planner")
    env = {e["name"]: e["value"] for e in main["podTemplate"]["spec"]["containers"][0]["env"]}
    assert env["PROMETHEUS_ENDPOINT"] == "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"


def test_profile_data_is_our_performance_model(autoscaled):
    p = profile_of(autoscaled.objects)
    pre, dec = p["prefill_raw_data.json"], p["decode_raw_data.json"]
    # the decode worker's KV tokens are what `kimi-k3 plan gb300-disagg` computes for its TP group
    plan = next(r for r in stack_plan("gb300-disagg").roles if r.spec.name == "decode")
    assert dec["max_kv_tokens"] == plan.plan.single_request_tokens > 0
    # one point of each table equals the calibrated model at that point (kimi_k3.sizing.perf's public estimate path)
    layout = perf_layout.Layout("gb300", "disagg", 8, 2, 8, 1)
    raw, _ = aic_table.raw_estimate(layout.point(pre["prefill_isl"][0], perf_layout.DEFAULT_OSL, 1), live=False)
    assert pre["prefill_ttft"][0] == pytest.approx(
        perf_calibration.calibration().apply(raw, 1, prefill_batch=1)["ttft_ms"], rel=1e-5
    )
    # physics the planner's regression relies on: TTFT grows with ISL, ITL grows with the batch at one context
    assert pre["prefill_ttft"] == sorted(pre["prefill_ttft"]) and len(pre["prefill_isl"]) >= 8
    by_ctx: dict[float, list[tuple[float, float]]] = {}
    for x, y, z in zip(dec["x_kv_usage"], dec["y_context_length"], dec["z_itl"]):
        by_ctx.setdefault(y, []).append((x, z))
    grown = [sorted(v) for v in by_ctx.values() if len(v) > 1]
    assert grown and all([z for _, z in v] == sorted(z for _, z in v) for v in grown)
    assert all(0 < x <= 1 for x in dec["x_kv_usage"])
    assert len(dec["z_itl"]) == len(dec["x_kv_usage"]) == len(dec["y_context_length"]) == len(dec["z_thpt_per_gpu"])


def test_aggregated_stack_plans_one_worker_role():
    g = graph_of("gb300", cluster=cluster("gb300", desiredNodes=18), serving={"autoscaling": ON})
    c = json.loads(g.autoscaling.config_json)
    assert c["mode"] == "agg" and c["min_endpoint"] == 2 and "prefill_min_endpoint" not in c
    assert [name for name, _ in g.autoscaling.profile_files] == ["decode_raw_data.json"]  # AggPlanner reads decode


@pytest.mark.slow  # renders in fresh interpreters (~10 s)
def test_generated_inputs_are_byte_identical_across_processes(autoscaled):
    code = (
        "import json,sys; sys.path.insert(0,'tests'); sys.path.insert(0,'tests/stacks'); from test_autoscaling import graph_of, cluster, ON; "
        "g = graph_of('gb300-disagg', cluster=cluster('gb300-disagg', desiredNodes=18), serving={'autoscaling': ON}); "
        "print(json.dumps([g.autoscaling.config_json, dict(g.autoscaling.profile_files)]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "7", "PATH": "/usr/bin:/bin"},
    ).stdout
    config, profile = json.loads(out)
    cms = {o["metadata"]["name"]: o["data"] for o in by_kind(autoscaled.objects, "ConfigMap")}
    assert cms["kimi-k3-planner-config"]["planner_config.json"] == config
    assert cms["kimi-k3-planner-profile-data"] == profile


def test_autoscaled_render_passes_the_rules_and_the_fighting_form_fails(autoscaled):
    objects = [o for o in autoscaled.objects]
    violations, _ = rules.run_all(objects, None, {})
    mandatory = [v for v in violations if v.level == rules_base.MANDATORY]
    assert mandatory == []
    # the fighting form: the planner on, and this program still writing the workers' replicas
    fighting = json.loads(json.dumps(objects))
    for c in dgd(fighting)["spec"]["components"]:
        if c["type"] in ("prefill", "decode"):
            c["replicas"] = 1
    got = [v for v in rules.run_all(fighting, None, {})[0] if v.rule == "planner-owns-worker-replicas"]
    assert len(got) == 2 and all("leave replicas unset" in v.message for v in got)
    # without the scaling adapter the planner is not the one owner either
    bare = json.loads(json.dumps(objects))
    for c in dgd(bare)["spec"]["components"]:
        c.pop("scalingAdapter", None)
    got = [v.rule for v in rules.run_all(bare, None, {})[0]]
    assert got.count("planner-owns-worker-replicas") == 2
    assert set(got) <= {"planner-owns-worker-replicas", "gpu-totals-match-recipe"}  # 1 replica each by default


BAD = {
    "targets missing": (
        "gb300-disagg",
        {"serving": {"autoscaling": {"enabled": True, "itlMs": 50}}},
        [
            "kimi-k3:serving.autoscaling.ttftMs",
            "required when kimi-k3:serving.autoscaling.enabled",
            "allowed: a target in milliseconds",
        ],
    ),
    "budget above the block": (
        "gb300-disagg",
        {"serving": {"autoscaling": {**ON, "maxGpuBudget": 80}}},
        [
            "kimi-k3:serving.autoscaling.maxGpuBudget = 80",
            "more GPUs than the Capacity Block",
            "18 p6e-gb300.36xlarge x 4 GPUs = 72",
            "allowed: 1..72",
        ],
    ),
    "minimums above the budget": (
        "gb300-disagg",
        {"serving": {"autoscaling": {**ON, "maxGpuBudget": 24, "minReplicas": {"decode": 3}}}},
        [
            "kimi-k3:serving.autoscaling.minReplicas",
            '"decode": 3',
            "= 32 GPUs",
            "budget of 24",
            "allowed: minimums within 24 GPUs",
        ],
    ),
    "minimum zero": (
        "gb300-disagg",
        {"serving": {"autoscaling": {**ON, "minReplicas": {"decode": 0}}}},
        ["kimi-k3:serving.autoscaling.minReplicas", "decode = 0", "allowed: a whole number >= 1"],
    ),
    "unknown role": (
        "gb300-disagg",
        {"serving": {"autoscaling": {**ON, "minReplicas": {"worker": 1}}}},
        ["kimi-k3:serving.autoscaling.minReplicas.worker = 1", "no such role", "allowed: decode, prefill"],
    ),
    "budget on nodes that never join": (
        "gb300-disagg",
        {"serving": {"autoscaling": ON}},
        [
            "kimi-k3:cluster.gpuNodes.desiredNodes = 6",
            "72 GPUs",
            "only 24 GPUs join",
            "allowed: 18 (the block is paid whole",
        ],
    ),
    "surge with the planner": (
        "gb300-disagg",
        {"serving": {"autoscaling": {**ON, "maxGpuBudget": 24}, "rollout": {"surge": 1}}},
        ["kimi-k3:serving.rollout.surge = 1", "planner owns the worker replicas", "allowed: 0"],
    ),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_autoscaling_input_one_clear_error(name):
    stack, overrides, expected = BAD[name]
    assert_one_clear_error(stack, overrides, expected)


def test_existing_cluster_needs_a_budget_and_a_prometheus():
    existing = {"mode": "existing", "context": "gpu"}
    storage = {"storageClass": "fsx-sc"}
    assert_one_clear_error(
        "gb300-disagg",
        {"cluster": existing, "storage": storage, "serving": {"autoscaling": ON}},
        [
            "kimi-k3:serving.autoscaling.maxGpuBudget",
            "required on a cluster this program does not build",
            "allowed: the GPUs",
        ],
    )
    assert_one_clear_error(
        "gb300-disagg",
        {"cluster": existing, "storage": storage, "serving": {"autoscaling": {**ON, "maxGpuBudget": 48}}},
        [
            "kimi-k3:serving.autoscaling.prometheusEndpoint",
            "kimi-k3:monitoring.stack existing",
            "allowed: the URL of the Prometheus",
        ],
    )
    g = graph_of(
        "gb300-disagg",
        cluster=existing,
        storage=storage,
        serving={"autoscaling": {**ON, "maxGpuBudget": 48, "prometheusEndpoint": "http://prometheus.obs.svc:9090"}},
    )
    assert g.autoscaling.max_gpus == 48 and g.autoscaling.prometheus_endpoint == "http://prometheus.obs.svc:9090"
    assert dict(g.autoscaling.max_replicas) == {"prefill": 4, "decode": 5}  # 12 nodes, the other role at its floor


def test_switching_the_planner_on_hands_over_only_single_replica_roles(rendered, autoscaled):
    from policies.rules.upgrades import run_transition_rules

    # gb300-disagg runs 1 prefill + 2 decode: the decode count would drop to the operator's default 1
    _, v = run_transition_rules(rendered["gb300-disagg"].resources, autoscaled.resources)
    got = [x for x in v if x.rule == "planner-takes-over-single-replicas"]
    assert [x.target for x in got] == ["DynamoGraphDeployment/kimi-k3 component DecodeWorker"]
    assert "runs 2 replicas" in got[0].message and "Set that role to 1 replica first" in got[0].message
    # with decode at 1 first (the documented way), the same switch is clean
    base = json.loads(json.dumps(rendered["gb300-disagg"].resources))
    dgd_record = next(r for r in base if r["type"].endswith(":DynamoGraphDeployment"))
    for c in dgd_record["inputs"]["spec"]["components"]:
        if c["name"] == "DecodeWorker":
            c["replicas"] = 1
    assert not [
        x for x in run_transition_rules(base, autoscaled.resources)[1] if x.rule == "planner-takes-over-single-replicas"
    ]
    # already planner-owned on both sides: nothing is handed over
    assert not [
        x
        for x in run_transition_rules(autoscaled.resources, autoscaled.resources)[1]
        if x.rule == "planner-takes-over-single-replicas"
    ]
