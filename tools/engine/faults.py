"""The fault lane's helpers: a `pulumi` that can be interrupted, a status setter that holds an object back (so an
`up` is reliably mid-update when the fault strikes), and what must hold afterwards, read from the API server.

Every process a helper starts runs in its own process group and ends with it (also on a failure or Ctrl-C)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Optional

import lane
import test_engine_lane as engine

# Names a controller that does not run here would create in every namespace (none of the program's).
SYSTEM_OBJECTS = {("ConfigMap", "kube-root-ca.crt"), ("ServiceAccount", "default")}


class Held(engine.StatusSetter):
    """The engine lane's status setter, except that objects `hold` picks get no status until `release()`: the
    provider keeps awaiting them, so the `up` is in flight (its state records pending operations). An API error
    (the API server restarting) is retried, not fatal."""

    def __init__(self, cluster: lane.Cluster, objects: list[dict], hold=lambda obj: False):
        super().__init__(cluster, objects)
        self.held = [o for o in self.pending if hold(o)]
        self.pending = [o for o in self.pending if o not in self.held]

    def release(self) -> None:
        self.pending.extend(self.held)
        self.held = []

    def run(self) -> None:
        while not self.stop.is_set():
            for obj in list(self.pending):
                try:
                    if self.cluster.get(obj) is not None:
                        self.cluster.set_status(obj, self.status_for(obj["kind"]))
                        self.pending.remove(obj)
                        self.done.append(f"{obj['kind']}/{obj['metadata']['name']}")
                except Exception as err:  # kept pending: retried once the API server answers again
                    self.errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {err}")
            time.sleep(0.5)


def download_job(obj: dict) -> bool:
    return obj["kind"] == "Job" and "download" in obj["metadata"]["name"]


class Running:
    """A `pulumi` command in its own process group (CLI, language host, provider, policy pack): `signal()` sends to
    the whole group as a terminal's Ctrl-C does; `finish()` waits (bounded) and kills whatever is left."""

    def __init__(self, world, *args: str, stack: str):
        self.cmd = ["pulumi", *args, "--non-interactive", "--color", "never", "--stack", stack]
        self.log = world["work"] / f"run-{stack}-{time.monotonic_ns()}.log"
        self.out = open(self.log, "w")
        self.proc = subprocess.Popen(
            self.cmd,
            cwd=world["project"],
            env=world["env"],
            stdout=self.out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.started = time.monotonic()
        lane.log(f"$ {' '.join(self.cmd)} & (pid {self.proc.pid})")

    def signal(self, sig: int) -> None:
        if sig == signal.SIGKILL:  # the plugins too: they run in process groups of their own
            lane.kill_tree(self.proc.pid)
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def finish(self, timeout_s: float) -> tuple[int, str]:
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{' '.join(self.cmd)} did not end within {timeout_s}s:\n{self.text()[-4000:]}")
        finally:
            self.kill()
        lane.log(f"$ {' '.join(self.cmd)} -> {self.proc.returncode} ({time.monotonic() - self.started:.1f}s)")
        return self.proc.returncode, self.text()

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.out.close()

    def text(self) -> str:
        if not self.out.closed:
            self.out.flush()
        return self.log.read_text(errors="replace")


def wait_for(what: str, predicate, timeout_s: float = 240, proc: Optional[Running] = None):
    """Poll `predicate` until it returns something truthy; fail naming `what` (and the command's output)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        if proc is not None and proc.proc.poll() is not None:
            raise AssertionError(f"{what}: the command ended first ({proc.proc.returncode}):\n{proc.text()[-4000:]}")
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout_s}s" + (f":\n{proc.text()[-3000:]}" if proc else ""))


def state(world, stack: str) -> dict:
    """`pulumi stack export` of `stack` (the deployment: resources and pending_operations)."""
    path = world["work"] / f"export-{stack}.json"
    engine.pulumi(world, "stack", "export", "--file", str(path), stack=stack)
    return json.loads(path.read_text())["deployment"]


def uids(cluster: lane.Cluster, objects: list[dict]) -> dict[str, Optional[str]]:
    """kind/name -> UID in the API server now (None: absent)."""
    out = {}
    for o in objects:
        live = cluster.get(o)
        out[f"{o['kind']}/{o['metadata']['name']}"] = live["metadata"]["uid"] if live else None
    return out


def live_names(cluster: lane.Cluster, rendered: list[dict]) -> set[tuple[str, str, str]]:
    """(kind, namespace, name) of every object the API server holds of the kinds the render has, in its namespaces
    (so a duplicate under another name, or an orphan the state lost, shows up)."""
    kinds = {(o["apiVersion"], o["kind"]) for o in rendered}
    namespaces = {o["metadata"].get("namespace") for o in rendered} - {None}
    found = set()
    for api, kind in sorted(kinds):
        plural = cluster.plural(api, kind)
        base = f"/api/{api}" if "/" not in api else f"/apis/{api}"
        scoped = any(o["kind"] == kind and "namespace" in o["metadata"] for o in rendered)
        for ns in sorted(namespaces) if scoped else [None]:
            r = cluster.request("GET", f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}")
            r.raise_for_status()
            for item in r.json()["items"]:
                found.add((kind, item["metadata"].get("namespace", ""), item["metadata"]["name"]))
    if not any(o["kind"] == "Namespace" for o in rendered):
        return found
    rendered_ns = {o["metadata"]["name"] for o in rendered if o["kind"] == "Namespace"}
    return {f for f in found if f[0] != "Namespace" or f[2] in rendered_ns}


def converged(world, stack: str, rendered: list[dict], resources_json: Path) -> dict:
    """What an uninterrupted `up` leaves, checked against the API server and the backend: no pending operations,
    every resource of the render in the state exactly once, every rendered object live and equal to the render
    (apart from server-set fields), no other object of those kinds in the namespace (no duplicate, no orphan), and a
    preview with no changes."""
    cluster = world["cluster"]
    dep = state(world, stack)
    pending = [f"{p['type']} {p['resource']['urn'].split('::')[-1]}" for p in dep.get("pending_operations") or []]
    assert not pending, f"{stack}: pending operations left in the state: {pending}"
    urns = [r["urn"] for r in dep["resources"] if r["type"] != "pulumi:pulumi:Stack"]
    urns = [u for u in urns if not u.split("::")[-1].startswith("default")]
    assert len(urns) == len(set(urns)), f"{stack}: a resource twice in the state: {sorted(urns)}"
    want = {r["urn"] for r in json.loads(resources_json.read_text())["resources"]}
    assert set(urns) == want, f"{stack}: state {sorted(set(urns) - want)} / render {sorted(want - set(urns))}"
    differences = []
    for obj in rendered:
        live = cluster.get(obj)
        if live is None:
            differences.append(f"{obj['kind']}/{obj['metadata']['name']}: not in the API server")
            continue
        live = lane.strip_server_fields(live)
        w = obj
        if obj["kind"] == "Secret":  # render redacts values
            w = {k: v for k, v in obj.items() if k not in ("data", "stringData")}
            live = {k: v for k, v in live.items() if k != "data"}
        differences += [f"{obj['kind']}/{obj['metadata']['name']} {d}" for d in lane.subset_diff(w, live)]
    assert not differences, f"{stack}: API server differs from the render:\n" + "\n".join(differences)
    expected = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in rendered}
    extra = {f for f in live_names(cluster, rendered) - expected if (f[0], f[2]) not in SYSTEM_OBJECTS}
    assert not extra, f"{stack}: objects in the API server the render does not have (duplicate/orphan): {extra}"
    proc = engine.pulumi(world, "preview", "--expect-no-changes", stack=stack, check=False)
    assert proc.returncode == 0, f"{stack}: preview after recovery shows changes:\n{proc.stdout[-3000:]}"
    return {"resources": len(urns), "objects": len(rendered)}


def bind_volume(cluster: lane.Cluster, claim: dict) -> str:
    """Stand in for the class's provisioner: a PersistentVolume bound to the live claim (claimRef with its UID,
    reclaim policy Delete as a dynamic class's default), so a test can show the volume behind the cache survives."""
    live = cluster.get(claim)
    name = f"pv-{live['metadata']['uid']}"
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": live["spec"]["resources"]["requests"]["storage"]},
            "accessModes": live["spec"]["accessModes"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": live["spec"].get("storageClassName"),
            "claimRef": {
                "kind": "PersistentVolumeClaim",
                "namespace": live["metadata"]["namespace"],
                "name": live["metadata"]["name"],
                "uid": live["metadata"]["uid"],
            },
            "nfs": {"server": "127.0.0.1", "path": "/kimi-k3-lane"},  # never mounted: no kubelet runs here
        },
    }
    r = cluster.request("POST", "/api/v1/persistentvolumes", json=pv)
    if r.status_code not in (201, 409):
        raise RuntimeError(f"PersistentVolume {name}: {r.status_code} {r.text[:300]}")
    return name


def cache_facts(cluster: lane.Cluster, claim: dict, pv: str) -> dict:
    """The claim's UID and whether it is being deleted, and the volume behind it (bound to that UID), as the API
    server has them."""
    live = cluster.get(claim)
    vol = cluster.request("GET", f"/api/v1/persistentvolumes/{pv}")
    return {
        "claim_uid": live["metadata"]["uid"] if live else None,
        "claim_deleting": bool(live and live["metadata"].get("deletionTimestamp")),
        "pv_claim_uid": vol.json()["spec"]["claimRef"]["uid"] if vol.status_code == 200 else None,
    }


def traceback_free(text: str) -> bool:
    return "Traceback (most recent call last)" not in text
