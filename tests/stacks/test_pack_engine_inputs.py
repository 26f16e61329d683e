"""The pack judges what the engine hands it as `kimi-k3 check` judges the rendered YAML.

The engine passes resource inputs to the pack through pulumi_policy's read-only proxies (Mapping/Sequence
wrappers that raise UnknownValueError on values unknown in preview), not as dicts and lists. A rule that only
ever met plain YAML (a `list + list`, a `.copy()`) crashed under the real engine on every stack while `check`
and the unit tests passed. These tests hand every rendered stack to the rules in the engine's form.
"""

import pytest
from conftest import STACKS
from google.protobuf import json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy
from test_policy_pack import analyzer  # noqa: F401 - the real pack over gRPC, started as the CLI starts it

from policies import rules
from policies.rules import base, engine_form


def k8s_resources(rendered_stack):
    return [r for r in rendered_stack.resources if r["type"].startswith("kubernetes:")]


def engine_object(resource):
    """The object exactly as the pack's Analyze builds it from the engine's inputs."""
    return engine_form.object_from_resource(
        resource["type"], unknown_checking_proxy(resource["inputs"]), resource["name"]
    )


def names(violations):
    return sorted((v.rule, v.target, v.message) for v in violations)


@pytest.mark.parametrize("stack", STACKS)
def test_every_rule_judges_proxied_inputs_as_check_judges_yaml(rendered, stack):
    resources = k8s_resources(rendered[stack])
    plain_objects = [engine_form.object_from_resource(r["type"], r["inputs"], r["name"]) for r in resources]
    proxied = [engine_object(r) for r in resources]
    assert proxied == plain_objects
    got, _ = rules.run_all(proxied)
    want, _ = rules.run_all(plain_objects)
    crashed = [v for v in got if "could not evaluate" in v.message]
    assert crashed == [], f"{stack}: a rule cannot read the engine's form of the inputs: {crashed[0].message}"
    assert names(got) == names(want)


def test_an_input_unknown_in_preview_is_not_judged(rendered):
    """An unknown value deep in a list (here one smoke-test argument) leaves the rules that read it not
    applicable, as pulumi_policy defines it; the rules that do not read it still judge the object."""
    resources = k8s_resources(rendered["gb300-disagg"])
    smoke = next(r for r in resources if r["name"] == "kimi-k3-serving-smoke-test")
    inputs = dict(smoke["inputs"])
    container = inputs["spec"]["template"]["spec"]["containers"][0]
    key = "args" if container.get("args") else "command"
    tampered = {**container, key: [*container[key][:-1], UNKNOWN_STRING_VALUE]}
    inputs = {
        **inputs,
        "spec": {
            **inputs["spec"],
            "template": {
                **inputs["spec"]["template"],
                "spec": {**inputs["spec"]["template"]["spec"], "containers": [tampered]},
            },
        },
    }
    obj = engine_form.object_from_resource(smoke["type"], unknown_checking_proxy(inputs), smoke["name"])
    others = [engine_form.object_from_resource(r["type"], r["inputs"], r["name"]) for r in resources if r is not smoke]
    for rule in rules.RULES:
        try:
            violations, _ = base.evaluate(rule, [*others, obj] if rule.scope == "stack" else [obj], base.Context({}))
        except Exception as exc:  # noqa: BLE001 - the one exception allowed is pulumi_policy's not-applicable
            assert type(exc).__name__ == "UnknownValueError", f"{rule.name}: {exc!r}"
            continue
        crashed = [v.message for v in violations if "could not evaluate" in v.message]
        assert crashed == [], f"{rule.name} judged a placeholder: {crashed}"


def resource_request(resource):
    props = json_format.ParseDict(resource["inputs"], struct_pb2.Struct())
    urn = f"urn:pulumi:lane::kimi-k3::{resource['type']}::{resource['name']}"
    return analyzer_pb2.AnalyzerResource(
        type=resource["type"],
        properties=props,
        urn=urn,
        name=resource["name"],
        options=analyzer_pb2.AnalyzerResourceOptions(protect=resource["protect"]),
    )


@pytest.mark.parametrize("stack", STACKS)
def test_the_real_pack_over_grpc_passes_every_rendered_stack(analyzer, rendered, stack):  # noqa: F811
    """What `pulumi preview --policy-pack policies` does: Analyze per resource, AnalyzeStack over all."""
    analyzer.Configure(analyzer_pb2.ConfigureAnalyzerRequest())
    resources = rendered[stack].resources
    requests = [resource_request(r) for r in resources]
    findings = []
    for r in requests:
        if r.type.startswith("kubernetes:"):
            response = analyzer.Analyze(
                analyzer_pb2.AnalyzeRequest(
                    type=r.type, properties=r.properties, urn=r.urn, name=r.name, options=r.options
                )
            )
            findings += [(d.policyName, d.message) for d in response.diagnostics]
    response = analyzer.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=requests))
    findings += [(d.policyName, d.message) for d in response.diagnostics]
    assert findings == [], f"{stack}: the pack refuses what `kimi-k3 check` passes: {findings[:3]}"
