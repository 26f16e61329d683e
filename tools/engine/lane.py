"""The engine lane's harness: a local Kubernetes API server (etcd + kube-apiserver + kube-controller-manager for
garbage collection) and the real Pulumi CLI on a local file backend, all inside the network namespace that
`make test-engine` creates with `unshare -n` (only loopback: nothing can dial out).

Tools come from `tools/engine/build.sh` (Go modules pinned in tools/engine/versions.env); a `pulumi` already on
PATH wins over ours (users keep their own CLI): our bin directory is appended to PATH, not prepended.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Optional

import requests
import urllib3
import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
# ENGINE_LANE_REFERENCE=/nonexistent runs the lane as a clone without ../shared does (open-schema CRDs).
SHARED_REFERENCE = Path(os.environ.get("ENGINE_LANE_REFERENCE") or ROOT.parent / "shared" / "reference")
# The CRDs the Dynamo platform chart and the DRA driver chart install, as their upstream files (unmodified). Neither
# project is served by a registry this lane reaches, so without ../shared the lane uses open-schema CRDs instead.
UPSTREAM_CRD_DIRS = ("dynamo/crds", "dra/crds")
# The Prometheus Operator CRDs: tools/engine/build.sh monitoring-crds copies them from the Go module's files.
MONITORING_CRD_DIR = "crds/monitoring.coreos.com"
ETCD_PORT, ETCD_PEER_PORT, API_PORT = 2379, 2380, 6443
TOKEN = "kimi-k3-engine-lane-admin"
STARTUP_TIMEOUT_S = 120

urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)  # the API server's self-signed loopback cert


def log(msg: str) -> None:
    print(f"[engine-lane {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def only_loopback() -> list[str]:
    """Interfaces of this process's network namespace (the lane runs only where this is ['lo'])."""
    return sorted(name for _, name in socket.if_nameindex())


def tool_dir() -> Path:
    """Build (or reuse) the pinned tools; the CLI only when no `pulumi` is on PATH."""
    want = ["provider", "kube", "etcd", "monitoring-crds"] + ([] if shutil.which("pulumi") else ["pulumi"])
    out = (
        subprocess.run([str(ROOT / "tools/engine/build.sh"), *want], check=True, stdout=subprocess.PIPE, text=True)
        .stdout.strip()
        .splitlines()[-1]
    )
    return Path(out)


def tool_env(bin_dir: Path, home: Path, passphrase: str) -> dict[str, str]:
    (home / "state").mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_")}
    env.update(
        {
            "PATH": f"{os.environ.get('PATH', '')}:{bin_dir}",  # a user's own `pulumi` comes first
            "PULUMI_HOME": str(home / "pulumi-home"),  # no plugins or credentials of the user's
            "PULUMI_BACKEND_URL": f"file://{home / 'state'}",
            "PULUMI_CONFIG_PASSPHRASE": passphrase,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_SKIP_CONFIRMATIONS": "true",
            "KUBECONFIG": str(home / "kubeconfig"),
        }
    )
    return env


def _ppids() -> dict[int, int]:
    """pid -> parent pid of every process this user can see (from /proc/<pid>/stat)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            out[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])  # comm may hold spaces
    return out


def process_tree(pid: int) -> list[int]:
    """pid and every descendant, whatever process group each is in: the Pulumi CLI starts its plugins in their own
    groups, so a signal to the CLI's group misses them and they outlive it."""
    children: dict[int, list[int]] = {}
    for child, parent in _ppids().items():
        children.setdefault(parent, []).append(child)
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo.extend(children.get(tree[-1], []))
    return tree


def kill_tree(pid: int) -> None:
    """SIGKILL to pid's process group and to each of its descendants (collected before anything dies, since an
    orphan is reparented away from the tree)."""
    tree = process_tree(pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for each in tree:
        try:
            os.kill(each, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def left_behind(home: Path) -> list[str]:
    """Processes still running with this lane's PULUMI_HOME (CLIs, language hosts, providers, packs inherit it):
    'pid exe' each. Empty when every command ended with everything it started."""
    marker = f"PULUMI_HOME={home / 'pulumi-home'}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(f"{entry.name} {os.readlink(entry / 'exe')}")
        except OSError:
            continue
    return found


def sweep(home: Path, grace_s: float = 10.0) -> list[str]:
    """What `left_behind` finds once `grace_s` has passed (a CLI that just exited may still be stopping its
    plugins), killed, so one leak does not spill into the next test; returns what it killed."""
    deadline = time.monotonic() + grace_s
    while (found := left_behind(home)) and time.monotonic() < deadline:
        time.sleep(0.5)
    for line in found:
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return found


class Cluster:
    """etcd + kube-apiserver + kube-controller-manager on loopback; `stop()` ends every process it started."""

    def __init__(self, bin_dir: Path, work: Path):
        self.bin, self.work = bin_dir, work
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.args: dict[str, list[str]] = {}  # each server's command line, for restart()
        self.url = f"https://127.0.0.1:{API_PORT}"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {TOKEN}"
        self.session.verify = False
        self.session.trust_env = False  # else REQUESTS_CA_BUNDLE / proxies from the environment override verify

    def _start(self, name: str, args: list[str]) -> None:
        self.args[name] = args
        logf = open(self.work / f"{name}.log", "a")
        proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((name, proc))

    def _alive(self) -> None:
        for name, proc in self.procs:
            if proc.poll() is not None:
                tail = (self.work / f"{name}.log").read_text()[-3000:]
                raise RuntimeError(f"{name} exited with status {proc.returncode}:\n{tail}")

    def start(self) -> "Cluster":
        w = self.work
        for d in ("etcd", "certs"):
            (w / d).mkdir(parents=True, exist_ok=True)
        subprocess.run(["openssl", "genrsa", "-out", str(w / "sa.key"), "2048"], check=True, capture_output=True)
        (w / "tokens.csv").write_text(f'{TOKEN},lane-admin,lane-admin,"system:masters"\n')
        self.kubeconfig = w / "kubeconfig"
        self.kubeconfig.write_text(self.kubeconfig_text())
        log("starting etcd, kube-apiserver, kube-controller-manager on loopback")
        self._start(
            "etcd",
            [
                str(self.bin / "etcd"),
                "--name",
                "lane",
                "--data-dir",
                str(w / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{ETCD_PORT}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{ETCD_PORT}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{ETCD_PEER_PORT}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{ETCD_PEER_PORT}",
                "--initial-cluster",
                f"lane=http://127.0.0.1:{ETCD_PEER_PORT}",
                "--unsafe-no-fsync",
                "--log-level",
                "warn",
            ],
        )
        self._start(
            "kube-apiserver",
            [
                str(self.bin / "kube-apiserver"),
                "--etcd-servers",
                f"http://127.0.0.1:{ETCD_PORT}",
                "--bind-address",
                "127.0.0.1",
                "--advertise-address",
                "127.0.0.1",
                "--secure-port",
                str(API_PORT),
                "--cert-dir",
                str(w / "certs"),
                "--token-auth-file",
                str(w / "tokens.csv"),
                "--authorization-mode",
                "RBAC",
                "--service-cluster-ip-range",
                "10.96.0.0/16",
                "--service-account-issuer",
                "https://kubernetes.default.svc",
                "--service-account-key-file",
                str(w / "sa.key"),
                "--service-account-signing-key-file",
                str(w / "sa.key"),
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                "-v=1",
            ],
        )
        self.wait_ready()
        # Garbage collection (Pulumi deletes with foreground propagation: the GC removes the finalizer) and the
        # namespace and DaemonSet controllers (with no nodes a DaemonSet is complete at 0 pods); no Job controller.
        self._start(
            "kube-controller-manager",
            [
                str(self.bin / "kube-controller-manager"),
                "--kubeconfig",
                str(self.kubeconfig),
                "--controllers",
                "garbagecollector,namespace,daemonset",
                "--leader-elect=false",
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                "10257",
                "-v=1",
            ],
        )
        return self

    def kubeconfig_text(self) -> str:
        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "lane",
                "clusters": [{"name": "lane", "cluster": {"server": self.url, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "lane-admin", "user": {"token": TOKEN}}],
                "contexts": [{"name": "lane", "context": {"cluster": "lane", "user": "lane-admin"}}],
            }
        )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            self._alive()
            try:
                if self.session.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                    log(f"API server ready: {self.version()['gitVersion']}")
                    return
            except requests.RequestException:
                pass
            time.sleep(1)
        raise RuntimeError(f"API server not ready within {STARTUP_TIMEOUT_S}s (logs in {self.work})")

    def stop(self) -> None:
        for name, proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        self.procs.clear()

    def restart(self, names: tuple[str, ...] = ("etcd", "kube-apiserver"), down_s: float = 0.0) -> None:
        """Stop `names` (SIGTERM, then SIGKILL), wait `down_s`, start them again on the same data and certificates,
        and wait until the API server is ready (the fault lane's API server restart)."""
        for name in names:
            proc = next(p for n, p in self.procs if n == name)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        self.procs = [(n, p) for n, p in self.procs if n not in names]
        time.sleep(down_s)
        for name in names:
            self._start(name, self.args[name])
        self.wait_ready()

    # ---------------------------------------------------------------- API
    def version(self) -> dict:
        return self.session.get(f"{self.url}/version", timeout=10).json()

    def request(self, method: str, path: str, **kw) -> requests.Response:
        return self.session.request(method, f"{self.url}{path}", timeout=30, **kw)

    def install_crds(self, crds: "list[dict] | Path") -> list[str]:
        """Create each CRD and wait until all are Established (a Path: the upstream Dynamo and DRA CRDs under it)."""
        if isinstance(crds, Path):
            found = upstream_crds(crds)
            if found is None:
                raise RuntimeError(f"no upstream CRDs under {crds} ({', '.join(UPSTREAM_CRD_DIRS)})")
            crds = found
        names = []
        for crd in crds:
            r = self.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd)
            if r.status_code not in (201, 409):
                raise RuntimeError(f"CRD {crd['metadata']['name']} refused: {r.status_code} {r.text[:500]}")
            names.append(crd["metadata"]["name"])
        deadline = time.monotonic() + 60
        for name in names:
            while True:
                crd = self.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}").json()
                conds = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
                if conds.get("Established") == "True":
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"CRD {name} not established: {conds}")
                time.sleep(0.5)
        return names

    def add_storage_class(self, name: str) -> None:
        """A ReadWriteMany class as an existing cluster would have; WaitForFirstConsumer, as no pod ever consumes the
        claim here (pulumi-kubernetes waits for an Immediate claim to be Bound, which needs a provisioner)."""
        sc = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": name},
            "provisioner": "lane.kimi-k3.local/none",
            "volumeBindingMode": "WaitForFirstConsumer",
        }
        r = self.request("POST", "/apis/storage.k8s.io/v1/storageclasses", json=sc)
        if r.status_code not in (201, 409):
            raise RuntimeError(f"StorageClass {name}: {r.status_code} {r.text[:300]}")

    def path_of(self, obj: dict, plural: str) -> str:
        api = obj["apiVersion"]
        base = f"/api/{api}" if "/" not in api else f"/apis/{api}"
        ns = obj["metadata"].get("namespace")
        return f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"

    def plural(self, api_version: str, kind: str) -> str:
        plural = self.served(api_version, kind)
        if plural is None:
            raise KeyError(f"{api_version} {kind} not served")
        return plural

    def served(self, api_version: str, kind: str) -> Optional[str]:
        """The plural under which the API server serves `kind` of `api_version` (discovery), or None."""
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        r = self.request("GET", base)
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return next(
            (res["name"] for res in r.json()["resources"] if res["kind"] == kind and "/" not in res["name"]), None
        )

    def get(self, obj: dict) -> Optional[dict]:
        plural = self.plural(obj["apiVersion"], obj["kind"])
        r = self.request("GET", f"{self.path_of(obj, plural)}/{obj['metadata']['name']}")
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return r.json()

    def set_status(self, obj: dict, status: dict) -> None:
        """Stand in for the controller that would set `status` (no kubelet or operator runs here)."""
        plural = self.plural(obj["apiVersion"], obj["kind"])
        r = self.request(
            "PATCH",
            f"{self.path_of(obj, plural)}/{obj['metadata']['name']}/status",
            data=json.dumps({"status": status}),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        if r.status_code >= 300:
            raise RuntimeError(f"status of {obj['kind']}/{obj['metadata']['name']}: {r.status_code} {r.text[:400]}")


class CrdLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml: the CRDs are megabytes
    """SafeLoader that reads a bare `=` as the string it is (YAML 1.1 gives it the `value` tag, which PyYAML cannot
    construct; the Prometheus Operator CRDs list `=` among relabeling/matcher operators)."""


CrdLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


def read_crds(files: Iterable[Path]) -> list[dict]:
    return [
        crd
        for f in files
        for crd in yaml.load_all(f.read_text(), Loader=CrdLoader)
        if crd and crd.get("kind") == "CustomResourceDefinition"
    ]


def upstream_crds(reference: Path) -> Optional[list[dict]]:
    """The Dynamo and DRA CRDs from ../shared/reference, or None where that folder (or a CRD folder) is absent."""
    dirs = [reference / sub for sub in UPSTREAM_CRD_DIRS]
    if not all(d.is_dir() and any(d.glob("*.yaml")) for d in dirs):
        return None
    return read_crds(f for d in dirs for f in sorted(d.glob("*.yaml")))


def monitoring_crds(bin_dir: Path) -> list[dict]:
    """The Prometheus Operator CRDs build.sh copied next to the tools (`build.sh monitoring-crds`)."""
    d = bin_dir.parent / MONITORING_CRD_DIR
    files = sorted(d.glob("*.yaml"))
    if not files:
        raise RuntimeError(f"no Prometheus Operator CRDs in {d}: run tools/engine/build.sh monitoring-crds")
    return read_crds(files)


def crd_kind(crd: dict) -> tuple[str, str]:
    """(group, kind) a CRD defines."""
    return crd["spec"]["group"], crd["spec"]["names"]["kind"]


def plural_of(kind: str) -> str:
    """controller-gen's default plural (lower-cased kind, English plural): DynamoGraphDeployment ->
    dynamographdeployments; checked against the upstream CRDs where they exist (test_open_schema_crds_*)."""
    k = kind.lower()
    if k.endswith(("s", "x", "z", "ch", "sh")):
        return k + "es"
    if k.endswith("y") and k[-2:-1] not in "aeiou":
        return k[:-1] + "ies"
    return k + "s"


def open_schema_crd(api_version: str, kind: str, namespaced: bool) -> dict:
    """A CRD serving `kind` at `api_version` under its conventional plural with an open schema (any fields kept:
    x-kubernetes-preserve-unknown-fields) and the status subresource (the harness sets status through it, as the
    operator would). It checks names and scope only: no field, type, enum, CEL rule or defaulting of upstream's."""
    group, version = api_version.split("/")
    plural = plural_of(kind)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{group}",
            "annotations": {"kimi-k3.io/engine-lane": "open schema: upstream CRD not available"},
        },
        "spec": {
            "group": group,
            "scope": "Namespaced" if namespaced else "Cluster",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


def crd_identity(crd: dict, version: str) -> dict:
    """What a client addresses: group, version (served), kind, plural, scope, status subresource."""
    spec = crd["spec"]
    v = next((v for v in spec["versions"] if v["name"] == version), None)
    return {
        "group": spec["group"],
        "kind": spec["names"]["kind"],
        "plural": spec["names"]["plural"],
        "scope": spec["scope"],
        "version": version,
        "served": bool(v and v.get("served")),
        "status": bool(v and "status" in (v.get("subresources") or {})),
    }


def selects(selector: dict, labels: dict) -> bool:
    """Kubernetes label-selector semantics (matchLabels and matchExpressions)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if not {
            "In": key in labels and labels[key] in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]:
            return False
    return True


# Fields the API server or its controllers set; everything else must be what `kimi-k3 render` wrote.
SERVER_METADATA = {
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "finalizers",
}


def strip_server_fields(live: dict) -> dict:
    out = {k: v for k, v in live.items() if k != "status"}
    out["metadata"] = {k: v for k, v in live["metadata"].items() if k not in SERVER_METADATA}
    return out


def subset_diff(want: Any, got: Any, path: str = "") -> list[str]:
    """Where `got` (live, with server defaults) does not contain `want` (rendered): missing or different values."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{path or '.'}: rendered {json.dumps(want)[:200]}, live {json.dumps(got)[:200]}"]
        out = []
        for k, v in want.items():
            if k not in got:
                out.append(f"{path}.{k}: rendered {json.dumps(v)[:200]}, live has no such field")
            else:
                out.extend(subset_diff(v, got[k], f"{path}.{k}"))
        return out
    if isinstance(want, list):
        if not isinstance(got, list) or len(want) != len(got):
            return [f"{path}: rendered {json.dumps(want)[:300]}, live {json.dumps(got)[:300]}"]
        return [d for i, (a, b) in enumerate(zip(want, got)) for d in subset_diff(a, b, f"{path}[{i}]")]
    if want != got:
        return [f"{path}: rendered {json.dumps(want)}, live {json.dumps(got)}"]
    return []


def extra_fields(want: Any, got: Any, path: str = "") -> Iterable[str]:
    """Paths the live object has that the render does not (server defaults, or fields a mutation added)."""
    if isinstance(want, dict) and isinstance(got, dict):
        for k, v in got.items():
            if k not in want:
                yield f"{path}.{k}"
            else:
                yield from extra_fields(want[k], v, f"{path}.{k}")
    elif isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for i, (a, b) in enumerate(zip(want, got)):
            yield from extra_fields(a, b, f"{path}[{i}]")
