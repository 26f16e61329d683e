"""The benchmark Job: AIPerf against the frontend Service (the rehearsal's workload, or a trace replay)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from kimi_k3.config.trace import BenchmarkTraceConfig
from kimi_k3.graph.model import ServingGraph
from kimi_k3.k8s import benchmark_trace
from kimi_k3.k8s.deployment import graph_deployment
from kimi_k3.k8s.objects import Obj, _env, _meta, with_config_checksums
from kimi_k3.k8s.smoke_job import frontend_url
from kimi_k3.names import CACHE_VOLUME, NAMES, PART_OF
from kimi_k3.pods import workload

WORKLOAD_SCRIPT = Path(workload.__file__)  # the workload `kimi-k3 rehearse` runs locally, and the Job's runner


BENCHMARK_DIR = "/benchmark"  # the runner and its plan (ConfigMap)


BENCHMARK_RESULTS = "/results"  # AIPerf's --artifact-dir per run (emptyDir; the summaries go to the log)


BENCHMARK_START_SECONDS = 600  # image pull (AIPerf's image is ~2 GB) and pod start, before the first run


BENCHMARK_UID = 1000  # the user AIPerf's own manifests run its image as (aiperf kube generate)


# Guaranteed QoS, so the client is neither throttled below its need nor evicted during a measurement. Memory: the
# rehearsal's AIPerf measured ~0.2 GiB RSS at this workload (2 processes, agentic, 32 requests); AIPerf's own
# estimate for its services is ~2 GiB (aiperf kube generate's memory estimator: controller 1388 MiB + one worker
# pod 632 MiB). Its workers are capped at --concurrency (aiperf/workers/worker_manager.py).
BENCHMARK_RESOURCES = {
    "requests": {"cpu": "2", "memory": "2Gi", "ephemeral-storage": "1Gi"},
    "limits": {"cpu": "2", "memory": "2Gi", "ephemeral-storage": "5Gi"},
}


def benchmark_plan(graph: ServingGraph, w: workload.Workload, trace: BenchmarkTraceConfig | None = None) -> Obj:
    """What the benchmark Job runs: the rehearsal's workload (workload.profile_args) against the frontend Service,
    tokenized by the model's own tokenizer from the cache (remote code, as the graph's --trust-remote-code); with
    a trace, its replay instead (kimi_k3/k8s/benchmark_trace.py)."""
    if trace is not None:
        return benchmark_trace.trace_plan(graph, trace, frontend_url(graph), BENCHMARK_RESULTS)
    return {
        "run_deadline_seconds": w.run_deadline_seconds(),
        "runs": {
            kind: workload.profile_args(
                kind,
                w,
                model=graph.served_model_name,
                url=frontend_url(graph),
                tokenizer=graph.model_path,
                artifact_dir=f"{BENCHMARK_RESULTS}/{kind}",
                extra=["--tokenizer-trust-remote-code"],
            )
            for kind in w.runs
        },
    }


def benchmark_config_map(graph: ServingGraph, w: workload.Workload, trace: BenchmarkTraceConfig | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(graph, NAMES["benchmark"]),
        "data": {
            WORKLOAD_SCRIPT.name: WORKLOAD_SCRIPT.read_text(),
            "plan.json": json.dumps(benchmark_plan(graph, w, trace), indent=1) + "\n",
        },
    }


def benchmark_job(
    graph: ServingGraph,
    w: workload.Workload,
    image: str,
    node_selector: dict[str, str] | None = None,
    trace: BenchmarkTraceConfig | None = None,
) -> Obj:
    """AIPerf against the frontend Service, after the smoke test: the rehearsal's runs, one after the other, in
    AIPerf's own image. No API access (no service account token), non-root, read-only root and model cache,
    Guaranteed resources; each run's summary stays in the Job's log (`kubectl logs job/kimi-k3-benchmark`)."""
    plan = benchmark_plan(graph, w, trace)
    deadline = int(BENCHMARK_START_SECONDS + len(plan["runs"]) * plan["run_deadline_seconds"])
    # A changed graph or workload changes the pod template, so the Job is replaced and measures again.
    graph_hash = hashlib.sha256(json.dumps(graph_deployment(graph), sort_keys=True).encode()).hexdigest()[:16]
    plan_hash = hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()[:16]
    tmp = {"name": "tmp", "emptyDir": {"sizeLimit": "4Gi"}}
    results = {"name": "results", "emptyDir": {"sizeLimit": "1Gi"}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(graph, NAMES["benchmark"], annotations={"pulumi.com/timeoutSeconds": str(deadline + 60)}),
        "spec": {
            "backoffLimit": 0,  # a second try would measure a cache the first one warmed
            "activeDeadlineSeconds": deadline,
            "template": {
                "metadata": with_config_checksums(
                    {
                        "labels": {**PART_OF, "app.kubernetes.io/component": "benchmark"},
                        "annotations": {"kimi-k3.io/graph-sha256": graph_hash, "kimi-k3.io/plan-sha256": plan_hash},
                    },
                    benchmark_config_map(graph, w, trace),
                ),
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,  # AIPerf profile only talks to the frontend
                    "enableServiceLinks": False,
                    **({"nodeSelector": dict(node_selector)} if node_selector else {}),
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": BENCHMARK_UID,
                        "runAsGroup": BENCHMARK_UID,
                        "fsGroup": BENCHMARK_UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "aiperf",
                            "image": image,
                            "command": ["python", f"{BENCHMARK_DIR}/{WORKLOAD_SCRIPT.name}"],
                            "args": [
                                "--plan",
                                f"{BENCHMARK_DIR}/plan.json",
                                "--termination-log",
                                "/dev/termination-log",
                            ],
                            # AIPerf's datasets and IPC sockets go to TMPDIR; remote tokenizer code to HF_HOME.
                            "env": _env(
                                [
                                    ("TMPDIR", "/tmp"),
                                    ("HOME", "/tmp"),
                                    ("HF_HOME", "/tmp/hf-home"),
                                    ("HF_HUB_DISABLE_TELEMETRY", "1"),
                                    ("DO_NOT_TRACK", "1"),
                                    ("PYTHONUNBUFFERED", "1"),
                                ]
                            ),
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "resources": BENCHMARK_RESOURCES,
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                                "readOnlyRootFilesystem": True,
                                "runAsNonRoot": True,
                                "seccompProfile": {"type": "RuntimeDefault"},
                            },
                            "volumeMounts": [
                                {"name": "benchmark", "mountPath": BENCHMARK_DIR, "readOnly": True},
                                {"name": CACHE_VOLUME, "mountPath": graph.cache_mount_path, "readOnly": True},
                                {"name": "tmp", "mountPath": "/tmp"},
                                {"name": "results", "mountPath": BENCHMARK_RESULTS},
                                *([benchmark_trace.mount()] if trace else []),
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "benchmark", "configMap": {"name": NAMES["benchmark"]}},
                        {"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": NAMES["pvc"], "readOnly": True}},
                        tmp,
                        results,
                        *([benchmark_trace.volume(trace)] if trace else []),
                    ],
                },
            },
        },
    }
