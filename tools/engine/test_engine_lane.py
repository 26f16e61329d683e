"""The engine lane (`make test-engine`): the program under the real Pulumi engine against a real API server.

For each stack, in existing-cluster mode against the local API server (tools/engine/lane.py):
  1. `pulumi preview --policy-pack policies`: the engine runs our pack (a seeded violation blocks, naming the rule);
  2. `pulumi up --yes`: every object accepted by the real API server (CRDs installed from ../shared/reference);
  3. the objects in the API server equal `kimi-k3 render`'s manifests, apart from server-set fields;
  4. a second preview shows no changes;
  5. a replica change previews as an update of the DynamoGraphDeployment; a change that would replace the model
     cache is refused;
  6. `pulumi destroy` keeps the model cache (README: the claim is retainOnDelete) and deletes the rest.
Plus: `kimi-k3 diff` (offline, the PR workflow's) and `pulumi preview --diff` agree on one change.

No kubelet or operator runs: the harness sets the status a controller would (download Job Complete, graph Ready)
once the object exists, so the program's real awaits (`pulumi.com/waitFor`) complete.
"""
from __future__ import annotations

import base64
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

import pytest
import yaml

import lane

STACKS = ("gb200", "gb200-disagg", "gb300", "gb300-disagg")
DIFF_STACK = "gb300-disagg"  # the stack on which offline diff and preview --diff are compared
COMMAND_TIMEOUT_S = 600
REPORT: dict = {"steps": []}
# Project files the lane's temporary project links to (stack files are the lane's own).
PROJECT_ENTRIES = ("Pulumi.yaml", "__main__.py", "components", "kimi_k3", "recipes", "policies", ".venv",
                   "pyproject.toml")


def evidence(stack: str, step: str, seconds: float, **facts) -> None:
    REPORT["steps"].append({"stack": stack, "step": step, "seconds": round(seconds, 1), **facts})
    lane.log(f"{stack}: {step} ok in {seconds:.1f}s {json.dumps(facts)[:300]}")


@pytest.fixture(scope="module")
def world():
    interfaces = lane.only_loopback()
    if interfaces != ["lo"]:
        pytest.skip(f"the lane runs only in a network namespace with loopback alone (make test-engine uses "
                    f"`unshare -n`); this one has {interfaces}")
    if not lane.SHARED_REFERENCE.is_dir():
        pytest.skip(f"upstream CRDs not found at {lane.SHARED_REFERENCE} (the Dynamo and DRA CRDs are installed "
                    f"from there; no chart can be fetched in this lane)")
    # A SIGTERM (timeout, CI) unwinds like Ctrl-C, so the servers below are stopped by the finally clause.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt("SIGTERM")))
    bin_dir = Path(os.environ["ENGINE_BIN"]) if os.environ.get("ENGINE_BIN") else lane.tool_dir()
    # Our own directory: pytest's shared basetemp is pruned by other pytest runs on the same machine.
    work = Path(tempfile.mkdtemp(prefix="kimi-k3-engine-lane-"))
    cluster = lane.Cluster(bin_dir, work).start()
    try:
        version = cluster.version()
        crds = cluster.install_crds(lane.SHARED_REFERENCE)
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
        REPORT["pulumi_path"] = subprocess.run(["sh", "-c", "command -v pulumi"], env=env, capture_output=True,
                                               text=True).stdout.strip()
        lane.log(f"pulumi {REPORT['pulumi']} at {REPORT['pulumi_path']}; API server {version['gitVersion']}; "
                 f"{len(crds)} CRDs")
        yield {"cluster": cluster, "env": env, "project": project, "work": work}
    finally:
        cluster.stop()
        out = lane.ROOT / "build" / "engine-lane"
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(REPORT, indent=2) + "\n")
        for log in work.glob("*.log"):  # the servers' logs, for a failed run
            shutil.copy(log, out / log.name)
        shutil.rmtree(work, ignore_errors=True)


def pulumi(world, *args: str, check: bool = True, stack: str | None = None) -> subprocess.CompletedProcess:
    cmd = ["pulumi", *args, "--non-interactive", "--color", "never"] + (["--stack", stack] if stack else [])
    start = time.monotonic()
    # Own process group: on a timeout the CLI, its language host, provider and policy pack all end with it.
    child = subprocess.Popen(cmd, cwd=world["project"], env=world["env"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = child.communicate(timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, err = child.communicate()
        raise AssertionError(f"{' '.join(cmd)} did not finish within {COMMAND_TIMEOUT_S}s\n{out[-4000:]}\n{err[-2000:]}")
    try:  # anything the CLI left running (a plugin that outlived it) ends here too
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc = subprocess.CompletedProcess(cmd, child.returncode, out, err)
    shown = [("[secret]" if i and cmd[i - 1].startswith("kimi-k3:") and "--secret" in cmd else a)
             for i, a in enumerate(cmd)]
    lane.log(f"$ {' '.join(shown)} -> {proc.returncode} ({time.monotonic() - start:.1f}s)")
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}\n"
                             f"--- stderr\n{proc.stderr[-3000:]}")
    return proc


def lane_config(stack: str, world) -> dict:
    """The repo stack's recipe and pricing, in existing-cluster mode on the lane's API server."""
    repo = yaml.safe_load((lane.ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    config = {k: v for k, v in repo.items() if k in ("kimi-k3:recipe", "kimi-k3:pricing")}
    config["kimi-k3:cluster"] = {"mode": "existing"}
    config["kimi-k3:storage"] = {"storageClass": "lane-rwx"}
    config["kimi-k3:serving"] = {"namespace": f"lane-{stack}"}
    # This cluster has no Prometheus Operator (its CRDs are not in ../shared/reference): add no monitoring objects.
    config["kimi-k3:monitoring"] = {"stack": "none"}
    return config


def init_stack(world, stack: str, config: dict) -> None:
    pulumi(world, "stack", "init", stack)
    path = world["project"] / f"Pulumi.{stack}.yaml"
    doc = yaml.safe_load(path.read_text()) or {}
    doc.setdefault("config", {}).update(config)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    pulumi(world, "config", "set", "--secret", "kimi-k3:hfToken", "hf_lane_placeholder_not_a_token", stack=stack)
    pulumi(world, "config", "set", "--secret", "kimi-k3:kubeconfig", world["cluster"].kubeconfig_text(), stack=stack)


def render(world, stack: str, out: Path) -> list[dict]:
    proc = subprocess.run([str(lane.ROOT / ".venv/bin/kimi-k3"), "render", stack, "--out", str(out)],
                          cwd=world["project"], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
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
            cond = {"status": "True", "lastProbeTime": now, "lastTransitionTime": now, "reason": "EngineLane",
                    "message": "set by the engine lane (no kubelet)"}
            return {"startTime": now, "completionTime": now, "succeeded": 1, "active": 0, "ready": 0,
                    "terminating": 0, "uncountedTerminatedPods": {},
                    "conditions": [{"type": "SuccessCriteriaMet", **cond}, {"type": "Complete", **cond}]}
        return {"state": "successful", "conditions": [{
            "type": "Ready", "status": "True", "lastTransitionTime": now, "reason": "EngineLane",
            "message": "set by the engine lane (no operator)"}]}

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
    config = lane_config(stack, world)
    init_stack(world, stack, config)
    rendered = render(world, stack, world["work"] / "render" / stack)
    kinds = sorted({o["kind"] for o in rendered})

    # 1. preview with the policy pack: the engine starts the pack, every mandatory rule passes.
    t = time.monotonic()
    proc = pulumi(world, "preview", "--policy-pack", "policies", stack=stack)
    assert "\u2705 kimi-k3@v0.1.0" in proc.stdout, f"the policy pack did not run, or failed:\n{proc.stdout[-3000:]}"
    evidence(stack, "1 preview --policy-pack", time.monotonic() - t, pack="kimi-k3@v0.1.0",
             creates=proc.stdout.count(" create "))

    # 2. up: every object accepted by the API server.
    t = time.monotonic()
    with StatusSetter(cluster, rendered) as statuses:
        pulumi(world, "up", "--yes", "--policy-pack", "policies", "--skip-preview", stack=stack)
    assert not statuses.errors, statuses.errors
    missing = [f"{o['kind']}/{o['metadata']['name']}" for o in rendered if cluster.get(o) is None]
    assert not missing, f"rendered objects not in the API server after up: {missing}"
    evidence(stack, "2 up", time.monotonic() - t, objects=len(rendered), kinds=kinds, statuses_set=statuses.done)

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
    evidence(stack, "3 live == render", time.monotonic() - t, compared=len(rendered),
             server_added={k: v for k, v in server_added.items() if v})

    # 4. no perpetual diff.
    t = time.monotonic()
    doc, proc = preview_steps(world, stack, "--expect-no-changes", check=False)
    assert proc.returncode == 0, f"second preview shows changes: {json.dumps(changed_steps(doc), indent=1)[:4000]}" \
                                 f"\n{proc.stderr[-2000:]}"
    evidence(stack, "4 second preview: no changes", time.monotonic() - t)

    # 5a. a replica change is an update of the DynamoGraphDeployment, never a replacement.
    t = time.monotonic()
    edit_config(world, stack, "kimi-k3:serving", ["frontend", "replicas"], 2)
    doc, proc = preview_steps(world, stack)
    steps = changed_steps(doc)
    ops = {s["urn"].split("::")[-1]: s["op"] for s in steps}
    dgd = [s for s in steps if "DynamoGraphDeployment" in s.get("newState", {}).get("inputs", {}).get("kind", "")
           or s["urn"].endswith("-deployment")]
    assert dgd and all(s["op"] == "update" for s in dgd), f"replica change: {ops}"
    # Jobs keyed to the graph (graph-ready, smoke test) re-run by design; the cache and namespace never move.
    kept = [s for s in steps if s["urn"].endswith(("-model-cache-volume", "-cluster-namespace"))]
    assert not kept, f"replica change touches the model cache or namespace: {ops}"
    evidence(stack, "5a replica change = update", time.monotonic() - t, ops=ops,
             diff=sorted((dgd[0].get("detailedDiff") or {}).keys()))
    if stack == DIFF_STACK:
        offline_diff_agrees(world, stack, config, steps)
    edit_config(world, stack, "kimi-k3:serving", ["frontend", "replicas"], remove=True)

    # 5b. a change that would replace the model cache is refused before `up` changes anything: the claim is
    # retainOnDelete (not protect, so teardown works), and the refusal is `make up`'s guard: `kimi-k3 check STACK
    # --against` the exported state, rule model-cache-kept. The real preview must not pass either.
    t = time.monotonic()
    edit_config(world, stack, "kimi-k3:storage", ["storageClass"], "lane-rwx-other")
    doc, proc = preview_steps(world, stack, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"preview of a cache replacement passed:\n{out[-4000:]}"
    state = world["project"] / f".state-{stack}.json"
    pulumi(world, "stack", "export", "--file", str(state), stack=stack)
    guard = subprocess.run([sys.executable, "-m", "kimi_k3", "check", stack, "--against", str(state)],
                           cwd=world["project"], env=world["env"], capture_output=True, text=True, timeout=300)
    said = guard.stdout + guard.stderr
    assert guard.returncode != 0 and "model-cache-kept" in said, f"guard did not refuse the cache replacement:\n{said}"
    evidence(stack, "5b cache replacement refused", time.monotonic() - t,
             preview=next((line.strip() for line in out.splitlines() if "immutable" in line or "error" in line), "")[:300],
             guard=next((line.strip() for line in said.splitlines() if "model-cache-kept" in line), "")[:300])
    edit_config(world, stack, "kimi-k3:storage", ["storageClass"], "lane-rwx")

    # 6. destroy: everything but the retained model cache claim (and its retained namespace) is deleted.
    t = time.monotonic()
    plain = pulumi(world, "destroy", "--yes", stack=stack, check=False)
    still = [f"{o['kind']}/{o['metadata']['name']}" for o in rendered if cluster.get(o) is not None]
    plain_facts = {"exit": plain.returncode, "objects_left": still,
                   "message": next((line.strip() for line in (plain.stdout + plain.stderr).splitlines()
                                    if "protect" in line), "")[:300]}
    if plain.returncode != 0:
        pulumi(world, "destroy", "--yes", "--exclude-protected", stack=stack)
    left = {f"{o['kind']}/{o['metadata']['name']}" for o in rendered if cluster.get(o) is not None}
    cache = {f"{o['kind']}/{o['metadata']['name']}" for o in rendered if o["kind"] in ("PersistentVolumeClaim",
                                                                                      "Namespace")}
    assert cache <= left, f"destroy deleted the model cache or its namespace: left {sorted(left)}"
    assert left == cache, f"destroy left more than the model cache: {sorted(left - cache)}"
    evidence(stack, "6 destroy keeps the cache", time.monotonic() - t, plain_destroy=plain_facts,
             left=sorted(left))


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
    git = lambda *a: subprocess.run(["git", "-c", "user.name=lane", "-c", "user.email=lane@localhost", *a],
                                    cwd=repo, check=True, capture_output=True, text=True)
    stack_file = repo / f"Pulumi.{stack}.yaml"
    stack_file.write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "base")
    changed = json.loads(json.dumps(config))
    changed["kimi-k3:serving"]["frontend"] = {"replicas": 2}
    stack_file.write_text(yaml.safe_dump({"config": changed}, sort_keys=False))
    git("commit", "-q", "-am", "head")
    proc = subprocess.run([str(lane.ROOT / ".venv/bin/kimi-k3"), "diff", "--base", "HEAD~1", "--head", "HEAD",
                           "--format", "json", stack], cwd=repo, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)
    assert proc.returncode == 0, f"kimi-k3 diff: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    report = json.loads(proc.stdout)["stacks"][0]
    offline = {c["urn"]: sorted(x["path"] for x in c["inputs"]) for c in report["resources"]["changed"]}
    engine = {s["urn"]: sorted((s.get("detailedDiff") or {}).keys()) for s in steps}
    assert set(offline) == set(engine), f"offline diff changes {sorted(offline)}, preview changes {sorted(engine)}"
    # kimi-k3 diff names list items by their name (components[Frontend]), the engine by index (components[0]).
    items = lambda paths: sorted(re.sub(r"\[[^\]]*\]", "[*]", p) for p in paths)
    for urn in offline:
        assert items(offline[urn]) == items(engine[urn]), f"{urn}: offline {offline[urn]}, preview {engine[urn]}"
    evidence(stack, "diff agrees with preview --diff", time.monotonic() - t, resources=sorted(offline),
             paths=offline)


def test_seeded_violation_blocks_preview(world):
    """A stack whose decode workers carry a removed vLLM flag: the engine's run of our pack blocks the preview."""
    stack = "seeded-violation"
    config = lane_config("gb300-disagg", world)
    config["kimi-k3:serving"] = {"namespace": "lane-seeded", "roles": {"decode": {"extraArgs": {
        "--is-decode-worker": True}}}}
    init_stack(world, stack, config)
    t = time.monotonic()
    proc = pulumi(world, "preview", "--policy-pack", "policies", stack=stack, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"preview with a seeded violation passed:\n{out[-3000:]}"
    assert "\u274c kimi-k3@v0.1.0" in out and "no-removed-flags" in out and "mandatory" in out, \
        f"the block does not name the rule:\n{out[-3000:]}"
    evidence(stack, "1 seeded violation blocks", time.monotonic() - t,
             line=next(line.strip() for line in out.splitlines() if "no-removed-flags" in line)[:300])
