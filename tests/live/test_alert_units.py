"""Issue 19 finding 7: every alert and panel queries a metric Dynamo (or kube-state-metrics) really exports, in
that metric's real unit. `dynamo_component_gpu_cache_usage_percent` is a 0.0-1.0 fraction: the KV-cache-full
alert compared it with 90 (it could never fire) and the dashboard showed 0.9 as 0.9 %."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, STACKS, by_kind, render_with

from kimi_k3.data import recipe_file
from policies import rules
from policies.rules.observability import expr_metrics

REHEARSE_PYTHON = Path(os.environ.get("KIMI_K3_REHEARSE_PYTHON", ROOT / ".venv-rehearse" / "bin" / "python"))
RULE = "alerts-match-metric-units"
FACTS = recipe_file("facts/metrics.yaml")


def _fired(objects):
    violations, skipped = rules.run_all(objects)
    assert not [s for s in skipped if s.rule == RULE]
    return [v.message for v in violations if v.rule == RULE]


def _alerts(objects):
    return {r["alert"]: r for r in by_kind(objects, "PrometheusRule")[0]["spec"]["groups"][0]["rules"]}


def _dashboard(objects):
    (cm,) = [m for m in by_kind(objects, "ConfigMap") if (m["metadata"].get("labels") or {}).get("grafana_dashboard")]
    return cm, json.loads(next(iter(cm["data"].values())))


def test_fact_table_is_complete_and_consistent():
    for name, fact in FACTS["metrics"].items():
        assert fact["exporter"] in FACTS["exporters"] and fact["unit"] in FACTS["units"], name
        assert any(name.startswith(p) for p in FACTS["exporters"][fact["exporter"]]["prefixes"]), name
        assert fact["type"] in ("gauge", "counter", "histogram"), name
        if fact["exporter"] == "dynamo":
            assert len(fact["names"]) == 2, f"{name}: a prefix and a name from dynamo.prometheus_names"


@pytest.fixture(scope="module")
def installed_dynamo():
    """What the installed Dynamo 1.6.1 really exports: each table name built from dynamo.prometheus_names, and
    the KV gauge as Dynamo's own metrics class registers it and its vLLM publisher sets it (the rehearsal venv)."""
    if not REHEARSE_PYTHON.is_file():
        pytest.skip(
            f"{REHEARSE_PYTHON} missing: the installed Dynamo package comes with the rehearsal venv "
            "(make rehearse-venv)"
        )
    wanted = {n: f["names"] for n, f in FACTS["metrics"].items() if f["exporter"] == "dynamo"}
    script = f"""
import json, importlib.metadata, inspect, operator
from dynamo import prometheus_names as pn
from prometheus_client import CollectorRegistry, generate_latest
from dynamo.common.utils.prometheus import LLMBackendMetrics
import dynamo.vllm
out = {{"version": importlib.metadata.version("ai-dynamo-runtime"), "names": {{}}}}
for name, parts in {wanted!r}.items():
    out["names"][name] = "_".join(operator.attrgetter(p)(pn) for p in parts)
registry = CollectorRegistry()
m = LLMBackendMetrics(registry=registry, model_name="k3", component_name="backend")
m.set_gpu_cache_usage("0", 0.95)     # what dynamo/vllm/publisher.py passes: vLLM's kv_cache_usage, 95 % full
out["exposition"] = generate_latest(registry).decode()
src = open(dynamo.vllm.__path__[0] + "/publisher.py").read()
out["publisher_sets_from_kv_cache_usage"] = "set_gpu_cache_usage(" in src and "scheduler_stats.kv_cache_usage" in src
print(json.dumps(out))
"""
    done = subprocess.run([str(REHEARSE_PYTHON), "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.rehearse  # needs .venv-rehearse: runs in make test-rehearse, where it exists
def test_table_names_are_what_the_installed_dynamo_exports(installed_dynamo):
    assert installed_dynamo["version"] == "1.6.1"
    for name, built in installed_dynamo["names"].items():
        assert built == name


@pytest.mark.rehearse  # needs .venv-rehearse: runs in make test-rehearse, where it exists
def test_kv_gauge_is_a_fraction_and_the_rendered_alert_fires_on_it(installed_dynamo, rendered):
    assert installed_dynamo["publisher_sets_from_kv_cache_usage"]
    samples = [
        line.split()
        for line in installed_dynamo["exposition"].splitlines()
        if line.startswith("dynamo_component_gpu_cache_usage_percent{")
    ]
    (sample,) = samples
    value = float(sample[-1])
    assert value == 0.95, "Dynamo exports the fraction as given, not a percent"
    expr = _alerts(rendered["gb300"].objects)["KimiK3KVCacheFull"]["expr"]
    threshold = float(expr.rsplit(">", 1)[1])
    assert value > threshold, f"a 95 %-full cache must fire {expr!r}"
    assert not value > 90, "the old form (> 90) never fires"


@pytest.mark.parametrize("stack", STACKS)
def test_every_alert_and_panel_of_our_stacks_passes_and_the_old_form_fails(stack, rendered):
    objects = rendered[stack].objects
    assert _fired(objects) == []
    names = set()
    for rule in _alerts(objects).values():
        names |= set(expr_metrics(rule["expr"])[0])
    _, dashboard = _dashboard(objects)
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            names |= set(expr_metrics(target["expr"])[0])
    known = set(FACTS["metrics"]) | {f"{n}_bucket" for n, f in FACTS["metrics"].items() if f["type"] == "histogram"}
    assert names and names <= known, names - known  # the rule has checked each of them against the table
    old = copy.deepcopy(objects)
    kv = _alerts(old)["KimiK3KVCacheFull"]
    kv["expr"] = kv["expr"].rsplit(">", 1)[0] + "> 90"  # the alert as rendered before this fix
    cm, board = _dashboard(old)
    panel = next(p for p in board["panels"] if p["title"] == "KV cache usage by worker")
    panel["fieldConfig"]["defaults"]["unit"] = "percent"  # the panel as rendered before
    cm["data"] = {k: json.dumps(board) for k in cm["data"]}
    messages = _fired(old)
    assert len(messages) == 2
    assert any("KimiK3KVCacheFull: compares a ratio" in m and "> 90" in m for m in messages)
    assert any("'KV cache usage by worker': shows a ratio" in m and "'percent'" in m for m in messages)


def test_threshold_in_percent_becomes_the_gauges_fraction():
    r = render_with("gb300", monitoring={"alerts": {"maxKvCacheUsagePercent": 80}})
    rule = _alerts(r.objects)["KimiK3KVCacheFull"]
    assert rule["expr"].endswith("> 0.8") and "80%" in rule["annotations"]["summary"]


@pytest.mark.parametrize(
    "expr, expected",
    [
        # a name Dynamo 1.6.1 does not export (the kvstats_-prefixed name of older Dynamo releases)
        ("max(dynamo_component_kvstats_gpu_cache_usage_percent) > 0.9", "is not a metric dynamo exports"),
        ("kube_pod_status_readyy == 0", "is not a metric kube-state-metrics exports"),
        ("min(dynamo_component_gpu_cache_usage_percent) < 0", "compares a ratio"),
        ("absent(dynamo_component_requests_total) > 1", "compares a boolean"),
        (
            "histogram_quantile(0.95, sum by (le) (rate(dynamo_frontend_time_to_first_token_seconds_bucket[5m]))) < 0",
            "compares a seconds",
        ),
    ],
)
def test_rule_on_hand_written_alerts(expr, expected):
    obj = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "mine"},
        "spec": {"groups": [{"name": "g", "rules": [{"alert": "Mine", "expr": expr}]}]},
    }
    messages = _fired([obj])
    assert len(messages) == 1 and expected in messages[0], messages


def test_rule_leaves_metrics_of_other_exporters_and_good_thresholds_alone():
    obj = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "mine"},
        "spec": {
            "groups": [
                {
                    "name": "g",
                    "rules": [
                        {"alert": "A", "expr": 'max(dynamo_component_gpu_cache_usage_percent{namespace="x"}) > 0.95'},
                        {"alert": "B", "expr": "node_load1 > 90"},
                        {"alert": "C", "expr": 'sum(kube_pod_status_ready{condition="false"}) > 0'},
                        {"record": "r", "expr": "sum by (pod) (rate(dynamo_component_requests_total[5m]))"},
                    ],
                }
            ]
        },
    }
    assert _fired([obj]) == []
