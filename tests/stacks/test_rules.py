"""Each rule passes on a good graph and fails on a mutation of it; upstream K3 profiles are pinned."""

import json

import pytest
import yaml
from conftest import SHARED, STACKS

from kimi_k3 import flags
from kimi_k3.commands import check_targets
from policies import rules
from policies.rules import base, engine_form, topology
from policies.rules.portability import RULE_NAMES as PORTABILITY_RULES

UPSTREAM = SHARED / "dynamo" / "recipes" / "kimi-k3" / "vllm"
IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0"
NO_CACHE_OPTIONS = {
    "startup-budget-covers-load": {"min_startup_seconds": 3600},
    "graph-fits-node-pool": {"gpu_node_pool_nodes": 6},
}


def worker(name, role, extra_args=()):
    args = [
        "--model",
        "/model-cache/hub/kimi-k3",
        "--served-model-name",
        "moonshotai/Kimi-K3",
        "--tensor-parallel-size",
        "8",
        "--block-size",
        "1536",
        "--kv-cache-dtype",
        "fp8",
        "--gpu-memory-utilization",
        "0.9",
        "--max-model-len",
        "262144",
        "--disaggregation-mode",
        role,
        "--kv-transfer-config",
        '{"kv_connector":"NixlConnector","kv_role":"kv_both"}',
        *extra_args,
    ]
    return {
        "name": name,
        "type": role,
        "replicas": 1,
        "multinode": {"nodeCount": 2},
        "runtimeVersionOverride": "1.4.0",
        "podTemplate": {
            "metadata": {"labels": {"role": name}},
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-GB300"]}
                                    ]
                                }
                            ]
                        }
                    },
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "topologyKey": "nvidia.com/gpu.clique",
                                "labelSelector": {"matchLabels": {"nvlink-group": "kimi-k3"}},
                            }
                        ]
                    },
                },
                # prefill hands KV to decode over NVLink: both roles claim the one ComputeDomain's channel
                "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": "kimi-k3-channel"}],
                "volumes": [{"name": "model-cache", "persistentVolumeClaim": {"claimName": "model-cache"}}],
                "containers": [
                    {
                        "name": "main",
                        "image": IMAGE,
                        "command": ["python3", "-m", "dynamo.vllm"],
                        "args": args,
                        "env": [
                            {"name": "MODEL_PATH", "value": "/model-cache/hub/kimi-k3"},
                            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
                        ],
                        "resources": {
                            "limits": {"nvidia.com/gpu": "4"},
                            "requests": {"nvidia.com/gpu": "4", "cpu": "32"},
                            "claims": [{"name": "channel"}],
                        },
                        "volumeMounts": [{"name": "model-cache", "mountPath": "/model-cache", "readOnly": True}],
                        "startupProbe": {
                            "httpGet": {"path": "/health", "port": 9090},
                            "periodSeconds": 10,
                            "failureThreshold": 360,
                        },
                    }
                ],
            },
        },
    }


def compute_domain(name):
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    }


def good_objects():
    frontend = {
        "name": "Frontend",
        "type": "frontend",
        "replicas": 1,
        "runtimeVersionOverride": "1.4.0",
        "podTemplate": {
            "spec": {
                # in the workers' zone (frontend-in-workers-zone)
                "affinity": {
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "topologyKey": "topology.kubernetes.io/zone",
                                "labelSelector": {
                                    "matchExpressions": [
                                        {"key": "role", "operator": "In", "values": ["prefill", "decode"]}
                                    ]
                                },
                            }
                        ]
                    }
                },
                "containers": [
                    {
                        "name": "main",
                        "image": IMAGE,
                        "command": ["python3", "-m", "dynamo.frontend"],
                        "args": [
                            "--router-mode",
                            "kv",
                            "--kv-cache-block-size",
                            "1536",
                            "--migration-limit",
                            "3",
                            "--http-port",
                            "8000",
                        ],
                        "resources": {"requests": {"cpu": "4", "memory": "16Gi"}},
                        "volumeMounts": [{"name": "model-cache", "mountPath": "/model-cache", "readOnly": True}],
                    }
                ],
                "volumes": [{"name": "model-cache", "persistentVolumeClaim": {"claimName": "model-cache"}}],
            }
        },
    }
    prefill = worker("prefill", "prefill", ["--kv-events-config", '{"publisher":"zmq","enable_kv_cache_events":true}'])
    dgd = {
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": "kimi-k3", "annotations": {"kimi-k3.io/gpus": "24"}},
        "spec": {"components": [frontend, prefill, dict(worker("decode", "decode"), replicas=2)]},
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "model-cache"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "3000Gi"}}},
    }
    return [compute_domain("kimi-k3"), dgd, pvc]


def protected(objects, protect=False, retain=True):
    return [
        base.ResourceInfo(
            f"kubernetes:{o['apiVersion'] if '/' in o['apiVersion'] else 'core/v1'}:{o['kind']}",
            o["metadata"]["name"],
            base.target_of(o),
            protect,
            retain,
        )
        for o in objects
    ]


def run(objects, resources="protected", config=NO_CACHE_OPTIONS):
    res = protected(objects) if resources == "protected" else resources
    return rules.run_all(objects, res, config)


def fired(objects, **kw):
    return sorted({v.rule for v in run(objects, **kw)[0]})


def dgd_of(objects):
    return next(o for o in objects if o["kind"] == "DynamoGraphDeployment")


def comp(objects, name):
    return next(c for c in dgd_of(objects)["spec"]["components"] if c["name"] == name)


def main(objects, name):
    return comp(objects, name)["podTemplate"]["spec"]["containers"][0]


def set_arg(objects, name, flag, value):
    args = main(objects, name)["args"]
    args[args.index(flag) + 1] = value


def drop_arg(objects, name, flag, with_value=True):
    args = main(objects, name)["args"]
    i = args.index(flag)
    del args[i : i + (2 if with_value else 1)]


def env(objects, name, var, value):
    main(objects, name).setdefault("env", []).append({"name": var, "value": value})


def test_good_graph_passes_every_rule():
    violations, skipped = run(good_objects())
    assert violations == []
    assert [s.rule for s in skipped if s.rule != "model-fits-at-tp"] == []


def smoke_job(args):
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "smoke"},
        "spec": {
            "backoffLimit": 1,
            "activeDeadlineSeconds": 300,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "smoke",
                            "image": "python:3.12.11-slim",
                            "command": ["python3", "/smoke/smoke.py"],
                            "args": args,
                        }
                    ],
                }
            },
        },
    }


def alert_rule(expr):
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "alerts"},
        "spec": {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": expr, "for": "5m"}]}]},
    }


def waiting_job():
    """A download Job that awaits through pulumi.com/waitFor (the form our stacks rendered before)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "dl",
            "annotations": {"pulumi.com/waitFor": "condition=Complete", "pulumi.com/timeoutSeconds": "28800"},
        },
        "spec": {
            "backoffLimit": 3,
            "activeDeadlineSeconds": 3600,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "dl", "image": "python:3.12.11-slim"}]}
            },
        },
    }


MUTATIONS = {
    "job-await-reports-failure": lambda o: o.append(waiting_job()),
    # our stacks' graph as rendered before: awaited by waitFor condition=Ready for 4 h
    "graph-await-reports-failure": lambda o: dgd_of(o)["metadata"]["annotations"].update(
        {"pulumi.com/waitFor": "condition=Ready", "pulumi.com/timeoutSeconds": "14400"}
    ),
    # gb300-disagg as rendered before: one ComputeDomain per role while KV moves over NVLink
    "nvlink-kv-roles-share-compute-domain": lambda o: (
        o.append(compute_domain("decode")),
        comp(o, "decode")["podTemplate"]["spec"]["resourceClaims"][0].update(
            resourceClaimTemplateName="decode-channel"
        ),
    ),
    # gb200-disagg as rendered before: NIXL LIBFABRIC with EFA devices on an image without EFA
    "kv-transport-consistent": lambda o: (
        set_arg(
            o,
            "decode",
            "--kv-transfer-config",
            '{"kv_connector":"NixlConnector","kv_role":"kv_both","kv_connector_extra_config":{"backends":["LIBFABRIC"]}}',
        ),
        main(o, "decode")["resources"]["limits"].update({"vpc.amazonaws.com/efa": "4"}),
    ),
    "frontend-reads-model-path": lambda o: main(o, "Frontend").pop("volumeMounts"),
    # the old form of every stack: the frontend pinned only by architecture (eks: the Region's system nodes)
    "frontend-in-workers-zone": lambda o: comp(o, "Frontend")["podTemplate"]["spec"].pop("affinity"),
    # a worker pinned to GKE A4X Max as the EKS graph is built: no network-profile selector, no DRANET claim
    "a4x-max-pods-schedule": lambda o: comp(o, "decode")["podTemplate"]["spec"].update(
        nodeSelector={"node.kubernetes.io/instance-type": "a4x-maxgpu-4g-metal"}
    ),
    # the old form: the smoke Job's fixed ~1.4k-token English prompt, no block size (1536 at TP8)
    "smoke-probe-spans-kv-block": lambda o: o.append(
        smoke_job(["--url", "http://f:8000", "--served-model-name", "m", "--max-model-len", "262144"])
    ),
    # the old form: the 0.0-1.0 KV gauge compared with 90 (percent)
    "alerts-match-metric-units": lambda o: o.append(alert_rule("max(dynamo_component_gpu_cache_usage_percent) > 90")),
    "pods-run-on-image-arch": lambda o: main(o, "Frontend").update(
        image="nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.1.0-efa-amd64"
    ),
    "tp-spans-whole-nodes": lambda o: set_arg(o, "decode", "--tensor-parallel-size", "16"),
    "pods-take-whole-nodes": lambda o: main(o, "decode")["resources"].update(
        limits={"nvidia.com/gpu": "2"}, requests={"nvidia.com/gpu": "2", "cpu": "32"}
    ),
    "multinode-claims-compute-domain": lambda o: comp(o, "decode")["podTemplate"]["spec"]["resourceClaims"][0].update(
        resourceClaimTemplateName="missing-channel"
    ),
    "tp-group-pinned-to-clique": lambda o: comp(o, "decode")["podTemplate"]["spec"]["affinity"].pop("podAffinity"),
    "tp-group-fits-nvlink-domain": lambda o: (
        comp(o, "decode").update(multinode={"nodeCount": 32}),
        set_arg(o, "decode", "--tensor-parallel-size", "128"),
    ),
    "graph-fits-node-pool": lambda o: comp(o, "decode").update(replicas=3),
    "gpu-totals-match-recipe": lambda o: dgd_of(o)["metadata"]["annotations"].update({"kimi-k3.io/gpus": "16"}),
    "model-fits-at-tp": lambda o: (
        comp(o, "decode").update(multinode={"nodeCount": 1}),
        set_arg(o, "decode", "--tensor-parallel-size", "4"),
    ),
    "env-refs-resolve": lambda o: main(o, "Frontend")["args"].extend(["--model-path", "$(MODEL_PATH)"]),
    "env-refs-provable": lambda o: (
        main(o, "Frontend")["args"].extend(["--model-path", "$(MODEL_PATH)"]),
        main(o, "Frontend").update(envFrom=[{"secretRef": {"name": "hf"}}]),
    ),
    "model-path-under-cache-mount": lambda o: set_arg(o, "decode", "--model", "/opt/models/kimi-k3"),
    # the form our stacks rendered before: fine on the leader, `\/model-cache/...` on every other pod
    "multinode-args-survive-operator-rewrite": lambda o: set_arg(o, "decode", "--model", "$(MODEL_PATH)"),
    "roles-agree-on-model": lambda o: set_arg(o, "decode", "--served-model-name", "kimi"),
    "model-cache-mounted-read-only": lambda o: main(o, "decode")["volumeMounts"][0].pop("readOnly"),
    "disagg-roles-use-nixl": lambda o: drop_arg(o, "decode", "--kv-transfer-config"),
    "no-removed-flags": lambda o: main(o, "prefill")["args"].append("--is-prefill-worker"),
    "ucx-settings-consistent": lambda o: (
        env(o, "decode", "UCX_TLS", "^cuda_ipc"),
        env(o, "decode", "UCX_CUDA_IPC_ENABLE_MNNVL", "y"),
    ),
    "efa-uses-libfabric": lambda o: main(o, "decode")["resources"]["limits"].update({"vpc.amazonaws.com/efa": "4"}),
    # 3072 >= vLLM's 1536: kept by vLLM, but not the router's block
    "frontend-block-size-matches-workers": lambda o: set_arg(o, "decode", "--block-size", "3072"),
    # the old form (ours and NVIDIA's gb200): router and workers agree on 64, which vLLM raises to 1536 at TP8
    "worker-block-size-is-vllms": lambda o: (
        set_arg(o, "decode", "--block-size", "64"),
        set_arg(o, "prefill", "--block-size", "64"),
        set_arg(o, "Frontend", "--kv-cache-block-size", "64"),
    ),
    "kv-router-has-kv-events": lambda o: drop_arg(o, "prefill", "--kv-events-config"),
    "images-pinned": lambda o: main(o, "Frontend").update(image="nvcr.io/nvidia/ai-dynamo/vllm-runtime:latest"),
    "runtime-version-declared": lambda o: (
        comp(o, "Frontend").pop("runtimeVersionOverride"),
        main(o, "Frontend").update(image=IMAGE + "-kimi-k3-dev.1"),
    ),
    "hf-token-from-secret": lambda o: main(o, "decode")["env"][1].update(value="hf_abc"),
    "env-secrets-from-secret": lambda o: (
        main(o, "Frontend")
        .setdefault("env", [])
        .append({"name": "AWS_SECRET_ACCESS_KEY", "value": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"})
    ),
    # the most common Kubernetes mistake: env written as a mapping (the API server refuses it)
    "object-shape-valid": lambda o: main(o, "decode").update(env={"UCX_TLS": "rc"}),
    "serving-containers-unprivileged": lambda o: main(o, "decode").update(securityContext={"privileged": True}),
    "startup-budget-covers-load": lambda o: main(o, "decode")["startupProbe"].update(failureThreshold=30),
    # the fighting form: a Planner scales the workers while this program still writes their replicas
    "planner-owns-worker-replicas": lambda o: dgd_of(o)["spec"]["components"].append(
        {
            "name": "Planner",
            "type": "planner",
            "replicas": 1,
            "podTemplate": {
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "nvcr.io/nvidia/ai-dynamo/dynamo-planner:1.6.1",
                            "command": ["python3", "-m", "dynamo.planner"],
                            "args": ["--config", "/workspace/c.json"],
                            "resources": {"requests": {"cpu": "1"}},
                        }
                    ]
                }
            },
        }
    ),
    # the old form of every stack: no --migration-limit, Dynamo's default 0 (a rollout fails in-flight streams)
    "frontend-migrates-requests": lambda o: drop_arg(o, "Frontend", "--migration-limit"),
    # the old form: this program named its graph after the recipe, so a recipe switch replaced it
    "graph-named-stably": lambda o: dgd_of(o)["metadata"].update(
        name="kimi-k3-gb300-disagg", labels={"app.kubernetes.io/part-of": "kimi-k3"}
    ),
    # the old form of the frontend (and the GB300 workers): no cpu or memory request, BestEffort
    "serving-containers-request-resources": lambda o: main(o, "Frontend").pop("resources"),
}


def test_every_rule_has_a_failing_case():
    # The two resource-option/AWS rules have their own cases (model-cache-retained below; aws-least-privilege in
    # test_aws.py, against the rendered stacks and their old forms); shared-mounts-writable needs PVs, storage
    # classes and access points (tests/stacks/test_shared_mounts.py, against the rendered stacks and their old form).
    assert sorted(MUTATIONS) == sorted(
        r.name
        for r in rules.RULES
        # nvlink-roles-in-provided-compute-domain: against the CKS stack and its old form (test_existing_computedomain.py)
        if r.name
        not in (
            "model-cache-retained",
            "aws-least-privilege",
            "shared-mounts-writable",
            "nvlink-roles-in-provided-compute-domain",
        )
        and r.name not in PORTABILITY_RULES  # tests/stacks/test_upstream_rules.py: our render and upstream's form
        and not r.name.startswith("sglang-")  # SGLang workers' rules: tests/unit/test_sglang_rules.py plants theirs
    )


@pytest.mark.parametrize("rule", sorted(MUTATIONS))
def test_mutation_fires_exactly_its_rule(rule):
    objects = good_objects()
    MUTATIONS[rule](objects)
    got = fired(objects)
    assert rule in got
    # A TP-4 single-node worker also breaks the recipe total and the TP arithmetic; nothing else may fire.
    # TP4 holds twice the KDA state per GPU: vLLM's block doubles (3072), so the TP8 --block-size is raised
    collateral = {
        "model-fits-at-tp": {"gpu-totals-match-recipe", "worker-block-size-is-vllms"},
        "tp-group-fits-nvlink-domain": {"gpu-totals-match-recipe", "graph-fits-node-pool", "model-fits-at-tp"},
        "graph-fits-node-pool": {"gpu-totals-match-recipe"},
        "pods-take-whole-nodes": {"tp-spans-whole-nodes", "gpu-totals-match-recipe"},
        "tp-spans-whole-nodes": set(),
        "env-refs-resolve": {"model-path-under-cache-mount", "roles-agree-on-model"},
        "env-refs-provable": {"model-path-under-cache-mount", "roles-agree-on-model"},
        "model-path-under-cache-mount": {"roles-agree-on-model", "frontend-reads-model-path"},
        "multinode-claims-compute-domain": {"nvlink-kv-roles-share-compute-domain"},
        "efa-uses-libfabric": {"kv-transport-consistent"},
        "hf-token-from-secret": {"env-secrets-from-secret"},  # HF_TOKEN is one of the credentials
    }.get(rule, set())
    assert set(got) - {rule} <= collateral


def test_upstream_frontend_bug_replay_is_caught():
    objects = good_objects()
    main(objects, "Frontend")["args"] += ["--model-path", "$(MODEL_PATH)"]
    violations = [v for v in run(objects)[0] if v.rule == "env-refs-resolve"]
    assert len(violations) == 1 and violations[0].level == base.MANDATORY
    assert "$(MODEL_PATH) has no env entry" in violations[0].message and "Frontend" in violations[0].message


def test_model_cache_retained_needs_retain_and_no_protect_on_the_claim():
    objects = good_objects()
    assert "model-cache-retained" not in fired(objects)
    assert "model-cache-retained" in fired(objects, resources=protected(objects, protect=False, retain=False))
    assert "model-cache-retained" not in fired(objects, resources=protected(objects, protect=False, retain=True))
    # The old form: protect on the claim blocks `pulumi destroy` and keeps the cluster through a teardown; protect
    # without retainOnDelete loses the weights after an unprotect.
    old = [
        v
        for v in run(objects, resources=protected(objects, protect=True, retain=True))[0]
        if v.rule == "model-cache-retained"
    ]
    assert [v.target for v in old] == ["PersistentVolumeClaim/model-cache"] and "protect" in old[0].message
    assert "model-cache-retained" in fired(objects, resources=protected(objects, protect=True, retain=False))
    fs = base.ResourceInfo("aws:fsx/lustreFileSystem:LustreFileSystem", "cache", None, True, False)
    assert "model-cache-retained" in fired(objects, resources=protected(objects) + [fs]), "protect alone"
    kept = base.ResourceInfo("aws:fsx/lustreFileSystem:LustreFileSystem", "cache", None, True, True)
    assert "model-cache-retained" not in fired(objects, resources=protected(objects) + [kept]), (
        "a protected filesystem is fine: its teardown keeps only AWS network pieces"
    )
    # The weights bucket (storage kind s3) is the cache too; the compile-cache EFS holds reproducible artifacts.
    bucket = base.ResourceInfo("aws:s3/bucket:Bucket", "kimi-k3-storage-weights", None, False, False)
    assert "model-cache-retained" in fired(objects, resources=protected(objects) + [bucket])
    kept_bucket = base.ResourceInfo("aws:s3/bucket:Bucket", "kimi-k3-storage-weights", None, True, True)
    assert "model-cache-retained" not in fired(objects, resources=protected(objects) + [kept_bucket])
    scratch = base.ResourceInfo("aws:efs/fileSystem:FileSystem", "kimi-k3-storage-compile-cache", None, False, False)
    assert "model-cache-retained" not in fired(objects, resources=protected(objects) + [scratch])


def test_model_cache_retained_not_evaluated_from_manifests_or_without_retain_visibility():
    objects = good_objects()
    _, skipped = run(objects, resources=None)
    assert [(s.rule, s.target) for s in skipped if s.rule == "model-cache-retained"] == [
        ("model-cache-retained", "PersistentVolumeClaim/model-cache")
    ]
    violations, skipped = run(objects, resources=protected(objects, protect=False, retain=None))
    assert "model-cache-retained" not in {v.rule for v in violations}
    assert "model-cache-retained" in {s.rule for s in skipped}


def test_node_pool_and_totals_not_evaluated_without_inputs():
    objects = good_objects()
    del dgd_of(objects)["metadata"]["annotations"]
    _, skipped = run(objects, config={})
    assert {"graph-fits-node-pool", "gpu-totals-match-recipe"} <= {s.rule for s in skipped}


def test_shell_script_flags_and_refs():
    script = (
        "# comment with $IGNORED\nset -euo pipefail\nexport LOCAL=1\nexec python3 -m dynamo.vllm \\\n"
        '  --model "${MODEL_PATH}" \\\n  --kv-transfer-config \'{"kv_connector":"NixlConnector"}\' \\\n'
        "  --tensor-parallel-size 16 --enable-prefix-caching --x $LOCAL $UNSET '$QUOTED'\n"
    )
    container = {"command": ["/bin/bash", "-lc"], "args": [script], "env": [{"name": "MODEL_PATH", "value": "/m"}]}
    tokens = flags.server_argv(container)
    assert flags.module(tokens) == "dynamo.vllm"
    assert flags.flag_value(tokens, "--tensor-parallel-size") == "16"
    assert flags.flag_values(tokens, "--enable-prefix-caching") == [None]
    assert json.loads(flags.flag_value(tokens, "--kv-transfer-config")) == {"kv_connector": "NixlConnector"}
    assert flags.shell_refs(script) == ["MODEL_PATH", "UNSET"]
    assert flags.resolve(flags.flag_value(tokens, "--model"), flags.container_env(container), shell=True) == "/m"


def test_kube_refs_expand_through_env_and_respect_escape():
    container = {"env": [{"name": "ROOT", "value": "/model-cache"}, {"name": "MODEL_PATH", "value": "$(ROOT)/k3"}]}
    assert flags.container_env(container)["MODEL_PATH"] == "/model-cache/k3"
    assert flags.kube_refs("$(A) $$(B)") == ["A"]


def cli(*argv):
    from kimi_k3.commands.main import main

    return main(["check", *argv])


def test_check_render_dir_with_only_manifests(tmp_path, capsys):
    (tmp_path / "manifests.yaml").write_text(yaml.safe_dump_all(good_objects()))
    assert cli(str(tmp_path)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line.startswith("model-cache-retained")] == [
        "model-cache-retained  PersistentVolumeClaim/model-cache  not evaluated: only manifests known: "
        "protect/retainOnDelete need Pulumi resource options (check a stack or a render directory with resources.json)"
    ]


def test_check_render_dir_with_resources_and_json(tmp_path, capsys):
    objects = good_objects()
    (tmp_path / "manifests.yaml").write_text(yaml.safe_dump_all(objects))
    resources = [
        {
            "urn": f"urn:{o['metadata']['name']}",
            "type": info.type,
            "name": info.name,
            "parent": None,
            "provider": None,
            "dependsOn": [],
            "protect": False,
            "retainOnDelete": False,
            "inputs": o,
        }
        for o, info in zip(objects, protected(objects))
    ]
    (tmp_path / "resources.json").write_text(json.dumps({"stack": "test", "outputs": {}, "resources": resources}))
    assert cli(str(tmp_path), "--json") == 1
    report = json.loads(capsys.readouterr().out)
    assert [(v["rule"], v["target"]) for v in report[0]["violations"]] == [
        ("model-cache-retained", "PersistentVolumeClaim/model-cache")
    ]


def test_check_reads_what_kimi_k3_render_writes(tmp_path, capsys):
    from conftest import ROOT
    from support import render_stack_once

    render_stack_once("gb300", ROOT).write(tmp_path)
    assert cli(str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "model-cache-retained" not in out, "resources.json carries protect/retainOnDelete, so the rule is evaluated"


def test_check_missing_target_is_a_usage_error(tmp_path):
    assert cli(str(tmp_path)) == 2


# ------------------------------------------------------------------------------------------ upstream profiles
# What the pack says about each unmodified upstream recipe: (rule, component) of every violation.
RUNTIME = "runtime-version-declared"
BLOCK = "worker-block-size-is-vllms"  # gb200 pins --block-size 64 (vLLM raises it to 768), gb300 sets none
MIGRATION = "frontend-migrates-requests"  # every upstream K3 frontend runs Dynamo's default, migration off
ZONE = "frontend-in-workers-zone"  # no upstream K3 frontend is kept in its workers' zone
QOS = "serving-containers-request-resources"  # requests only on disagg-gb200 and agg-gb200's worker
UPSTREAM_PINS = {
    "agg-gb200-agentic": {
        ("tp-group-pinned-to-clique", "VllmDecodeWorker"),
        (RUNTIME, "Frontend"),
        (MIGRATION, "Frontend"),
        (ZONE, "Frontend"),
        (RUNTIME, "VllmDecodeWorker"),
        (BLOCK, "VllmDecodeWorker"),
        (QOS, "Frontend"),
    },
    "agg-gb300-agentic": {
        ("tp-group-pinned-to-clique", "VllmDecodeWorker"),
        (RUNTIME, "Frontend"),
        (MIGRATION, "Frontend"),
        (ZONE, "Frontend"),
        (RUNTIME, "VllmDecodeWorker"),
        ("model-path-under-cache-mount", "VllmDecodeWorker"),
        (BLOCK, "VllmDecodeWorker"),
        (QOS, "Frontend"),
        (QOS, "VllmDecodeWorker"),
        ("no-dev-mode-server", "VllmDecodeWorker"),  # VLLM_SERVER_DEV_MODE=1 (tests/stacks/test_upstream_rules.py)
    },
    "disagg-gb200-agentic": {
        ("tp-group-pinned-to-clique", "Prefill"),
        ("tp-group-pinned-to-clique", "Decode"),
        ("ucx-settings-consistent", "Prefill"),
        ("ucx-settings-consistent", "Decode"),
        (RUNTIME, "Frontend"),
        (MIGRATION, "Frontend"),
        (ZONE, "Frontend"),
        (RUNTIME, "Prefill"),
        (RUNTIME, "Decode"),
        (BLOCK, "Prefill"),
        (BLOCK, "Decode"),
    },
    "disagg-gb300-agentic": {
        ("tp-group-pinned-to-clique", "PrefillWorker"),
        ("tp-group-pinned-to-clique", "DecodeWorker"),
        ("model-path-under-cache-mount", "PrefillWorker"),
        ("model-path-under-cache-mount", "DecodeWorker"),
        ("no-dev-mode-server", "PrefillWorker"),
        ("no-dev-mode-server", "DecodeWorker"),
        (RUNTIME, "Frontend"),
        (MIGRATION, "Frontend"),
        (ZONE, "Frontend"),
        (RUNTIME, "PrefillWorker"),
        (RUNTIME, "DecodeWorker"),
        (BLOCK, "PrefillWorker"),
        (BLOCK, "DecodeWorker"),
        (QOS, "Frontend"),
        (QOS, "PrefillWorker"),
        (QOS, "DecodeWorker"),
    },
}


def upstream_objects(profile):
    if not UPSTREAM.is_dir():
        pytest.skip(f"{UPSTREAM} absent: upstream recipes are not shipped with the repo")
    return check_targets.yaml_objects((UPSTREAM / profile / "deploy.yaml").read_text())


@pytest.mark.parametrize("profile", sorted(UPSTREAM_PINS))
def test_upstream_profile_findings_are_pinned(profile):
    violations, _ = rules.run_all(upstream_objects(profile))
    got = {(v.rule, v.message.split(":")[0].split()[1]) for v in violations}
    assert got == UPSTREAM_PINS[profile]
    assert all(v.level == base.MANDATORY for v in violations)


def test_upstream_gb200_disagg_with_replayed_frontend_bug(capsys):
    objects = upstream_objects("disagg-gb200-agentic")
    frontend = next(c for c in dgd_of(objects)["spec"]["components"] if c["type"] == "frontend")
    frontend["podTemplate"]["spec"]["containers"][0]["args"] += ["--model-path", "$(MODEL_PATH)"]
    violations, _ = rules.run_all(objects)
    assert ("env-refs-resolve", "Frontend") in {(v.rule, v.message.split()[1]) for v in violations}


def test_check_cli_on_upstream_file(capsys):
    objects = upstream_objects("disagg-gb200-agentic")
    assert objects
    assert cli(str(UPSTREAM / "disagg-gb200-agentic" / "deploy.yaml")) == 1
    out = capsys.readouterr().out
    assert (
        "ucx-settings-consistent  DynamoGraphDeployment/kimi-k3-disagg  component Decode container main: "
        "UCX_TLS=^cuda_ipc excludes cuda_ipc"
    ) in out


# ------------------------------------------------------------------------------------------ our own stacks
@pytest.mark.parametrize("stack", STACKS)
def test_our_stacks_have_no_mandatory_violations(stack):
    loaded = check_targets.load(stack)
    violations, skipped = rules.run_all(loaded.objects, loaded.resources)
    assert [v for v in violations if v.level == base.MANDATORY] == []
    assert skipped == [], "with resources.json every rule is evaluated (the node pool comes from the GPU node group)"


def gpu_node_group(max_size, ami="AL2023_ARM_64_NVIDIA"):
    return engine_form.resource_info(
        "aws:eks/nodeGroup:NodeGroup",
        "gpu-nodes",
        {"amiType": ami, "scalingConfig": {"maxSize": max_size}},
        False,
        False,
    )


def test_node_pool_comes_from_the_stacks_gpu_node_group():
    rule = next(r for r in rules.RULES if r.name == "graph-fits-node-pool")
    needs = topology.gpu_nodes(dgd_of(good_objects()))
    system = gpu_node_group(50, ami="AL2023_x86_64_STANDARD")  # not a GPU pool
    too_small = base.evaluate(rule, good_objects(), base.Context({}, [system, gpu_node_group(needs - 1)]))
    assert [v.message for v in too_small[0]] == [
        f"graph needs {needs} GPU nodes; the pool has {needs - 1} (the stack's GPU node group max size)"
    ]
    assert base.evaluate(rule, good_objects(), base.Context({}, [system, gpu_node_group(needs)])) == ([], [])
    unknown = base.evaluate(rule, good_objects(), base.Context({}, [system]))
    assert unknown[0] == [] and len(unknown[1]) == 1


def test_kv_router_by_environment_variable_needs_kv_events_too():
    """#11473 with the router set the way NVIDIA's Kubernetes docs set it: DYN_ROUTER_MODE=kv on the frontend."""
    objects = good_objects()
    args = main(objects, "Frontend")["args"]
    del args[args.index("--router-mode") : args.index("--router-mode") + 2]
    env(objects, "Frontend", "DYN_ROUTER_MODE", "kv")
    assert "kv-router-has-kv-events" not in fired(objects)
    drop_arg(objects, "prefill", "--kv-events-config")
    assert "kv-router-has-kv-events" in fired(objects)


def test_migration_limit_in_every_form_the_frontend_reads():
    """--migration-limit wins (argparse keeps the last); without it DYN_MIGRATION_LIMIT (frontend_args.py env_var)."""

    def verdict(objects):
        rule = rules.RULES_BY_NAME["frontend-migrates-requests"]
        return base.evaluate(rule, objects, base.Context({}, None))

    objects = good_objects()
    assert verdict(objects) == ([], [])
    set_arg(objects, "Frontend", "--migration-limit", "0")
    assert ["--migration-limit 0 turns request migration off" in v.message for v in verdict(objects)[0]] == [True]
    main(objects, "Frontend")["args"] += ["--migration-limit", "2"]  # the last one counts
    assert verdict(objects) == ([], [])
    drop_arg(objects, "Frontend", "--migration-limit")
    drop_arg(objects, "Frontend", "--migration-limit")
    assert "no --migration-limit, so Dynamo's default 0" in verdict(objects)[0][0].message
    env(objects, "Frontend", "DYN_MIGRATION_LIMIT", "3")  # NVIDIA's Kubernetes guide sets it so
    assert verdict(objects) == ([], [])
    main(objects, "Frontend")["env"][-1].update(value="0")
    assert "DYN_MIGRATION_LIMIT 0 turns request migration off" in verdict(objects)[0][0].message
    main(objects, "Frontend")["env"][-1] = {
        "name": "DYN_MIGRATION_LIMIT",
        "valueFrom": {"configMapKeyRef": {"name": "fe", "key": "limit"}},
    }
    violations, skipped = verdict(objects)
    assert violations == [] and "valueFrom" in skipped[0].reason
    # Dynamo <= 0.9.1's place for it: dynamo.vllm >= 1.0.0 hands it to vLLM's parser, which exits
    objects = good_objects()
    main(objects, "decode")["args"] += ["--migration-limit", "3"]
    assert ["component decode: --migration-limit" in v.message for v in verdict(objects)[0]] == [True]


def test_frontend_migrates_requests_fails_on_the_old_render_of_every_stack(rendered):
    """Every stack rendered before recipes/defaults/request-migration.yaml had no --migration-limit on its frontend (its only
    difference from today's render): the rule fails that form and passes today's, for each of the four stacks."""
    for stack, r in rendered.items():
        objects = json.loads(json.dumps(r.objects))
        assert "frontend-migrates-requests" not in fired(objects, resources=None), stack
        frontend = main(objects, "Frontend")
        assert flags.flag_value(frontend["args"], "--migration-limit") == "3", stack
        drop_arg(objects, "Frontend", "--migration-limit")
        got = [v for v in run(objects, resources=None)[0] if v.rule == "frontend-migrates-requests"]
        assert len(got) == 1 and got[0].level == base.MANDATORY and "no --migration-limit" in got[0].message, stack
