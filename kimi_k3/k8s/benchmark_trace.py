"""The benchmark Job's trace replay (`kimi-k3:serving.benchmark.trace`, issue 21): the plan the runner
(kimi_k3/pods/workload.py) follows and the volume that mounts the user's ConfigMap. The trace's content is never
read here: the Job mounts the ConfigMap by name, so it stays out of the repository and the Pulumi state."""

from __future__ import annotations

from kimi_k3.config.trace import CONFIGMAP_MAX_BYTES, JOB_TRACE_MAX_REQUESTS, BenchmarkTraceConfig
from kimi_k3.graph.model import ServingGraph
from kimi_k3.k8s.objects import Obj
from kimi_k3.pods import workload

TRACE_VOLUME = "trace"
TRACE_DIR = "/trace"  # the user's ConfigMap, read-only
TRACE_FILE = "trace.jsonl"  # the key, mounted under this name
SELECTED = "/tmp/trace-selected.jsonl"  # the selection AIPerf replays (the Job's tmp emptyDir)


def source(graph: ServingGraph, trace: BenchmarkTraceConfig) -> str:
    """How the runner's messages name the trace: the ConfigMap, its namespace and key, and the stack key."""
    return f"kimi-k3:serving.benchmark.trace: ConfigMap {graph.namespace}/{trace.config_map} key {trace.key}"


def trace_plan(graph: ServingGraph, trace: BenchmarkTraceConfig, url: str, results: str) -> Obj:
    """One `trace` run: AIPerf's replay (workload.trace_profile_args, the rehearsal's argv) of the selection the
    runner writes from the mounted ConfigMap, bounded by trace.maxSeconds plus the run grace."""
    return {
        "run_deadline_seconds": trace.max_seconds + workload.RUN_GRACE_SECONDS,
        "runs": {
            "trace": workload.trace_profile_args(
                SELECTED,
                trace.speedup,
                model=graph.served_model_name,
                url=url,
                tokenizer=graph.model_path,
                artifact_dir=f"{results}/trace",
                extra=["--tokenizer-trust-remote-code"],
            )
        },
        "trace": {
            "source": source(graph, trace),
            "mounted": f"{TRACE_DIR}/{TRACE_FILE}",
            "selected": SELECTED,
            "first": trace.first,
            "window": None if trace.window is None else list(trace.window_seconds),
            "speedup": trace.speedup,
            "max_seconds": trace.max_seconds,
            "max_requests": JOB_TRACE_MAX_REQUESTS,
            "max_bytes": CONFIGMAP_MAX_BYTES,
        },
    }


def volume(trace: BenchmarkTraceConfig) -> Obj:
    # optional: a missing ConfigMap or key mounts nothing, and the runner names it in the Job's termination message
    # instead of the pod waiting in ContainerCreating until the deadline.
    return {
        "name": TRACE_VOLUME,
        "configMap": {"name": trace.config_map, "items": [{"key": trace.key, "path": TRACE_FILE}], "optional": True},
    }


def mount() -> Obj:
    return {"name": TRACE_VOLUME, "mountPath": TRACE_DIR, "readOnly": True}
