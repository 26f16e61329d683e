"""`pulumi up` reports a failed download within minutes, naming the reason: the await configuration of the
rendered Job, evaluated with a model of pulumi-kubernetes' await (kimi_k3/offline/pulumi_await.py, source cited there),
against Job statuses as the Kubernetes Job controller writes them. The old render form fails the same checks."""

import copy

import pytest
from conftest import STACKS, by_kind, render_with

from kimi_k3.offline import pulumi_await as aw
from policies import rules

BACKOFF_FAILED = {
    "conditions": [
        {
            "type": "FailureTarget",
            "status": "True",
            "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit",
        },
        {
            "type": "Failed",
            "status": "True",
            "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit",
        },
    ],
    "failed": 4,
}
DEADLINE_FAILED = {
    "conditions": [
        {
            "type": "Failed",
            "status": "True",
            "reason": "DeadlineExceeded",
            "message": "Job was active longer than specified deadline",
        }
    ]
}
COMPLETE = {
    "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}],
    "succeeded": 1,
}
RUNNING = {"active": 1, "startTime": "2026-11-30T17:00:00Z"}


def _job(rendered, stack):
    (job,) = [j for j in by_kind(rendered[stack].objects, "Job") if j["metadata"]["name"] == "kimi-k3-model-download"]
    return job


def _old_form(job):
    """The Job as rendered before: waitFor condition=Complete, backoffLimit 6, no deadline."""
    old = copy.deepcopy(job)
    old["metadata"]["annotations"] = {"pulumi.com/waitFor": "condition=Complete", "pulumi.com/timeoutSeconds": "28800"}
    old["spec"]["backoffLimit"] = 6
    old["spec"].pop("activeDeadlineSeconds")
    return old


def _with_status(job, status):
    return {**job, "status": status}


@pytest.mark.parametrize("stack", STACKS)
def test_failed_download_fails_up_with_its_reason(stack, rendered):
    job = _job(rendered, stack)
    assert aw.awaiter(job) == "job", "pulumi-kubernetes' own Job await must run"
    assert aw.outcome(_with_status(job, BACKOFF_FAILED)) == (
        "failed",
        "[BackoffLimitExceeded] Job has reached the specified backoff limit",
    )
    assert aw.outcome(_with_status(job, DEADLINE_FAILED))[0] == "failed"
    assert aw.outcome(_with_status(job, RUNNING))[0] == "waiting"
    assert aw.outcome(_with_status(job, COMPLETE))[0] == "ready"


@pytest.mark.parametrize("stack", STACKS)
def test_old_form_never_reports_the_failure(stack, rendered):
    old = _old_form(_job(rendered, stack))
    assert aw.awaiter(old) == "custom"
    assert aw.outcome(_with_status(old, BACKOFF_FAILED))[0] == "waiting"  # until the 8 h timeout
    assert aw.outcome(_with_status(old, COMPLETE))[0] == "ready"
    assert aw.seconds_until_failure_reported(old, 60) == 28800


@pytest.mark.parametrize("stack", STACKS)
def test_failure_reported_within_minutes_and_before_the_provider_timeout(stack, rendered):
    job = _job(rendered, stack)
    spec = job["spec"]
    # Every pod failing after a minute (bad token, wrong revision, unverifiable shards): minutes, not hours.
    assert aw.seconds_until_failure_reported(job, 60) <= 10 * 60
    # A stuck Job (pods never finish) ends at its own deadline, with reason DeadlineExceeded, before the
    # provider's timeout (which reports no reason).
    assert spec["activeDeadlineSeconds"] < aw.timeout_seconds(job)
    # Node drains/preemptions do not use up retries.
    assert {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]} in spec[
        "podFailurePolicy"
    ]["rules"]
    # The reason reaches `up`: the provider reads containerStatuses (not init containers); the log tail
    # becomes the termination message.
    pod = spec["template"]["spec"]
    assert "initContainers" not in pod
    assert all(c["terminationMessagePolicy"] == "FallbackToLogsOnError" for c in pod["containers"])


@pytest.mark.parametrize("stack", STACKS)
def test_rule_fails_on_the_old_form_and_passes_on_the_new(stack, rendered):
    job = _job(rendered, stack)

    def findings(obj):
        return [v.message for v in rules.run_all([obj])[0] if v.rule == "job-await-reports-failure"]

    assert findings(job) == []
    old = findings(_old_form(job))
    assert len(old) == 1 and "replaces pulumi-kubernetes' Job await" in old[0]
    no_waitfor = _old_form(job)
    del no_waitfor["metadata"]["annotations"]["pulumi.com/waitFor"]
    msgs = findings(no_waitfor)
    assert any("activeDeadlineSeconds None" in m for m in msgs) and any("backoffLimit 6" in m for m in msgs)


def test_model_matches_the_provider_job_checker_reasons():
    # checker/job/check.go reports only these two reasons; a PodFailurePolicy FailJob is NOT reported early.
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {}}
    pfp = {"conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": "x"}]}
    assert aw.outcome(_with_status(job, pfp))[0] == "waiting"
    assert aw.timeout_seconds(job) == 600


def test_download_deadline_comes_from_config():
    (job,) = [
        j
        for j in by_kind(render_with("gb300", serving={"downloadTimeoutSeconds": 5000}).objects, "Job")
        if j["metadata"]["name"] == "kimi-k3-model-download"
    ]
    # The stacks' weights come from the S3 fetchers: the verify step waits the download timeout and reports what
    # is missing; the Job's deadline leaves it time to, and the provider's timeout comes after both.
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["VERIFY_WAIT_SECONDS"] == "5000"
    assert job["spec"]["activeDeadlineSeconds"] == 5000 + 600
    assert aw.timeout_seconds(job) == 5000 + 600 + 300
