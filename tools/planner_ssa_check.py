"""Does a later `pulumi up` leave the SLA planner's replica count alone? The real Pulumi engine and Kubernetes
provider (the engine lane's pinned builds) against a local API server holding the upstream DGD CRD.

Two forms of our gb300-disagg graph with the planner on, each deployed with `pulumi up`; then a stand-in for the
operator's scaling adapter (field manager `dynamo-operator`, an Update as the operator's r.Update is) sets the decode
worker to 3 replicas; then `pulumi up` again with an unrelated change to the graph (a frontend env var):
- ours: workers rendered without `replicas` (kimi_k3/graph/autoscaling.py): must succeed and leave 3;
- the old/fighting form: `replicas: 2` rendered, with `ignoreChanges: [spec.components[i].replicas]`;
and the two transitions: planner switched on for a graph Pulumi deployed with 2 decode replicas, and switched off
after it scaled to 3 (the config then stating 3).
No Dynamo operator runs here (no webhook, no DGDSA controller). Run it as
  unshare --net -- sh -c 'ip link set lo up && ENGINE_BIN=<engine lane bin dir> .venv/bin/python tools/planner_ssa_check.py'
It prints one JSON report and exits 0 when ours holds (the fighting form's outcome is reported, whatever it is).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tools" / "engine"), str(ROOT / "tests")]

import lane  # noqa: E402  (tools/engine/lane.py: the local API server)
from conftest import render_with, stack_config  # noqa: E402

PROGRAM = """
import json, pulumi, pulumi_kubernetes as k8s
cfg = pulumi.Config()
obj = json.load(open(cfg.require("file")))
k8s.apiextensions.CustomResource("graph", api_version=obj["apiVersion"], kind=obj["kind"], metadata=obj["metadata"],
    spec=obj["spec"], opts=pulumi.ResourceOptions(ignore_changes=json.loads(cfg.get("ignore") or "[]")))
"""


def graphs() -> dict[str, dict]:
    """Our autoscaled DGD; the same with the worker replicas written (the fighting form); the graph without the
    planner (1 prefill, 2 decode); and that graph at the planner's 3 decode replicas."""
    cluster = json.loads(stack_config("gb300-disagg")[0]["kimi-k3:cluster"])
    cluster["gpuNodes"]["desiredNodes"] = 18
    dgd = lambda r: next(o for o in r.objects if o["kind"] == "DynamoGraphDeployment")  # noqa: E731
    ours = dgd(
        render_with(
            "gb300-disagg", cluster=cluster, serving={"autoscaling": {"enabled": True, "ttftMs": 30000, "itlMs": 50}}
        )
    )
    fighting = copy.deepcopy(ours)
    for c in fighting["spec"]["components"]:
        if c["type"] in ("prefill", "decode"):
            c["replicas"] = 2 if c["type"] == "decode" else 1
    plain = dgd(render_with("gb300-disagg", cluster=cluster))
    plain3 = dgd(render_with("gb300-disagg", cluster=cluster, serving={"roles": {"decode": {"replicas": 3}}}))
    return {"ours": ours, "fighting": fighting, "plain": plain, "plain3": plain3}


def replicas_managers(live: dict, component: str) -> list[str]:
    """Field managers that own spec.components[name=component].replicas."""
    key = 'k:{"name":"%s"}' % component
    return sorted(
        m["manager"]
        for m in live["metadata"]["managedFields"]
        if "f:replicas" in ((m.get("fieldsV1") or {}).get("f:spec", {}).get("f:components", {}).get(key, {}))
    )


def changed(obj: dict) -> dict:
    """An unrelated change: one more env var on the frontend."""
    out = copy.deepcopy(obj)
    fe = next(c for c in out["spec"]["components"] if c["type"] == "frontend")
    fe["podTemplate"]["spec"]["containers"][0].setdefault("env", []).append({"name": "KIMI_K3_CHANGE", "value": "1"})
    return out


def run_scenario(cluster, env, project: Path, work: Path, form: str, steps: list) -> list[dict]:
    ns = f"ssa-{form}"
    cluster.request(
        "POST", "/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    )

    def pulumi(*a):
        return subprocess.run(
            ["pulumi", *a, "--non-interactive", "--color", "never", "--stack", form],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    pulumi("stack", "init")
    out = []
    obj = None
    for i, step in enumerate(steps):
        if step[0] == "up":
            obj = copy.deepcopy(step[1])
            obj["metadata"]["namespace"] = ns
            f = work / f"{form}-{i}.json"
            f.write_text(json.dumps(obj))
            pulumi("config", "set", "file", str(f))
            pulumi("config", "set", "ignore", json.dumps(step[2]))
            r = pulumi("up", "--yes", "--skip-preview")
            rec = {"step": "pulumi up", "ignoreChanges": step[2], "exit": r.returncode}
            if r.returncode:
                lines = (r.stdout + r.stderr).splitlines()
                rec["error"] = next(
                    (ln.strip() for ln in lines if "Apply failed" in ln),
                    next((ln.strip() for ln in lines if "error:" in ln), ""),
                )[-400:]
        else:
            names = [c["name"] for c in obj["spec"]["components"]]
            live = cluster.get(obj)
            op = "replace" if "replicas" in live["spec"]["components"][names.index("DecodeWorker")] else "add"
            r = cluster.request(
                "PATCH",
                f"/apis/nvidia.com/v1beta1/namespaces/{ns}/dynamographdeployments/"
                f"{obj['metadata']['name']}?fieldManager=dynamo-operator",
                data=json.dumps(
                    [{"op": op, "path": f"/spec/components/{names.index('DecodeWorker')}/replicas", "value": step[1]}]
                ),
                headers={"Content-Type": "application/json-patch+json"},
            )
            r.raise_for_status()
            rec = {"step": f"operator stand-in sets DecodeWorker replicas {step[1]}"}
        live = cluster.get(obj)
        comp = next(c for c in live["spec"]["components"] if c["name"] == "DecodeWorker")
        fe = next(c for c in live["spec"]["components"] if c["name"] == "Frontend")
        rec.update(
            {
                "DecodeWorker.replicas": comp.get("replicas"),
                "scalingAdapter": "scalingAdapter" in comp,
                "replicas owned by": replicas_managers(live, "DecodeWorker"),
                "frontend changed": any(
                    e["name"] == "KIMI_K3_CHANGE" for e in fe["podTemplate"]["spec"]["containers"][0].get("env", [])
                ),
            }
        )
        out.append(rec)
    return out


def main() -> int:
    assert lane.only_loopback() == ["lo"], "run inside `unshare --net` (only loopback)"
    bin_dir = Path(os.environ["ENGINE_BIN"])
    work = Path(tempfile.mkdtemp(prefix="planner-ssa-"))
    cluster = lane.Cluster(bin_dir, work).start()
    report: dict = {}
    try:
        cluster.install_crds(lane.SHARED_REFERENCE)
        env = lane.tool_env(bin_dir, work, "planner-ssa")
        Path(env["KUBECONFIG"]).write_text(cluster.kubeconfig_text())
        project = work / "project"
        project.mkdir()
        (project / "__main__.py").write_text(PROGRAM)
        (project / "Pulumi.yaml").write_text(
            yaml_text(
                {
                    "name": "planner-ssa",
                    "runtime": {"name": "python", "options": {"toolchain": "pip", "virtualenv": str(ROOT / ".venv")}},
                }
            )
        )
        g = graphs()
        fight_ignore = [
            f"spec.components[{[c['name'] for c in g['fighting']['spec']['components']].index('DecodeWorker')}]"
            ".replicas"
        ]
        scenarios = {
            # planner on from the start; the planner scales; an unrelated change is applied
            "ours": [("up", g["ours"], []), ("scale", 3), ("up", changed(g["ours"]), [])],
            # the old/fighting form: replicas written, ignoreChanges on them
            "fighting": [
                ("up", g["fighting"], fight_ignore),
                ("scale", 3),
                ("up", changed(g["fighting"]), fight_ignore),
            ],
            # turning the planner on for a running graph (2 decode replicas written by Pulumi until then)
            "switch-on": [("up", g["plain"], []), ("up", g["ours"], [])],
            # turning it off after it scaled to 3: the config states the 3 it runs
            "switch-off": [("up", g["ours"], []), ("scale", 3), ("up", g["plain3"], [])],
        }
        for form, steps in scenarios.items():
            report[form] = run_scenario(cluster, env, project, work, form, steps)
        report["versions"] = {
            "kube-apiserver": cluster.version()["gitVersion"],
            "pulumi": subprocess.run(["pulumi", "version"], env=env, capture_output=True, text=True).stdout.strip(),
        }
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report, indent=1))
    last = report.get("ours", [{}])[-1]
    ok = last.get("exit") == 0 and last.get("DecodeWorker.replicas") == 3 and last.get("frontend changed")
    return 0 if ok else 1


def yaml_text(obj: dict) -> str:
    import yaml

    return yaml.safe_dump(obj)


if __name__ == "__main__":
    sys.exit(main())
