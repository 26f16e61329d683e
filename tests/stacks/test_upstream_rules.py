"""The portability rules (policies/rules/portability.py): each fails on a violation planted in our own render and
on a hand-written manifest in upstream main's form, passes on all our stacks, and what they say about the upstream
release-tag recipes in ../shared is pinned."""

from __future__ import annotations

import copy

import pytest
import yaml
from conftest import STACKS

from kimi_k3.commands.main import main as cli
from policies import rules
from policies.rules.portability import RULE_NAMES, image_reference, registry_problem

STAGING = "nvcr.io/nvstaging/nim/example:dynamo-main-arm64"  # the org upstream main pulls from; tag ours
CLIQUE = "0e804531-7d0e-ce6f-a1f4-9a9854394a7f.1"  # the id upstream main hard-codes (see UPSTREAM_MAIN_FORM)


def findings(objects, rule=None):
    got = [(v.rule, v.message) for v in rules.run_all(objects)[0] if v.rule in RULE_NAMES]
    return [m for r, m in got if r == rule] if rule else got


def dgd(objects):
    return next(o for o in objects if o["kind"] == "DynamoGraphDeployment")


def decode_spec(objects):
    comps = dgd(objects)["spec"]["components"]
    return next(c for c in comps if c["name"] == "DecodeWorker")["podTemplate"]["spec"]


PLANTS = {
    "images-pullable": lambda spec: spec["containers"][0].update(image=STAGING),
    "no-dev-mode-server": lambda spec: spec["containers"][0]["env"].append(
        {"name": "VLLM_SERVER_DEV_MODE", "value": "1"}
    ),
    "no-hard-coded-clique": lambda spec: spec.setdefault("nodeSelector", {}).update({"nvidia.com/gpu.clique": CLIQUE}),
}


@pytest.mark.parametrize("stack", STACKS)
def test_our_stacks_pass_every_portability_rule(rendered, stack):
    assert findings(rendered[stack].objects) == []


@pytest.mark.parametrize("rule", sorted(PLANTS))
def test_a_violation_planted_in_our_render_fails_exactly_its_rule(rendered, rule):
    objects = copy.deepcopy(rendered["gb300-disagg"].objects)
    PLANTS[rule](decode_spec(objects))
    got = findings(objects)
    assert [r for r, _ in got] == [rule], got
    assert "component DecodeWorker" in got[0][1]


# Upstream main's form, written by hand (not copied): ai-dynamo/dynamo recipes/kimi-k3/vllm/disagg-gb300-agentic/
# deploy.yaml @ 1d08afd35788044566d7ca4ec553e4f5c284b426 runs an nvcr.io/nvstaging image (with an NVIDIA pull
# secret), pins the frontend by nodeSelector and the workers by required nodeAffinity to one gpu.clique id, and
# sets VLLM_SERVER_DEV_MODE=1 on the workers (agg-gb300-agentic @ d21b9e9e9bcc4ab5295cdb95f2fd49631f164b78 too).
UPSTREAM_MAIN_FORM = f"""
apiVersion: nvidia.com/v1beta1
kind: DynamoGraphDeployment
metadata: {{name: k3-main-form}}
spec:
  backendFramework: vllm
  components:
  - name: Frontend
    type: frontend
    replicas: 1
    podTemplate:
      spec:
        nodeSelector: {{nvidia.com/gpu.clique: {CLIQUE}, nvidia.com/gpu.product: NVIDIA-GB300}}
        containers:
        - {{name: main, image: "{STAGING}", command: [python3, -m, dynamo.frontend]}}
  - name: PrefillWorker
    type: prefill
    replicas: 1
    podTemplate:
      spec:
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
              - matchExpressions:
                - {{key: nvidia.com/gpu.product, operator: In, values: [NVIDIA-GB300]}}
                - {{key: nvidia.com/gpu.clique, operator: In, values: ["{CLIQUE}"]}}
        containers:
        - name: main
          image: "{STAGING}"
          env: [{{name: VLLM_SERVER_DEV_MODE, value: "1"}}]
"""


def test_upstream_main_form_fails_all_three():
    got = findings(list(yaml.safe_load_all(UPSTREAM_MAIN_FORM)))
    assert sorted(got) == sorted(
        [
            (
                "images-pullable",
                f"component Frontend container main: {STAGING}: nvcr.io/nvstaging/ is NVIDIA's "
                "staging org on NGC (needs an NVIDIA-issued pull secret)",
            ),
            (
                "images-pullable",
                f"component PrefillWorker container main: {STAGING}: nvcr.io/nvstaging/ is "
                "NVIDIA's staging org on NGC (needs an NVIDIA-issued pull secret)",
            ),
            (
                "no-dev-mode-server",
                "component PrefillWorker container main: VLLM_SERVER_DEV_MODE=1 opens the "
                "server's development endpoints; allowed: unset or '0' (recipes/facts/portability.yaml)",
            ),
            (
                "no-hard-coded-clique",
                f"component Frontend: nodeSelector nvidia.com/gpu.clique={CLIQUE}: a clique "
                "id names one NVLink domain of one cluster; allowed: a required podAffinity with topologyKey "
                "nvidia.com/gpu.clique (the TP group shares whichever clique it lands on)",
            ),
            (
                "no-hard-coded-clique",
                f"component PrefillWorker: nodeAffinity nvidia.com/gpu.clique In ['{CLIQUE}']: "
                "a clique id names one NVLink domain of one cluster; allowed: a required podAffinity with topologyKey "
                "nvidia.com/gpu.clique (the TP group shares whichever clique it lands on)",
            ),
        ]
    )


def test_kimi_k3_check_reports_them_on_a_file(tmp_path, capsys):
    path = tmp_path / "deploy.yaml"
    path.write_text(UPSTREAM_MAIN_FORM)
    assert cli(["check", str(path)]) == 1
    out = capsys.readouterr().out
    for rule in RULE_NAMES:
        assert f"{rule}  DynamoGraphDeployment/k3-main-form" in out


@pytest.mark.parametrize(
    "image, ref",
    [
        ("python:3.12.11-slim", "docker.io/library/python"),
        ("bitnami/etcd:3.5", "docker.io/bitnami/etcd"),
        ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause"),
        ("localhost:5000/x:1", "localhost:5000/x"),
        ("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.0@sha256:" + "a" * 64, "nvcr.io/nvidia/ai-dynamo/vllm-runtime"),
    ],
)
def test_image_references_are_qualified_as_docker_does(image, ref):
    assert image_reference(image) == ref


def test_an_unknown_registry_is_refused_unless_policy_config_allows_it():
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/mine/vllm:1"
    assert "registry 123456789012.dkr.ecr.us-east-1.amazonaws.com is not one a user can pull from" in (
        registry_problem(image) or ""
    )
    assert registry_problem(image, ("123456789012.dkr.ecr.us-east-1.amazonaws.com/mine/",)) is None
    assert registry_problem("bitnami/etcd:3.5") is not None  # docker.io beyond the official images: not listed
    assert registry_problem("nvcr.io/nvstaging/x:1", ("nvcr.io/",)) is not None  # denied wins over allowed


def test_dev_mode_off_values_pass():
    objects = list(yaml.safe_load_all(UPSTREAM_MAIN_FORM))
    env = dgd(objects)["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]["env"]
    env[0]["value"] = "0"
    assert findings(objects, "no-dev-mode-server") == []
    env[0]["value"] = "2"  # bool(int("2")) is True in vllm/envs.py
    assert findings(objects, "no-dev-mode-server")


# The release-tag recipes in ../shared (v1.4.0-kimi-k3-dev.1): public images, no clique id, but both GB300
# profiles set VLLM_SERVER_DEV_MODE=1 on their workers.
REFERENCE_PINS = {
    "agg-gb200-agentic": [],
    "agg-gb300-agentic": [("no-dev-mode-server", "VllmDecodeWorker")],
    "disagg-gb200-agentic": [],
    "disagg-gb300-agentic": [("no-dev-mode-server", "DecodeWorker"), ("no-dev-mode-server", "PrefillWorker")],
}


@pytest.mark.parametrize("profile", sorted(REFERENCE_PINS))
def test_what_the_rules_say_about_the_release_tag_recipes(shared_reference, profile):
    text = (shared_reference / "dynamo/recipes/kimi-k3/vllm" / profile / "deploy.yaml").read_text()
    got = sorted((r, m.split()[1]) for r, m in findings(list(yaml.safe_load_all(text))))
    assert got == REFERENCE_PINS[profile]


def test_the_rule_families_and_rules_listed_in_the_docs_are_the_code():
    from conftest import ROOT

    modules = sorted(
        p.stem
        for p in (ROOT / "policies/rules").glob("*.py")
        if p.stem not in ("__init__", "base", "catalogue", "engine_form")
    )
    arch = (ROOT / "docs/architecture.md").read_text()
    listed = arch.split("one module per rule family (", 1)[1].split(";", 1)[0]
    assert listed.split(", ") == modules
    registry = rules.__doc__.split("one module per family\n(", 1)[1].split(";", 1)[0]
    assert sorted(registry.replace("\n", " ").split(", ")) == modules
    table = (ROOT / "policies/README.md").read_text().split("## Rules", 1)[1].split("\n## ", 1)[0]
    assert [r.name for r in rules.RULES if f"| `{r.name}` |" not in table] == []
