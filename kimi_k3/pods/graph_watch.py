"""Wait until the serving graph is Ready, or fail within minutes naming why it cannot become Ready.

Runs as the graph-ready Job (mounted from a ConfigMap; Python stdlib only). pulumi-kubernetes cannot fail a
`pulumi.com/waitFor` await early (it only succeeds or times out, kimi_k3/pulumi_await.py), but it fails `pulumi up`
at once when a Job fails, with the pod's log tail: so this Job does the waiting, and the graph itself is created
with `pulumi.com/skipAwait`. `diagnose` is the pure decision the tests exercise.
Environment: GRAPH_NAME, GRAPH_NAMESPACE, POD_SELECTOR, DEADLINE_SECONDS.
"""
from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from typing import Any, Optional

# Waiting reasons that never clear by themselves (the image, the spec or the crash has to change).
FATAL_WAITING = {"ErrImageNeverPull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
                 "CreateContainerError"}
CRASHES_TOLERATED = 1            # one crash may be transient; the second one fails `up`
UNSCHEDULABLE_GRACE_SECONDS = 900
POLL_SECONDS = 15
SA = "/var/run/secrets/kubernetes.io/serviceaccount"


def _time(value: Optional[str]) -> Optional[datetime]:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _condition(obj: dict[str, Any], kind: str) -> Optional[dict[str, Any]]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def _container_problem(pod: str, status: dict[str, Any]) -> Optional[str]:
    name = f"pod {pod} container {status.get('name')}"
    waiting = (status.get("state") or {}).get("waiting") or {}
    last = (status.get("lastState") or {}).get("terminated") or {}
    crashed = f" (last exit: {last.get('reason')}, code {last.get('exitCode')}: {(last.get('message') or '').strip()[-500:]})" \
        if last else ""
    if waiting.get("reason") in FATAL_WAITING:
        return f"{name}: {waiting.get('reason')}: {waiting.get('message', '')}".rstrip(": ")
    if int(status.get("restartCount") or 0) > CRASHES_TOLERATED:
        return f"{name} restarted {status.get('restartCount')} times{crashed}"
    return None


def diagnose(graph: Optional[dict[str, Any]], pods: list[dict[str, Any]], now: datetime) -> tuple[str, str]:
    """("ready" | "failed" | "waiting", message) for one observation of the graph and its pods."""
    if graph is None:
        return "waiting", "graph not found yet"
    generation = (graph.get("metadata") or {}).get("generation")
    observed = (graph.get("status") or {}).get("observedGeneration")
    if generation is not None and observed is not None and int(observed) < int(generation):
        return "waiting", f"graph change (generation {generation}) not yet observed by the operator ({observed})"
    ready = _condition(graph, "Ready")
    if ready and ready.get("status") == "True":
        return "ready", f"graph {graph['metadata']['name']} is Ready"
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        name, status = pod["metadata"]["name"], pod.get("status") or {}
        if status.get("phase") == "Failed":
            return "failed", f"pod {name} failed: {status.get('reason', '')} {status.get('message', '')}".strip()
        for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            problem = _container_problem(name, cs)
            if problem:
                return "failed", problem
        scheduled = _condition(pod, "PodScheduled")
        since = _time((scheduled or {}).get("lastTransitionTime"))
        if scheduled and scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable" and \
                since and (now - since).total_seconds() > UNSCHEDULABLE_GRACE_SECONDS:
            return "failed", f"pod {name} unschedulable for {int((now - since).total_seconds())} s: " \
                             f"{scheduled.get('message', '')}"
    reason = f"{ready.get('reason', '')} {ready.get('message', '')}".strip() if ready else "no Ready condition yet"
    return "waiting", f"{len(pods)} pods; graph not Ready: {reason}"


def _get(path: str) -> Optional[dict[str, Any]]:
    token = open(f"{SA}/token").read()
    request = urllib.request.Request(f"https://kubernetes.default.svc{path}",
                                     headers={"Authorization": f"Bearer {token}"})
    context = ssl.create_default_context(cafile=f"{SA}/ca.crt")
    try:
        with urllib.request.urlopen(request, context=context, timeout=20) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise


def main() -> int:
    name, ns = os.environ["GRAPH_NAME"], os.environ["GRAPH_NAMESPACE"]
    selector = urllib.parse.quote(os.environ["POD_SELECTOR"])
    deadline = time.monotonic() + int(os.environ["DEADLINE_SECONDS"])
    last_report = 0.0
    while time.monotonic() < deadline:
        try:
            graph = _get(f"/apis/nvidia.com/v1beta1/namespaces/{ns}/dynamographdeployments/{name}")
            pods = (_get(f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}") or {}).get("items") or []
        except (OSError, ValueError) as err:  # API hiccup: keep waiting, say so
            print(f"API error, retrying: {err}", flush=True)
            time.sleep(POLL_SECONDS)
            continue
        state, message = diagnose(graph, pods, datetime.now(timezone.utc))
        if state != "waiting":
            print(message, flush=True)
            return 0 if state == "ready" else 1
        if time.monotonic() - last_report >= 60:
            print(message, flush=True)
            last_report = time.monotonic()
        time.sleep(POLL_SECONDS)
    print(f"graph {name} not Ready within {os.environ['DEADLINE_SECONDS']} s", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
