"""The README's main command: `make up STACK=...` drives the Pulumi CLI in the right order, or explains why not."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import ROOT

FAKE_PULUMI = """#!/bin/sh
echo "$*" >> "$PULUMI_LOG"
case "$*" in "config get kimi-k3:hfToken"*) [ -n "$HAS_TOKEN" ] || exit 1 ;; esac
case "$*" in "stack export"*) for a; do last=$a; done; [ -z "$FAKE_STATE" ] || cp "$FAKE_STATE" "$last" ;; esac
exit 0
"""


def make(target: str, tmp_path, **env) -> tuple[subprocess.CompletedProcess, list[str]]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "pulumi"
    fake.write_text(FAKE_PULUMI)
    fake.chmod(0o755)
    log = tmp_path / "pulumi.log"
    proc = subprocess.run(["make", "--no-print-directory", target, "STACK=gb300-disagg"], cwd=ROOT,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PULUMI_LOG": str(log),
                               "PULUMI_BACKEND_URL": f"file://{tmp_path}/state", **env},
                          capture_output=True, text=True, timeout=300)
    return proc, log.read_text().splitlines() if log.exists() else []


def test_make_up_runs_pulumi_up_with_the_policy_pack(tmp_path):
    proc, calls = make("up", tmp_path, HAS_TOKEN="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    export = [c for c in calls if c.startswith("stack export --stack gb300-disagg --file ")]
    assert [c for c in calls if c not in export] == [
        "stack select --create gb300-disagg", "config get kimi-k3:hfToken --stack gb300-disagg",
        "up --stack gb300-disagg --policy-pack policies"]
    assert len(export) == 1 and calls.index(export[0]) < calls.index("up --stack gb300-disagg --policy-pack policies")
    assert "nothing deployed yet" in proc.stdout


def test_make_up_without_a_token_says_how_to_set_it_and_runs_nothing(tmp_path):
    proc, calls = make("up", tmp_path)
    assert proc.returncode != 0
    assert "pulumi config set --secret kimi-k3:hfToken" in proc.stdout + proc.stderr
    assert not any(c.startswith("up ") for c in calls)


def test_make_up_without_the_pulumi_cli_says_how_to_install_it(tmp_path):
    env = {"PATH": "/usr/bin:/bin"}  # no pulumi anywhere
    proc = subprocess.run(["make", "--no-print-directory", "up", "STACK=gb300-disagg"], cwd=ROOT,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "The Pulumi CLI is not installed" in proc.stdout and "make render STACK=gb300-disagg" in proc.stdout


@pytest.mark.slow  # renders twice
def test_make_up_stops_before_pulumi_up_when_the_change_would_replace_the_graph(tmp_path):
    """The deployed state names the graph after the recipe (the old form): this commit renames it, which
    pulumi-kubernetes replaces; `make up` must stop before `pulumi up` and say why."""
    import json

    from kimi_k3.commands.render import render_stack

    deployed = render_stack("gb300-disagg", ROOT)
    resources = []
    for r in deployed.resources:
        inputs = r["inputs"]
        if r["type"].endswith(":DynamoGraphDeployment"):
            inputs = {**inputs, "metadata": {**inputs["metadata"], "name": "kimi-k3-gb300-disagg"}}
        resources.append({"urn": r["urn"], "type": r["type"], "custom": True, "protect": r["protect"],
                          "retainOnDelete": r["retainOnDelete"], "inputs": inputs,
                          "provider": f"{r['provider']}::some-id" if r["provider"] else ""})
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"version": 3, "deployment": {"resources": resources}}))
    proc, calls = make("up", tmp_path, HAS_TOKEN="1", FAKE_STATE=str(state))
    assert proc.returncode != 0
    assert not any(c.startswith("up ") for c in calls)
    out = proc.stdout + proc.stderr
    assert "graph-updated-in-place" in out and "metadata.name" in out and "stopped before changing anything" in out


def test_make_park_and_unpark_flip_the_parked_flag_then_run_up(tmp_path):
    proc, calls = make("park", tmp_path, HAS_TOKEN="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls[-2:] == ["config set --path kimi-k3:cluster.parked true --stack gb300-disagg",
                          "up --stack gb300-disagg --policy-pack policies"]
    proc, calls = make("unpark", tmp_path, HAS_TOKEN="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls[-2:] == ["config rm --path kimi-k3:cluster.parked --stack gb300-disagg",
                          "up --stack gb300-disagg --policy-pack policies"]
