"""deployment.py -> model_cache.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

from typing import Any

from kimi_k3.graph.model import ServingGraph
from kimi_k3.k8s.objects import Obj, _arch_requirement, _env, _meta, _node_affinity, with_config_checksums
from kimi_k3.names import CACHE_VOLUME, NAMES, PART_OF
from kimi_k3.pods import program_path

VERIFY_SCRIPT = program_path("verify_checkpoint.py")


TOOLS_DIR = "/opt/hub"  # emptyDir holding the pinned huggingface_hub install


# A pod that fails at once (bad token, wrong revision) fails the Job after 4 tries and 10+20+40 s of the Job
# controller's pod backoff: `pulumi up` reports it within minutes. A resumed `hf download` loses nothing.
DOWNLOAD_BACKOFF_LIMIT = 3


AWAIT_GRACE_SECONDS = 300  # provider timeout beyond the Job's activeDeadlineSeconds


VERIFY_REPORT_SECONDS = 600  # Job deadline beyond the verify step's own wait (pip install, report)


COMPILE_CACHE_GI = 100  # what the compile-cache PV/PVC advertise (EFS is elastic)


def hf_token_secret(graph: ServingGraph, token: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(graph, NAMES["secret"]),
        "type": "Opaque",
        "stringData": {"HF_TOKEN": token},
    }


def model_cache_pvc(graph: ServingGraph, storage_class: str, size_gi: int) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(graph, NAMES["pvc"]),
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": f"{size_gi}Gi"}},
        },
    }


def verify_script_config_map(graph: ServingGraph) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(graph, NAMES["verify"]),
        "data": {VERIFY_SCRIPT.name: VERIFY_SCRIPT.read_text()},
    }


def download_job(
    graph: ServingGraph,
    download_image: str,
    hub_version: str,
    fetch_from_hub: bool = True,
    node_selector: dict[str, str] | None = None,
    wait_seconds: int = 0,
) -> Obj:
    """Download (unless the weights were pre-staged or are fetched outside the cluster), then verify every shard.
    `wait_seconds`: the weights arrive from elsewhere (the S3 fetchers); poll that long for them to be complete, on
    a read-only volume (no marker file written)."""
    n = NAMES
    pairs = [
        ("MODEL_REPO", graph.model_repo),
        ("MODEL_REVISION", graph.model_revision),
        ("MODEL_PATH", graph.model_path),
        ("HF_HOME", "/tmp/hf-home" if wait_seconds else f"{graph.cache_mount_path}/.hf-home"),
        ("HF_XET_HIGH_PERFORMANCE", "1"),  # hf_xet's parallel fast-transfer mode
        ("PYTHONPATH", TOOLS_DIR),
    ]
    if wait_seconds:
        # The fetchers' manifests and failure records, polled on the read-only mount (kimi_k3/pods/verify_checkpoint.py).
        pairs += [("VERIFY_MODE", "manifest"), ("VERIFY_WAIT_SECONDS", str(wait_seconds)), ("VERIFY_WRITE_MARKER", "0")]
    else:
        pairs += [("VERIFY_MODE", "hash")]  # hashes every file, writes the manifest the node-local copy reads
    env = _env(pairs)
    env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": n["secret"], "key": "HF_TOKEN"}}})
    # Root, written out (the python image's USER): a filesystem model cache (kind efs/fsx-lustre) is root:root 0755.
    hardened = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsUser": 0,
        "runAsGroup": 0,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    mounts = [
        {"name": CACHE_VOLUME, "mountPath": graph.cache_mount_path, **({"readOnly": True} if wait_seconds else {})},
        {"name": "tools", "mountPath": TOOLS_DIR},
    ]
    script = f"set -eu\npip install --no-cache-dir --target {TOOLS_DIR} 'huggingface_hub[hf_xet]=={hub_version}'\n"
    if fetch_from_hub:
        # hf download skips complete files and resumes partial ones, so a retried pod continues.
        script += f'{TOOLS_DIR}/bin/hf download "$MODEL_REPO" --revision "$MODEL_REVISION" --local-dir "$MODEL_PATH"\n'
    d = graph.drafter
    if d is not None:
        # The drafter (kimi-k3:serving.speculation), pinned and checked like the weights, beside them in the cache
        # under its own revision's directory: the workers read it there; upstream's pods download it from the Hub at
        # every start instead. On a writable cache this Job downloads and hashes it (also beside FSx-imported weights:
        # the import carries only the user's bucket); with kind s3 the fetchers did, and it checks their manifests
        # (VERIFY_MODE manifest, polling as for the weights). Verified as the weights are, index included: a drafter
        # without model.safetensors.index.json fails the Job, naming it (~7 GB of BF16 is sharded by
        # save_pretrained's 5 GB default, but its file list was not readable here).
        env += _env([("DRAFTER_REPO", d.repo), ("DRAFTER_REVISION", d.revision), ("DRAFTER_PATH", d.staged_path)])
        if not wait_seconds:
            script += (
                f'{TOOLS_DIR}/bin/hf download "$DRAFTER_REPO" --revision "$DRAFTER_REVISION" '
                '--local-dir "$DRAFTER_PATH"\n'
            )
        script += (
            'MODEL_REPO="$DRAFTER_REPO" MODEL_REVISION="$DRAFTER_REVISION" MODEL_PATH="$DRAFTER_PATH" '
            f"python3 /scripts/{VERIFY_SCRIPT.name}\n"
        )
    script += f"exec python3 /scripts/{VERIFY_SCRIPT.name}\n"
    # Waiting for weights fetched elsewhere, the verify step gives up first and names what is missing.
    deadline = graph.download_timeout_seconds + (VERIFY_REPORT_SECONDS if wait_seconds else 0)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        # No pulumi.com/waitFor: it replaces pulumi-kubernetes' Job await, which fails `up` as soon as the Job
        # is Failed (BackoffLimitExceeded / DeadlineExceeded) with its pods' errors; waitFor only succeeds or
        # times out. The provider's timeout sits past the Job's own deadline so the Job names the reason.
        "metadata": _meta(
            graph,
            n["job"],
            annotations={
                "pulumi.com/timeoutSeconds": str(deadline + AWAIT_GRACE_SECONDS),
            },
        ),
        "spec": {
            "backoffLimit": DOWNLOAD_BACKOFF_LIMIT,
            "activeDeadlineSeconds": deadline,
            # A drained or preempted node is no failure of the download: it does not use up a retry.
            "podFailurePolicy": {
                "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
            },
            "template": {
                "metadata": with_config_checksums(
                    {
                        "labels": {**PART_OF, "app.kubernetes.io/component": "model-download"},
                        # The cloud's weights-mount needs (GKE: the GCS FUSE sidecar), none on EKS.
                        **(
                            {"annotations": dict(graph.node_facts.weights_pod_annotations)}
                            if graph.node_facts.weights_pod_annotations
                            else {}
                        ),
                    },
                    verify_script_config_map(graph),
                ),
                "spec": {
                    "restartPolicy": "Never",
                    **(
                        {"serviceAccountName": graph.node_facts.fetcher_service_account}
                        if graph.node_facts.fetcher_service_account
                        else {}
                    ),
                    **({"nodeSelector": dict(node_selector)} if node_selector else {}),
                    "affinity": _node_affinity(_arch_requirement(graph.download_arch)),
                    # One container, so the pod status Pulumi reports carries the failing step's log tail
                    # (its checker reads containerStatuses, not initContainerStatuses).
                    "containers": [
                        {
                            "name": "download",
                            "image": download_image,
                            "command": ["sh", "-c"],
                            "args": [script],
                            "env": env,
                            "securityContext": hardened,
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "volumeMounts": mounts + [{"name": "scripts", "mountPath": "/scripts", "readOnly": True}],
                        }
                    ],
                    "volumes": [
                        {"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": n["pvc"]}},
                        {"name": "tools", "emptyDir": {}},
                        {"name": "scripts", "configMap": {"name": n["verify"]}},
                    ],
                },
            },
        },
    }


def compile_cache_pvc(namespace: str) -> Obj:
    """The shared compile-cache claim (statically bound to the stack's compile-cache PV)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": NAMES["compile_cache"], "namespace": namespace, "labels": dict(PART_OF)},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": NAMES["compile_cache"],
            "resources": {"requests": {"storage": f"{COMPILE_CACHE_GI}Gi"}},
        },
    }
