"""How pulumi-kubernetes waits for a Kubernetes resource on create/update, as pure functions, so the await
configuration of what we render can be tested and checked by rule.

Source: pulumi/pulumi-kubernetes @ 94977969d64112b04e19945818a7d5d5f38f631d (provider/pkg):
- metadata/overrides.go ReadyCondition: `pulumi.com/skipAwait: "true"` -> no wait; `pulumi.com/waitFor`
  (`condition=...`, `jsonpath=...`, or a JSON list of them, all must hold) -> a custom condition that REPLACES
  the built-in awaiter (await.go: "Use our built-in await logic only if the user hasn't specified any await
  overrides"); TimeoutDuration: customTimeouts, else `pulumi.com/timeoutSeconds`.
- await/internal/awaiter.go Await: a custom condition's errors are ignored while waiting (`done, _ :=
  Satisfied()`): it ends only when satisfied or at the timeout. There is no failure expression.
- await/job.go + await/checker/job/check.go: the built-in batch/v1 Job awaiter (default timeout 10 min) fails
  at once when the Job has condition Failed=True with reason BackoffLimitExceeded or DeadlineExceeded,
  reporting `[reason] message` plus the errors of the Job's pods (await/checker/pod/check.go: waiting and
  terminated reasons/messages of containerStatuses; initContainerStatuses are not read).
"""

from __future__ import annotations

import json
from typing import Any, Literal, Mapping, Optional

WAIT_FOR = "pulumi.com/waitFor"
TIMEOUT = "pulumi.com/timeoutSeconds"
SKIP_AWAIT = "pulumi.com/skipAwait"
JOB_DEFAULT_TIMEOUT_SECONDS = 10 * 60
CUSTOM_DEFAULT_TIMEOUT_SECONDS = 10 * 60
JOB_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded")
# Kubernetes Job controller: a failed pod is re-created after 10 s, doubling, capped at 6 min
# (kubernetes.io/docs/concepts/workloads/controllers/job/#pod-backoff-failure-policy).
POD_BACKOFF_BASE_SECONDS, POD_BACKOFF_CAP_SECONDS = 10, 360

Awaiter = Literal["skip", "custom", "job", "none"]


def _annotations(obj: Mapping) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def awaiter(obj: Mapping) -> Awaiter:
    """Which await logic the provider runs for this object (PULUMI_K8S_AWAIT_ALL unset)."""
    ann = _annotations(obj)
    if str(ann.get(SKIP_AWAIT, "")).lower() == "true":
        return "skip"
    if ann.get(WAIT_FOR):
        return "custom"
    if obj.get("apiVersion") == "batch/v1" and obj.get("kind") == "Job":
        return "job"
    return "none"


def wait_for_expressions(obj: Mapping) -> list[str]:
    raw = str(_annotations(obj).get(WAIT_FOR) or "")
    try:
        values = json.loads(raw)
    except json.JSONDecodeError:
        return [raw] if raw else []
    return [str(v) for v in values] if isinstance(values, list) else [raw]


def timeout_seconds(obj: Mapping, custom_timeout: Optional[float] = None) -> int:
    if custom_timeout:
        return int(custom_timeout)
    raw = _annotations(obj).get(TIMEOUT)
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        return JOB_DEFAULT_TIMEOUT_SECONDS if awaiter(obj) == "job" else CUSTOM_DEFAULT_TIMEOUT_SECONDS


def _condition(status: Mapping, kind: str) -> Optional[Mapping]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)


def _custom_satisfied(expr: str, obj: Mapping) -> bool:
    """`condition=Type[=Status]` (kubectl wait syntax) on the live object; jsonpath is not modelled."""
    body = expr.removeprefix("condition=")
    kind, _, wanted = body.partition("=")
    cond = _condition(obj.get("status") or {}, kind)
    return cond is not None and str(cond.get("status")) == (wanted or "True")


def outcome(obj: Mapping) -> tuple[Literal["ready", "failed", "waiting"], str]:
    """What one observation of the live object (spec + status) means to the provider's awaiter."""
    kind = awaiter(obj)
    if kind in ("skip", "none"):
        return "ready", "no await"
    if kind == "custom":
        exprs = wait_for_expressions(obj)
        unsupported = [e for e in exprs if not e.startswith("condition=")]
        if unsupported:
            raise ValueError(f"not modelled: {unsupported}")
        if all(_custom_satisfied(e, obj) for e in exprs):
            return "ready", "waitFor satisfied"
        return "waiting", f"waiting for {', '.join(exprs)} (a Failed condition changes nothing)"
    status = obj.get("status") or {}
    failed = _condition(status, "Failed")
    if failed and failed.get("status") == "True" and failed.get("reason") in JOB_FAILURE_REASONS:
        return "failed", f"[{failed.get('reason')}] {failed.get('message', '')}".strip()
    complete = _condition(status, "Complete")
    if complete and complete.get("status") == "True":
        return "ready", "Job complete"
    return "waiting", "waiting for the Job to succeed"


def worst_case_backoff_seconds(backoff_limit: int) -> int:
    """Pod backoff the Job controller inserts before the Job fails, when every pod fails."""
    return sum(min(POD_BACKOFF_BASE_SECONDS * 2**i, POD_BACKOFF_CAP_SECONDS) for i in range(backoff_limit))


def seconds_until_failure_reported(job: Mapping, attempt_seconds: int) -> int:
    """How long `pulumi up` runs before it reports a Job whose every pod fails after `attempt_seconds`."""
    spec = job.get("spec") or {}
    limit = int(spec.get("backoffLimit", 6))
    timeout = timeout_seconds(job)
    if awaiter(job) != "job":
        return timeout  # the custom condition cannot fail: the provider times out
    fails_at = (limit + 1) * attempt_seconds + worst_case_backoff_seconds(limit)
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None:
        fails_at = min(fails_at, int(deadline))
    return min(fails_at, timeout)
