"""The dynamo-platform release installs on every stack: its chart's Grove + KAI rule holds, and KAI can start.

Two consumers read one value. The chart (ai-dynamo/dynamo deploy/helm/charts/platform/templates/validate-values.yaml)
`fail`s `helm install` when it installs Grove and KAI together unless
kai-scheduler.scheduler.args.default-staleness-grace-period is "-1s" (#14722, cherry-picked into release/1.5.0 as
#14741). KAI's chart copies scheduler.args into the default SchedulingShard, its operator passes each on as
`--name=value`, and the scheduler parses this one with Go's time.ParseDuration (`fs.DurationVar`), which refuses
a bare "-1" (the value #14553 first required).
"""

from __future__ import annotations

import re

import pytest
from conftest import ROOT, STACKS, assert_one_clear_error, render_with
from support import render_stack_once, sweep

from kimi_k3.config.stack_files import stack_names

KEY = "default-staleness-grace-period"
# Go's time.ParseDuration: "0", or a signed sequence of decimal numbers each with a unit.
GO_DURATION = re.compile(r"^[-+]?(0|((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+)$")
KAI_DURATION_FLAGS = {"schedule-period", KEY, "stuck-in-releasing-threshold"}  # options.go DurationVar flags


def platform_release(r):
    (res,) = [
        x
        for x in r.resources
        if x["type"] == "kubernetes:helm.sh/v3:Release" and x["inputs"]["name"] == "dynamo-platform"
    ]
    return res["inputs"]["values"]


def chart_refuses(values) -> bool:
    """validate-values.yaml's Grove-ownership block, as the released 1.5.x chart writes it (#14741)."""
    g = values.get("global") or {}
    grove, kai = g.get("grove") or {}, g.get("kai-scheduler") or {}
    if not ((grove.get("enabled") or grove.get("install")) and kai.get("install")):
        return False
    args = ((values.get("kai-scheduler") or {}).get("scheduler") or {}).get("args") or {}
    return str(args.get(KEY, "")) != "-1s"


def test_go_duration_grammar_is_gos():
    for ok in ["-1s", "60s", "0", "1h30m", "1.5h", "-0.5ms", "2m0s"]:
        assert GO_DURATION.match(ok), ok
    for bad in ["-1", "60", "", "s", "1 s", "-", "1d"]:
        assert not GO_DURATION.match(bad), bad


# make test: the seed stacks, a GKE stack and the existing-cluster stack, which between them carry every distinct
# dynamo-platform release the 17 stacks install (EKS, GKE, none); the other stacks run in make test-slow.
@pytest.mark.parametrize("stack", sweep(stack_names(ROOT), [*STACKS, "gke-gb300", "cks-gb300-disagg"]))
def test_every_stack_installs_the_platform_chart_and_kai_starts(stack):
    r = render_stack_once(stack, ROOT)
    installs = [x for x in r.resources if x["type"] == "kubernetes:helm.sh/v3:Release"]
    if not any(x["inputs"]["name"] == "dynamo-platform" for x in installs):
        pytest.skip(f"{stack} installs no dynamo-platform release (an existing cluster's own platform)")
    values = platform_release(r)
    assert not chart_refuses(values), f"{stack}: the dynamo-platform chart would fail helm install"
    args = ((values.get("kai-scheduler") or {}).get("scheduler") or {}).get("args") or {}
    for flag in KAI_DURATION_FLAGS & set(args):
        assert GO_DURATION.match(str(args[flag])), f"{stack}: KAI --{flag}={args[flag]} is not a Go duration"


@pytest.mark.parametrize("value", ["-1", "60s"])
def test_a_value_the_chart_refuses_is_one_clear_error_before_anything_is_registered(value):
    assert_one_clear_error(
        "gb300-disagg",
        {"platform": {"dynamoPlatform": {"values": {"kai-scheduler": {"scheduler": {"args": {KEY: value}}}}}}},
        [
            f"kimi-k3:platform.dynamoPlatform.values.kai-scheduler.scheduler.args.{KEY} = {value}",
            'allowed: "-1s"',
            "recipes/platform/platform-set.yaml",
        ],
    )


def test_own_kai_is_not_held_to_the_bundled_rule():
    r = render_with(
        "gb300-disagg",
        platform={
            "dynamoPlatform": {
                "values": {
                    "global": {"kai-scheduler": {"install": False, "enabled": True}},
                    "kai-scheduler": {"scheduler": {"args": {KEY: "60s"}}},
                }
            }
        },
    )
    assert not chart_refuses(platform_release(r))
