""".github/workflows: valid against GitHub's workflow schema (offline), pinned, and wired as .github/README.md says."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))
DOC = ROOT / ".github" / "README.md"
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@(v\d+\.\d+\.\d+|[0-9a-f]{40})$")


def load(name: str) -> dict:
    # PyYAML reads the bare key `on` as True (YAML 1.1); map it back.
    doc = yaml.safe_load((WORKFLOWS / name).read_text())
    return {("on" if k is True else k): v for k, v in doc.items()}


def steps(workflow: dict):
    for job in workflow["jobs"].values():
        yield from job.get("steps", [])


def test_the_three_workflows_exist():
    assert [f.name for f in FILES] == ["pr-comment.yml", "pr.yml", "preview.yml"]


def test_workflows_match_the_github_workflow_schema():
    """check-jsonschema ships the schema in its wheel (no download at test time)."""
    proc = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", *map(str, FILES)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_schema_check_rejects_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("on: pull_request\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    stepz: []\n")
    proc = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(broken)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_action_is_pinned_to_an_exact_version(path):
    uses = [s["uses"] for s in steps(load(path.name)) if "uses" in s]
    assert uses and all(PINNED.match(u) for u in uses), uses


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_run_scripts_parse_as_bash(path):
    for step in steps(load(path.name)):
        if "run" in step:
            script = re.sub(r"\$\{\{.*?\}\}", "X", step["run"])  # expressions are substituted before bash runs
            proc = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
            assert proc.returncode == 0, f"{step.get('name', step['run'][:40])}: {proc.stderr}"


def test_pr_runs_tests_check_and_diff_without_any_secret():
    wf = load("pr.yml")
    text = (WORKFLOWS / "pr.yml").read_text()
    assert wf["on"] == {"pull_request": None}
    assert "secrets." not in text  # a fork's run has none: this workflow must not need one
    runs = "\n".join(s.get("run", "") for s in steps(wf))
    assert "make test" in runs and ".venv/bin/kimi-k3 check $(" in runs
    assert '.venv/bin/kimi-k3 diff --base "origin/$BASE_REF"' in runs
    (diff_step,) = [s for s in steps(wf) if "kimi-k3 diff" in s.get("run", "")]
    assert diff_step["env"]["BASE_REF"] == "${{ github.base_ref }}"
    checkouts = [s for s in wf["jobs"]["diff"]["steps"] if s.get("uses", "").startswith("actions/checkout@")]
    assert checkouts[0]["with"]["fetch-depth"] == 0  # the base branch must be there to render
    assert any(s.get("uses", "").startswith("actions/upload-artifact@") for s in wf["jobs"]["diff"]["steps"])


def test_pr_comment_is_sticky_and_never_runs_pull_request_code():
    wf = load("pr-comment.yml")
    assert wf["on"] == {"workflow_run": {"workflows": ["pr"], "types": ["completed"]}}
    assert wf["permissions"]["pull-requests"] == "write"
    uses = [s["uses"] for s in steps(wf) if "uses" in s]
    assert not any(u.startswith("actions/checkout@") for u in uses)
    (script,) = [s["with"]["script"] for s in steps(wf) if s.get("uses", "").startswith("actions/github-script@")]
    assert "<!-- kimi-k3-diff -->" in script and "updateComment" in script and "createComment" in script
    assert "pr.head.sha !== process.env.HEAD_SHA" in script  # the artifact's PR number is checked, not trusted


def test_preview_runs_only_with_credentials_and_the_policy_pack():
    wf = load("preview.yml")
    gate = wf["jobs"]["affected"]["steps"][0]
    assert gate["id"] == "gate" and {"BACKEND", "AWS", "HF"} <= set(gate["env"])
    for step in wf["jobs"]["affected"]["steps"][1:]:
        assert step["if"] == "steps.gate.outputs.enabled == 'true'"
    preview = wf["jobs"]["preview"]
    assert preview["needs"] == "affected" and "needs.affected.outputs.stacks != '[]'" in preview["if"]
    assert preview["permissions"]["id-token"] == "write"
    (run,) = [s for s in preview["steps"] if s.get("with", {}).get("command") == "preview"]
    assert run["uses"].startswith("pulumi/actions@")
    assert run["with"]["policyPacks"] == "policies" and run["with"]["comment-on-pr"] is True
    assert any(s.get("uses", "").startswith("aws-actions/configure-aws-credentials@") for s in preview["steps"])


def test_every_secret_and_variable_is_documented():
    used = set()
    for path in FILES:
        used |= set(re.findall(r"\b(?:secrets|vars)\.([A-Z0-9_]+)", path.read_text()))
    doc = DOC.read_text()
    assert used and not [name for name in sorted(used) if f"`{name}`" not in doc]
