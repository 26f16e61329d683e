"""The engine lane (`make test-engine`): the program under the real Pulumi engine against a real API server.

For each stack, in existing-cluster mode against the local API server (tools/engine/lane.py):
  1. `pulumi preview --policy-pack policies`: the engine runs our pack (a seeded violation blocks, naming the rule);
  2. `pulumi up --yes`: every object accepted by the real API server, in the declared dependency order (the engine's
     dependencies equal the render's; none started before its dependencies finished); the PodMonitors,
     ServiceMonitor and PrometheusRule exist (kimi-k3:monitoring.stack existing, the Prometheus Operator's CRDs from
     its Go module) and the serving PodMonitors select the live graph's pod templates, each role exactly once;
  3. the objects in the API server equal `kimi-k3 render`'s manifests, apart from server-set fields;
  4. a second preview shows no changes;
  5. a replica change previews as an update of the DynamoGraphDeployment; a change that would replace the model
     cache is refused;
  6. `pulumi destroy` keeps the model cache (README: the claim is retainOnDelete) and deletes the rest.
Plus: `kimi-k3 diff` (offline, the PR workflow's) and `pulumi preview --diff` agree on one change.

CRDs: the Prometheus Operator's from its Go module (tools/engine/build.sh monitoring-crds), always; the Dynamo and DRA
ones unmodified from ../shared/reference where it exists, else open-schema CRDs of the same group/version/kind/plural
(lane.open_schema_crd): then the API server checks names and scope only, not upstream's fields, types, enums, CEL
rules or defaults (tests/stacks/test_schemas.py checks the render against upstream's schemas where ../shared exists, and
test_open_schema_crds_name_what_upstream_serves checks the fallback's names against upstream's).

No kubelet or operator runs: the harness sets the status a controller would (download Job Complete, graph Ready)
once the object exists, so the program's real awaits (`pulumi.com/waitFor`) complete.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import lane
import pytest
import yaml

# The harness talks to the API server's self-signed loopback certificate without verifying it (lane.Cluster).
pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
STACKS = ("gb200", "gb200-disagg", "gb300", "gb300-disagg")
MONITORING_API = "monitoring.coreos.com/v1"  # the Prometheus Operator's PodMonitor/ServiceMonitor/PrometheusRule
DIFF_STACK = "gb300-disagg"  # the stack on which offline diff and preview --diff are compared
COMMAND_TIMEOUT_S = 600
REPORT: dict = {"steps": []}
# Project files the lane's temporary project links to (stack files are the lane's own).
PROJECT_ENTRIES = (
    "Pulumi.yaml",
    "__main__.py",
    "components",
    "kimi_k3",
    "recipes",
    "policies",
    ".venv",
    "pyproject.toml",
)


def evidence(stack: str, step: str, seconds: float, **facts) -> None:
    REPORT["steps"].append({"stack": stack, "step": step, "seconds": round(seconds, 1), **facts})
    lane.log(f"{stack}: {step} ok in {seconds:.1f}s {json.dumps(facts)[:300]}")


@pytest.fixture(scope="module")
def world():
    interfaces = lane.only_loopback()
    if interfaces != ["lo"]:
        pytest.skip(
            f"the lane runs only in a network namespace with loopback alone (make test-engine uses "
            f"`unshare -n`); this one has {interfaces}"
        )
    # A SIGTERM (timeout, CI) unwinds like Ctrl-C, so the servers below are stopped by the finally clause.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt("SIGTERM")))
    bin_dir = Path(os.environ["ENGINE_BIN"]) if os.environ.get("ENGINE_BIN") else lane.tool_dir()
    # Our own directory: pytest's shared basetemp is pruned by other pytest runs on the same machine.
    work = Path(tempfile.mkdtemp(prefix="kimi-k3-engine-lane-"))
    used = rendered_kinds(work)
    cluster = lane.Cluster(bin_dir, work).start()
    try:
        version = cluster.version()
        crds, custom_kinds = install_crds(cluster, bin_dir, used)
        for name in ("lane-rwx", "lane-rwx-other"):
            cluster.add_storage_class(name)
        REPORT["apiserver"] = version["gitVersion"]
        REPORT["crds"] = crds
        project = work / "project"
        project.mkdir()
        for entry in PROJECT_ENTRIES:
            (project / entry).symlink_to(lane.ROOT / entry)
        env = lane.tool_env(bin_dir, work, passphrase=secrets.token_hex(16))
        env["KUBECONFIG"] = str(cluster.kubeconfig)
        out = subprocess.run(["pulumi", "version"], env=env, capture_output=True, text=True, check=True)
        REPORT["pulumi"] = out.stdout.strip()
        REPORT["pulumi_path"] = subprocess.run(
            ["sh", "-c", "command -v pulumi"], env=env, capture_output=True, text=True
        ).stdout.strip()
        lane.log(
            f"pulumi {REPORT['pulumi']} at {REPORT['pulumi_path']}; API server {version['gitVersion']}; "
            f"{len(crds['installed'])} CRDs"
        )
        yield {"cluster": cluster, "env": env, "project": project, "work": work, "custom_kinds": custom_kinds}
    finally:
        cluster.stop()
        out = lane.ROOT / "build" / "engine-lane"
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(REPORT, indent=2) + "\n")
        for log in work.glob("*.log"):  # the servers' logs, for a failed run
            shutil.copy(log, out / log.name)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(autouse=True)
def nothing_left_running(world):
    """After each test: no process of its pulumi commands (CLI, language host, provider, pack) still runs."""
    yield
    left = lane.sweep(world["work"])
    assert not left, f"processes of this test's pulumi commands outlived them: {left}"


def rendered_kinds(work: Path) -> dict[tuple[str, str], bool]:
    """(apiVersion, kind) -> namespaced, of every object `kimi-k3 render` makes for the four stacks in lane mode."""
    project = work / "kinds-project"
    project.mkdir()
    for entry in PROJECT_ENTRIES:
        (project / entry).symlink_to(lane.ROOT / entry)
    for stack in STACKS:
        (project / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": lane_config(stack)}, sort_keys=False))
    out = work / "kinds-render"
    proc = subprocess.run(
        [str(lane.ROOT / ".venv/bin/kimi-k3"), "render", *STACKS, "--out", str(out), "--no-critical-path"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert proc.returncode == 0, f"kimi-k3 render {' '.join(STACKS)}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    kinds: dict[tuple[str, str], bool] = {}
    for stack in STACKS:
        for obj in yaml.safe_load_all((out / stack / "manifests.yaml").read_text()):
            if obj:
                kinds[(obj["apiVersion"], obj["kind"])] = "namespace" in obj["metadata"]
    return kinds


def install_crds(cluster: lane.Cluster, bin_dir: Path, used: dict[tuple[str, str], bool]) -> tuple[dict, dict]:
    """CRDs for every kind the renders use that Kubernetes itself does not serve: the Prometheus Operator's (from its
    Go module; schema-validated) and the Dynamo/DRA ones, upstream's from ../shared/reference where present (schema-
    validated), else open-schema CRDs of the same group/version/kind/plural (names and scope only). Returns what was
    installed (for the report) and the custom kinds used: (apiVersion, kind) -> namespaced."""
    custom = {k: ns for k, ns in used.items() if cluster.served(*k) is None}
    custom_group_kinds = {(api.split("/")[0], kind) for api, kind in custom}
    monitoring = [c for c in lane.monitoring_crds(bin_dir) if lane.crd_kind(c) in custom_group_kinds]
    upstream = lane.upstream_crds(lane.SHARED_REFERENCE)
    if upstream is not None:
        mode, rest = f"upstream CRDs from {lane.SHARED_REFERENCE} (schema-validated)", upstream
    else:
        have = {lane.crd_kind(c) for c in monitoring}
        rest = [
            lane.open_schema_crd(api, kind, ns)
            for (api, kind), ns in sorted(custom.items())
            if (api.split("/")[0], kind) not in have
        ]
        mode = (
            f"open-schema CRDs for {', '.join(c['spec']['names']['kind'] for c in rest)} ({lane.SHARED_REFERENCE} "
            f"absent: names and scope checked, not upstream's schemas)"
        )
    installed = cluster.install_crds(monitoring + rest)
    unserved = sorted(f"{api} {kind}" for api, kind in used if cluster.served(api, kind) is None)
    assert not unserved, f"kinds the renders use that the API server does not serve after the CRDs: {unserved}"
    lane.log(
        f"CRDs: {mode}; Prometheus Operator {', '.join(c['spec']['names']['kind'] for c in monitoring)} from "
        f"its Go module (schema-validated)"
    )
    return {"mode": mode, "installed": installed, "monitoring": [c["metadata"]["name"] for c in monitoring]}, custom


def pulumi(
    world, *args: str, check: bool = True, stack: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    cmd = ["pulumi", *args, "--non-interactive", "--color", "never"] + (["--stack", stack] if stack else [])
    start = time.monotonic()
    # Own process group: on a timeout the CLI, its language host, provider and policy pack all end with it.
    child = subprocess.Popen(
        cmd,
        cwd=world["project"],
        env={**world["env"], **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = child.communicate(timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        lane.kill_tree(child.pid)
        out, err = child.communicate()
        raise AssertionError(
            f"{' '.join(cmd)} did not finish within {COMMAND_TIMEOUT_S}s\n{out[-4000:]}\n{err[-2000:]}"
        )
    except BaseException:  # Ctrl-C, or the SIGTERM of a timeout: the CLI and its plugins end with the lane
        lane.kill_tree(child.pid)
        child.wait()
        raise
    try:  # anything left in the CLI's process group ends here too
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc = subprocess.CompletedProcess(cmd, child.returncode, out, err)
    shown = [
        ("[secret]" if i and cmd[i - 1].startswith("kimi-k3:") and "--secret" in cmd else a) for i, a in enumerate(cmd)
    ]
    lane.log(f"$ {' '.join(shown)} -> {proc.returncode} ({time.monotonic() - start:.1f}s)")
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}\n"
            f"--- stderr\n{proc.stderr[-3000:]}"
        )
    return proc


def lane_config(stack: str) -> dict:
    """The repo stack's recipe and pricing, in existing-cluster mode on the lane's API server."""
    repo = yaml.safe_load((lane.ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    config = {k: v for k, v in repo.items() if k in ("kimi-k3:recipe", "kimi-k3:pricing")}
    config["kimi-k3:cluster"] = {"mode": "existing"}
    config["kimi-k3:storage"] = {"storageClass": "lane-rwx"}
    config["kimi-k3:serving"] = {"namespace": f"lane-{stack}"}
    # `up` refuses an unpinned model revision; no pod runs here, so any 40-hex commit stands in for the real pin.
    config["kimi-k3:model"] = {"revision": "1" * 40}
    # The cluster's own Prometheus Operator (its CRDs are installed; no kube-prometheus-stack chart can be fetched):
    # the program adds only its PodMonitors, ServiceMonitor, PrometheusRule and dashboard.
    config["kimi-k3:monitoring"] = {"stack": "existing"}
    return config


def init_stack(world, stack: str, config: dict) -> None:
    pulumi(world, "stack", "init", stack)
    path = world["project"] / f"Pulumi.{stack}.yaml"
    doc = yaml.safe_load(path.read_text()) or {}
    doc.setdefault("config", {}).update(config)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    pulumi(world, "config", "set", "--secret", "kimi-k3:hfToken", "hf_lane_placeholder_not_a_token", stack=stack)
    pulumi(world, "config", "set", "--secret", "kimi-k3:kubeconfig", world["cluster"].kubeconfig_text(), stack=stack)


def shared_view(world, stack: str) -> Path:
    """The lane project as CI renders and checks it: the stack file without the per-user secrets the lane keeps in
    it (the offline commands refuse per-user values in a shared stack file and would assume placeholders anyway)."""
    view = world["work"] / f"shared-view-{stack}"
    view.mkdir(exist_ok=True)
    for entry in PROJECT_ENTRIES:
        if not (view / entry).exists():
            (view / entry).symlink_to(lane.ROOT / entry)
    doc = yaml.safe_load((world["project"] / f"Pulumi.{stack}.yaml").read_text()) or {}
    for key in ("kimi-k3:hfToken", "kimi-k3:kubeconfig"):
        doc.get("config", {}).pop(key, None)
    (view / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return view


def render(world, stack: str, out: Path) -> list[dict]:
    proc = subprocess.run(
        [str(lane.ROOT / ".venv/bin/kimi-k3"), "render", stack, "--out", str(out)],
        cwd=shared_view(world, stack),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert proc.returncode == 0, f"kimi-k3 render {stack}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    return [o for o in yaml.safe_load_all((out / "manifests.yaml").read_text()) if o]


class StatusSetter:
    """Sets the status a kubelet / Job controller / Dynamo operator would, once each awaited object exists."""

    def __init__(self, cluster: lane.Cluster, objects: list[dict]):
        self.cluster = cluster
        self.pending = [o for o in objects if o["kind"] in ("Job", "DynamoGraphDeployment")]
        self.done: list[str] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def status_for(self, kind: str) -> dict:
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        if kind == "Job":
            cond = {
                "status": "True",
                "lastProbeTime": now,
                "lastTransitionTime": now,
                "reason": "EngineLane",
                "message": "set by the engine lane (no kubelet)",
            }
            return {
                "startTime": now,
                "completionTime": now,
                "succeeded": 1,
                "active": 0,
                "ready": 0,
                "terminating": 0,
                "uncountedTerminatedPods": {},
                "conditions": [{"type": "SuccessCriteriaMet", **cond}, {"type": "Complete", **cond}],
            }
        return {
            "state": "successful",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastTransitionTime": now,
                    "reason": "EngineLane",
                    "message": "set by the engine lane (no operator)",
                }
            ],
        }

    def run(self) -> None:
        while self.pending and not self.stop.is_set():
            for obj in list(self.pending):
                try:
                    if self.cluster.get(obj) is not None:
                        self.cluster.set_status(obj, self.status_for(obj["kind"]))
                        self.pending.remove(obj)
                        self.done.append(f"{obj['kind']}/{obj['metadata']['name']}")
                except Exception as err:  # reported by the test, which fails on it
                    self.errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {err}")
                    self.pending.remove(obj)
            time.sleep(0.5)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=10)


def preview_steps(world, stack: str, *extra: str, check: bool = True) -> tuple[dict, subprocess.CompletedProcess]:
    proc = pulumi(world, "preview", "--json", "--diff", *extra, stack=stack, check=check)
    try:
        return json.loads(proc.stdout), proc
    except json.JSONDecodeError:
        return {}, proc


def changed_steps(doc: dict) -> list[dict]:
    return [s for s in doc.get("steps", []) if s.get("op") not in ("same", None)]


@pytest.mark.parametrize("stack", STACKS)
def test_stack_under_the_engine(world, stack):
    cluster = world["cluster"]
    config = lane_config(stack)
    init_stack(world, stack, config)
    rendered = render(world, stack, world["work"] / "render" / stack)
    kinds = sorted({o["kind"] for o in rendered})

    # 1. preview with the policy pack: the engine starts the pack, every mandatory rule passes.
    t = time.monotonic()
    proc = pulumi(world, "preview", "--policy-pack", "policies", stack=stack)
    assert "\u2705 kimi-k3@v0.1.0" in proc.stdout, f"the policy pack did not run, or failed:\n{proc.stdout[-3000:]}"
    evidence(
        stack,
        "1 preview --policy-pack",
        time.monotonic() - t,
        pack="kimi-k3@v0.1.0",
        creates=proc.stdout.count(" create "),
    )

    # 2. up: every object accepted by the API server, in the order the program declares.
    t = time.monotonic()
    events = world["work"] / f"events-{stack}.jsonl"
    with StatusSetter(cluster, rendered) as statuses:
        pulumi(
            world,
            "up",
            "--yes",
            "--policy-pack",
            "policies",
            "--skip-preview",
            "--event-log",
            str(events),
            stack=stack,
            env={"PULUMI_DEBUG_COMMANDS": "true"},
        )  # the CLI offers --event-log only with this
    assert not statuses.errors, statuses.errors
    missing = [f"{o['kind']}/{o['metadata']['name']}" for o in rendered if cluster.get(o) is None]
    assert not missing, f"rendered objects not in the API server after up: {missing}"
    order = declared_order(world, stack, events, world["work"] / "render" / stack / "resources.json")
    evidence(
        stack, "2 up", time.monotonic() - t, objects=len(rendered), kinds=kinds, statuses_set=statuses.done, **order
    )

    # 2b. monitoring against the cluster's Prometheus Operator: the monitors and rules exist, and the serving
    # PodMonitors select the pod templates of the graph the API server holds, each role exactly once.
    t = time.monotonic()
    evidence(stack, "2b monitors select the graph", time.monotonic() - t, **monitors_match_graph(cluster, rendered))

    # 3. live objects equal the render, apart from fields the server (or its defaulting) sets.
    t = time.monotonic()
    differences, server_added = [], {}
    for obj in rendered:
        live = lane.strip_server_fields(cluster.get(obj))
        want = obj
        if obj["kind"] == "Secret":  # render redacts values: compare the keys, and decode what the server holds
            want = {k: v for k, v in obj.items() if k not in ("data", "stringData")}
            keys = set(obj.get("data", {})) | set(obj.get("stringData", {}))
            assert set(live.get("data", {})) == keys, f"Secret {obj['metadata']['name']} keys differ"
            live = {k: v for k, v in live.items() if k != "data"}
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        differences += [f"{name} {d}" for d in lane.subset_diff(want, live)]
        server_added[name] = sorted(lane.extra_fields(want, live))
    assert not differences, "API server objects differ from kimi-k3 render:\n" + "\n".join(differences)
    evidence(
        stack,
        "3 live == render",
        time.monotonic() - t,
        compared=len(rendered),
        server_added={k: v for k, v in server_added.items() if v},
    )

    # 4. no perpetual diff.
    t = time.monotonic()
    doc, proc = preview_steps(world, stack, "--expect-no-changes", check=False)
    assert proc.returncode == 0, (
        f"second preview shows changes: {json.dumps(changed_steps(doc), indent=1)[:4000]}\n{proc.stderr[-2000:]}"
    )
    evidence(stack, "4 second preview: no changes", time.monotonic() - t)

    # 5a. a replica change is an update of the DynamoGraphDeployment, never a replacement.
    t = time.monotonic()
    edit_config(world, stack, "kimi-k3:serving", ["frontend", "replicas"], 2)
    doc, proc = preview_steps(world, stack)
    steps = changed_steps(doc)
    ops = {s["urn"].split("::")[-1]: s["op"] for s in steps}
    dgd = [
        s
        for s in steps
        if "DynamoGraphDeployment" in s.get("newState", {}).get("inputs", {}).get("kind", "")
        or s["urn"].endswith("-deployment")
    ]
    assert dgd and all(s["op"] == "update" for s in dgd), f"replica change: {ops}"
    # Jobs keyed to the graph (graph-ready, smoke test) re-run by design; the cache and namespace never move.
    kept = [s for s in steps if s["urn"].endswith(("-model-cache-volume", "-cluster-namespace"))]
    assert not kept, f"replica change touches the model cache or namespace: {ops}"
    evidence(
        stack,
        "5a replica change = update",
        time.monotonic() - t,
        ops=ops,
        diff=sorted((dgd[0].get("detailedDiff") or {}).keys()),
    )
    if stack == DIFF_STACK:
        offline_diff_agrees(world, stack, config, steps)
    edit_config(world, stack, "kimi-k3:serving", ["frontend", "replicas"], remove=True)

    # 5b. a change that would replace the model cache is refused before `up` changes anything: the claim is
    # retainOnDelete (not protect, so teardown works), and the refusal is `make up`'s guard: `kimi-k3 check STACK
    # --against` the exported state, rule model-cache-kept. The real preview must not pass either.
    t = time.monotonic()
    claims = [o for o in rendered if o["kind"] == "PersistentVolumeClaim"]
    uids = {o["metadata"]["name"]: cluster.get(o)["metadata"]["uid"] for o in claims}
    edit_config(world, stack, "kimi-k3:storage", ["storageClass"], "lane-rwx-other")
    doc, proc = preview_steps(world, stack, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"preview of a cache replacement passed:\n{out[-4000:]}"
    state = world["project"] / f".state-{stack}.json"
    pulumi(world, "stack", "export", "--file", str(state), stack=stack)
    guard = subprocess.run(
        [sys.executable, "-m", "kimi_k3", "check", stack, "--against", str(state)],
        cwd=shared_view(world, stack),
        env=world["env"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = guard.stdout + guard.stderr
    assert guard.returncode != 0 and "model-cache-kept" in said, f"guard did not refuse the cache replacement:\n{said}"
    after = {o["metadata"]["name"]: (cluster.get(o) or {}).get("metadata", {}).get("uid") for o in claims}
    assert claims and after == uids, f"the refused change touched the claims: before {uids}, after {after}"
    evidence(
        stack,
        "5b cache replacement refused",
        time.monotonic() - t,
        preview=next((line.strip() for line in out.splitlines() if "immutable" in line or "error" in line), "")[:300],
        guard=next((line.strip() for line in said.splitlines() if "model-cache-kept" in line), "")[:300],
    )
    edit_config(world, stack, "kimi-k3:storage", ["storageClass"], "lane-rwx")

    # 6. destroy: everything but the retained model cache claim (and its retained namespace) is deleted.
    t = time.monotonic()
    plain = pulumi(world, "destroy", "--yes", stack=stack, check=False)
    still = [f"{o['kind']}/{o['metadata']['name']}" for o in rendered if cluster.get(o) is not None]
    plain_facts = {
        "exit": plain.returncode,
        "objects_left": still,
        "message": next((line.strip() for line in (plain.stdout + plain.stderr).splitlines() if "protect" in line), "")[
            :300
        ],
    }
    if plain.returncode != 0:
        pulumi(world, "destroy", "--yes", "--exclude-protected", stack=stack)
    left = {f"{o['kind']}/{o['metadata']['name']}" for o in rendered if cluster.get(o) is not None}
    cache = {
        f"{o['kind']}/{o['metadata']['name']}" for o in rendered if o["kind"] in ("PersistentVolumeClaim", "Namespace")
    }
    assert cache <= left, f"destroy deleted the model cache or its namespace: left {sorted(left)}"
    assert left == cache, f"destroy left more than the model cache: {sorted(left - cache)}"
    evidence(stack, "6 destroy keeps the cache", time.monotonic() - t, plain_destroy=plain_facts, left=sorted(left))


def declared_order(world, stack: str, events: Path, resources_json: Path) -> dict:
    """The engine's recorded dependencies equal those `kimi-k3 render` reports (resources.json dependsOn, what the
    critical path is computed from), and `up` started each resource only after all of its dependencies finished
    (`--event-log`: resourcePreEvent / resOutputsEvent sequence numbers)."""
    state = world["work"] / f".order-{stack}.json"
    pulumi(world, "stack", "export", "--file", str(state), stack=stack)
    # The root stack and default providers are the engine's own; the render records what the program registers.
    engine = {
        r["urn"]: set(r.get("dependencies") or [])
        for r in json.loads(state.read_text())["deployment"]["resources"]
        if r["type"] != "pulumi:pulumi:Stack" and not r["urn"].split("::")[-1].startswith("default")
    }
    render = {r["urn"]: set(r.get("dependsOn") or []) for r in json.loads(resources_json.read_text())["resources"]}
    assert set(engine) == set(render), (
        f"resources only in the engine: {sorted(set(engine) - set(render))}; only in "
        f"the render: {sorted(set(render) - set(engine))}"
    )
    differ = {
        urn: {"engine": sorted(engine[urn] - render[urn]), "render": sorted(render[urn] - engine[urn])}
        for urn in engine
        if engine[urn] != render[urn]
    }
    assert not differ, f"dependencies differ between the engine and kimi-k3 render: {json.dumps(differ, indent=1)}"
    started, finished = {}, {}
    for line in events.read_text().splitlines():
        event = json.loads(line)
        if (pre := event.get("resourcePreEvent")) and not pre.get("planning"):
            started[pre["metadata"]["urn"]] = event["sequence"]
        elif out := event.get("resOutputsEvent"):
            finished[out["metadata"]["urn"]] = event["sequence"]
    assert set(engine) <= set(started) and set(engine) <= set(finished), (
        f"resources without create events: {sorted(set(engine) - (set(started) & set(finished)))}"
    )
    early = [
        f"{urn.split('::')[-1]} started before {dep.split('::')[-1]} finished"
        for urn, deps in engine.items()
        for dep in deps
        if dep in finished and finished[dep] > started[urn]
    ]
    assert not early, f"up did not follow the declared order: {early}"
    return {"resources": len(engine), "dependency_edges": sum(len(d) for d in engine.values())}


def monitors_match_graph(cluster: lane.Cluster, rendered: list[dict]) -> dict:
    """Read back from the API server: the PodMonitors/ServiceMonitors/PrometheusRules the render has exist; each
    PodMonitor of the graph's namespace (no namespaceSelector: it selects pods of its own namespace) selects the pod
    template of at least one component of the live DynamoGraphDeployment, every component is selected exactly once,
    and the serving alerts query that namespace. (The DCGM and DRA monitors select other charts' pods, not here.)"""
    graph = next(o for o in rendered if o["kind"] == "DynamoGraphDeployment")
    ns = graph["metadata"]["namespace"]
    live_graph = cluster.get(graph)
    templates = {
        c["name"]: ((c.get("podTemplate") or {}).get("metadata") or {}).get("labels") or {}
        for c in live_graph["spec"]["components"]
    }
    live: dict[str, list[dict]] = {}
    for kind, plural in (
        ("PodMonitor", "podmonitors"),
        ("ServiceMonitor", "servicemonitors"),
        ("PrometheusRule", "prometheusrules"),
    ):
        r = cluster.request("GET", f"/apis/monitoring.coreos.com/v1/namespaces/{ns}/{plural}")
        r.raise_for_status()
        live[kind] = r.json()["items"]
    want = sorted((o["kind"], o["metadata"]["name"]) for o in rendered if o["apiVersion"] == MONITORING_API)
    have = sorted((kind, o["metadata"]["name"]) for kind, items in live.items() for o in items)
    assert want == have, f"monitoring objects: rendered {want}, in the API server {have}"
    assert {k for k, _ in have} == {"PodMonitor", "ServiceMonitor", "PrometheusRule"}, have
    serving = [m for m in live["PodMonitor"] if not m["spec"].get("namespaceSelector")]
    picked = {
        m["metadata"]["name"]: sorted(
            c for c, labels in templates.items() if lane.selects(m["spec"]["selector"], labels)
        )
        for m in serving
    }
    assert all(picked.values()), f"PodMonitors selecting no pod template of the graph: {picked} (templates {templates})"
    counts = {c: sum(c in cs for cs in picked.values()) for c in templates}
    assert all(n == 1 for n in counts.values()), f"graph components not selected exactly once: {counts} ({picked})"
    exprs = [
        r["expr"]
        for rule in live["PrometheusRule"]
        for g in rule["spec"]["groups"]
        for r in g["rules"]
        if "dynamo_" in r["expr"]
    ]
    assert exprs and all(f'namespace="{ns}"' in e for e in exprs), f"serving alerts not on namespace {ns}: {exprs}"
    return {"selected": picked, "alerts_on_namespace": len(exprs), "monitors": {k: len(v) for k, v in live.items()}}


def edit_config(world, stack: str, key: str, path: list[str], value=None, remove: bool = False) -> None:
    """Set (or remove) `key`'s nested `path` in the stack file, as `pulumi config set --path` would."""
    file = world["project"] / f"Pulumi.{stack}.yaml"
    doc = yaml.safe_load(file.read_text())
    node = doc["config"].setdefault(key, {})
    for part in path[:-1]:
        node = node.setdefault(part, {})
    if remove:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    file.write_text(yaml.safe_dump(doc, sort_keys=False))


def offline_diff_agrees(world, stack: str, config: dict, steps: list[dict]) -> None:
    """`kimi-k3 diff` between the stack file before and after the change names the same resources and fields."""
    t = time.monotonic()
    repo = world["work"] / "diff-project"
    repo.mkdir()
    for entry in PROJECT_ENTRIES:
        (repo / entry).symlink_to(lane.ROOT / entry)
    git = lambda *a: subprocess.run(
        ["git", "-c", "user.name=lane", "-c", "user.email=lane@localhost", *a],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    )
    stack_file = repo / f"Pulumi.{stack}.yaml"
    stack_file.write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "base")
    changed = json.loads(json.dumps(config))
    changed["kimi-k3:serving"]["frontend"] = {"replicas": 2}
    stack_file.write_text(yaml.safe_dump({"config": changed}, sort_keys=False))
    git("commit", "-q", "-am", "head")
    proc = subprocess.run(
        [str(lane.ROOT / ".venv/bin/kimi-k3"), "diff", "--base", "HEAD~1", "--head", "HEAD", "--format", "json", stack],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert proc.returncode == 0, f"kimi-k3 diff: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    report = json.loads(proc.stdout)["stacks"][0]
    offline = {c["urn"]: sorted(x["path"] for x in c["inputs"]) for c in report["resources"]["changed"]}
    engine = {s["urn"]: sorted((s.get("detailedDiff") or {}).keys()) for s in steps}
    assert set(offline) == set(engine), f"offline diff changes {sorted(offline)}, preview changes {sorted(engine)}"
    # kimi-k3 diff names list items by their name (components[Frontend]), the engine by index (components[0]).
    items = lambda paths: sorted(re.sub(r"\[[^\]]*\]", "[*]", p) for p in paths)
    for urn in offline:
        assert items(offline[urn]) == items(engine[urn]), f"{urn}: offline {offline[urn]}, preview {engine[urn]}"
    evidence(stack, "diff agrees with preview --diff", time.monotonic() - t, resources=sorted(offline), paths=offline)


def test_seeded_violation_blocks_preview(world):
    """A stack whose decode workers carry a removed vLLM flag: the engine's run of our pack blocks the preview."""
    stack = "seeded-violation"
    config = lane_config("gb300-disagg")
    config["kimi-k3:serving"] = {
        "namespace": "lane-seeded",
        "roles": {"decode": {"extraArgs": {"--is-decode-worker": True}}},
    }
    init_stack(world, stack, config)
    t = time.monotonic()
    proc = pulumi(world, "preview", "--policy-pack", "policies", stack=stack, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"preview with a seeded violation passed:\n{out[-3000:]}"
    assert "\u274c kimi-k3@v0.1.0" in out and "no-removed-flags" in out and "mandatory" in out, (
        f"the block does not name the rule:\n{out[-3000:]}"
    )
    evidence(
        stack,
        "1 seeded violation blocks",
        time.monotonic() - t,
        line=next(line.strip() for line in out.splitlines() if "no-removed-flags" in line)[:300],
    )


def test_open_schema_crds_name_what_upstream_serves(world):
    """Without ../shared the lane serves the Dynamo and DRA kinds through open-schema CRDs: they must address the
    same group, version, kind, plural and scope, with the status subresource, as the upstream CRDs do."""
    upstream = lane.upstream_crds(lane.SHARED_REFERENCE)
    if upstream is None:
        pytest.skip(
            f"no upstream CRDs at {lane.SHARED_REFERENCE}: this run used the open-schema CRDs, and there is "
            f"nothing to compare their names with"
        )
    by_kind = {lane.crd_kind(c): c for c in upstream}
    compared = []
    for (api, kind), namespaced in sorted(world["custom_kinds"].items()):
        group, version = api.split("/")
        if (group, kind) not in by_kind:  # monitoring.coreos.com: always the Prometheus Operator's own CRDs
            continue
        want = lane.crd_identity(by_kind[(group, kind)], version)
        got = lane.crd_identity(lane.open_schema_crd(api, kind, namespaced), version)
        assert got == want, f"open-schema CRD for {api} {kind}: {got}, upstream {want}"
        compared.append(f"{kind}.{group}/{version}")
    assert {"DynamoGraphDeployment.nvidia.com/v1beta1", "ComputeDomain.resource.nvidia.com/v1beta1"} <= set(compared), (
        compared
    )
    evidence("-", "open-schema CRDs name what upstream serves", 0, compared=compared)
